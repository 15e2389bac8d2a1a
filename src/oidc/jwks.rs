//! The provider's signing keys (a JWK Set) as ring verification keys, and which algorithms the
//! gateway accepts at all: asymmetric signatures only (no `none`, no HMAC: a client secret must
//! never be a key an ID token can be forged with).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey, VerificationAlgorithm};
use serde::Deserialize;

/// The JWS algorithms this gateway can verify.
pub(crate) const SUPPORTED: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

#[derive(Debug, Deserialize)]
pub(crate) struct JwkSet {
    pub keys: Vec<Jwk>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Jwk {
    pub kty: String,
    pub kid: Option<String>,
    #[serde(rename = "use")]
    pub use_: Option<String>,
    pub alg: Option<String>,
    pub crv: Option<String>,
    pub n: Option<String>,
    pub e: Option<String>,
    pub x: Option<String>,
    pub y: Option<String>,
}

fn rsa(alg: &str) -> Option<&'static signature::RsaParameters> {
    Some(match alg {
        "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
        "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
        "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
        "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
        "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
        "PS512" => &signature::RSA_PSS_2048_8192_SHA512,
        _ => return None,
    })
}

fn b64(v: &Option<String>) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(v.as_deref()?).ok()
}

impl Jwk {
    /// Can this key verify `alg` (its type and curve fit, it is a signing key, and any `alg` it
    /// names is this one)?
    pub(crate) fn fits(&self, alg: &str) -> bool {
        if self.use_.as_deref().is_some_and(|u| u != "sig") || self.alg.as_deref().is_some_and(|a| a != alg) {
            return false;
        }
        match (self.kty.as_str(), self.crv.as_deref()) {
            ("RSA", _) => rsa(alg).is_some(),
            ("EC", Some("P-256")) => alg == "ES256",
            ("EC", Some("P-384")) => alg == "ES384",
            ("OKP", Some("Ed25519")) => alg == "EdDSA",
            _ => false,
        }
    }

    /// Verify `sig` over `message` with this key and `alg` (checked with [`Jwk::fits`] first).
    pub(crate) fn verify(&self, alg: &str, message: &[u8], sig: &[u8]) -> bool {
        if !self.fits(alg) {
            return false;
        }
        if let Some(params) = rsa(alg) {
            let (Some(n), Some(e)) = (b64(&self.n), b64(&self.e)) else {
                return false;
            };
            return RsaPublicKeyComponents { n, e }.verify(params, message, sig).is_ok();
        }
        let (algorithm, point): (&'static dyn VerificationAlgorithm, Option<Vec<u8>>) = match alg {
            "ES256" | "ES384" => {
                let (Some(x), Some(y)) = (b64(&self.x), b64(&self.y)) else {
                    return false;
                };
                let size = if alg == "ES256" { 32 } else { 48 };
                if x.len() != size || y.len() != size {
                    return false;
                }
                let algorithm: &'static dyn VerificationAlgorithm = if alg == "ES256" {
                    &signature::ECDSA_P256_SHA256_FIXED
                } else {
                    &signature::ECDSA_P384_SHA384_FIXED
                };
                (algorithm, Some([&[4u8][..], &x, &y].concat()))
            }
            "EdDSA" => (&signature::ED25519, b64(&self.x)),
            _ => return false,
        };
        point.is_some_and(|p| UnparsedPublicKey::new(algorithm, p).verify(message, sig).is_ok())
    }
}
