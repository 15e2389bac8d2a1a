//! Cross-site request refusal for requests a cookie authenticates (the gateway's pages, and
//! project requests on a project host). A browser attaches the cookie to requests other sites
//! start, so an unsafe request passes only when it is plainly from the same origin. The rule is
//! Go 1.25's `CrossOriginProtection`, with an exact origin compare (scheme, host and port: one
//! host serves several ports, and sibling project hosts are the same *site*):
//! 1. GET, HEAD and OPTIONS pass.
//! 2. An Origin on the configured list passes.
//! 3. With `Sec-Fetch-Site`, only `same-origin` and `none` pass.
//! 4. With neither `Sec-Fetch-Site` nor `Origin`, pass (not a browser).
//! 5. Otherwise `Origin` must be the request's own origin.
//!
//! A WebSocket upgrade is stricter: WebSockets have no CORS, so one a cookie authenticates must
//! carry an `Origin` equal to the request's own origin (or a configured one).

use http::{HeaderMap, Method, header};

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
    headers: &HeaderMap,
    own: &str,
    trusted: &[String],
) -> Result<(), Refusal> {
    let origin = headers.get(header::ORIGIN).map(|v| v.to_str().unwrap_or("null"));
    let origin_ok = |o: &str| {
        crate::policy::origin::normalize(o).is_some_and(|o| {
            o == own
                || trusted
                    .iter()
                    .any(|t| crate::policy::origin::normalize(t).is_some_and(|t| t == o))
        })
    };
    if upgrade {
        return match origin {
            Some(o) if origin_ok(o) => Ok(()),
            Some(_) => Err(Refusal::ForeignOrigin),
            None => Err(Refusal::NoOrigin),
        };
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    if let Some(o) = origin
        && origin_ok(o)
    {
        return Ok(());
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        return match site.as_bytes() {
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
                    let got = check(&method, false, &h(origin, site), OWN, &[]);
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
                    &h(Some("https://api.gw.localhost:8443"), Some("same-site")),
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
                    &h(Some("https://evil.example"), Some("cross-site")),
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
                &h(Some("https://ci.example.com"), Some("cross-site")),
                OWN,
                &trusted
            )
            .is_ok()
        );
        assert!(
            check(
                &Method::POST,
                false,
                &h(Some("https://ci.example.com.evil"), None),
                OWN,
                &trusted
            )
            .is_err()
        );
    }

    #[test]
    fn a_websocket_needs_the_exact_origin() {
        assert_eq!(
            check(&Method::GET, true, &h(None, None), OWN, &[]),
            Err(Refusal::NoOrigin)
        );
        assert_eq!(
            check(
                &Method::GET,
                true,
                &h(Some("https://api.gw.localhost:8443"), Some("same-site")),
                OWN,
                &[]
            ),
            Err(Refusal::ForeignOrigin)
        );
        assert!(check(&Method::GET, true, &h(Some(OWN), Some("same-origin")), OWN, &[]).is_ok());
    }
}
