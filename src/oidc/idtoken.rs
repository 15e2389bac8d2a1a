//! The ID token check the callback relies on (OpenID Connect Core 3.1.3.7): a compact JWS whose
//! algorithm is one the provider advertises and the gateway supports (never `none`, never HMAC),
//! signed by a key from the provider's JWKS, issued by the configured issuer to this client, not
//! expired, and carrying the nonce this browser's flow sent. Pure: the keys, the expectations and
//! the time come in, so tests feed it crafted tokens.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use super::jwks::{Jwk, SUPPORTED};

/// Clock difference tolerated between the gateway and the provider.
pub(crate) const LEEWAY_SECS: i64 = 60;

/// What the token must say.
pub(crate) struct Expect<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    /// [`nonce_digest`] of the nonce the flow sent (the flow keeps no nonce in clear).
    pub nonce_digest: &'a [u8; 32],
    /// `id_token_signing_alg_values_supported` from discovery.
    pub algs: &'a [String],
    pub now: i64,
}

/// The claims the gateway uses, from a token that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub sub: String,
    pub email: Option<String>,
    pub email_verified: bool,
}

/// Why a token was refused (a stable code for logs and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Malformed,
    /// `none`, HMAC, or anything discovery does not advertise.
    AlgorithmNotAllowed,
    /// No key in the JWKS fits the header's `kid` and `alg`.
    UnknownKey,
    BadSignature,
    WrongIssuer,
    WrongAudience,
    Expired,
    IssuedInFuture,
    WrongNonce,
}

impl Refusal {
    pub(crate) fn code(self) -> &'static str {
        match self {
            Refusal::Malformed => "id_token_malformed",
            Refusal::AlgorithmNotAllowed => "id_token_alg_not_allowed",
            Refusal::UnknownKey => "id_token_unknown_key",
            Refusal::BadSignature => "id_token_bad_signature",
            Refusal::WrongIssuer => "id_token_wrong_issuer",
            Refusal::WrongAudience => "id_token_wrong_audience",
            Refusal::Expired => "id_token_expired",
            Refusal::IssuedInFuture => "id_token_issued_in_future",
            Refusal::WrongNonce => "id_token_wrong_nonce",
        }
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
    crit: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Audience,
    exp: i64,
    iat: i64,
    nonce: Option<String>,
    azp: Option<String>,
    email: Option<String>,
    #[serde(default)]
    email_verified: EmailVerified,
}

/// Some providers send `"true"` as a string.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum EmailVerified {
    Bool(bool),
    Text(String),
    #[default]
    Absent,
}

/// Does the JWKS need fetching again for this token (its `kid` is not in `keys`)? Lets the
/// caller refresh once when the provider rotated its keys.
pub(crate) fn names_unknown_key(token: &str, keys: &[Jwk]) -> bool {
    let Some(header) = token.split('.').next().and_then(|h| decode::<Header>(h).ok()) else {
        return false;
    };
    header
        .kid
        .is_some_and(|kid| !keys.iter().any(|k| k.kid.as_deref() == Some(kid.as_str())))
}

/// What a flow keeps of its nonce.
pub(crate) fn nonce_digest(nonce: &str) -> [u8; 32] {
    use blake2::{Blake2b256, Digest};
    let mut h = Blake2b256::new();
    h.update(b"oidc-nonce\0");
    h.update(nonce.as_bytes());
    h.finalize().into()
}

fn decode<T: for<'de> Deserialize<'de>>(part: &str) -> Result<T, Refusal> {
    let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| Refusal::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed)
}

/// Check `token` against `keys` and `expect`; the identity it vouches for.
pub(crate) fn verify(token: &str, keys: &[Jwk], expect: &Expect<'_>) -> Result<Identity, Refusal> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(Refusal::Malformed);
    };
    let header: Header = decode(h)?;
    // Extensions the gateway does not understand must not be ignored (RFC 7515 4.1.11).
    if header.crit.is_some() {
        return Err(Refusal::Malformed);
    }
    if !SUPPORTED.contains(&header.alg.as_str()) || !expect.algs.contains(&header.alg) {
        return Err(Refusal::AlgorithmNotAllowed);
    }
    let sig = URL_SAFE_NO_PAD.decode(s).map_err(|_| Refusal::Malformed)?;
    let candidates: Vec<&Jwk> = keys
        .iter()
        .filter(|k| k.fits(&header.alg))
        .filter(|k| header.kid.is_none() || k.kid == header.kid)
        .collect();
    // Without a `kid` only an unambiguous key is used.
    if candidates.is_empty() || (header.kid.is_none() && candidates.len() > 1) {
        return Err(Refusal::UnknownKey);
    }
    let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
    if !candidates.iter().any(|k| k.verify(&header.alg, signed, &sig)) {
        return Err(Refusal::BadSignature);
    }
    // Only now is the payload trusted enough to read.
    let claims: Claims = decode(p)?;
    if claims.iss != expect.issuer {
        return Err(Refusal::WrongIssuer);
    }
    let audiences: Vec<&str> = match &claims.aud {
        Audience::One(a) => vec![a.as_str()],
        Audience::Many(v) => v.iter().map(String::as_str).collect(),
    };
    if !audiences.contains(&expect.client_id) {
        return Err(Refusal::WrongAudience);
    }
    // A token for several audiences must name this client as the party it was issued to.
    if (audiences.len() > 1 || claims.azp.is_some()) && claims.azp.as_deref() != Some(expect.client_id) {
        return Err(Refusal::WrongAudience);
    }
    if claims.exp.saturating_add(LEEWAY_SECS) <= expect.now {
        return Err(Refusal::Expired);
    }
    if claims.iat > expect.now.saturating_add(LEEWAY_SECS) {
        return Err(Refusal::IssuedInFuture);
    }
    let nonce_ok = claims.nonce.as_deref().is_some_and(|n| {
        bool::from(subtle::ConstantTimeEq::ct_eq(
            &nonce_digest(n)[..],
            &expect.nonce_digest[..],
        ))
    });
    if !nonce_ok {
        return Err(Refusal::WrongNonce);
    }
    if claims.sub.is_empty() {
        return Err(Refusal::Malformed);
    }
    let email_verified = match claims.email_verified {
        EmailVerified::Bool(b) => b,
        EmailVerified::Text(t) => t == "true",
        EmailVerified::Absent => false,
    };
    Ok(Identity {
        sub: claims.sub,
        email: claims.email,
        email_verified,
    })
}

#[cfg(test)]
#[path = "idtoken_tests.rs"]
mod tests;
