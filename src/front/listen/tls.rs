//! rustls server configuration: TLS 1.2 and 1.3 only, ALPN h2 and http/1.1, session resumption.
//! The certificate comes from a [`CertStore`], so it can change without a new configuration.

use std::sync::Arc;

use rustls::ServerConfig;

use crate::config::Tls;
use crate::gateway::certs::{ACME_TLS_ALPN, CertStore};
use crate::support::tls::provider;

/// A configuration serving `tls.cert`/`tls.key` (checked: readable, matching, not expired).
pub fn server_config(tls: &Tls) -> anyhow::Result<Arc<ServerConfig>> {
    with_store(CertStore::from_files(tls)?, false)
}

/// A configuration whose certificate is whatever `store` holds at each handshake. `acme` also
/// offers the `acme-tls/1` protocol, which the store answers with a TLS-ALPN-01 challenge.
pub(crate) fn with_store(store: Arc<CertStore>, acme: bool) -> anyhow::Result<Arc<ServerConfig>> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if acme {
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    // Resumption (tickets for 1.3, a session cache for 1.2) makes a phone's reconnects cheap.
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    Ok(Arc::new(config))
}
