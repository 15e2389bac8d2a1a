//! Query strings and percent-encoding, read the way OpenCode's server reads them
//! (`URLSearchParams`: names and values percent-decoded), so a filter cannot be dodged with
//! `auth%5Ftoken=` or `%64irectory=`.

use std::borrow::Cow;

/// Decode `%XX` escapes (invalid escapes are kept as written). With `plus_is_space`, `+` means a
/// space, as in form encoding.
pub fn percent_decode(s: &str, plus_is_space: bool) -> Cow<'_, str> {
    if !s.bytes().any(|b| b == b'%' || (plus_is_space && b == b'+')) {
        return Cow::Borrowed(s);
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// The value of one hexadecimal digit.
pub(crate) fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The `name=value` pairs of a query, raw, each with its decoded name.
pub fn pairs(query: &str) -> impl Iterator<Item = (Cow<'_, str>, &str)> {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        (percent_decode(name, true), pair)
    })
}

/// The decoded value of the first parameter called `name`.
pub(crate) fn get<'a>(query: &'a str, name: &str) -> Option<Cow<'a, str>> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(n, true) == name).then(|| percent_decode(v, false))
    })
}

/// The query without the parameters whose decoded name `drop` selects; `None` when nothing is left.
pub fn without(query: &str, drop: impl Fn(&str) -> bool) -> Option<String> {
    let mut out = String::with_capacity(query.len());
    for (name, pair) in pairs(query) {
        if drop(&name) {
            continue;
        }
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(pair);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_and_keeps_broken_ones() {
        assert_eq!(percent_decode("a%20b", false), "a b");
        assert_eq!(percent_decode("a+b", true), "a b");
        assert_eq!(percent_decode("a+b", false), "a+b");
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz%4", false), "%zz%4");
        assert_eq!(percent_decode("auth%5Ftoken", true), "auth_token");
    }

    #[test]
    fn filters_by_decoded_name() {
        let q = "a=1&auth%5ftoken=x&b=2&auth_token=y";
        assert_eq!(without(q, |n| n == "auth_token").as_deref(), Some("a=1&b=2"));
        assert_eq!(without("auth_token=x", |n| n == "auth_token"), None);
        assert_eq!(get(q, "auth_token").as_deref(), Some("x"));
        assert_eq!(get("x=%2Fetc", "x").as_deref(), Some("/etc"));
    }
}
