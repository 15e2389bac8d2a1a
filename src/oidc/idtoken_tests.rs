//! Crafted ID tokens, signed with a key made here (ES256), against the same `verify` the
//! callback uses: each refusal by its reason.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use super::*;

const ISS: &str = "http://127.0.0.1:4000";
const CLIENT: &str = "gateway";
const NONCE: &str = "n-0S6_WzA2Mj";
const NOW: i64 = 1_800_000_000;

struct Signer {
    key: EcdsaKeyPair,
    jwk: Jwk,
}

fn signer(kid: &str) -> Signer {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let point = key.public_key().as_ref();
    let jwk = serde_json::from_value(json!({
        "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
    }))
    .unwrap();
    Signer { key, jwk }
}

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

impl Signer {
    fn sign(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", b64(header), b64(claims));
        let sig = self.key.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    fn keys(&self) -> Vec<Jwk> {
        vec![self.jwk.clone()]
    }

    fn token(&self, claims: &Value) -> String {
        self.sign(&json!({"alg": "ES256", "kid": self.jwk.kid, "typ": "JWT"}), claims)
    }
}

fn claims() -> Value {
    json!({
        "iss": ISS, "sub": "alice", "aud": CLIENT, "exp": NOW + 300, "iat": NOW - 5,
        "nonce": NONCE, "email": "alice@example.com", "email_verified": true,
    })
}

fn with(changes: Value) -> Value {
    let mut c = claims();
    for (k, v) in changes.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn check(token: &str, keys: &[Jwk]) -> Result<Identity, Refusal> {
    let algs = vec!["RS256".to_string(), "ES256".to_string()];
    let nonce = nonce_digest(NONCE);
    verify(
        token,
        keys,
        &Expect {
            issuer: ISS,
            client_id: CLIENT,
            nonce_digest: &nonce,
            algs: &algs,
            now: NOW,
        },
    )
}

#[test]
fn a_good_token_names_its_subject_and_verified_email() {
    let s = signer("k1");
    let id = check(&s.token(&claims()), &s.keys()).unwrap();
    assert_eq!(id.sub, "alice");
    assert_eq!(id.email.as_deref(), Some("alice@example.com"));
    assert!(id.email_verified);
    let unverified = check(&s.token(&with(json!({"email_verified": false}))), &s.keys()).unwrap();
    assert!(!unverified.email_verified);
    let many = check(
        &s.token(&with(json!({"aud": [CLIENT, "other"], "azp": CLIENT}))),
        &s.keys(),
    );
    assert!(many.is_ok(), "{many:?}");
}

#[test]
fn a_changed_payload_fails_the_signature() {
    let s = signer("k1");
    let token = s.token(&claims());
    let parts: Vec<&str> = token.split('.').collect();
    let forged = b64(&with(json!({"sub": "admin", "email": "admin@example.com"})));
    let tampered = format!("{}.{forged}.{}", parts[0], parts[2]);
    assert_eq!(check(&tampered, &s.keys()), Err(Refusal::BadSignature));
}

#[test]
fn a_token_signed_by_another_key_is_refused() {
    let s = signer("k1");
    let impostor = signer("k1");
    assert_eq!(
        check(&impostor.token(&claims()), &s.keys()),
        Err(Refusal::BadSignature),
        "same kid, other key"
    );
    let stranger = signer("k9");
    assert_eq!(check(&stranger.token(&claims()), &s.keys()), Err(Refusal::UnknownKey));
    assert!(names_unknown_key(&stranger.token(&claims()), &s.keys()));
    assert!(!names_unknown_key(&s.token(&claims()), &s.keys()));
}

#[test]
fn none_hmac_and_unadvertised_algorithms_are_refused() {
    let s = signer("k1");
    let payload = b64(&claims());
    let none = format!("{}.{payload}.", b64(&json!({"alg": "none"})));
    assert_eq!(check(&none, &s.keys()), Err(Refusal::AlgorithmNotAllowed));
    // HS256 keyed with something public (the classic key confusion): never accepted.
    let hs = format!("{}.{payload}.c2ln", b64(&json!({"alg": "HS256", "kid": "k1"})));
    assert_eq!(check(&hs, &s.keys()), Err(Refusal::AlgorithmNotAllowed));
    // ES384 is supported by the gateway but not advertised by this provider.
    let es384 = s.sign(&json!({"alg": "ES384", "kid": "k1"}), &claims());
    assert_eq!(check(&es384, &s.keys()), Err(Refusal::AlgorithmNotAllowed));
    // An advertised algorithm the key was not made for.
    let rs = s.sign(&json!({"alg": "RS256", "kid": "k1"}), &claims());
    assert_eq!(check(&rs, &s.keys()), Err(Refusal::UnknownKey));
}

#[test]
fn expired_tokens_are_refused_beyond_the_leeway() {
    let s = signer("k1");
    let keys = [s.jwk.clone()];
    let expired = s.token(&with(json!({"exp": NOW - LEEWAY_SECS - 1, "iat": NOW - 3600})));
    assert_eq!(check(&expired, &keys), Err(Refusal::Expired));
    let just = s.token(&with(json!({"exp": NOW - 10})));
    assert!(check(&just, &keys).is_ok(), "within the leeway");
    let future = s.token(&with(json!({"iat": NOW + 3600, "exp": NOW + 7200})));
    assert_eq!(check(&future, &keys), Err(Refusal::IssuedInFuture));
}

#[test]
fn wrong_audience_is_refused() {
    let s = signer("k1");
    let keys = [s.jwk.clone()];
    for aud in [json!("another-client"), json!(["another-client"]), json!([])] {
        assert_eq!(
            check(&s.token(&with(json!({"aud": aud}))), &keys),
            Err(Refusal::WrongAudience),
            "{aud}"
        );
    }
    let other_azp = s.token(&with(json!({"aud": [CLIENT, "other"], "azp": "other"})));
    assert_eq!(check(&other_azp, &keys), Err(Refusal::WrongAudience));
    let no_azp = s.token(&with(json!({"aud": [CLIENT, "other"]})));
    assert_eq!(check(&no_azp, &keys), Err(Refusal::WrongAudience));
}

#[test]
fn wrong_issuer_is_refused() {
    let s = signer("k1");
    let keys = [s.jwk.clone()];
    for iss in [
        "http://127.0.0.1:4001",
        "http://127.0.0.1:4000/",
        "https://evil.example",
    ] {
        assert_eq!(
            check(&s.token(&with(json!({"iss": iss}))), &keys),
            Err(Refusal::WrongIssuer),
            "{iss}"
        );
    }
}

#[test]
fn wrong_or_missing_nonce_is_refused() {
    let s = signer("k1");
    let keys = [s.jwk.clone()];
    let other = s.token(&with(json!({"nonce": "someone-elses-nonce"})));
    assert_eq!(check(&other, &keys), Err(Refusal::WrongNonce));
    let mut none = claims();
    none.as_object_mut().unwrap().remove("nonce");
    assert_eq!(check(&s.token(&none), &keys), Err(Refusal::WrongNonce));
}

#[test]
fn malformed_tokens_are_refused() {
    let s = signer("k1");
    let keys = [s.jwk.clone()];
    let good = s.token(&claims());
    for bad in ["", "a.b", "a.b.c.d", "!!.!!.!!", &format!("{good}.extra")] {
        assert_eq!(check(bad, &keys), Err(Refusal::Malformed), "{bad}");
    }
    let crit = s.sign(&json!({"alg": "ES256", "kid": "k1", "crit": ["exp"]}), &claims());
    assert_eq!(check(&crit, &keys), Err(Refusal::Malformed));
}
