//! A stand-in Web Push service on loopback (the test's own HTTPS server: a browser's
//! subscription cannot reach a real push service here). It serves TLS with a certificate of its
//! own for 127.0.0.1 (the gateway trusts it through `SSL_CERT_FILE`), records every delivery
//! (path, headers, body) and answers the statuses in its script in turn, then 201.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// One delivery as the push service received it.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

pub struct PushService {
    pub origin: String,
    /// The certificate to trust (PEM), for the gateway's `SSL_CERT_FILE`.
    pub ca_file: std::path::PathBuf,
    pub seen: Arc<Mutex<Vec<Delivery>>>,
    pub script: Arc<Mutex<Vec<u16>>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for PushService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PushService {
    pub async fn start() -> PushService {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Self::start_on(listener)
    }

    /// The service on `listener` (e.g. one made in a network namespace), its certificate for the
    /// listener's address.
    pub fn start_on(listener: std::net::TcpListener) -> PushService {
        let at = listener.local_addr().unwrap();
        let made = rcgen::generate_simple_self_signed(vec![at.ip().to_string()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("push-ca.pem");
        std::fs::write(&ca_file, made.cert.pem()).unwrap();
        let cert = rustls::pki_types::CertificateDer::from(made.cert.der().to_vec());
        let key = rustls::pki_types::PrivateKeyDer::try_from(made.signing_key.serialize_der()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let origin = format!("https://{at}");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(Vec::new()));
        let (seen2, script2) = (seen.clone(), script.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, seen, script) = (acceptor.clone(), seen2.clone(), script2.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (seen, script) = (seen.clone(), script.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            let headers = req.headers().clone();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            seen.lock().unwrap().push(Delivery { path, headers, body });
                            let status = {
                                let mut s = script.lock().unwrap();
                                if s.is_empty() { 201 } else { s.remove(0) }
                            };
                            let mut r = http::Response::new(Full::new(Bytes::new()));
                            *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        PushService {
            origin,
            ca_file,
            seen,
            script,
            task,
            _dir: dir,
        }
    }

    /// The deliveries to `path`, once there are `n` (bounded).
    pub async fn deliveries(&self, path: &str, n: usize) -> Vec<Delivery> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let got: Vec<Delivery> = self
                .seen
                .lock()
                .unwrap()
                .iter()
                .filter(|d| d.path == path)
                .cloned()
                .collect();
            if got.len() >= n {
                return got;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{n} deliveries to {path} expected, got {}",
                got.len()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
