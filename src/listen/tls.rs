//! rustls server configuration: TLS 1.2 and 1.3 only, ALPN h2 and http/1.1, session resumption.

use std::sync::Arc;

use anyhow::Context;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::Tls;

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub fn server_config(tls: &Tls) -> anyhow::Result<Arc<ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
        .with_context(|| format!("tls.cert: cannot read {}", tls.cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("tls.cert: {} is not a PEM certificate chain", tls.cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("tls.cert: {} holds no certificate", tls.cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .with_context(|| format!("tls.key: cannot read a PEM private key from {}", tls.key.display()))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("tls: the certificate and key do not match")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Resumption (tickets for 1.3, a session cache for 1.2) makes a phone's reconnects cheap.
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    Ok(Arc::new(config))
}
