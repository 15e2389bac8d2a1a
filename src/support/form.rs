//! `application/x-www-form-urlencoded`, the encoding half: what the gateway sends in a form body or
//! a query (the OpenID Provider's token request, the pages' links).

/// Percent-encode everything but RFC 3986's unreserved characters (for a query value).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
