//! What a request offers as proof of identity, parsed without I/O: HTTP Basic, a Bearer token, or
//! OpenCode's own `?auth_token=base64(user:password)` (which browsers use where headers can't be set).

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use http::HeaderMap;
use http::header::AUTHORIZATION;

use crate::config::Secret;

/// Longest Authorization value we look at; argon2 input is bounded by it too.
pub(crate) const MAX_CREDENTIAL_LEN: usize = 4096;

#[derive(Debug, PartialEq, Eq)]
pub enum Credentials {
    Basic { user: String, password: Secret },
    Bearer(Secret),
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the Authorization header is not valid Basic or Bearer credentials")]
    Malformed,
    #[error("the Authorization scheme is not supported (use Basic or Bearer)")]
    UnsupportedScheme,
}

/// Credentials from the Authorization header, or `Ok(None)` when there is none.
pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Option<Credentials>, CredentialError> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| CredentialError::Malformed)?;
    parse_authorization(value).map(Some)
}

pub fn parse_authorization(value: &str) -> Result<Credentials, CredentialError> {
    if value.len() > MAX_CREDENTIAL_LEN {
        return Err(CredentialError::Malformed);
    }
    let value = value.trim();
    let (scheme, rest) = value.split_once(' ').ok_or(CredentialError::Malformed)?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("basic") {
        parse_basic_token(rest).ok_or(CredentialError::Malformed)
    } else if scheme.eq_ignore_ascii_case("bearer") {
        if rest.is_empty() || rest.contains(char::is_whitespace) {
            return Err(CredentialError::Malformed);
        }
        Ok(Credentials::Bearer(Secret::new(rest)))
    } else {
        Err(CredentialError::UnsupportedScheme)
    }
}

/// `base64(user:password)`, as in Basic and in OpenCode's `auth_token`.
pub fn parse_basic_token(token: &str) -> Option<Credentials> {
    if token.len() > MAX_CREDENTIAL_LEN {
        return None;
    }
    let decoded = STANDARD
        .decode(token)
        .or_else(|_| STANDARD_NO_PAD.decode(token.trim_end_matches('=')))
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    if user.is_empty() || user.len() > 256 {
        return None;
    }
    Some(Credentials::Basic {
        user: user.to_string(),
        password: Secret::new(password),
    })
}

/// OpenCode's `auth_token` query parameter, if the query has one. The request path reads it
/// through the canonical request's query facts (`pipeline/request.rs`, shown to read the same
/// value as `query::get` by a property test) and then [`parse_basic_token`]; this is the same
/// composition, for the property and fuzz tests.
pub fn from_query(query: Option<&str>) -> Option<Credentials> {
    let token = crate::policy::query::get(query?, "auth_token")?;
    parse_basic_token(&token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, pw: &str) -> String {
        format!("Basic {}", STANDARD.encode(format!("{user}:{pw}")))
    }

    #[test]
    fn parses_basic_with_colons_in_the_password() {
        let c = parse_authorization(&basic("alice", "a:b:c")).unwrap();
        assert_eq!(
            c,
            Credentials::Basic {
                user: "alice".into(),
                password: Secret::new("a:b:c")
            }
        );
        assert!(parse_authorization(&basic("alice", "x").replace("Basic", "bAsIc")).is_ok());
    }

    #[test]
    fn refuses_what_is_not_basic_or_bearer() {
        assert_eq!(parse_authorization("Digest x"), Err(CredentialError::UnsupportedScheme));
        assert_eq!(parse_authorization("Basic !!!"), Err(CredentialError::Malformed));
        assert_eq!(
            parse_authorization(&format!("Basic {}", STANDARD.encode("nocolon"))),
            Err(CredentialError::Malformed)
        );
        assert_eq!(
            parse_authorization(&format!("Basic {}", STANDARD.encode(":pw"))),
            Err(CredentialError::Malformed)
        );
        assert_eq!(parse_authorization("Basic"), Err(CredentialError::Malformed));
        assert_eq!(parse_authorization("Bearer "), Err(CredentialError::Malformed));
        assert!(matches!(parse_authorization("Bearer abc"), Ok(Credentials::Bearer(_))));
    }

    #[test]
    fn reads_auth_token_from_the_query() {
        let token = STANDARD.encode("bob:pw");
        let q = format!("directory=%2Ftmp&auth_token={}", token.replace('=', "%3D"));
        assert_eq!(
            from_query(Some(&q)),
            Some(Credentials::Basic {
                user: "bob".into(),
                password: Secret::new("pw")
            })
        );
        assert_eq!(from_query(Some("a=b")), None);
        assert_eq!(from_query(None), None);
    }
}
