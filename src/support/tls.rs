//! The one rustls crypto provider (ring) every TLS configuration is built with: the listeners',
//! the ACME client's, the notifier's and the single sign-on client's.

use std::sync::Arc;

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
