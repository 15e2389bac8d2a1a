//! The banner's words on the dev CA: where a phone gets it and the fingerprint to compare there,
//! and the `NODE_EXTRA_CA_CERTS=…` OpenCode's CLI needs to trust it.

use std::net::SocketAddr;

use crate::config::Settings;
use crate::config::protected::DevCertPaths;
use crate::support::invocation::path_here;

/// `NODE_EXTRA_CA_CERTS=<ca> ` (relative to the current folder when under it) when the gateway
/// made its own CA; nothing otherwise.
pub(super) fn node_extra_ca(settings: &Settings) -> String {
    if !settings.tls.dev_ca {
        return String::new();
    }
    let ca = DevCertPaths::beside(&settings.tls.cert, &settings.tls.key).ca_cert;
    format!("NODE_EXTRA_CA_CERTS={} ", path_here(&ca))
}

/// Where a phone gets the dev CA (the plain-HTTP listener's `/ca`) and the fingerprint to compare
/// there, when the gateway made its own CA; nothing otherwise.
pub(super) fn trust_the_ca(settings: &Settings, http: Option<SocketAddr>, reach: &crate::reach::Reach) -> String {
    if !settings.tls.dev_ca {
        return String::new();
    }
    let ca = DevCertPaths::beside(&settings.tls.cert, &settings.tls.key).ca_cert;
    let Some(der) = std::fs::read_to_string(&ca)
        .ok()
        .and_then(|p| crate::web::ca_page::der_from_pem(&p))
    else {
        return String::new();
    };
    let fp = crate::web::ca_page::fingerprint(&der);
    match http {
        Some(http) => format!(
            "trust the dev CA on a phone: http://{}:{}/ca   SHA-256 fingerprint {fp}\n",
            reach.host(),
            http.port()
        ),
        // Loopback only: no phone reaches it (the LAN variant offers the CA on plain HTTP).
        None if settings.server.listen.ip().is_loopback() => String::new(),
        None => format!(
            "dev CA: {} (SHA-256 fingerprint {fp}); set server.http_listen to offer it to phones\n",
            ca.display()
        ),
    }
}
