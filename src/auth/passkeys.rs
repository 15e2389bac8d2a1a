//! Passkeys (issue 26): registering a WebAuthn credential for a logged-in user, and signing in
//! with one. The ceremonies' checks (challenge, origin, RP ID hash, user presence and
//! verification, the signature, the credential's user handle) are `webauthn_rp`'s; this module
//! keeps the ceremonies in flight, binds each to the origin and user it began with, and reads and
//! writes the state database. HTTP, the login limiter and the session are the page's
//! (`web/passkey_form.rs`).
//!
//! Every ceremony is for one origin: the login host's as configured ([`Place::origin`], from
//! `Reach::login_origin`), never one read from a request. A page on another port of the same
//! name has the same RP ID; had the origin come from `Host`, such a page could relay a sign-in
//! naming its own port and get the cookie (hostile review, round four).
//!
//! A registration in flight is a single-use record in the state database (`auth/once.rs`), in
//! the library's own encoding (its `serializable_server_state`): behind a load balancer the
//! answer may reach another replica than the options did. Finishing takes it out, so a replayed
//! answer finds nothing. Registrations need a login; they are few and short (five minutes, as
//! the library's timeout), bounded in all (in the store) and per address (by each replica).
//! Sign-ins, which anyone may start, keep nothing until an answer verifies
//! (`auth/passkey_sign_in.rs`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use webauthn_rp::bin::{Decode, Encode};
use webauthn_rp::request::register::{
    CredProtect, PublicKeyCredentialUserEntity, RegistrationVerificationOptions, UserHandle,
};
use webauthn_rp::request::{ExtensionInfo, PublicKeyCredentialDescriptor, TimedCeremony};
use webauthn_rp::response::CredentialId;
use webauthn_rp::{
    DiscoverableAuthentication16, PublicKeyCredentialCreationOptions, Registration, RegistrationServerState,
};

use crate::auth::once::{OnceKind, Seen, Verdict};
pub(crate) use crate::auth::passkey_parts::{
    CEREMONY_TTL, HANDLE_LEN, PasskeyError, Place, blocking, handle_of, malformed, slot,
};
use crate::auth::passkey_sign_in::SignIns;
use crate::store::{PasskeyRecord, PutOnce, Store};

/// Registrations in flight, in all and from one address.
const MAX_CEREMONIES: usize = 1024;
const MAX_PER_ADDRESS: usize = 8;
/// A passkey's name on the portal and in `passkeys`.
const MAX_LABEL_CHARS: usize = 60;

/// A ceremony in flight, as the state database keeps it: the library's state in its own
/// encoding, and what it was begun with.
#[derive(Serialize, Deserialize)]
struct Pending {
    state: Vec<u8>,
    origin: String,
    /// The user registering (none for a sign-in).
    user: Option<String>,
}

/// Ceremonies of one kind: in the state database, and, for the bound per address, the ones
/// begun here and not finished here (a ceremony finished on another replica counts here until
/// it would have expired).
struct Ceremonies {
    once: Arc<OnceKind<Pending>>,
    begun: Mutex<HashMap<u128, (IpAddr, Instant)>>,
}

impl Ceremonies {
    fn new(store: Arc<dyn Store>, kind: &'static str) -> Ceremonies {
        Ceremonies {
            once: Arc::new(OnceKind::new(store, kind, CEREMONY_TTL, MAX_CEREMONIES)),
            begun: Mutex::new(HashMap::new()),
        }
    }

    /// Count a ceremony `peer` begins here, or refuse it when that address holds too many.
    fn admit(&self, challenge: u128, peer: IpAddr) -> Result<(), PasskeyError> {
        let mut map = self.begun.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, at)| at.elapsed() < CEREMONY_TTL);
        let peer = crate::ratelimit::address_key(peer);
        if map.values().filter(|(p, _)| *p == peer).count() >= MAX_PER_ADDRESS || map.len() >= MAX_CEREMONIES {
            return Err(PasskeyError::Busy);
        }
        map.insert(challenge, (peer, Instant::now()));
        Ok(())
    }

    async fn begin(&self, challenge: u128, peer: IpAddr, pending: Pending) -> Result<(), PasskeyError> {
        self.admit(challenge, peer)?;
        match self.once.put(slot(challenge), pending).await {
            Ok(PutOnce::Kept) => Ok(()),
            Ok(PutOnce::Full | PutOnce::KeyInUse) => Err(PasskeyError::Busy),
            Err(_) => Err(PasskeyError::Store),
        }
    }

    /// The live ceremony for `challenge`, taken out (wherever it began).
    async fn take(&self, challenge: u128) -> Result<Option<Pending>, PasskeyError> {
        self.begun.lock().unwrap_or_else(|e| e.into_inner()).remove(&challenge);
        match self.once.settle(slot(challenge), |_, _| Verdict::Take).await {
            Ok(Seen::Live(p)) => Ok(Some(p)),
            Ok(_) => Ok(None),
            Err(_) => Err(PasskeyError::Store),
        }
    }
}

/// The passkey ceremonies in flight.
pub struct Passkeys {
    registering: Ceremonies,
    pub(crate) signing_in: SignIns,
}

impl Passkeys {
    /// `key` seals sign-in ceremonies (the store's digest key: the same on every gateway sharing
    /// the store, so a sign-in may finish on another replica).
    pub(crate) fn new(store: Arc<dyn Store>, key: [u8; 32]) -> Passkeys {
        Passkeys {
            registering: Ceremonies::new(store.clone(), "passkey-registration"),
            signing_in: SignIns::new(store, key),
        }
    }

    /// Begin a sign-in (`auth/passkey_sign_in.rs`): nothing is kept until the answer comes.
    pub(crate) async fn start_sign_in(&self, at: &Place<'_>) -> Result<String, PasskeyError> {
        self.signing_in.start(at).await
    }

    /// Finish a sign-in (`auth/passkey_sign_in.rs`): the passkey it was made with.
    pub(crate) async fn finish_sign_in(
        &self,
        store: &Arc<dyn Store>,
        at: &Place<'_>,
        json: &str,
        ceremony: &str,
    ) -> Result<PasskeyRecord, PasskeyError> {
        self.signing_in.finish(store, at, json, ceremony).await
    }
}

impl Passkeys {
    /// Begin registering a passkey for `user`: the options for `navigator.credentials.create`
    /// (`PublicKeyCredentialCreationOptionsJSON`). The user's passkeys already made are excluded,
    /// so an authenticator that holds one says so instead of making a second.
    pub(crate) async fn start_registration(
        &self,
        store: &Arc<dyn Store>,
        user: &Arc<str>,
        at: &Place<'_>,
    ) -> Result<String, PasskeyError> {
        let rp = at.rp_id()?;
        let (s, u) = (store.clone(), user.to_string());
        let fresh = UserHandle::<HANDLE_LEN>::new();
        let fresh_bytes = fresh.as_ref().to_vec();
        let (handle, mine) = blocking("reading a user's passkeys", move || {
            Ok((s.passkey_handle(&u, &fresh_bytes)?, s.list_passkeys(Some(&u))?))
        })
        .await?;
        let handle = handle_of(&handle).ok_or(PasskeyError::Store)?;
        let exclude = mine
            .into_iter()
            .filter(|p| p.revoked_at.is_none())
            .filter_map(|p| {
                Some(PublicKeyCredentialDescriptor {
                    id: CredentialId::decode(p.credential_id).ok()?,
                    // No hint: the browser asks every authenticator it has.
                    transports: webauthn_rp::response::AuthTransports::decode(0).ok()?,
                })
            })
            .collect();
        let entity = PublicKeyCredentialUserEntity {
            name: user
                .as_ref()
                .try_into()
                .map_err(|_| PasskeyError::Malformed(String::new()))?,
            id: &handle,
            display_name: None,
        };
        let mut options = PublicKeyCredentialCreationOptions::passkey(&rp, entity, exclude);
        // Ask for credProtect, but do not make the browser refuse an authenticator without it
        // (the library's default enforces it: Chromium's virtual authenticator, and passkey
        // managers without the extension, then fail the ceremony). Every sign-in requires user
        // verification anyway.
        options.extensions.cred_protect = CredProtect::UserVerificationRequired(ExtensionInfo::AllowDontEnforceValue);
        let (server, client) = options
            .start_ceremony()
            .map_err(|e| PasskeyError::Refused(e.to_string()))?;
        let json = serde_json::to_string(&client).map_err(|_| PasskeyError::Malformed(String::new()))?;
        let challenge = server.sent_challenge().0;
        let state = server.encode().map_err(|e| PasskeyError::Refused(e.to_string()))?;
        self.registering
            .begin(
                challenge,
                at.peer,
                Pending {
                    state,
                    origin: at.origin.to_string(),
                    user: Some(user.to_string()),
                },
            )
            .await?;
        Ok(json)
    }

    /// Finish registering: the browser's `PublicKeyCredential` as JSON. Kept for `user` with
    /// `label` if it answers the ceremony `user` began on this origin.
    pub(crate) async fn finish_registration(
        &self,
        store: &Arc<dyn Store>,
        user: &Arc<str>,
        at: &Place<'_>,
        json: &str,
        label: &str,
    ) -> Result<PasskeyRecord, PasskeyError> {
        let rp = at.rp_id()?;
        let reg = Registration::from_json_relaxed(json.as_bytes()).map_err(malformed)?;
        let challenge = reg.challenge_relaxed().map_err(malformed)?;
        at.check_client(reg.response().client_data_json())?;
        let pending = self
            .registering
            .take(challenge.0)
            .await?
            .ok_or(PasskeyError::NoCeremony)?;
        if pending.origin != at.origin || pending.user.as_deref() != Some(&**user) {
            return Err(PasskeyError::Mismatch);
        }
        let state = RegistrationServerState::<HANDLE_LEN>::decode(pending.state.as_slice())
            .map_err(|_| PasskeyError::NoCeremony)?;
        let origins = [at.origin];
        let options = RegistrationVerificationOptions::<&str, &str> {
            allowed_origins: &origins,
            ..Default::default()
        };
        let cred = state
            .verify(&rp, &reg, &options)
            .map_err(|e| PasskeyError::Refused(e.to_string()))?;
        let (id, _transports, handle, static_state, dynamic_state, _metadata) = cred.into_parts();
        let encoded =
            |e: Result<Vec<u8>, _>| e.map_err(|_: std::convert::Infallible| PasskeyError::Malformed(String::new()));
        let record = PasskeyRecord {
            id: format!("pk_{}", crate::auth::sessions::random(9)),
            credential_id: id.as_ref().to_vec(),
            user: user.to_string(),
            handle: handle.as_ref().to_vec(),
            static_state: encoded(static_state.encode())?,
            dynamic_state: dynamic_state
                .encode()
                .map(|d| d.to_vec())
                .map_err(|_| PasskeyError::Malformed(String::new()))?,
            label: label_of(label),
            created_at: crate::auth::tokens::now_unix(),
            last_used_at: None,
            revoked_at: None,
        };
        let (s, r) = (store.clone(), record.clone());
        blocking("saving a passkey", move || s.save_passkey(&r)).await?;
        Ok(record)
    }
}

/// Whether `json` reads as a registration answer and as a sign-in answer, each with its
/// challenge: all a finish reads before it looks a ceremony up (the fuzz target's entry).
pub fn reads_as_answers(json: &[u8]) -> (bool, bool) {
    let registration = Registration::from_json_relaxed(json)
        .ok()
        .and_then(|r| r.challenge_relaxed().ok())
        .is_some();
    let sign_in = DiscoverableAuthentication16::from_json_relaxed(json)
        .ok()
        .and_then(|a| a.challenge_relaxed().ok())
        .is_some();
    (registration, sign_in)
}

/// A passkey's name as typed, without control characters and bounded; "passkey" when empty.
fn label_of(typed: &str) -> String {
    let clean: String = typed
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_LABEL_CHARS)
        .collect();
    match clean.trim() {
        "" => "passkey".into(),
        t => t.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::passkey_parts::rp_id;

    #[test]
    fn the_rp_id_is_the_hosts_name_and_an_address_has_none() {
        assert_eq!(rp_id("gw.localhost:8443").unwrap().as_ref(), "gw.localhost");
        assert_eq!(rp_id("Box.Local").unwrap().as_ref(), "box.local");
        for host in ["127.0.0.1:8443", "[::1]:8443", "192.168.1.20", ""] {
            assert_eq!(rp_id(host).err(), Some(PasskeyError::NoName), "{host}");
        }
    }

    /// A ceremony is taken once, from any gateway on the store; those one address begins are
    /// bounded, and an expired one is not taken.
    #[tokio::test]
    async fn a_ceremony_is_taken_once_and_one_address_cannot_hold_many() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(crate::store::sqlite::SqliteStore::open(&dir.path().join("g.db")).unwrap());
        let c = Ceremonies::new(store.clone(), "test");
        let pending = || Pending {
            state: vec![1, 2, 3],
            origin: "https://gw.localhost".into(),
            user: None,
        };
        let (one, two) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for i in 0..MAX_PER_ADDRESS as u128 {
            c.begin(i, one, pending()).await.unwrap();
        }
        assert_eq!(c.begin(99, one, pending()).await.err(), Some(PasskeyError::Busy));
        c.begin(100, two, pending()).await.unwrap();
        let elsewhere = Ceremonies::new(store.clone(), "test");
        assert_eq!(
            elsewhere.take(0).await.unwrap().map(|p| p.state),
            Some(vec![1, 2, 3]),
            "another gateway finishes it"
        );
        assert_eq!(
            c.begin(99, one, pending()).await.err(),
            Some(PasskeyError::Busy),
            "finished elsewhere: still counted here until it would have expired"
        );
        assert!(c.take(0).await.unwrap().is_none(), "once");
        assert!(c.take(1).await.unwrap().is_some());
        c.begin(99, one, pending())
            .await
            .expect("a ceremony finished here frees its place");
        let past = crate::store::now_millis() - 1;
        store
            .once_put("test", &slot(200), &serde_json::to_vec(&pending()).unwrap(), past, 10)
            .unwrap();
        assert!(c.take(200).await.unwrap().is_none(), "expired");
    }

    #[test]
    fn a_label_is_bounded_and_has_no_control_characters() {
        assert_eq!(label_of(""), "passkey");
        assert_eq!(label_of(" phone\n\u{7}"), "phone");
        assert_eq!(label_of(&"x".repeat(200)).len(), MAX_LABEL_CHARS);
    }
}
