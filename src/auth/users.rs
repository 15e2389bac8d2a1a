//! The configured users as checking a credential needs them. Built by each state (a reload
//! replaces them all, `gateway::state`), defined here because auth reads them and sits below the
//! gateway: the checks take the users map, not the whole state.

use std::sync::Arc;

use argon2::PasswordHash;

use crate::config::Grants;
use crate::support::name_map::NameMap;

/// The users of one state, by name.
pub(crate) type Users = NameMap<Arc<UserState>>;

pub struct UserState {
    pub name: Arc<str>,
    pub hash: Option<PasswordHash>,
    /// Digest of the PHC text: part of every auth-cache key of this user.
    pub fingerprint: [u8; 32],
    pub grants: Grants,
    pub ssh_keys: Vec<russh::keys::PublicKey>,
    /// A token's `[[policy]]`: its requests cannot approve what the policy does not allow, and
    /// the sessions it makes are answered by the policy (`None` for everyone else).
    pub policy: Option<Arc<str>>,
}
