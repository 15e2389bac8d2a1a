//! Passkey sign-in without a record per ceremony started (hostile review, round four: 1 024
//! unfinished sign-ins from 128 addresses filled the table of ceremonies in flight and locked
//! everyone out of passkey sign-in for five minutes).
//!
//! Starting a sign-in keeps nothing. The library's server state (its challenge and expiry) goes
//! to the browser sealed, `base64url(1 ‖ expires ‖ state ‖ MAC)`, beside the options (`ceremony`),
//! and comes back with the answer. The MAC is keyed with the store's digest key (the same on
//! every gateway sharing the store, so any replica finishes it) and covers the login origin, so a
//! sealed ceremony is good for that origin only. Unfinished sign-ins therefore cost nothing to
//! keep and cannot crowd anyone out; what bounds starting is the login limiter alone.
//!
//! Single use is enforced at the end: a challenge whose answer verified is recorded
//! (`once_records`, kind `passkey-sign-in-used`, 5 minutes, at most [`MAX_USED`]) before the
//! sign-in counts, and another answer to it finds the record. Only an answer signed by a
//! registered, unrevoked passkey writes one, so strangers cannot fill it.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use subtle::ConstantTimeEq;

use webauthn_rp::bin::{Decode, Encode};
use webauthn_rp::request::TimedCeremony;
use webauthn_rp::request::auth::AuthenticationVerificationOptions;
use webauthn_rp::response::CredentialId;
use webauthn_rp::response::register::{DynamicState, StaticState};
use webauthn_rp::{
    AuthenticatedCredential, DiscoverableAuthentication16, DiscoverableAuthenticationServerState,
    DiscoverableCredentialRequestOptions,
};

use crate::auth::once::{OnceKind, Seen, Verdict};
use crate::auth::passkey_parts::{CEREMONY_TTL, PasskeyError, Place, blocking, handle_of, malformed, slot};
use crate::store::{PasskeyRecord, PutOnce, Store};

/// Used sign-in challenges remembered at once (each for 5 minutes). Only a verified sign-in
/// adds one: filling it takes 16 384 successful passkey sign-ins within 5 minutes, each a new
/// login session and an audit line. A row is about 100 bytes: under 2 MiB in all.
pub(crate) const MAX_USED: usize = 16_384;
const VERSION: u8 = 1;
const MAC_LEN: usize = 32;

/// Sign-ins: the key that seals them, and the challenges already answered.
pub(crate) struct SignIns {
    key: [u8; 32],
    used: Arc<OnceKind<()>>,
}

impl SignIns {
    pub(crate) fn new(store: Arc<dyn Store>, key: [u8; 32]) -> SignIns {
        SignIns {
            key,
            used: Arc::new(OnceKind::new(store, "passkey-sign-in-used", CEREMONY_TTL, MAX_USED)),
        }
    }

    fn mac(&self, origin: &str, body: &[u8]) -> [u8; 32] {
        crate::auth::tokens::keyed(&self.key, &[b"passkey-sign-in\0", origin.as_bytes(), b"\0", body])
    }

    /// The library's `state` for `origin`, good until `expires` (Unix milliseconds), sealed.
    fn seal(&self, origin: &str, expires: i64, state: &[u8]) -> String {
        let mut raw = Vec::with_capacity(1 + 8 + state.len() + MAC_LEN);
        raw.push(VERSION);
        raw.extend_from_slice(&expires.to_be_bytes());
        raw.extend_from_slice(state);
        let mac = self.mac(origin, &raw);
        raw.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The state sealed in `token` for `origin`, if the MAC holds and it has not expired at
    /// `now`. Anything else was never begun here (or not for this origin), or is over.
    fn open(&self, origin: &str, token: &str, now: i64) -> Result<Vec<u8>, PasskeyError> {
        let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| PasskeyError::NoCeremony)?;
        if raw.len() < 1 + 8 + MAC_LEN || raw[0] != VERSION {
            return Err(PasskeyError::NoCeremony);
        }
        let (body, mac) = raw.split_at(raw.len() - MAC_LEN);
        if !bool::from(self.mac(origin, body).ct_eq(mac)) {
            return Err(PasskeyError::NoCeremony);
        }
        let expires = i64::from_be_bytes(body[1..9].try_into().map_err(|_| PasskeyError::NoCeremony)?);
        if expires <= now {
            return Err(PasskeyError::NoCeremony);
        }
        Ok(body[9..].to_vec())
    }

    /// Whether `challenge` was answered already: a replay is refused as such before any work,
    /// rather than by whichever check of the library it then fails (the signature counter).
    async fn answered(&self, challenge: u128) -> Result<bool, PasskeyError> {
        match self.used.settle(slot(challenge), |_, _| Verdict::Keep).await {
            Ok(seen) => Ok(matches!(seen, Seen::Live(()))),
            Err(_) => Err(PasskeyError::Store),
        }
    }

    /// Record `challenge` as answered; an answer to one answered already finds it.
    async fn spend(&self, challenge: u128) -> Result<(), PasskeyError> {
        match self.used.put(slot(challenge), ()).await {
            Ok(PutOnce::Kept) => Ok(()),
            Ok(PutOnce::KeyInUse) => Err(PasskeyError::NoCeremony),
            Ok(PutOnce::Full) => Err(PasskeyError::Busy),
            Err(_) => Err(PasskeyError::Store),
        }
    }
}

fn unix_millis(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl SignIns {
    /// Begin a sign-in with any passkey for this site (discoverable credentials: the browser
    /// offers the person's passkeys; no user name is asked or revealed): the options for
    /// `navigator.credentials.get`, and `ceremony`, the sealed state to send back.
    pub(crate) async fn start(&self, at: &Place<'_>) -> Result<String, PasskeyError> {
        let rp = at.rp_id()?;
        let (server, client) = DiscoverableCredentialRequestOptions::passkey(&rp)
            .start_ceremony()
            .map_err(|e| PasskeyError::Refused(e.to_string()))?;
        let state = server.encode().map_err(|e| PasskeyError::Refused(e.to_string()))?;
        let sealed = self.seal(at.origin, unix_millis(server.expiration()), &state);
        let mut options = serde_json::to_value(&client).map_err(|_| PasskeyError::Malformed(String::new()))?;
        let object = options
            .as_object_mut()
            .ok_or_else(|| PasskeyError::Malformed(String::new()))?;
        // An unknown member of the options is ignored by the browser's parser.
        object.insert("ceremony".into(), sealed.into());
        Ok(options.to_string())
    }

    /// Finish a sign-in: `json` is the browser's answer, `ceremony` what `start_sign_in` sealed.
    /// The passkey it was made with, whose `user` is who signs in (the credential's stored user,
    /// never a name the browser sends). Its use is written back.
    pub(crate) async fn finish(
        &self,
        store: &Arc<dyn Store>,
        at: &Place<'_>,
        json: &str,
        ceremony: &str,
    ) -> Result<PasskeyRecord, PasskeyError> {
        let rp = at.rp_id()?;
        let answer = DiscoverableAuthentication16::from_json_relaxed(json.as_bytes()).map_err(malformed)?;
        let challenge = answer.challenge_relaxed().map_err(malformed)?;
        at.check_client(answer.response().client_data_json())?;
        let sealed = self.open(at.origin, ceremony, crate::store::now_millis())?;
        let state =
            DiscoverableAuthenticationServerState::decode(sealed.as_slice()).map_err(|_| PasskeyError::NoCeremony)?;
        if state.sent_challenge() != challenge || self.answered(challenge.0).await? {
            return Err(PasskeyError::NoCeremony);
        }
        let (s, raw) = (store.clone(), answer.raw_id().as_ref().to_vec());
        let mut record = blocking("reading a passkey", move || s.passkey_by_credential(&raw))
            .await?
            .ok_or(PasskeyError::Unknown)?;
        if record.revoked_at.is_some() {
            return Err(PasskeyError::Revoked);
        }
        record.dynamic_state = verified(&record, &rp, state, &answer, at.origin)?;
        // Only now, with a signature that holds, is the challenge spent (so answers nobody
        // could sign never fill the record of used ones); of two answers racing, one spends it.
        self.spend(challenge.0).await?;
        let now = crate::auth::tokens::now_unix();
        record.last_used_at = Some(now);
        let (s, id, state) = (store.clone(), record.id.clone(), record.dynamic_state.clone());
        blocking("recording a passkey's use", move || s.passkey_used(&id, &state, now)).await?;
        Ok(record)
    }
}

/// The library's check of `answer` against the stored passkey `record` (origin, RP ID, flags,
/// signature, user handle, counter): the passkey's new dynamic state, encoded.
fn verified(
    record: &PasskeyRecord,
    rp: &webauthn_rp::request::RpId,
    state: DiscoverableAuthenticationServerState,
    answer: &DiscoverableAuthentication16,
    origin: &str,
) -> Result<Vec<u8>, PasskeyError> {
    let handle = handle_of(&record.handle).ok_or(PasskeyError::Store)?;
    let static_state = StaticState::decode(record.static_state.as_slice()).map_err(|_| PasskeyError::Store)?;
    let dynamic: [u8; 7] = record
        .dynamic_state
        .as_slice()
        .try_into()
        .map_err(|_| PasskeyError::Store)?;
    let dynamic_state = DynamicState::decode(dynamic).map_err(|_| PasskeyError::Store)?;
    let id = CredentialId::decode(record.credential_id.as_slice()).map_err(|_| PasskeyError::Store)?;
    let mut cred = AuthenticatedCredential::new(id, &handle, static_state, dynamic_state)
        .map_err(|e| PasskeyError::Refused(e.to_string()))?;
    let origins = [origin];
    let options = AuthenticationVerificationOptions::<&str, &str> {
        allowed_origins: &origins,
        ..Default::default()
    };
    state
        .verify(rp, answer, &mut cred, &options)
        .map_err(|e| PasskeyError::Refused(e.to_string()))?;
    cred.dynamic_state()
        .encode()
        .map(|d| d.to_vec())
        .map_err(|_| PasskeyError::Malformed(String::new()))
}

#[cfg(test)]
#[path = "passkey_sign_in_tests.rs"]
mod tests;
