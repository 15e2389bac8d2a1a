//! The gateway's one cookie. `__Host-` makes browsers insist on Secure, `Path=/` and no `Domain`,
//! so the cookie stays on the exact host that set it: the login host's never reaches a project's
//! host (sibling subdomains are the same site, so SameSite would not separate them), and each
//! project host gets its own through the handoff. The value is an opaque random id; only its
//! keyed digest is stored.

use http::{HeaderMap, HeaderValue, header};

pub(crate) const NAME: &str = "__Host-ocgw";
/// A project host's handoff state: set when it sends a browser to the login host, checked when the
/// ticket comes back, so a ticket minted for one browser (an attacker's own login) cannot be
/// redeemed in another (login CSRF into a project host). A sibling host cannot set it; a sibling
/// port can (cookies ignore ports), so a project port also checks the login cookie (`web/front.rs`).
pub(crate) const HANDOFF_STATE: &str = "__Host-ocgw-handoff";

/// `Set-Cookie` for a new session (a session cookie for a password login, persistent for a
/// paired device so the phone stays logged in across browser restarts).
pub(crate) fn set(value: &str, max_age_secs: Option<i64>) -> HeaderValue {
    set_named(NAME, value, max_age_secs)
}

/// `Set-Cookie` for the session cookie `name` (a project port's own name, `web/front.rs`).
pub(crate) fn set_named(name: &str, value: &str, max_age_secs: Option<i64>) -> HeaderValue {
    let age = max_age_secs.map_or(String::new(), |s| format!("; Max-Age={s}"));
    HeaderValue::from_str(&format!("{name}={value}; Path=/; Secure; HttpOnly; SameSite=Lax{age}"))
        .expect("a cookie of URL-safe characters is a valid header")
}

/// `Set-Cookie` for a project front's handoff state `name` (lives as long as a login may take).
pub(crate) fn set_handoff_state(name: &str, value: &str) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=900"
    ))
    .expect("a cookie of URL-safe characters is a valid header")
}

/// `Set-Cookie` that removes the handoff state `name`.
pub(crate) fn clear_handoff_state(name: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("{name}=; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=0"))
        .expect("a cookie name of token characters is a valid header")
}

/// `Set-Cookie` that removes it.
pub(crate) fn clear() -> HeaderValue {
    HeaderValue::from_str(&format!("{NAME}=; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=0"))
        .expect("static cookie is a valid header")
}

/// The gateway cookie's value in the request's `Cookie` headers. When a client sends it more than
/// once (a page on a sibling host cannot set `__Host-` cookies, one on a sibling port can), none is used.
pub(crate) fn find(headers: &HeaderMap) -> Option<&str> {
    find_named(headers, NAME)
}

/// The value of the cookie `name` (exactly once), like [`find`].
pub(crate) fn find_named<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    find_matching(headers, |n| n == name)
}

/// The value of the one cookie whose name `is_it` accepts, like [`find`] (no allocation: a
/// project port's names are matched in their parts, see `web/front.rs`).
pub(crate) fn find_matching(headers: &HeaderMap, is_it: impl Fn(&str) -> bool) -> Option<&str> {
    let mut found = None;
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for pair in v.split(';') {
            let Some((pair_name, value)) = pair.trim().split_once('=') else {
                continue;
            };
            if is_it(pair_name) {
                if found.is_some() {
                    return None;
                }
                found = Some(value.trim());
            }
        }
    }
    found.filter(|v| !v.is_empty())
}

/// Remove the gateway's cookie from what goes upstream (OpenCode never sees it). Other cookies
/// pass as they came.
pub(crate) fn strip(headers: &mut HeaderMap) {
    if !headers.contains_key(header::COOKIE) {
        return;
    }
    let kept = others(headers);
    headers.remove(header::COOKIE);
    if let Some(v) = kept {
        headers.insert(header::COOKIE, v);
    }
}

/// The one `Cookie` field the upstream gets in place of the client's: every pair but the
/// gateway's, or none when nothing else is left ([`strip`], and the direct road's head).
pub(crate) fn others(headers: &HeaderMap) -> Option<HeaderValue> {
    let kept: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty() && !is_ours(pair))
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join("; ")).ok()
}

/// Drop any `Set-Cookie` that would set the gateway's cookie (an upstream tossing a session
/// into a project host); others pass.
pub(crate) fn strip_set_cookie(headers: &mut HeaderMap) {
    let kept: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter(|v| !v.to_str().map_or(true, |s| is_ours(s.split(';').next().unwrap_or(""))))
        .cloned()
        .collect();
    headers.remove(header::SET_COOKIE);
    for v in kept {
        headers.append(header::SET_COOKIE, v);
    }
}

/// Any spelling a browser could send of the gateway's cookie name (names are case-sensitive in
/// browsers, but an upstream might compare them loosely).
fn is_ours(pair: &str) -> bool {
    let name = pair.split_once('=').map_or(pair, |(n, _)| n).trim();
    name.len() >= 7 && name[..7].eq_ignore_ascii_case("__host-") && name[7..].to_ascii_lowercase().starts_with("ocgw")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(cookies: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for c in cookies {
            h.append(header::COOKIE, HeaderValue::from_str(c).unwrap());
        }
        h
    }

    #[test]
    fn the_cookie_has_every_attribute_and_no_domain() {
        let v = set("abc", None);
        let s = v.to_str().unwrap();
        for attr in ["__Host-ocgw=abc", "Path=/", "Secure", "HttpOnly", "SameSite=Lax"] {
            assert!(s.contains(attr), "{s}");
        }
        assert!(!s.to_ascii_lowercase().contains("domain"), "{s}");
        assert!(set("abc", Some(60)).to_str().unwrap().ends_with("Max-Age=60"));
        assert!(clear().to_str().unwrap().contains("Max-Age=0"));
    }

    #[test]
    fn finds_the_value_once_and_refuses_two() {
        assert_eq!(find(&headers(&["a=1; __Host-ocgw=xyz; b=2"])), Some("xyz"));
        assert_eq!(find(&headers(&["a=1", "__Host-ocgw=xyz"])), Some("xyz"));
        assert_eq!(find(&headers(&["__Host-ocgw=xyz; __Host-ocgw=abc"])), None);
        assert_eq!(find(&headers(&["__host-ocgw=xyz"])), None, "names are case-sensitive");
        assert_eq!(find(&headers(&["__Host-ocgw="])), None);
        assert_eq!(find(&headers(&[])), None);
    }

    #[test]
    fn stripping_keeps_other_cookies_and_drops_every_spelling_of_ours() {
        let mut h = headers(&["a=1; __Host-ocgw=xyz", "__HOST-OCGW=zz; b=2"]);
        strip(&mut h);
        assert_eq!(h.get_all(header::COOKIE).iter().count(), 1);
        assert_eq!(h[header::COOKIE], "a=1; b=2");
        let mut h = headers(&["__Host-ocgw=xyz"]);
        strip(&mut h);
        assert!(h.get(header::COOKIE).is_none());
    }
}
