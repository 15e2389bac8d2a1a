//! Single sign-on flows in flight (state, nonce, the browser binding, the PKCE verifier) and the
//! provider's cached metadata; the pages that start and finish a flow are web/sso.rs. Flows are
//! single-use records in the state database (`auth/once.rs`): behind a load balancer the
//! provider's redirect back may reach another gateway than the one that started the flow. The
//! PKCE verifier is kept there in the clear for its ten minutes: it is useless without the
//! authorization code, which only the browser and the provider see.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::once::OnceKind;
use crate::oidc::provider::Provider;
use crate::store::Store;

pub(crate) const FLOW_TTL: Duration = Duration::from_secs(600);
const MAX_FLOWS: usize = 10_000;

#[derive(Serialize, Deserialize)]
pub(crate) struct Flow {
    pub(crate) nonce: [u8; 32],
    pub(crate) binding: [u8; 32],
    pub(crate) verifier: String,
    pub(crate) redirect_uri: String,
    pub(crate) next: String,
}

/// Flows in flight and the provider's cached metadata.
pub struct Sso {
    pub(crate) flows: Arc<OnceKind<Flow>>,
    pub provider: Provider,
}

impl Sso {
    pub(crate) fn new(store: Arc<dyn Store>) -> Sso {
        Sso {
            flows: Arc::new(OnceKind::new(store, "sso-flow", FLOW_TTL, MAX_FLOWS)),
            provider: Provider::default(),
        }
    }
}
