//! instant-acme's HTTP client: one HTTPS connection per request (an order is a handful of
//! requests a few times a year), over the rustls and hyper the gateway already uses, trusting
//! `tls.acme.ca_bundle` or the system's CA bundle. No second TLS stack.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::Request;
use hyper_util::rt::TokioIo;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::TlsConnector;

/// Where Debian and its relatives keep the system's trusted roots.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// A request that takes longer has failed (the order is retried with backoff).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct AcmeHttp {
    tls: TlsConnector,
}

impl AcmeHttp {
    pub(crate) fn new(ca_bundle: Option<&Path>) -> anyhow::Result<AcmeHttp> {
        let path = ca_bundle.unwrap_or(Path::new(SYSTEM_BUNDLE));
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(path).with_context(|| {
            format!(
                "tls.acme.ca_bundle: cannot read {} (set it to the PEM roots that sign the ACME server's certificate)",
                path.display()
            )
        })? {
            roots.add(cert.context("tls.acme.ca_bundle: not a PEM bundle")?)?;
        }
        let mut config = rustls::ClientConfig::builder_with_provider(crate::support::tls::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(AcmeHttp {
            tls: TlsConnector::from(Arc::new(config)),
        })
    }
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Other(Box::new(e))
}

async fn send(tls: TlsConnector, req: Request<BodyWrapper<Bytes>>) -> Result<BytesResponse, Error> {
    let uri = req.uri().clone();
    if uri.scheme_str() != Some("https") {
        return Err(Error::Str("the ACME server sent a URL that is not https://"));
    }
    let host = uri.host().ok_or(Error::Str("an ACME URL without a host"))?.to_string();
    let port = uri.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port))
        .await
        .map_err(other)?;
    let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string()).map_err(other)?;
    let stream = tls.connect(name, tcp).await.map_err(other)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(other)?;
    tokio::spawn(conn);
    let (mut parts, body) = req.into_parts();
    let authority = uri.authority().map(|a| a.as_str().to_string()).unwrap_or(host);
    parts
        .headers
        .insert(http::header::HOST, authority.parse().map_err(other)?);
    parts.uri = uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(other)?;
    let resp = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .map_err(other)?;
    Ok(BytesResponse::from(resp))
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        let tls = self.tls.clone();
        Box::pin(async move {
            match tokio::time::timeout(REQUEST_TIMEOUT, send(tls, req)).await {
                Ok(r) => r,
                Err(_) => Err(Error::Str("the ACME server did not answer within 30 s")),
            }
        })
    }
}
