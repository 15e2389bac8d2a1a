//! One POST to a notification receiver, on a connection of its own: plain HTTP (the config allows
//! it to loopback only) or HTTPS verified against the system's CA bundle.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::SEND_TIMEOUT;

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

/// POST one body to `url` (http or https) on a connection of its own; 2xx is success.
pub(super) async fn post(
    url: &str,
    content_type: &str,
    headers: &[(&'static str, String)],
    body: Bytes,
) -> Result<(), String> {
    post_trusting(url, content_type, headers, body, None).await
}

/// [`post`], trusting `roots` instead of the system's CA bundle when given (tests).
async fn post_trusting(
    url: &str,
    content_type: &str,
    headers: &[(&'static str, String)],
    body: Bytes,
    roots: Option<Arc<rustls::ClientConfig>>,
) -> Result<(), String> {
    let via = Via { roots, addr: None };
    let (status, _) = exchange(http::Method::POST, url, Some(content_type), headers, body, 0, via).await?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("answered {status}"))
    }
}

/// How an [`exchange`] reaches its server: trusting `roots` instead of the system's CA bundle
/// (tests), and at `addr` instead of what the URL's name resolves to now (an address already
/// checked: push endpoints).
#[derive(Default, Clone)]
pub(crate) struct Via {
    pub roots: Option<Arc<rustls::ClientConfig>>,
    pub addr: Option<std::net::SocketAddr>,
}

/// One request on a connection of its own (http or https, verified against the system's CA
/// bundle unless `via` says otherwise), within 15 s; the status and at most `max_body` bytes of
/// the answer (a longer answer is an error).
pub(crate) async fn exchange(
    method: http::Method,
    url: &str,
    content_type: Option<&str>,
    headers: &[(&'static str, String)],
    body: Bytes,
    max_body: usize,
    via: Via,
) -> Result<(http::StatusCode, Bytes), String> {
    let Via { roots, addr } = via;
    let uri: http::Uri = url.parse().map_err(|_| "not a URL".to_string())?;
    let host = uri
        .host()
        .ok_or("no host")?
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let exchange = async {
        let tcp = match addr {
            Some(addr) => tokio::net::TcpStream::connect(addr).await,
            None => tokio::net::TcpStream::connect((host.as_str(), port)).await,
        }
        .map_err(|e| e.to_string())?;
        let stream: Box<dyn Stream> = if https {
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
            let config = match roots {
                Some(c) => c,
                None => client_config()?,
            };
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| e.to_string())?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut b = http::Request::builder()
            .method(method)
            .uri(path)
            .header(
                http::header::HOST,
                uri.authority().map_or(host.as_str(), |a| a.as_str()),
            )
            .header(http::header::USER_AGENT, "opencode-gateway");
        if let Some(t) = content_type {
            b = b.header(http::header::CONTENT_TYPE, t);
        }
        let mut req = b.body(Full::new(body)).map_err(|e| e.to_string())?;
        for (name, value) in headers {
            if let Ok(v) = http::HeaderValue::from_str(value) {
                req.headers_mut().insert(*name, v);
            }
        }
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), max_body.max(1))
            .collect()
            .await
            .map(|c| c.to_bytes());
        match body {
            Ok(b) => Ok((status, b)),
            Err(_) if max_body == 0 => Ok((status, Bytes::new())),
            Err(_) => Err(format!(
                "answered {status} with a body over {max_body} bytes, or cut short"
            )),
        }
    };
    tokio::time::timeout(SEND_TIMEOUT, exchange)
        .await
        .map_err(|_| "no answer in 15 s".to_string())?
}

pub(crate) use crate::support::tls::client_config;

#[cfg(test)]
mod tests {
    use super::*;

    /// An https receiver with a self-signed certificate, answering each connection with 200;
    /// whether each TLS handshake succeeded.
    async fn tls_receiver() -> (
        u16,
        rustls::pki_types::CertificateDer<'static>,
        tokio::sync::mpsc::Receiver<bool>,
    ) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = rustls::pki_types::CertificateDer::from(ck.cert.der().to_vec());
        let key = rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(crate::support::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    let _ = tx.send(false).await;
                    continue;
                };
                let _ = tx.send(true).await;
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::new())))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            }
        });
        (port, cert, rx)
    }

    /// The certificate is verified, not skipped: the system roots refuse a self-signed
    /// receiver; trusting its certificate, the POST goes through.
    #[tokio::test]
    async fn https_receivers_are_verified() {
        let (port, cert, mut handshakes) = tls_receiver().await;
        let url = format!("https://localhost:{port}/hook");
        let err = post(&url, "application/json", &[], Bytes::from("{}"))
            .await
            .expect_err("a self-signed receiver is refused");
        assert!(client_config().is_ok(), "the system CA bundle loads");
        assert!(err.contains("certificate") || err.contains("UnknownIssuer"), "{err}");
        assert_eq!(handshakes.recv().await, Some(false));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let trusting = rustls::ClientConfig::builder_with_provider(crate::support::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        post_trusting(
            &url,
            "application/json",
            &[],
            Bytes::from("{}"),
            Some(Arc::new(trusting)),
        )
        .await
        .expect("delivered over https");
        assert_eq!(handshakes.recv().await, Some(true));
    }
}
