//! What changes between the client's request and the upstream's, and back. Pure functions on
//! header maps and query strings, edited in place (no copy of the header map per request).
//!
//! Towards the upstream: hop-by-hop headers go, the client's credentials go (the Authorization
//! header and `?auth_token=`), forwarding headers are set fresh, the upstream's own credential is
//! injected, and `Host`/`Origin` name the upstream so OpenCode's same-origin checks (PTY connect
//! tokens) see a consistent, local request. The gateway has already checked the client's Origin.
//! The upstream is asked for unencoded bodies, so redaction sees every byte.

use std::borrow::Cow;
use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// What the header rules look for, in one list so one pass finds them all ([`present`]): first
/// the headers that describe one connection, never the message (RFC 9110 §7.6.1), plus the proxy
/// ones ([`hop_by_hop`]); then what an answer's rules act on.
static WATCHED: [HeaderName; 12] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::WWW_AUTHENTICATE,
    header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::SET_COOKIE,
];

/// The hop-by-hop headers: [`WATCHED`]'s first eight (bit `i` of a mask is `WATCHED[i]`).
const HOP_BY_HOP_LEN: usize = 8;
const HOP_BY_HOP_BITS: u32 = (1 << HOP_BY_HOP_LEN) - 1;
const WWW_AUTHENTICATE_BIT: u32 = 1 << 8;
const ALLOW_CREDENTIALS_BIT: u32 = 1 << 9;
const ALLOW_ORIGIN_BIT: u32 = 1 << 10;
const SET_COOKIE_BIT: u32 = 1 << 11;

pub(crate) fn hop_by_hop() -> &'static [HeaderName] {
    &WATCHED[..HOP_BY_HOP_LEN]
}

// Built at compile time: `from_static` at run time validates the name on every request.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Forwarding headers a client could forge; only the gateway sets them.
pub(crate) static FORWARDING: [HeaderName; 5] = [
    HeaderName::from_static("forwarded"),
    X_FORWARDED_FOR,
    X_FORWARDED_PROTO,
    X_FORWARDED_HOST,
    HeaderName::from_static("x-real-ip"),
];

/// Query parameters that carry a credential for the gateway; never forwarded, never logged.
pub fn is_credential_param(name: &str) -> bool {
    name == "auth_token"
}

pub struct Forward<'a> {
    /// The client address as the gateway determined it (after trusted proxies).
    pub client_ip: IpAddr,
    /// `https` for TLS, `http` for SSH channels.
    pub proto: &'static str,
    /// The host the client asked for.
    pub original_host: Option<&'a str>,
    /// `Host` and `Origin` naming the upstream.
    pub upstream_host: &'a HeaderValue,
    pub upstream_origin: &'a HeaderValue,
    /// `Basic …` for the upstream, when it has a password.
    pub upstream_auth: Option<&'a HeaderValue>,
    /// For an upgrade: the protocol to ask the upstream for (`websocket`).
    pub upgrade: Option<HeaderValue>,
}

/// Remove hop-by-hop headers, including any the Connection header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the few headers a request has beats a hashed removal per listed name, and
    // almost no request carries any of them (HTTP/1.1 keep-alive is the default).
    let found = present(headers, hop_by_hop());
    if found != 0 {
        strip_found_hop_by_hop(headers, found);
    }
}

/// Which of `names` (at most 32) the headers hold, a bit each: one pass over the map instead of a
/// hashed lookup per name, most of which find nothing.
fn present(headers: &HeaderMap, names: &[HeaderName]) -> u32 {
    let mut found = 0;
    for name in headers.keys() {
        if let Some(i) = names.iter().position(|n| n == name) {
            found |= 1 << i;
        }
    }
    found
}

/// The hop-by-hop headers `found` (bits of [`WATCHED`]) says are there, and those the
/// Connection header names, removed. A real server's answers say `Connection: keep-alive` on
/// every answer (nginx does): its token is removed by reference, no name allocated for it.
fn strip_found_hop_by_hop(headers: &mut HeaderMap, found: u32) {
    if found & 1 != 0 {
        // Copies of the values (a reference count each, no bytes copied), as the map changes
        // below; a second Connection header, rare, is the only one that allocates.
        let mut values = headers.get_all(header::CONNECTION).iter();
        let first = values.next().cloned();
        let more: Vec<HeaderValue> = values.cloned().collect();
        for value in first.iter().chain(&more) {
            let Ok(value) = value.to_str() else { continue };
            for token in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                // `keep-alive` goes below with the other hop-by-hop names (`found` has it if it
                // is there), and `close` names no field: neither is parsed and looked up here
                // (nginx says `Connection: keep-alive` on every answer).
                if token.eq_ignore_ascii_case("keep-alive") || token.eq_ignore_ascii_case("close") {
                    continue;
                }
                // An invalid name is in no map: `remove` finds nothing.
                headers.remove(token);
            }
        }
    }
    for (i, name) in hop_by_hop().iter().enumerate() {
        if found & (1 << i) != 0 {
            headers.remove(name);
        }
    }
}

pub fn request_headers(headers: &mut HeaderMap, f: &Forward<'_>) {
    // Room for the headers added below at once, rather than growing the map in steps.
    headers.reserve(8);
    strip_hop_by_hop(headers);
    headers.remove(header::AUTHORIZATION);
    crate::http::cookie::strip(headers);
    if headers.keys().any(|n| FORWARDING.contains(n)) {
        for name in &FORWARDING {
            headers.remove(name);
        }
    }
    if let Some(v) = ip_header_value(f.client_ip) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(f.proto));
    // The client's Host header is about to be replaced: move it rather than copy it.
    let client_host = headers.insert(header::HOST, f.upstream_host.clone());
    let forwarded_host = match (f.original_host, client_host) {
        (Some(h), Some(v)) if v.as_bytes() == h.as_bytes() => Some(v),
        (Some(h), _) => HeaderValue::from_str(h).ok(),
        (None, _) => None,
    };
    if let Some(host) = forwarded_host {
        headers.insert(X_FORWARDED_HOST, host);
    }
    if headers.contains_key(header::ORIGIN) {
        headers.insert(header::ORIGIN, f.upstream_origin.clone());
    }
    if let Some(auth) = f.upstream_auth {
        headers.insert(header::AUTHORIZATION, auth.clone());
    }
    // OpenCode gzips large answers when asked; the gateway must see plain bytes to redact the
    // upstream's credential (and compressing on loopback only costs CPU).
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    if let Some(proto) = &f.upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, proto.clone());
    }
}

/// An address as a header value.
pub(crate) fn ip_header_value(ip: IpAddr) -> Option<HeaderValue> {
    let IpAddr::V4(v4) = ip else {
        return HeaderValue::from_str(&ip.to_string()).ok();
    };
    let (buf, n) = v4_digits(v4);
    HeaderValue::from_bytes(&buf[..n]).ok()
}

/// An IPv4 address written digit by digit: this runs on every request, and the formatting
/// machinery behind `to_string` was a visible share of a request's cost.
pub(crate) fn v4_digits(v4: std::net::Ipv4Addr) -> ([u8; 15], usize) {
    let mut buf = [0u8; 15];
    let mut n = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            buf[n] = b'.';
            n += 1;
        }
        if octet >= 100 {
            buf[n] = b'0' + octet / 100;
            n += 1;
        }
        if octet >= 10 {
            buf[n] = b'0' + octet / 10 % 10;
            n += 1;
        }
        buf[n] = b'0' + octet % 10;
        n += 1;
    }
    (buf, n)
}

/// Response headers back to the client. For a 101, the Upgrade pair is kept. `upstream_origin`
/// is the `Origin` the gateway sent upstream in the client's stead.
pub fn response_headers(headers: &mut HeaderMap, upgrade: bool, upstream_origin: &HeaderValue) {
    let proto = upgrade.then(|| headers.get(header::UPGRADE).cloned()).flatten();
    // What the rules below act on, found in one pass: an answer has none of them but, from a
    // real server, `Connection: keep-alive` (each hashed lookup that finds nothing was about a
    // hundred instructions; docs/performance.md, issue 43).
    let found = present(headers, &WATCHED);
    if found & HOP_BY_HOP_BITS != 0 {
        strip_found_hop_by_hop(headers, found & HOP_BY_HOP_BITS);
    }
    if found & WWW_AUTHENTICATE_BIT != 0 {
        headers.remove(header::WWW_AUTHENTICATE);
    }
    // No credentialed CORS through the gateway: the web UI is same-origin with its host and
    // needs none, and a project host must not let a sibling host's page read it with cookies.
    if found & ALLOW_CREDENTIALS_BIT != 0 {
        headers.remove(header::ACCESS_CONTROL_ALLOW_CREDENTIALS);
    }
    // OpenCode reflects the Origin it was sent, which is the upstream's own (`http://127.0.0.1:
    // <port>`): an answer naming it tells the client the upstream's port and allows nobody.
    if found & ALLOW_ORIGIN_BIT != 0
        && headers
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .is_some_and(|v| v == upstream_origin)
    {
        headers.remove(header::ACCESS_CONTROL_ALLOW_ORIGIN);
    }
    // An upstream may not set (toss) the gateway's own cookie on a project host.
    if found & SET_COOKIE_BIT != 0 {
        crate::http::cookie::strip_set_cookie(headers);
    }
    if let Some(proto) = proto {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, proto);
    }
}

/// The query to send upstream: the client's, without gateway credentials and, for a pinned
/// project, without directory and workspace selectors.
pub fn upstream_query(query: Option<&str>, pinned: bool) -> Option<Cow<'_, str>> {
    let q = query?;
    let drop = |n: &str| is_credential_param(n) || (pinned && crate::policy::pin::is_selector_param(n));
    if !crate::policy::query::pairs(q).any(|(n, _)| drop(&n)) {
        return Some(Cow::Borrowed(q));
    }
    crate::policy::query::without(q, drop).map(Cow::Owned)
}

/// A query fit for logs: credential-like parameter values replaced.
pub fn loggable_query(query: &str) -> Cow<'_, str> {
    // `code` and `state`: a single sign-on callback's (short-lived, single use, bound to the
    // browser, but still nobody's business in a log).
    const SECRET: [&str; 7] = ["auth_token", "ticket", "token", "password", "key", "code", "state"];
    if !crate::policy::query::pairs(query).any(|(n, _)| SECRET.contains(&n.as_ref())) {
        return Cow::Borrowed(query);
    }
    let parts: Vec<String> = crate::policy::query::pairs(query)
        .map(|(n, pair)| {
            if SECRET.contains(&n.as_ref()) {
                format!("{n}=<redacted>")
            } else {
                pair.to_string()
            }
        })
        .collect();
    Cow::Owned(parts.join("&"))
}

/// Is this request asking to switch protocols (WebSocket)?
pub(crate) fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
    let wants = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !wants {
        return None;
    }
    headers.get(header::UPGRADE).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    static HOST: HeaderValue = HeaderValue::from_static("127.0.0.1:4096");
    static ORIGIN: HeaderValue = HeaderValue::from_static("http://127.0.0.1:4096");

    fn forward<'a>(auth: Option<&'a HeaderValue>) -> Forward<'a> {
        Forward {
            client_ip: "192.0.2.7".parse().unwrap(),
            proto: "https",
            original_host: Some("web.gw.localhost:8443"),
            upstream_host: &HOST,
            upstream_origin: &ORIGIN,
            upstream_auth: auth,
            upgrade: None,
        }
    }

    #[test]
    fn client_credentials_and_forged_forwarding_never_pass() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic YWxpY2U6cHc="));
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        h.insert("forwarded", HeaderValue::from_static("for=1.2.3.4"));
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, x-secret"));
        h.insert("x-secret", HeaderValue::from_static("drop me"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://web.gw.localhost:8443"),
        );
        h.insert("x-opencode-directory", HeaderValue::from_static("/x"));
        let up = HeaderValue::from_static("Basic b3BlbmNvZGU6dXBzdHJlYW0=");
        request_headers(&mut h, &forward(Some(&up)));
        assert_eq!(h.get(header::AUTHORIZATION), Some(&up));
        assert_eq!(h.get("x-forwarded-for").unwrap(), "192.0.2.7");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");
        assert_eq!(h.get("x-forwarded-host").unwrap(), "web.gw.localhost:8443");
        assert_eq!(h.get(header::HOST).unwrap(), "127.0.0.1:4096");
        assert_eq!(h.get(header::ORIGIN).unwrap(), "http://127.0.0.1:4096");
        assert!(h.get("forwarded").is_none() && h.get("x-secret").is_none() && h.get(header::CONNECTION).is_none());
        assert!(h.get("x-opencode-directory").is_some(), "end-to-end headers pass");
    }

    #[test]
    fn without_an_upstream_password_no_authorization_is_sent() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic YWxpY2U6cHc="));
        request_headers(&mut h, &forward(None));
        assert!(h.get(header::AUTHORIZATION).is_none());
    }

    #[test]
    fn addresses_are_written_as_std_writes_them() {
        for ip in [
            "0.0.0.0",
            "10.0.9.1",
            "127.0.0.1",
            "198.51.100.4",
            "255.255.255.255",
            "::1",
            "2001:db8::7",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_header_value(ip).unwrap(), ip.to_string().as_str());
        }
    }

    #[test]
    fn upstream_answers_carry_no_credentialed_cors_and_never_set_the_gateways_cookie() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("https://a.gw.localhost"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        h.insert(
            header::SET_COOKIE,
            HeaderValue::from_static("__Host-ocgw=forged; Path=/; Secure"),
        );
        h.append(header::SET_COOKIE, HeaderValue::from_static("theme=dark; Path=/"));
        let upstream = HeaderValue::from_static("http://127.0.0.1:4096");
        response_headers(&mut h, false, &upstream);
        assert!(h.get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS).is_none());
        let cookies: Vec<_> = h.get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(
            cookies,
            ["theme=dark; Path=/"],
            "only the gateway's own cookie is dropped"
        );
        assert!(
            h.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_some(),
            "plain CORS passes"
        );
        // OpenCode's reflection of the upstream origin the gateway sent: it names the port.
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, upstream.clone());
        response_headers(&mut h, false, &upstream);
        assert!(
            h.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(),
            "the upstream's origin never leaves"
        );
    }

    /// The rules as they read before the one-pass scan: a hashed lookup or removal per name.
    fn answer_rules_by_name(headers: &mut HeaderMap, upstream_origin: &HeaderValue) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in named.iter().chain(hop_by_hop()) {
            headers.remove(name);
        }
        headers.remove(header::WWW_AUTHENTICATE);
        headers.remove(header::ACCESS_CONTROL_ALLOW_CREDENTIALS);
        if headers
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .is_some_and(|v| v == upstream_origin)
        {
            headers.remove(header::ACCESS_CONTROL_ALLOW_ORIGIN);
        }
        crate::http::cookie::strip_set_cookie(headers);
    }

    #[test]
    fn the_one_pass_scan_of_an_answer_removes_what_a_lookup_per_name_removed() {
        let bit = |name: &HeaderName| 1u32 << WATCHED.iter().position(|n| n == name).unwrap();
        assert_eq!(bit(&header::WWW_AUTHENTICATE), WWW_AUTHENTICATE_BIT);
        assert_eq!(bit(&header::ACCESS_CONTROL_ALLOW_CREDENTIALS), ALLOW_CREDENTIALS_BIT);
        assert_eq!(bit(&header::ACCESS_CONTROL_ALLOW_ORIGIN), ALLOW_ORIGIN_BIT);
        assert_eq!(bit(&header::SET_COOKIE), SET_COOKIE_BIT);
        assert!(hop_by_hop().iter().all(|n| bit(n) & HOP_BY_HOP_BITS != 0));
        let candidates: [(&str, &str); 15] = [
            ("connection", "keep-alive"),
            ("connection", "close, X-Private , ,Bad Name, Keep-Alive, UPGRADE, CLOSE"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("trailer", "x-t"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic eA=="),
            ("www-authenticate", "Basic realm=x"),
            ("access-control-allow-credentials", "true"),
            ("access-control-allow-origin", "http://127.0.0.1:4096"),
            ("set-cookie", "__Host-ocgw=forged; Path=/; Secure"),
            ("set-cookie", "theme=dark"),
            ("x-private", "kept unless named"),
        ];
        let upstream = HeaderValue::from_static("http://127.0.0.1:4096");
        for subset in 0u32..(1 << candidates.len()) {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            for (i, (name, value)) in candidates.iter().enumerate() {
                if subset & (1 << i) != 0 {
                    h.append(*name, HeaderValue::from_static(value));
                }
            }
            let mut expected = h.clone();
            answer_rules_by_name(&mut expected, &upstream);
            response_headers(&mut h, false, &upstream);
            assert_eq!(h, expected, "headers {subset:#b}");
        }
    }

    #[test]
    fn upgrades_keep_their_protocol() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        let proto = upgrade_protocol(&h).unwrap();
        let mut f = forward(None);
        f.upgrade = Some(proto);
        request_headers(&mut h, &f);
        assert_eq!(h.get(header::UPGRADE).unwrap(), "websocket");
        assert_eq!(h.get(header::CONNECTION).unwrap(), "upgrade");
        let mut resp = HeaderMap::new();
        resp.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        resp.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        resp.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=x"));
        response_headers(&mut resp, true, &HeaderValue::from_static("http://127.0.0.1:4096"));
        assert_eq!(resp.get(header::UPGRADE).unwrap(), "websocket");
        assert!(resp.get(header::WWW_AUTHENTICATE).is_none());
    }

    #[test]
    fn auth_token_is_removed_however_it_is_spelled() {
        assert_eq!(upstream_query(Some("a=1&auth_token=x"), false).as_deref(), Some("a=1"));
        assert_eq!(
            upstream_query(Some("auth%5Ftoken=x&b=2"), false).as_deref(),
            Some("b=2")
        );
        assert_eq!(upstream_query(Some("auth_token=x"), false), None);
        assert_eq!(
            upstream_query(Some("directory=%2Ftmp"), false).as_deref(),
            Some("directory=%2Ftmp")
        );
        let pinned = upstream_query(
            Some("directory=%2Fetc&%64irectory=x&location%5Bdirectory%5D=y&workspace=w&cursor=3"),
            true,
        );
        assert_eq!(pinned.as_deref(), Some("cursor=3"));
        assert_eq!(
            loggable_query("a=1&ticket=abc&auth_token=zzz"),
            "a=1&ticket=<redacted>&auth_token=<redacted>"
        );
    }
}
