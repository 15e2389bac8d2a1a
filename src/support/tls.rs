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

/// A self-signed certificate for `names` and its key, written as PEM to `cert` and `key`, valid
/// from `days.0` to `days.1` days from now (tests).
#[cfg(test)]
pub(crate) fn write_self_signed(cert: &std::path::Path, key: &std::path::Path, names: &[&str], days: (i64, i64)) {
    let mut params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now + time::Duration::days(days.0);
    params.not_after = now + time::Duration::days(days.1);
    let pair = rcgen::KeyPair::generate().unwrap();
    let signed = params.self_signed(&pair).unwrap();
    std::fs::write(cert, signed.pem()).unwrap();
    std::fs::write(key, pair.serialize_pem()).unwrap();
}
