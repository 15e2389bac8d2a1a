//! The named host's handoff (issue 38): passkeys need a name, and in LAN mode the login host is
//! an address (`Reach::passkey_origin`). So a browser logged in at the address (a paired phone)
//! is given a login at the named host `https://<host>.local[:port]` without a password, by the
//! project hosts' handoff run the other way round (web/handoff.rs has the ticket's rules):
//! the portal's button opens `/_gw/arrive` on the named host, which sets its handoff state as a
//! host-only cookie and sends the browser to the address's `/_gw/handoff?to=<named origin>/`;
//! there the logged-in session mints a single-use ticket bound to it and to the state, for exactly
//! the named origin (its port, its host in any case, the portal's path only), and the named host's
//! `/_gw/callback` redeems it once, in the browser holding the state, into a login session that is
//! a child of the address's (same user and device, it dies with it: `Origin::Named`).
//!
//! A browser already logged in on the named host keeps its login: the callback there is refused
//! (a sibling port of the name could plant the state cookie, not replace a held login cookie).
//! One with no login there can be planted one by a sibling port anyway (web/front.rs's limit);
//! the state cookie adds nothing to that.

use http::Response;

use super::handoff::{BadTarget, split_target};
use super::{Ctx, form, page};
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

/// Read a handoff target naming the named host `named` (`https://<name>[:port]`): exactly its
/// origin (host in any case, the same port) and the portal's path (`/`, with a query at most).
/// `None`: the target names another host (the other rules apply). Returns the path.
pub(crate) fn parse<'a>(to: &'a str, named: &str) -> Option<Result<&'a str, BadTarget>> {
    let (authority, path) = match split_target(to) {
        Ok(parts) => parts,
        Err(e) => return Some(Err(e)),
    };
    let named = named.strip_prefix("https://").unwrap_or(named);
    let name = crate::policy::route::strip_port(named);
    if !crate::policy::route::strip_port(authority).eq_ignore_ascii_case(name) {
        return None;
    }
    // The port as the origin spells it (`:08443` and `:443` are no spelling of it).
    Some(if !authority.eq_ignore_ascii_case(named) {
        Err(BadTarget::OtherPort)
    } else if path != "/" && !path.starts_with("/?") {
        Err(BadTarget::BadPath)
    } else {
        Ok(path)
    })
}

/// Named host: `GET /_gw/arrive`. Logged in here already: the portal. Else set this host's
/// handoff state and go to the login address's handoff for the named origin.
pub(crate) async fn arrive(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let Some(named) = ctx.named_origin().filter(|n| *n == ctx.own_origin()) else {
        return Err(HttpError::NotFound("no such gateway page".into()));
    };
    if ctx.login_session().await?.is_some() {
        return Ok(page::redirect("/#passkeys"));
    }
    let state = crate::auth::sessions::random(16);
    let to = format!("{named}/");
    Err(HttpError::LoginRedirect {
        location: format!(
            "{}/_gw/handoff?to={}&state={state}",
            ctx.login_origin(),
            form::encode(&to)
        ),
        state,
        cookie: crate::http::cookie::HANDOFF_STATE.into(),
    })
}

/// Whether this request came to the named host (the one login-host name a ticket may be
/// redeemed on).
pub(crate) fn here(ctx: &Ctx<'_>) -> bool {
    ctx.named_origin().is_some_and(|n| n == ctx.own_origin())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reach::BoundPorts;
    use crate::web::handoff::target;

    const NAMED: &str = "https://devbox.local:8443";

    fn ports() -> BoundPorts {
        BoundPorts {
            main: 8443,
            projects: vec![("demo".into(), 8444)],
            http: None,
        }
    }

    /// From the address: the named host's exact origin, its portal only.
    fn from_address(to: &str) -> Result<(&str, String, &str), BadTarget> {
        target(to, "192.168.1.20:8443", None, Some(NAMED), &ports())
    }

    #[test]
    fn the_named_host_is_a_target_only_at_its_exact_origin_and_portal() {
        assert_eq!(
            from_address("https://devbox.local:8443/"),
            Ok(("devbox.local:8443", String::new(), "/"))
        );
        assert_eq!(from_address("https://devbox.local:8443").unwrap().2, "/");
        assert_eq!(from_address("https://DevBox.LOCAL:8443/?x=1").unwrap().2, "/?x=1");
        let refused = [
            ("https://other.local:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local.evil:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local.:8443/", BadTarget::NotAProjectHost),
            ("https://xdevbox.local:8443/", BadTarget::NotAProjectHost),
            ("https://devbox%2elocal:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local:8443@evil.example/", BadTarget::NotAProjectHost),
            ("https://evil.example@devbox.local:8443/", BadTarget::NotAProjectHost),
            ("https://devbox.local:8443\\@evil.example/", BadTarget::NotAProjectHost),
            ("https://devbox.local\\evil.example:8443/", BadTarget::NotAProjectHost),
            ("http://devbox.local:8443/", BadTarget::NotHttps),
            ("//devbox.local:8443/", BadTarget::NotHttps),
            ("https://devbox.local:9443/", BadTarget::OtherPort),
            ("https://devbox.local/", BadTarget::OtherPort),
            ("https://devbox.local:08443/", BadTarget::OtherPort),
            // A project's own port on the name is not the named origin.
            ("https://devbox.local:8444/", BadTarget::OtherPort),
            ("https://devbox.local:8443//evil.example/", BadTarget::BadPath),
            ("https://devbox.local:8443/../x", BadTarget::BadPath),
            ("https://devbox.local:8443/login", BadTarget::BadPath),
            ("https://devbox.local:8443/_gw/callback", BadTarget::BadPath),
            ("https://devbox.local:8443/#frag", BadTarget::BadPath),
        ];
        for (to, want) in refused {
            assert_eq!(from_address(to), Err(want), "{to}");
        }
    }

    #[test]
    fn without_a_named_host_or_on_it_the_other_rules_stand() {
        // No named host (a login host by name, or a certificate without the name): refused.
        assert_eq!(
            target("https://devbox.local:8443/", "192.168.1.20:8443", None, None, &ports()),
            Err(BadTarget::NotAProjectHost)
        );
        // The address's project ports stay targets beside it.
        assert_eq!(from_address("https://192.168.1.20:8444/").unwrap().1, "demo");
        // On the named host (which passes no named origin): its own project ports, as before.
        assert_eq!(
            target("https://devbox.local:8444/", "devbox.local:8443", None, None, &ports())
                .unwrap()
                .1,
            "demo"
        );
    }

    #[test]
    fn any_target_string_is_answered_without_a_panic() {
        // Property: whatever follows `https://`, the parser answers, and accepts only the exact
        // named origin's portal.
        let pieces = [
            "devbox.local",
            "DEVBOX.local",
            ":8443",
            ":08443",
            ":8444",
            ":",
            "@",
            "\\",
            "/",
            "//",
            "?",
            "#",
            "%2e",
            ".",
            "é",
            "evil",
            "..",
            "x",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let to = format!("https://{a}{b}{c}");
                    if let Some(Ok(_)) = parse(&to, NAMED) {
                        let rest = to["https://".len()..].to_ascii_lowercase();
                        let after = rest.strip_prefix("devbox.local:8443");
                        assert!(
                            after.is_some_and(|a| a.is_empty() || a == "/" || a.starts_with("/?")),
                            "{to} accepted"
                        );
                    }
                }
            }
        }
    }
}
