//! Web Push messages (issue 26), with ring only: a message encrypted for one subscription
//! (RFC 8291, in the `aes128gcm` content coding of RFC 8188) and the VAPID credential that says
//! which server sends it (RFC 8292). Delivery (RFC 8030) is a POST of the sealed body to the
//! subscription's endpoint with `Content-Encoding: aes128gcm`, `TTL` and
//! `Authorization: vapid t=<JWT>, k=<public key>`.
//!
//! The gateway's VAPID key pair is made on first use in `state_dir` (`vapid.pk8`, 0600, PKCS#8);
//! its public half is what a browser's `pushManager.subscribe` is given as
//! `applicationServerKey`.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use ring::{aead, agreement, hkdf, hmac};

/// The record size written in the header: one record holds any message the gateway sends.
const RECORD_SIZE: u32 = 4096;
/// A message's plaintext, at most (one record, less the padding delimiter and the tag).
pub(crate) const MAX_PLAINTEXT: usize = 3000;
/// How long a VAPID token is valid (RFC 8292: at most 24 hours).
const TOKEN_SECONDS: u64 = 12 * 3600;

/// `len` bytes out of an HKDF expansion (ring's way of naming an output length).
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn expand(prk: &hkdf::Prk, info: &[&[u8]], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    prk.expand(info, Len(len))
        .and_then(|okm| okm.fill(&mut out))
        .expect("HKDF-SHA256 expands to at most 255 blocks");
    out
}

/// RFC 8291 section 3.4 and RFC 8188: the body for one subscription (`ua_public`, its 65-byte
/// uncompressed P-256 key, and its 16-byte `auth` secret), from the ECDH secret between the
/// subscription's key and the sender's one-time key (`as_public`), and a random `salt`.
pub(crate) fn seal(
    ecdh_secret: &[u8],
    auth: &[u8],
    ua_public: &[u8],
    as_public: &[u8],
    salt: &[u8; 16],
    plaintext: &[u8],
) -> Vec<u8> {
    let (cek, nonce) = content_keys(ecdh_secret, auth, ua_public, as_public, salt);
    let key = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &cek).expect("16 bytes"));
    // The last (only) record: the plaintext, then the delimiter 0x02, no padding.
    let mut record = Vec::with_capacity(plaintext.len() + 1 + aead::AES_128_GCM.tag_len());
    record.extend_from_slice(plaintext);
    record.push(2);
    key.seal_in_place_append_tag(
        aead::Nonce::try_assume_unique_for_key(&nonce).expect("12 bytes"),
        aead::Aad::empty(),
        &mut record,
    )
    .expect("a record under 64 GiB");
    let mut body = Vec::with_capacity(16 + 4 + 1 + as_public.len() + record.len());
    body.extend_from_slice(salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(as_public.len() as u8);
    body.extend_from_slice(as_public);
    body.extend_from_slice(&record);
    body
}

/// RFC 8291 section 3.4's key schedule: the content key and nonce of a message, from the ECDH
/// secret, the auth secret, both public keys and the salt.
fn content_keys(
    ecdh_secret: &[u8],
    auth: &[u8],
    ua_public: &[u8],
    as_public: &[u8],
    salt: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    // PRK_key = HMAC(auth, ecdh); IKM = HKDF-Expand(PRK_key, "WebPush: info\0" || ua || as, 32).
    let prk_key = hkdf::Salt::new(hkdf::HKDF_SHA256, auth).extract(ecdh_secret);
    let ikm = expand(&prk_key, &[b"WebPush: info\0", ua_public, as_public], 32);
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&ikm);
    let cek = expand(&prk, &[b"Content-Encoding: aes128gcm\0"], 16);
    let nonce = expand(&prk, &[b"Content-Encoding: nonce\0"], 12);
    (cek, nonce)
}

/// Why a subscription's keys cannot take a message.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum SealError {
    #[error("the subscription's p256dh is not an uncompressed P-256 key (65 bytes)")]
    BadKey,
    #[error("the subscription's auth secret is not 16 bytes")]
    BadAuth,
    #[error("the message is over {MAX_PLAINTEXT} bytes")]
    TooLong,
}

/// `plaintext` sealed for a subscription: a one-time key pair and salt of the gateway's, the
/// ECDH secret with the subscription's key.
pub(crate) fn encrypt(ua_public: &[u8], auth: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
    if ua_public.len() != 65 || ua_public[0] != 4 {
        return Err(SealError::BadKey);
    }
    if auth.len() != 16 {
        return Err(SealError::BadAuth);
    }
    if plaintext.len() > MAX_PLAINTEXT {
        return Err(SealError::TooLong);
    }
    let rng = SystemRandom::new();
    let mine = agreement::EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng).map_err(|_| SealError::BadKey)?;
    let as_public = mine.compute_public_key().map_err(|_| SealError::BadKey)?;
    let mut salt = [0u8; 16];
    rng.fill(&mut salt).map_err(|_| SealError::BadKey)?;
    let theirs = agreement::UnparsedPublicKey::new(&agreement::ECDH_P256, ua_public);
    agreement::agree_ephemeral(mine, &theirs, |secret| {
        seal(secret, auth, ua_public, as_public.as_ref(), &salt, plaintext)
    })
    .map_err(|_| SealError::BadKey)
}

/// The gateway's VAPID key pair.
pub(crate) struct Vapid {
    key: EcdsaKeyPair,
}

impl Vapid {
    /// The key pair in `state_dir/vapid.pk8`, made (0600) when there is none.
    pub(crate) fn load_or_create(state_dir: &Path) -> anyhow::Result<Vapid> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = state_dir.join("vapid.pk8");
        let rng = SystemRandom::new();
        let pkcs8 = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(|_| anyhow::anyhow!("cannot make a VAPID key pair"))?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                std::io::Write::write_all(&mut f, doc.as_ref())?;
                doc.as_ref().to_vec()
            }
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        };
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng).map_err(|_| {
            anyhow::anyhow!(
                "{} is not a P-256 PKCS#8 key: remove it to make a new one (subscribed devices then subscribe again)",
                path.display()
            )
        })?;
        Ok(Vapid { key })
    }

    /// The public key, base64url (a browser's `applicationServerKey`, VAPID's `k`).
    pub(crate) fn public_key(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.public_key().as_ref())
    }

    /// `Authorization` for a push service at `audience` (its origin, `https://host[:port]`):
    /// `vapid t=<ES256 JWT>, k=<public key>`, valid for 12 hours from `now` (Unix seconds);
    /// `subject` is how the push service may reach the operator (the gateway's public URL).
    pub(crate) fn authorization(&self, audience: &str, subject: &str, now: u64) -> String {
        let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({"aud": audience, "exp": now + TOKEN_SECONDS, "sub": subject});
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signing_input = format!("{header}.{claims}");
        let signature = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .expect("ECDSA P-256 signing does not fail with the system's randomness");
        let jwt = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()));
        format!("vapid t={jwt}, k={}", self.public_key())
    }
}

/// A push service's origin, VAPID's audience: `https://host[:port]` of an endpoint URL.
pub(crate) fn audience(endpoint: &http::Uri) -> Option<String> {
    Some(format!("https://{}", endpoint.authority()?))
}

/// A short digest of an endpoint, to tell subscriptions apart in logs and the audit without
/// writing the endpoint (a push service's URL for one browser is that browser's address).
pub(crate) fn endpoint_tag(endpoint: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, b"opencode-gateway push endpoint");
    let tag = hmac::sign(&key, endpoint.as_bytes());
    URL_SAFE_NO_PAD.encode(&tag.as_ref()[..9])
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};

    fn b64(s: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(s).unwrap()
    }

    /// RFC 8291 appendix A: from its ECDH secret, keys, auth secret and salt to the body sent,
    /// byte for byte.
    #[test]
    fn a_message_seals_to_the_rfc_8291_example() {
        let salt: [u8; 16] = b64("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let body = seal(
            &b64("kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs"),
            &b64("BTBZMqHH6r4Tts7J_aSIgg"),
            &b64("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"),
            &b64("BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"),
            &salt,
            b"When I grow up, I want to be a watermelon",
        );
        assert_eq!(
            URL_SAFE_NO_PAD.encode(body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
    }

    /// What `encrypt` sends, opened as a browser would with the subscription's private key:
    /// the ECDH with the header's key, then the same derivation, then AES-GCM.
    #[test]
    fn an_encrypted_message_opens_with_the_subscriptions_key() {
        let rng = SystemRandom::new();
        let ua = agreement::EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng).unwrap();
        let ua_public = ua.compute_public_key().unwrap().as_ref().to_vec();
        let auth = [7u8; 16];
        let body = encrypt(&ua_public, &auth, b"{\"project\":\"web\"}").unwrap();
        let (salt, rest) = body.split_at(16);
        assert_eq!(&rest[..4], &RECORD_SIZE.to_be_bytes());
        let id_len = rest[4] as usize;
        let (as_public, record) = rest[5..].split_at(id_len);
        let theirs = agreement::UnparsedPublicKey::new(&agreement::ECDH_P256, as_public);
        // The same key schedule (pinned to the RFC by the test above), then AES-GCM open.
        let opened = agreement::agree_ephemeral(ua, &theirs, |secret| {
            let (cek, nonce) = content_keys(secret, &auth, &ua_public, as_public, salt);
            let key = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &cek).unwrap());
            let mut data = record.to_vec();
            let plain = key
                .open_in_place(
                    aead::Nonce::try_assume_unique_for_key(&nonce).unwrap(),
                    aead::Aad::empty(),
                    &mut data,
                )
                .unwrap();
            plain.to_vec()
        })
        .unwrap();
        assert_eq!(opened, b"{\"project\":\"web\"}\x02");
        assert_eq!(encrypt(&ua_public[1..], &auth, b"x"), Err(SealError::BadKey));
        assert_eq!(encrypt(&ua_public, &auth[1..], b"x"), Err(SealError::BadAuth));
        assert_eq!(
            encrypt(&ua_public, &auth, &[0; MAX_PLAINTEXT + 1]),
            Err(SealError::TooLong)
        );
    }

    /// The VAPID key is made once (0600) and read back; its token is an ES256 JWT for the push
    /// service's origin, valid 12 hours, that verifies with the `k` it is sent with.
    #[test]
    fn the_vapid_key_is_kept_and_its_token_verifies() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = Vapid::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join("vapid.pk8"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Vapid::load_or_create(dir.path()).unwrap();
        assert_eq!(first.public_key(), again.public_key(), "the same key after a restart");
        assert_eq!(b64(&first.public_key()).len(), 65);
        let endpoint: http::Uri = "https://push.example.net:8443/wpush/v2/abc".parse().unwrap();
        let aud = audience(&endpoint).unwrap();
        assert_eq!(aud, "https://push.example.net:8443");
        let header = first.authorization(&aud, "https://gw.example", 1_000);
        let (t, k) = header
            .strip_prefix("vapid t=")
            .and_then(|r| r.split_once(", k="))
            .unwrap();
        assert_eq!(k, first.public_key());
        let (signed, signature) = t.rsplit_once('.').unwrap();
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, b64(k))
            .verify(signed.as_bytes(), &b64(signature))
            .expect("the JWT verifies with k");
        let claims: serde_json::Value = serde_json::from_slice(&b64(signed.split_once('.').unwrap().1)).unwrap();
        assert_eq!(claims["aud"], "https://push.example.net:8443");
        assert_eq!(claims["exp"], 1_000 + 12 * 3600);
        assert_eq!(claims["sub"], "https://gw.example");
        std::fs::write(dir.path().join("vapid.pk8"), b"garbage").unwrap();
        let err = Vapid::load_or_create(dir.path()).err().unwrap().to_string();
        assert!(err.contains("is not a P-256 PKCS#8 key: remove it"), "{err}");
        assert_ne!(endpoint_tag("https://a/1"), endpoint_tag("https://a/2"));
    }
}
