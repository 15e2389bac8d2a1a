//! The one rustls crypto provider (ring) every TLS configuration is built with: the listeners',
//! the ACME client's, the notifier's and the single sign-on client's; and the client
//! configuration that trusts the system's CA bundle (the notifier's, the state database's).

use std::sync::{Arc, OnceLock};

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS client configuration trusting the system's CA bundle, made once.
pub(crate) fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let path = std::env::var_os("SSL_CERT_FILE")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into());
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| format!("cannot read the CA bundle {}: {e}", path.display()))?;
            roots.add_parsable_certificates(certs.flatten());
            if roots.is_empty() {
                return Err(format!("no CA certificate in {}", path.display()));
            }
            let config = rustls::ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}
