//! The passkey ceremonies' shared vocabulary: why one is refused, where it happens (the login
//! origin, whose name is the RP ID), and the small helpers both registration
//! (`auth/passkeys.rs`) and sign-in (`auth/passkey_sign_in.rs`) use. Its own file so that the two
//! depend on it and not on each other.

use std::net::IpAddr;
use std::time::Duration;

use blake2::{Blake2b256, Digest};
use serde::Deserialize;
use webauthn_rp::bin::Decode;
use webauthn_rp::request::register::UserHandle;
use webauthn_rp::request::{AsciiDomain, RpId};

/// A user handle's length: 16 random bytes, stored per user (`passkey_users`).
pub(crate) const HANDLE_LEN: usize = 16;

/// How long a ceremony may take: the library's own timeout (it refuses a late answer itself).
pub(crate) const CEREMONY_TTL: Duration = Duration::from_secs(300);

/// Why a ceremony was refused. `code()` is what the audit trail and tests see.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PasskeyError {
    /// The login host is an address: WebAuthn needs a domain name for its RP ID.
    NoName,
    /// The request came to another origin than the login host's (its `Host` names another
    /// port, or another name): passkeys work only on the login origin, which this names.
    ElsewhereHost(String),
    /// The browser made the answer on another origin (its `clientDataJSON` says which).
    ForeignOrigin,
    /// Too many registrations in flight (from this address, or in all), or the record of used
    /// sign-in challenges is full.
    Busy,
    /// The answer is not a WebAuthn credential as a browser sends it (why, for the log).
    Malformed(String),
    /// No ceremony waits for this challenge: finished already (a replay), expired or never begun.
    NoCeremony,
    /// The ceremony began on another origin, or for another user.
    Mismatch,
    /// The library refused the answer (origin, RP ID, flags, signature, user handle).
    Refused(String),
    /// No passkey with this credential id.
    Unknown,
    /// The passkey was revoked.
    Revoked,
    /// The state database did not answer.
    Store,
}

impl PasskeyError {
    pub(crate) fn code(&self) -> &'static str {
        match self {
            PasskeyError::NoName => "no_domain_name",
            PasskeyError::ElsewhereHost(_) => "not_login_origin",
            PasskeyError::ForeignOrigin => "foreign_origin",
            PasskeyError::Busy => "busy",
            PasskeyError::Malformed(_) => "malformed",
            PasskeyError::NoCeremony => "no_ceremony",
            PasskeyError::Mismatch => "ceremony_mismatch",
            PasskeyError::Refused(_) => "verification_failed",
            PasskeyError::Unknown => "unknown_passkey",
            PasskeyError::Revoked => "revoked_passkey",
            PasskeyError::Store => "state_unavailable",
        }
    }

    /// For the log: the parser's or the library's own words (never a secret: the answer holds
    /// public keys and signatures).
    pub(crate) fn detail(&self) -> &str {
        match self {
            PasskeyError::Malformed(why) | PasskeyError::Refused(why) => why,
            _ => "",
        }
    }

    /// What the person is told (never which check of a sign-in failed beyond what they can act on).
    pub(crate) fn message(&self) -> String {
        match self {
            PasskeyError::NoName => "passkeys need the gateway's login address to be a name, not an address: \
                 set server.public_url (or base_domain) to one, for example https://<host>.local:8443"
                .into(),
            PasskeyError::ElsewhereHost(login) => format!("passkeys work only on {login}: open the gateway there"),
            PasskeyError::ForeignOrigin => {
                "this passkey answer was made on another site than the gateway's login page".into()
            }
            PasskeyError::Busy => "too many passkey ceremonies are in progress: try again in a minute".into(),
            PasskeyError::Malformed(_) => "the browser's answer is not a passkey credential".into(),
            PasskeyError::NoCeremony => "this passkey request was used already or has expired: try again".into(),
            PasskeyError::Mismatch => "this passkey request was started elsewhere: try again".into(),
            PasskeyError::Refused(why) => format!("the passkey was not accepted: {why}"),
            PasskeyError::Unknown | PasskeyError::Revoked => "this passkey is not (or no longer) accepted here".into(),
            PasskeyError::Store => "the gateway's state database is unavailable".into(),
        }
    }
}

pub(crate) fn slot(challenge: u128) -> [u8; 32] {
    Blake2b256::digest(challenge.to_le_bytes()).into()
}

/// Where a ceremony happens: the login host's configured origin (`https://<name>[:port]`, its
/// name the RP ID), and the client's address.
pub(crate) struct Place<'a> {
    pub origin: &'a str,
    pub peer: IpAddr,
}

impl Place<'_> {
    /// The RP ID: the login origin's name.
    pub(crate) fn rp_id(&self) -> Result<RpId, PasskeyError> {
        rp_id(self.origin.strip_prefix("https://").ok_or(PasskeyError::NoName)?)
    }

    /// Refuse an answer the browser made on another origin than this one (the library checks
    /// it too; this says so plainly, before any passkey is looked up).
    pub(crate) fn check_client(&self, client_data_json: &[u8]) -> Result<(), PasskeyError> {
        #[derive(Deserialize)]
        struct ClientData {
            origin: String,
        }
        let bytes = client_data_json
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(client_data_json);
        match serde_json::from_slice::<ClientData>(bytes) {
            Ok(c) if c.origin == self.origin => Ok(()),
            Ok(_) => Err(PasskeyError::ForeignOrigin),
            Err(e) => Err(malformed(e)),
        }
    }
}

/// The RP ID for a page served on `host`: its name without the port. An address is refused:
/// browsers allow WebAuthn only on a domain name.
pub(crate) fn rp_id(host: &str) -> Result<RpId, PasskeyError> {
    let name = crate::policy::route::strip_port(host)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if name.parse::<IpAddr>().is_ok() || name.is_empty() {
        return Err(PasskeyError::NoName);
    }
    AsciiDomain::try_from(name)
        .map(RpId::Domain)
        .map_err(|_| PasskeyError::NoName)
}

pub(crate) async fn blocking<T: Send + 'static>(
    what: &'static str,
    call: impl FnOnce() -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, PasskeyError> {
    crate::store::blocking(what, call)
        .await
        .map_err(|_| PasskeyError::Store)
}

pub(crate) fn malformed(e: impl std::fmt::Display) -> PasskeyError {
    PasskeyError::Malformed(e.to_string())
}

pub(crate) fn handle_of(bytes: &[u8]) -> Option<UserHandle<HANDLE_LEN>> {
    let b: [u8; HANDLE_LEN] = bytes.try_into().ok()?;
    UserHandle::decode(b).ok()
}
