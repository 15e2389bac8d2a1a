//! The two origin rules, in one place: which requests a browser may have sent from another site.
//!
//! A browser attaches a site's cookie, and its cached Basic credentials, to requests other sites
//! start. So an unsafe request or a WebSocket upgrade passes only when it is plainly from an
//! allowed origin. The stricter rule, [`check`], is for requests a cookie authenticates (the
//! gateway's pages, and project requests on a project front). It is Go 1.25's
//! `CrossOriginProtection`, with an exact origin compare (scheme, host and port: one host serves
//! several ports, and sibling project hosts are the same *site*):
//! 1. GET, HEAD and OPTIONS pass.
//! 2. An Origin on the configured list passes.
//! 3. With `Sec-Fetch-Site`, only `same-origin` and `none` pass.
//! 4. With neither `Sec-Fetch-Site` nor `Origin`, pass (not a browser).
//! 5. Otherwise `Origin` must be the request's own origin.
//!
//! A WebSocket upgrade is stricter: WebSockets have no CORS, so one a cookie authenticates must
//! carry an `Origin` equal to the request's own origin (or a configured one).
//!
//! The older rule, [`credentials_rule`], is for Basic, Bearer, a ticket and an SSH channel:
//! an `Origin` must be the request's own or a configured one; without one, only a browser's
//! word that the request is cross-site (`Sec-Fetch-Site: cross-site`) refuses it.

use http::{HeaderMap, Method, header};

// Built at compile time: a `&str` name is parsed and validated on every lookup.
const SEC_FETCH_SITE: http::HeaderName = http::HeaderName::from_static("sec-fetch-site");

/// What a browser says about where a request comes from, read one way for both rules: `Origin`
/// (`"null"` when it is not text) and `Sec-Fetch-Site`. Read when a rule asks, not before: most
/// requests are safe and never ask (two header lookups on every request cost about 1 % of a
/// proxied request's instructions, docs/performance.md).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Browser<'a>(&'a HeaderMap);

impl<'a> Browser<'a> {
    pub(crate) fn of(headers: &'a HeaderMap) -> Self {
        Browser(headers)
    }

    pub(crate) fn origin(self) -> Option<&'a str> {
        self.0.get(header::ORIGIN).map(|v| v.to_str().unwrap_or("null"))
    }

    pub(crate) fn fetch_site(self) -> Option<&'a [u8]> {
        self.0.get(SEC_FETCH_SITE).map(|v| v.as_bytes())
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The older rule (Basic, Bearer, a ticket, an SSH channel): a write or an upgrade passes with
/// the request's own origin (`scheme://host`) or a configured one; without an `Origin`, unless
/// the browser says the request is cross-site.
pub(crate) fn credentials_rule(
    method: &Method,
    upgrade: bool,
    browser: Browser<'_>,
    scheme: &str,
    host: Option<&str>,
    trusted: &[String],
) -> Result<(), Refusal> {
    if is_safe(method) && !upgrade {
        return Ok(());
    }
    match browser.origin() {
        None if browser
            .fetch_site()
            .is_some_and(|s| s.eq_ignore_ascii_case(b"cross-site")) =>
        {
            Err(Refusal::FetchSite)
        }
        None => Ok(()),
        Some(o) if crate::policy::origin::allowed(o, scheme, host, trusted) => Ok(()),
        Some(_) => Err(Refusal::ForeignOrigin),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `Sec-Fetch-Site` said cross-site or same-site.
    FetchSite,
    /// `Origin` is not this origin.
    ForeignOrigin,
    /// A WebSocket upgrade with no `Origin`.
    NoOrigin,
}

impl Refusal {
    pub(crate) fn code(self) -> &'static str {
        match self {
            Refusal::FetchSite => "cross_site_fetch",
            Refusal::ForeignOrigin => "foreign_origin",
            Refusal::NoOrigin => "websocket_without_origin",
        }
    }

    pub(crate) fn message(self) -> &'static str {
        match self {
            Refusal::FetchSite => "a request from another site may not act with this browser's login",
            Refusal::ForeignOrigin => "a request from another origin may not act with this browser's login",
            Refusal::NoOrigin => "a terminal opened with this browser's login must say its origin",
        }
    }
}

/// `own` is the request's own origin (`https://host[:port]`, normalised).
pub(crate) fn check(
    method: &Method,
    upgrade: bool,
    browser: Browser<'_>,
    own: &str,
    trusted: &[String],
) -> Result<(), Refusal> {
    let origin_ok = |o: &str| {
        crate::policy::origin::normalize(o).is_some_and(|o| {
            o == own
                || trusted
                    .iter()
                    .any(|t| crate::policy::origin::normalize(t).is_some_and(|t| t == o))
        })
    };
    if upgrade {
        return match browser.origin() {
            Some(o) if origin_ok(o) => Ok(()),
            Some(_) => Err(Refusal::ForeignOrigin),
            None => Err(Refusal::NoOrigin),
        };
    }
    if is_safe(method) {
        return Ok(());
    }
    let origin = browser.origin();
    if let Some(o) = origin
        && origin_ok(o)
    {
        return Ok(());
    }
    if let Some(site) = browser.fetch_site() {
        return match site {
            b"same-origin" | b"none" => Ok(()),
            _ => Err(Refusal::FetchSite),
        };
    }
    match origin {
        None => Ok(()),
        Some(_) => Err(Refusal::ForeignOrigin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const OWN: &str = "https://web.gw.localhost:8443";

    fn h(origin: Option<&str>, site: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        if let Some(s) = site {
            h.insert("sec-fetch-site", HeaderValue::from_str(s).unwrap());
        }
        h
    }

    /// The matrix: method × Sec-Fetch-Site × Origin (own, own without port, sibling host, other
    /// port, other scheme, null, absent).
    #[test]
    fn the_matrix() {
        let origins = [
            (Some(OWN), true),
            (Some("https://WEB.gw.localhost:8443"), true),
            (Some("https://web.gw.localhost"), false),
            (Some("https://api.gw.localhost:8443"), false),
            (Some("https://web.gw.localhost:9443"), false),
            (Some("http://web.gw.localhost:8443"), false),
            (Some("null"), false),
            (None, true),
        ];
        let sites = [
            (None, true),
            (Some("same-origin"), true),
            (Some("none"), true),
            (Some("same-site"), false),
            (Some("cross-site"), false),
        ];
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            for (origin, origin_same) in origins {
                for (site, site_ok) in sites {
                    let got = check(&method, false, Browser::of(&h(origin, site)), OWN, &[]);
                    // A matching Origin wins; otherwise Sec-Fetch-Site decides; with neither, pass.
                    let want = if origin.is_some() && origin_same {
                        true
                    } else if site.is_some() {
                        site_ok
                    } else {
                        origin.is_none()
                    };
                    assert_eq!(got.is_ok(), want, "{method} origin={origin:?} site={site:?}: {got:?}");
                }
            }
            assert_eq!(
                check(
                    &method,
                    false,
                    Browser::of(&h(Some("https://api.gw.localhost:8443"), Some("same-site"))),
                    OWN,
                    &[]
                ),
                Err(Refusal::FetchSite),
                "a sibling project host is same-site, and refused"
            );
        }
        for safe in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(
                check(
                    &safe,
                    false,
                    Browser::of(&h(Some("https://evil.example"), Some("cross-site"))),
                    OWN,
                    &[]
                )
                .is_ok()
            );
        }
    }

    #[test]
    fn a_trusted_origin_passes_and_nothing_else_is_widened() {
        let trusted = vec!["https://ci.example.com".to_string()];
        assert!(
            check(
                &Method::POST,
                false,
                Browser::of(&h(Some("https://ci.example.com"), Some("cross-site"))),
                OWN,
                &trusted
            )
            .is_ok()
        );
        assert!(
            check(
                &Method::POST,
                false,
                Browser::of(&h(Some("https://ci.example.com.evil"), None)),
                OWN,
                &trusted
            )
            .is_err()
        );
    }

    #[test]
    fn a_websocket_needs_the_exact_origin() {
        assert_eq!(
            check(&Method::GET, true, Browser::of(&h(None, None)), OWN, &[]),
            Err(Refusal::NoOrigin)
        );
        assert_eq!(
            check(
                &Method::GET,
                true,
                Browser::of(&h(Some("https://api.gw.localhost:8443"), Some("same-site"))),
                OWN,
                &[]
            ),
            Err(Refusal::ForeignOrigin)
        );
        assert!(
            check(
                &Method::GET,
                true,
                Browser::of(&h(Some(OWN), Some("same-origin"))),
                OWN,
                &[]
            )
            .is_ok()
        );
    }

    /// The older rule, for every method and browser word: a safe request that does not upgrade
    /// passes; otherwise the request's own origin or a configured one passes, a foreign or
    /// `null` origin is refused as foreign, and without an Origin only `cross-site` refuses.
    #[test]
    fn the_credentials_rule() {
        const SCHEME: &str = "https";
        const HOST: &str = "gw.localhost:8443";
        let trusted = vec!["https://ci.example.com".to_string()];
        let origins = [
            (Some("https://gw.localhost:8443"), Ok(())),
            (Some("https://GW.localhost:8443/"), Ok(())),
            (Some("https://ci.example.com"), Ok(())),
            (Some("https://gw.localhost"), Err(Refusal::ForeignOrigin)),
            (Some("http://gw.localhost:8443"), Err(Refusal::ForeignOrigin)),
            (Some("https://evil.example"), Err(Refusal::ForeignOrigin)),
            (Some("null"), Err(Refusal::ForeignOrigin)),
        ];
        for method in [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::POST,
            Method::PUT,
            Method::DELETE,
        ] {
            for upgrade in [false, true] {
                let judged = !is_safe(&method) || upgrade;
                for site in [
                    None,
                    Some("same-origin"),
                    Some("same-site"),
                    Some("cross-site"),
                    Some("CROSS-SITE"),
                ] {
                    for (origin, want) in origins {
                        let headers = h(origin, site);
                        let got =
                            credentials_rule(&method, upgrade, Browser::of(&headers), SCHEME, Some(HOST), &trusted);
                        let want = if judged { want } else { Ok(()) };
                        assert_eq!(got, want, "{method} upgrade={upgrade} origin={origin:?} site={site:?}");
                    }
                    let headers = h(None, site);
                    let got = credentials_rule(&method, upgrade, Browser::of(&headers), SCHEME, Some(HOST), &trusted);
                    let cross = site.is_some_and(|s| s.eq_ignore_ascii_case("cross-site"));
                    let want = if judged && cross {
                        Err(Refusal::FetchSite)
                    } else {
                        Ok(())
                    };
                    assert_eq!(got, want, "{method} upgrade={upgrade} no origin, site={site:?}");
                }
            }
        }
    }
}
