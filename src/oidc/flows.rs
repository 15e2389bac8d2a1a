//! Single sign-on flows in flight (state, nonce, the browser binding, the PKCE verifier) and the
//! provider's cached metadata; the pages that start and finish a flow are web/sso.rs.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Secret;
use crate::oidc::provider::Provider;
use crate::support::ttl_map::TtlMap;

pub(crate) const FLOW_TTL: Duration = Duration::from_secs(600);
const MAX_FLOWS: usize = 10_000;

pub(crate) struct Flow {
    pub(crate) nonce: [u8; 32],
    pub(crate) binding: [u8; 32],
    pub(crate) verifier: Secret,
    pub(crate) redirect_uri: String,
    pub(crate) next: String,
}

/// Flows in flight and the provider's cached metadata.
pub struct Sso {
    pub(crate) flows: TtlMap<[u8; 32], Arc<Flow>>,
    pub provider: Provider,
}

impl Default for Sso {
    fn default() -> Self {
        Sso {
            flows: TtlMap::new(MAX_FLOWS, FLOW_TTL),
            provider: Provider::default(),
        }
    }
}
