//! `[oidc]`: the provider must be reached over TLS (`http://` only to this machine, for tests and
//! a local provider), the client secret comes from the environment or a file (never the config
//! text, which is often shared), and each SSO identity names one user.

use std::collections::HashMap;

use super::super::file::RawOidc;
use super::super::settings::{Oidc, OidcMatch, User};
use super::Checker;
use crate::config::Secret;

/// The origin of an absolute URL, lower-cased, with the scheme's default port left out:
/// `https://Login.Example.com:443/x` → `https://login.example.com`.
pub(crate) fn origin_of(url: &str) -> Option<String> {
    let uri = url.parse::<http::Uri>().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = match (scheme.as_str(), uri.port_u16()) {
        ("https", Some(443)) | ("http", Some(80)) | (_, None) => String::new(),
        (_, Some(p)) => format!(":{p}"),
    };
    Some(format!("{scheme}://{host}{port}"))
}

/// May discovery name `url` as one of its endpoints? The issuer's own origin, or one the config
/// lists (`endpoint_origins`): the token endpoint receives the client secret and the JWKS decides
/// which signatures count, so a document that pointed them anywhere else (another port on this
/// machine, plain http) would hand both to whoever listens there.
pub(crate) fn endpoint_allowed(issuer: &str, allowed: &[String], url: &str) -> Result<(), String> {
    let origin = origin_of(url).ok_or_else(|| "is not a URL".to_string())?;
    if Some(&origin) == origin_of(issuer).as_ref() || allowed.contains(&origin) {
        return Ok(());
    }
    Err(format!(
        "is on {origin}, neither the issuer's origin nor one of oidc.endpoint_origins (add {origin:?} there if the provider really serves it)"
    ))
}

/// `https://…`, or `http://` to a loopback host; no query or fragment (the issuer is compared
/// byte for byte with the ID token's `iss`).
pub(crate) fn acceptable_url(url: &str) -> Result<(), &'static str> {
    let uri = url
        .parse::<http::Uri>()
        .ok()
        .filter(|u| u.host().is_some())
        .ok_or("is not a URL")?;
    if uri.query().is_some() || url.contains('#') {
        return Err("has a query or fragment");
    }
    let host = uri.host().unwrap_or_default().trim_matches(|ch| ch == '[' || ch == ']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if loopback => Ok(()),
        Some("http") => {
            Err("is plain http:// to another machine (tokens and the client secret would travel unencrypted)")
        }
        _ => Err("is not an https:// URL"),
    }
}

pub(super) fn oidc(c: &mut Checker<'_>, raw: &RawOidc) -> Option<Oidc> {
    let issuer = raw.issuer.trim().to_string();
    if let Err(why) = acceptable_url(&issuer) {
        c.problem(
            "oidc.issuer",
            format!("{issuer:?} {why}"),
            "write issuer = \"https://accounts.example.com\" exactly as the provider's discovery document names it (http:// is allowed to 127.0.0.1 or localhost only)",
        );
    }
    if raw.client_id.trim().is_empty() {
        c.problem(
            "oidc.client_id",
            "the client id is empty",
            "write the client id the provider gave this gateway",
        );
    }
    let (client_secret, secret_file) = secret(c, raw);
    let match_on = match_on(c, raw);
    let scopes = scopes(c, raw, match_on);
    let label = raw.label.clone().unwrap_or_else(|| {
        issuer
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .into()
    });
    let endpoint_origins = endpoint_origins(c, raw, &issuer);
    Some(Oidc {
        issuer,
        client_id: raw.client_id.trim().to_string(),
        client_secret: client_secret?,
        match_on,
        label,
        scopes,
        secret_file,
        endpoint_origins,
    })
}

fn match_on(c: &mut Checker<'_>, raw: &RawOidc) -> OidcMatch {
    match raw.match_on.as_deref() {
        None | Some("email") => OidcMatch::Email,
        Some("sub") => OidcMatch::Subject,
        Some(other) => {
            c.problem(
                "oidc.match",
                format!("{other:?} is not a claim the gateway matches users on"),
                "write match = \"email\" (a verified email) or match = \"sub\" (the provider's subject)",
            );
            OidcMatch::Email
        }
    }
}

/// The scopes asked for; `openid` always among them.
fn scopes(c: &mut Checker<'_>, raw: &RawOidc, match_on: OidcMatch) -> Vec<String> {
    let mut scopes = raw.scopes.clone().unwrap_or_else(|| match match_on {
        OidcMatch::Email => vec!["openid".into(), "email".into()],
        OidcMatch::Subject => vec!["openid".into()],
    });
    if let Some(bad) = scopes
        .iter()
        .find(|s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'))
    {
        c.problem(
            "oidc.scopes",
            format!("{bad:?} is not a scope"),
            "write scopes = [\"openid\", \"email\"]",
        );
    }
    if !scopes.iter().any(|s| s == "openid") {
        scopes.insert(0, "openid".into());
    }
    scopes
}

/// Origins besides the issuer's that its endpoints may be at.
fn endpoint_origins(c: &mut Checker<'_>, raw: &RawOidc, issuer: &str) -> Vec<String> {
    let mut endpoint_origins = Vec::new();
    for o in raw.endpoint_origins.iter().flatten() {
        // Plain http only where the issuer itself is on plain http (a loopback test provider).
        let plain_ok = issuer.starts_with("http://");
        match (acceptable_url(o), origin_of(o)) {
            (Ok(()), Some(origin)) if origin == o.trim_end_matches('/').to_ascii_lowercase() => {
                if origin.starts_with("http://") && !plain_ok {
                    c.problem(
                        "oidc.endpoint_origins",
                        format!("{o:?} is plain http:// while the issuer is https://"),
                        "list https:// origins only",
                    );
                }
                endpoint_origins.push(origin);
            }
            _ => c.problem(
                "oidc.endpoint_origins",
                format!("{o:?} is not an origin"),
                "write origins only, scheme and host (and port when not the default): endpoint_origins = [\"https://oauth2.example.com\"]",
            ),
        }
    }
    endpoint_origins
}

fn secret(c: &mut Checker<'_>, raw: &RawOidc) -> (Option<Secret>, Option<std::path::PathBuf>) {
    match (&raw.client_secret_env, &raw.client_secret_file) {
        (Some(_), Some(_)) => {
            c.problem(
                "oidc.client_secret_env",
                "both client_secret_env and client_secret_file are set",
                "keep one of them",
            );
            (None, None)
        }
        (Some(var), None) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => (Some(Secret::new(v)), None),
            _ => {
                c.problem(
                    "oidc.client_secret_env",
                    format!("the environment variable {var} is not set"),
                    format!("export {var}=<the client secret> before starting the gateway, or use client_secret_file"),
                );
                (None, None)
            }
        },
        (None, Some(file)) => {
            let path = c.path(file);
            match std::fs::read_to_string(&path) {
                Ok(v) if !v.trim().is_empty() => (Some(Secret::new(v.trim_end_matches(['\r', '\n']))), Some(path)),
                Ok(_) => {
                    c.problem(
                        "oidc.client_secret_file",
                        format!("{} is empty", path.display()),
                        "write the client secret the provider gave this gateway into it",
                    );
                    (None, None)
                }
                Err(e) => {
                    c.problem(
                        "oidc.client_secret_file",
                        format!("cannot read {}: {e}", path.display()),
                        "create it (mode 0600) with the client secret",
                    );
                    (None, None)
                }
            }
        }
        (None, None) => {
            c.problem(
                "oidc.client_secret_env",
                "no client secret is configured",
                "set client_secret_env = \"OIDC_CLIENT_SECRET\" (an environment variable holding it) or client_secret_file = \"<file>\"",
            );
            (None, None)
        }
    }
}

/// Two users with one identity would make a sign-in ambiguous. Emails compare without case.
pub(super) fn identities_unique(c: &mut Checker<'_>, users: &[User], oidc: Option<&Oidc>) {
    let fold = oidc.is_none_or(|o| o.match_on == OidcMatch::Email);
    let mut seen: HashMap<String, &str> = HashMap::new();
    for u in users {
        let Some(id) = &u.oidc else { continue };
        let key = if fold { id.to_lowercase() } else { id.clone() };
        if let Some(first) = seen.insert(key, &u.name) {
            c.problem(
                format!("user ({}).oidc", u.name),
                format!("{id:?} is also the identity of user {first:?}"),
                "give each user their own identity",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::acceptable_url;

    #[test]
    fn the_provider_is_reached_over_tls_or_on_this_machine() {
        for ok in [
            "https://accounts.example.com",
            "https://login.example.com/realms/dev",
            "http://127.0.0.1:4000",
            "http://localhost:8080/issuer",
            "http://[::1]:9000",
        ] {
            assert_eq!(acceptable_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://sso.example.com",
            "http://127.0.0.1.example.com",
            "ftp://127.0.0.1",
            "accounts.example.com",
            "https://accounts.example.com/?tenant=x",
            "https://accounts.example.com/#x",
        ] {
            assert!(acceptable_url(bad).is_err(), "{bad}");
        }
    }
}
