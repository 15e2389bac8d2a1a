//! Challenge answers: TLS-ALPN-01 certificates (RFC 8737) served by the cert store on the
//! `acme-tls/1` protocol, HTTP-01 tokens served on `server.http_listen`, and the self-signed
//! placeholder served until the first certificate is issued (so the listener can answer a
//! TLS-ALPN-01 validation at all).

use std::sync::Arc;

use rcgen::{CertificateParams, CustomExtension, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

fn certified(params: CertificateParams) -> anyhow::Result<CertifiedKey> {
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: its key check parses the certificate with webpki, which
    // refuses the critical acmeIdentifier extension a TLS-ALPN-01 certificate must carry.
    let signing = crate::support::tls::provider().key_provider.load_private_key(der)?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signing))
}

/// The self-signed certificate whose acmeIdentifier extension carries the key authorization's
/// SHA-256 digest for `name`.
pub(crate) fn tls_alpn_cert(name: &str, digest: &[u8]) -> anyhow::Result<Arc<CertifiedKey>> {
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    Ok(Arc::new(certified(params)?))
}

/// Served until a certificate is issued: no client trusts it, and it says so in its name.
pub(crate) fn placeholder(names: &[String]) -> anyhow::Result<CertifiedKey> {
    let mut names = names.to_vec();
    if names.is_empty() {
        names.push("acme-pending.invalid".into());
    }
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "opencode-gateway: ACME certificate pending");
    certified(params)
}
