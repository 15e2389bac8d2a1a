//! The request head the direct road (`upstream/direct.rs`) sends, written in one pass: the
//! client's fields as [`rewrite::request_headers`] and [`pin_headers`] leave them, then the
//! gateway's own, without editing a header map. Each insert into the map hashed a name and
//! probed its table, about 1 300 instructions a request for the six or seven fields the gateway
//! sets (docs/performance.md, issue 43). The map's edit stays the rules' reference (hyper's road
//! takes it): the property test `upstream_head::*` and the fuzz target `upstream_head` hold this
//! writer to the head written from the edited map, for any fields a client sends.
//!
//! [`pin_headers`]: crate::policy::pin::pin_headers

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::rewrite::{self, Forward};

/// What becomes of one of the client's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Kept,
    /// Left out: a hop-by-hop or forwarding field, a credential, the client's framing, or a
    /// field the gateway sets itself.
    Dropped,
    /// Replaced by the upstream's own Origin.
    Origin,
    /// Sent without the gateway's cookie.
    Cookie,
    /// A directory selector: left out when the project is pinned.
    Selector,
}

/// A field's fate by its name. Standard names compare as the values they are (a few
/// instructions each), the others as text; the names are `rewrite.rs`'s lists and the fields it
/// sets, and the unit test below checks the two agree.
fn fate(name: &HeaderName) -> Fate {
    use http::header as h;
    // Hop-by-hop (RFC 9110 §7.6.1, and the proxy ones), the client's credential and framing,
    // the forwarding fields only the gateway sets and those it replaces.
    const DROPPED: [HeaderName; 11] = [
        h::HOST,
        h::AUTHORIZATION,
        h::ACCEPT_ENCODING,
        h::CONNECTION,
        h::TE,
        h::TRAILER,
        h::TRANSFER_ENCODING,
        h::UPGRADE,
        h::PROXY_AUTHORIZATION,
        h::CONTENT_LENGTH,
        h::FORWARDED,
    ];
    if DROPPED.contains(name) {
        return Fate::Dropped;
    }
    if name == h::ORIGIN {
        return Fate::Origin;
    }
    if name == h::COOKIE {
        return Fate::Cookie;
    }
    match name.as_str() {
        "keep-alive" | "proxy-connection" | "x-forwarded-for" | "x-forwarded-proto" | "x-forwarded-host"
        | "x-real-ip" => Fate::Dropped,
        "x-opencode-directory" | "x-opencode-workspace" => Fate::Selector,
        _ => Fate::Kept,
    }
}

/// The request target in origin form: a path, and a query after `?` when there is one.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub path: &'a str,
    pub query: Option<&'a str>,
}

impl Target<'_> {
    /// Whether the target is written as it is: every byte one that `http::Uri` keeps as it is in
    /// a path and a query, and a length far below its limit. Anything else (a `#`, a space, a
    /// byte beyond ASCII, `[`…) goes through `http::Uri` first, as on hyper's road, which
    /// refuses or cuts it the same way for both roads. This saves the Uri's scan and allocation
    /// on the common target (unit test `a_plain_target_is_what_the_uri_keeps`).
    pub fn is_plain(&self) -> bool {
        const MAX: usize = 16 * 1024;
        let plain = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%?".contains(&b))
        };
        self.path.starts_with('/')
            && self.path.len() + self.query.map_or(0, |q| q.len() + 1) <= MAX
            && plain(self.path)
            && !self.path.contains('?')
            && self.query.is_none_or(plain)
    }
}

/// The head for `method` on `target` (the upstream's path and query, in origin form; see
/// [`Target::is_plain`]): the client's `headers` rewritten by `f`'s rules, `dir` named as the
/// project's directory when the project is pinned.
pub fn write(
    method: &Method,
    target: Target<'_>,
    headers: &HeaderMap,
    f: &Forward<'_>,
    dir: Option<&HeaderValue>,
) -> Vec<u8> {
    let named = connection_tokens(headers);
    let length = target.path.len() + target.query.map_or(0, |q| q.len() + 1);
    // Room for most heads at once; a larger one grows.
    let mut head = Vec::with_capacity(length + 1024);
    head.extend_from_slice(method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.path.as_bytes());
    if let Some(query) = target.query {
        head.push(b'?');
        head.extend_from_slice(query.as_bytes());
    }
    head.extend_from_slice(b" HTTP/1.1\r\n");
    let (mut origin, mut cookie) = (false, false);
    for (name, value) in headers {
        if !named.is_empty() && named.iter().any(|t| name.as_str().eq_ignore_ascii_case(t)) {
            continue;
        }
        match fate(name) {
            Fate::Kept => field(&mut head, name.as_str(), value.as_bytes()),
            Fate::Selector if dir.is_none() => field(&mut head, name.as_str(), value.as_bytes()),
            Fate::Origin => origin = true,
            Fate::Cookie => cookie = true,
            Fate::Dropped | Fate::Selector => {}
        }
    }
    if cookie && let Some(kept) = crate::http::cookie::others(headers) {
        field(&mut head, "cookie", kept.as_bytes());
    }
    gateways_fields(&mut head, f, origin);
    if let Some(dir) = dir {
        field(&mut head, "x-opencode-directory", dir.as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// The fields the gateway sets, as `rewrite::request_headers` inserts them. Each name is
/// written with the line end before it, one copy for both (a copy is a call here).
fn gateways_fields(head: &mut Vec<u8>, f: &Forward<'_>, origin: bool) {
    let (v4, v6);
    let client: Option<&[u8]> = match f.client_ip {
        std::net::IpAddr::V4(ip) => {
            v4 = rewrite::v4_digits(ip);
            Some(&v4.0[..v4.1])
        }
        ip => {
            v6 = rewrite::ip_header_value(ip);
            v6.as_ref().map(HeaderValue::as_bytes)
        }
    };
    match client {
        Some(client) => {
            then(head, b"x-forwarded-for: ", client);
            then(head, b"\r\nx-forwarded-proto: ", f.proto.as_bytes());
        }
        None => then(head, b"x-forwarded-proto: ", f.proto.as_bytes()),
    }
    then(head, b"\r\nhost: ", f.upstream_host.as_bytes());
    if let Some(host) = f.original_host.filter(|h| is_field_value(h.as_bytes())) {
        then(head, b"\r\nx-forwarded-host: ", host.as_bytes());
    }
    if origin {
        then(head, b"\r\norigin: ", f.upstream_origin.as_bytes());
    }
    if let Some(auth) = f.upstream_auth {
        then(head, b"\r\nauthorization: ", auth.as_bytes());
    }
    head.extend_from_slice(b"\r\naccept-encoding: identity\r\n");
    if let Some(proto) = &f.upgrade {
        field(head, "connection", b"upgrade");
        field(head, "upgrade", proto.as_bytes());
    }
}

fn then(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(value);
}

/// The names the client's `Connection` fields list (hop-by-hop for this connection only), as
/// `rewrite::strip_hop_by_hop` reads them; almost always none.
fn connection_tokens(headers: &HeaderMap) -> Vec<&str> {
    let mut tokens = Vec::new();
    // A scan of the few names is cheaper than the hashed lookup that finds nothing.
    if !headers.keys().any(|n| n == http::header::CONNECTION) {
        return tokens;
    }
    for value in headers.get_all(http::header::CONNECTION) {
        let Ok(value) = value.to_str() else { continue };
        tokens.extend(value.split(',').map(str::trim).filter(|t| !t.is_empty()));
    }
    tokens
}

/// What `HeaderValue::from_str` accepts: visible characters, spaces and tabs.
fn is_field_value(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| (b >= 32 && b != 127) || b == b'\t')
}

fn field(head: &mut Vec<u8>, name: &str, value: &[u8]) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The match above names what `rewrite.rs` and `pin.rs` act on, read from their own lists
    /// (a name added there and not here fails this): every hop-by-hop and forwarding name, the
    /// fields the gateway replaces, the client's framing, and the directory selectors.
    #[test]
    fn the_fates_name_what_the_map_rules_act_on() {
        use http::header;
        let replaced = [
            header::HOST,
            header::AUTHORIZATION,
            header::ACCEPT_ENCODING,
            header::CONTENT_LENGTH,
        ];
        for name in rewrite::hop_by_hop()
            .iter()
            .chain(&rewrite::FORWARDING)
            .chain(&replaced)
        {
            assert_eq!(fate(name), Fate::Dropped, "{name}");
        }
        assert_eq!(fate(&header::ORIGIN), Fate::Origin);
        assert_eq!(fate(&header::COOKIE), Fate::Cookie);
        assert_eq!(fate(&crate::policy::pin::DIRECTORY_HEADER), Fate::Selector);
        assert_eq!(fate(&HeaderName::from_static("x-opencode-workspace")), Fate::Selector);
        for kept in ["accept", "user-agent", "x-opencode-session", "content-type", "cookie2"] {
            assert_eq!(fate(&HeaderName::from_static(kept)), Fate::Kept, "{kept}");
        }
    }

    /// What `is_plain` lets through is what `http::Uri` keeps byte for byte; what it does not
    /// includes what the Uri refuses or cuts.
    #[test]
    fn a_plain_target_is_what_the_uri_keeps() {
        let allowed: Vec<u8> = (0u8..=127)
            .filter(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%?".contains(&b))
            .collect();
        // Every allowed byte in the path and in the query, and each after a `?`.
        for &b in &allowed {
            let c = b as char;
            for (path, query) in [
                (format!("/a{c}b"), None),
                ("/s".to_string(), Some(format!("x={c}&y?{c}"))),
            ] {
                let t = Target {
                    path: &path,
                    query: query.as_deref(),
                };
                let whole = match query.as_deref() {
                    Some(q) => format!("{path}?{q}"),
                    None => path.clone(),
                };
                if !t.is_plain() {
                    assert!(path.contains('?'), "{whole} not plain");
                    continue;
                }
                let uri = http::uri::PathAndQuery::try_from(whole.as_str()).expect(&whole);
                assert_eq!(uri.as_str(), whole);
            }
        }
        for odd in [
            "/a#b", "/a b", "/a\u{e9}", "/a[0]", "/a\"b", "/a{b}", "/a^b", "/a|b", "/a\\b", "/a\tb",
        ] {
            let t = Target { path: odd, query: None };
            assert!(!t.is_plain(), "{odd:?}");
        }
        for odd in ["a#b", "a b", "location[directory]=x"] {
            let t = Target {
                path: "/s",
                query: Some(odd),
            };
            assert!(!t.is_plain(), "{odd:?}");
        }
        assert!(!Target { path: "s", query: None }.is_plain());
    }
}
