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

/// A field's fate by its name, one `match` (a comparison per listed name per field cost more
/// than the inserts it replaces). The names are `rewrite.rs`'s lists and the fields it sets; the
/// unit test below checks the two agree.
fn fate(name: &HeaderName) -> Fate {
    match name.as_str() {
        // Hop-by-hop (RFC 9110 §7.6.1, and the proxy ones), the client's credential and framing.
        "connection"
        | "keep-alive"
        | "proxy-connection"
        | "te"
        | "trailer"
        | "transfer-encoding"
        | "upgrade"
        | "proxy-authorization"
        | "authorization"
        | "content-length" => Fate::Dropped,
        // Forwarding fields only the gateway sets, and those it replaces.
        "forwarded" | "x-forwarded-for" | "x-forwarded-proto" | "x-forwarded-host" | "x-real-ip" | "host"
        | "accept-encoding" => Fate::Dropped,
        "origin" => Fate::Origin,
        "cookie" => Fate::Cookie,
        "x-opencode-directory" | "x-opencode-workspace" => Fate::Selector,
        _ => Fate::Kept,
    }
}

/// The head for `method` on `target` (the upstream's path and query, in origin form): the
/// client's `headers` rewritten by `f`'s rules, `dir` named as the project's directory when the
/// project is pinned.
pub fn write(
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    f: &Forward<'_>,
    dir: Option<&HeaderValue>,
) -> Vec<u8> {
    let named = connection_tokens(headers);
    let fields: usize = headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    let mut head = Vec::with_capacity(method.as_str().len() + target.len() + fields + 256);
    head.extend_from_slice(method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
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

/// The fields the gateway sets, as `rewrite::request_headers` inserts them.
fn gateways_fields(head: &mut Vec<u8>, f: &Forward<'_>, origin: bool) {
    match f.client_ip {
        std::net::IpAddr::V4(v4) => {
            let (digits, n) = rewrite::v4_digits(v4);
            field(head, "x-forwarded-for", &digits[..n]);
        }
        ip => {
            if let Some(v) = rewrite::ip_header_value(ip) {
                field(head, "x-forwarded-for", v.as_bytes());
            }
        }
    }
    field(head, "x-forwarded-proto", f.proto.as_bytes());
    field(head, "host", f.upstream_host.as_bytes());
    if let Some(host) = f.original_host.filter(|h| is_field_value(h.as_bytes())) {
        field(head, "x-forwarded-host", host.as_bytes());
    }
    if origin {
        field(head, "origin", f.upstream_origin.as_bytes());
    }
    if let Some(auth) = f.upstream_auth {
        field(head, "authorization", auth.as_bytes());
    }
    field(head, "accept-encoding", b"identity");
    if let Some(proto) = &f.upgrade {
        field(head, "connection", b"upgrade");
        field(head, "upgrade", proto.as_bytes());
    }
}

/// The names the client's `Connection` fields list (hop-by-hop for this connection only), as
/// `rewrite::strip_hop_by_hop` reads them; almost always none.
fn connection_tokens(headers: &HeaderMap) -> Vec<&str> {
    let mut tokens = Vec::new();
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

    /// The match above names what `rewrite.rs` and `pin.rs` act on: every hop-by-hop and
    /// forwarding name, every field the gateway sets, and the directory selectors.
    #[test]
    fn the_fates_name_what_the_map_rules_act_on() {
        use http::header;
        let dropped = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "proxy-authorization",
            "authorization",
            "content-length",
            "forwarded",
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-host",
            "x-real-ip",
            "host",
            "accept-encoding",
        ];
        for name in dropped {
            assert_eq!(fate(&HeaderName::from_static(name)), Fate::Dropped, "{name}");
        }
        assert_eq!(fate(&header::ORIGIN), Fate::Origin);
        assert_eq!(fate(&header::COOKIE), Fate::Cookie);
        assert_eq!(fate(&crate::policy::pin::DIRECTORY_HEADER), Fate::Selector);
        assert_eq!(fate(&HeaderName::from_static("x-opencode-workspace")), Fate::Selector);
        for kept in ["accept", "user-agent", "x-opencode-session", "content-type", "cookie2"] {
            assert_eq!(fate(&HeaderName::from_static(kept)), Fate::Kept, "{kept}");
        }
    }
}
