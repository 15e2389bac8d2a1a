//! Sign-ins against the real ceremony code, with a software authenticator: an Ed25519 passkey
//! stored as a registration would keep it, and answers signed the way an authenticator signs
//! them (authenticator data ‖ SHA-256 of the client data).

use std::net::IpAddr;
use std::sync::Arc;

use crate::auth::passkeys::Passkeys;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{Ed25519KeyPair, KeyPair};
use webauthn_rp::bin::Encode;
use webauthn_rp::response::register::{
    AuthenticatorExtensionOutputStaticState, CredentialProtectionPolicy, DynamicState, Ed25519PubKey, StaticState,
    UncompressedPubKey,
};
use webauthn_rp::response::{AuthenticatorAttachment, Backup};

use super::*;

const LOGIN: &str = "https://gw.localhost:8443";

fn store(dir: &std::path::Path) -> Arc<dyn Store> {
    Arc::new(crate::store::sqlite::SqliteStore::open(&dir.join("g.db")).unwrap())
}

/// A store (in the folder returned with it) where alice has a passkey, and the gateway's passkeys.
fn alice_with_a_passkey() -> (tempfile::TempDir, Arc<dyn Store>, Passkeys, Authenticator) {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let passkeys = Passkeys::new(store.clone(), [5; 32]);
    let alice = Authenticator::registered(&store, "alice");
    (dir, store, passkeys, alice)
}

fn at(origin: &str, peer: IpAddr) -> Place<'_> {
    Place { origin, peer }
}

/// A passkey on a software authenticator, kept in the store for `user`.
struct Authenticator {
    key: Ed25519KeyPair,
    id: [u8; 16],
    handle: Vec<u8>,
}

impl Authenticator {
    fn registered(store: &Arc<dyn Store>, user: &str) -> Authenticator {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let key = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let handle = store.passkey_handle(user, &[3; 16]).unwrap();
        let public = key.public_key().as_ref().to_vec();
        let static_state = StaticState {
            credential_public_key: UncompressedPubKey::Ed25519(Ed25519PubKey::try_from(public.as_slice()).unwrap()),
            extensions: AuthenticatorExtensionOutputStaticState {
                cred_protect: CredentialProtectionPolicy::None,
                hmac_secret: None,
            },
        };
        let dynamic_state = DynamicState {
            user_verified: true,
            backup: Backup::NotEligible,
            sign_count: 0,
            authenticator_attachment: AuthenticatorAttachment::None,
        };
        let id = [7; 16];
        store
            .save_passkey(&PasskeyRecord {
                id: "pk_test".into(),
                credential_id: id.to_vec(),
                user: user.into(),
                handle: handle.clone(),
                static_state: static_state.encode().unwrap(),
                dynamic_state: dynamic_state.encode().unwrap().to_vec(),
                label: "test".into(),
                created_at: 1,
                last_used_at: None,
                revoked_at: None,
            })
            .unwrap();
        Authenticator { key, id, handle }
    }

    /// The answer to `options` this authenticator gives in a page on `origin`.
    fn answer(&self, options: &serde_json::Value, origin: &str) -> String {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        let client_data = serde_json::json!({
            "type": "webauthn.get",
            "challenge": options["challenge"],
            "origin": origin,
            "crossOrigin": false,
        })
        .to_string();
        let rp_id = options["rpId"].as_str().unwrap();
        let mut auth_data = ring::digest::digest(&ring::digest::SHA256, rp_id.as_bytes())
            .as_ref()
            .to_vec();
        // User present and verified; no counter.
        auth_data.extend_from_slice(&[0x05, 0, 0, 0, 0]);
        let mut signed = auth_data.clone();
        signed.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, client_data.as_bytes()).as_ref());
        serde_json::json!({
            "id": b64(&self.id),
            "rawId": b64(&self.id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64(client_data.as_bytes()),
                "authenticatorData": b64(&auth_data),
                "signature": b64(self.key.sign(&signed).as_ref()),
                "userHandle": b64(&self.handle),
            },
            "clientExtensionResults": {},
        })
        .to_string()
    }
}

async fn start(passkeys: &Passkeys, origin: &str, peer: IpAddr) -> serde_json::Value {
    serde_json::from_str(&passkeys.start_sign_in(&at(origin, peer)).await.unwrap()).unwrap()
}

fn sealed(options: &serde_json::Value) -> &str {
    options["ceremony"].as_str().unwrap()
}

/// Sign-ins begun and never finished, from many addresses (more than the old table held in
/// all, and many from one), keep nothing: a fresh address starts a sign-in and finishes it, and
/// the only record made is its used challenge. The same answer again is refused.
#[tokio::test]
async fn unfinished_sign_ins_from_many_addresses_do_not_lock_out_a_fresh_one() {
    let (_dir, store, passkeys, alice) = alice_with_a_passkey();
    for i in 0..1100u32 {
        let peer = IpAddr::from([10, 1, (i / 200) as u8, (i % 200) as u8]);
        passkeys
            .start_sign_in(&at(LOGIN, peer))
            .await
            .unwrap_or_else(|e| panic!("sign-in {i}: {e:?}"));
    }
    for _ in 0..50 {
        start(&passkeys, LOGIN, "10.2.0.1".parse().unwrap()).await;
    }
    assert_eq!(passkeys.signing_in.used.live().unwrap(), 0, "nothing kept for them");

    let fresh: IpAddr = "10.9.9.9".parse().unwrap();
    let options = start(&passkeys, LOGIN, fresh).await;
    let answer = alice.answer(&options, LOGIN);
    let signed_in = passkeys
        .finish_sign_in(&store, &at(LOGIN, fresh), &answer, sealed(&options))
        .await
        .expect("a fresh address signs in");
    assert_eq!(signed_in.user, "alice");
    assert_eq!(passkeys.signing_in.used.live().unwrap(), 1);
    let again = passkeys
        .finish_sign_in(&store, &at(LOGIN, fresh), &answer, sealed(&options))
        .await;
    assert_eq!(again.err(), Some(PasskeyError::NoCeremony), "an answer counts once");
}

/// A page on another port of the login host's name relays a sign-in: the answer its browser
/// signed names that origin and is refused for it, before any passkey is looked up. A sealed
/// ceremony is good only for the origin it was sealed for, untampered, and until it expires.
#[tokio::test]
async fn a_sign_in_is_valid_only_for_the_login_origin_it_was_sealed_for() {
    let (_dir, store, passkeys, alice) = alice_with_a_passkey();
    let peer: IpAddr = "10.0.0.1".parse().unwrap();
    let sibling = "https://gw.localhost:9443";

    let options = start(&passkeys, LOGIN, peer).await;
    let relayed = alice.answer(&options, sibling);
    let r = passkeys
        .finish_sign_in(&store, &at(LOGIN, peer), &relayed, sealed(&options))
        .await;
    assert_eq!(r.err(), Some(PasskeyError::ForeignOrigin));

    // Begun for the sibling origin (had a page there been let start one): not good here.
    let theirs = start(&passkeys, sibling, peer).await;
    let r = passkeys
        .finish_sign_in(&store, &at(LOGIN, peer), &alice.answer(&theirs, LOGIN), sealed(&theirs))
        .await;
    assert_eq!(r.err(), Some(PasskeyError::NoCeremony));

    // Another ceremony's seal, a tampered one, or none.
    let other = start(&passkeys, LOGIN, peer).await;
    let answer = alice.answer(&options, LOGIN);
    let mut tampered = URL_SAFE_NO_PAD.decode(sealed(&options)).unwrap();
    tampered[3] ^= 1;
    for seal in [
        sealed(&other).to_string(),
        URL_SAFE_NO_PAD.encode(tampered),
        String::new(),
    ] {
        let r = passkeys.finish_sign_in(&store, &at(LOGIN, peer), &answer, &seal).await;
        assert_eq!(r.err(), Some(PasskeyError::NoCeremony), "{seal}");
    }

    // Expired: sealed as the gateway would, with a past expiry.
    let state = passkeys.signing_in.open(LOGIN, sealed(&options), 0).unwrap();
    let past = passkeys.signing_in.seal(LOGIN, crate::store::now_millis() - 1, &state);
    let r = passkeys.finish_sign_in(&store, &at(LOGIN, peer), &answer, &past).await;
    assert_eq!(r.err(), Some(PasskeyError::NoCeremony), "expired");

    let ok = passkeys
        .finish_sign_in(&store, &at(LOGIN, peer), &answer, sealed(&options))
        .await;
    assert_eq!(
        ok.map(|r| r.user).ok().as_deref(),
        Some("alice"),
        "the untouched seal still works"
    );
}
