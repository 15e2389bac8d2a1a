//! The benchmark's clients, lean enough to hold 10 000 streams:
//!   client hold <url> <n> <auth|-> <ca|->        open n SSE streams, print "ready", hold until stdin closes
//!   client latency <url> <n> <auth|-> <ca|->     one stream; print p50/p99 of (arrival - upstream send) in µs
//!   client handshakes <url> <n> <full|resume> <auth|-> <ca|->   n requests, each on a new TLS connection
//!   client hold2 <url> <n> <conns> <auth|-> <ca>  n SSE streams multiplexed over `conns` HTTP/2
//!                                                  connections (TLS, ALPN h2); as `hold` otherwise
use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

struct Target {
    tls: bool,
    host: String,
    addr: String,
    path: String,
}

fn parse(url: &str) -> Target {
    let (tls, rest) = match url.strip_prefix("https://") {
        Some(r) => (true, r),
        None => (false, url.strip_prefix("http://").expect("http:// or https://")),
    };
    let (authority, path) = rest
        .split_once('/')
        .map(|(a, p)| (a, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let host = authority
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(authority)
        .to_string();
    // Every name used in the benchmark resolves to loopback.
    let port = authority
        .rsplit_once(':')
        .map(|(_, p)| p)
        .unwrap_or(if tls { "443" } else { "80" });
    Target {
        tls,
        host,
        addr: format!("127.0.0.1:{port}"),
        path,
    }
}

fn tls_config(ca: &str, resume: bool) -> Arc<rustls::ClientConfig> {
    tls_config_alpn(ca, resume, b"http/1.1")
}

fn tls_config_alpn(ca: &str, resume: bool, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    if ca != "-" {
        for c in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    if !resume {
        cfg.resumption = rustls::client::Resumption::disabled();
    }
    Arc::new(cfg)
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

async fn connect(t: &Target, cfg: &Arc<rustls::ClientConfig>) -> std::io::Result<Box<dyn Io>> {
    let tcp = TcpStream::connect(&t.addr).await?;
    tcp.set_nodelay(true)?;
    if !t.tls {
        return Ok(Box::new(tcp));
    }
    let name = ServerName::try_from(t.host.clone()).unwrap();
    Ok(Box::new(TlsConnector::from(cfg.clone()).connect(name, tcp).await?))
}

fn request(t: &Target, auth: &str, close: bool) -> String {
    let mut r = format!("GET {} HTTP/1.1\r\nHost: {}\r\nAccept: */*\r\n", t.path, t.host);
    if auth != "-" {
        r.push_str(&format!("Authorization: Basic {auth}\r\n"));
    }
    if close {
        r.push_str("Connection: close\r\n");
    }
    r.push_str("\r\n");
    r
}

async fn hold(url: &str, n: usize, auth: &str, ca: &str) {
    let t = Arc::new(parse(url));
    let cfg = tls_config(ca, true);
    let ready = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(256));
    for _ in 0..n {
        let (t, cfg, ready, failed, gate) = (t.clone(), cfg.clone(), ready.clone(), failed.clone(), gate.clone());
        let req = request(&t, auth, false);
        tokio::spawn(async move {
            let permit = gate.acquire_owned().await.unwrap();
            let Ok(mut io) = connect(&t, &cfg).await else {
                failed.fetch_add(1, Ordering::SeqCst);
                return;
            };
            if io.write_all(req.as_bytes()).await.is_err() {
                failed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            let mut buf = vec![0u8; 512];
            let mut seen = Vec::new();
            loop {
                match io.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Ok(k) => {
                        seen.extend_from_slice(&buf[..k]);
                        if seen.windows(16).any(|w| w == b"server.connected") {
                            break;
                        }
                    }
                }
            }
            drop(seen);
            ready.fetch_add(1, Ordering::SeqCst);
            drop(permit);
            let mut small = [0u8; 256];
            while matches!(io.read(&mut small).await, Ok(k) if k > 0) {}
        });
    }
    report_and_hold(n, &ready, &failed).await;
}

/// Wait until every stream is ready or failed, print the counts, hold until stdin closes.
async fn report_and_hold(n: usize, ready: &AtomicUsize, failed: &AtomicUsize) {
    let started = Instant::now();
    while ready.load(Ordering::SeqCst) + failed.load(Ordering::SeqCst) < n {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if started.elapsed().as_secs() > 300 {
            break;
        }
    }
    println!(
        "ready {} failed {}",
        ready.load(Ordering::SeqCst),
        failed.load(Ordering::SeqCst)
    );
    tokio::task::spawn_blocking(|| {
        let stdin = std::io::stdin();
        for _ in stdin.lock().lines() {}
    })
    .await
    .unwrap();
}

/// `n` streams over `conns` HTTP/2 connections, opened in turn (stream i on connection i % conns).
async fn hold2(url: &str, n: usize, conns: usize, auth: &str, ca: &str) {
    use http_body_util::BodyExt;
    use hyper::client::conn::http2;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let t = parse(url);
    let cfg = tls_config_alpn(ca, true, b"h2");
    let mut senders = Vec::with_capacity(conns);
    for _ in 0..conns {
        let tcp = TcpStream::connect(&t.addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let name = ServerName::try_from(t.host.clone()).unwrap();
        let tls = TlsConnector::from(cfg.clone()).connect(name, tcp).await.unwrap();
        assert_eq!(
            tls.get_ref().1.alpn_protocol(),
            Some(&b"h2"[..]),
            "the server did not choose h2"
        );
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake::<_, http_body_util::Empty<bytes::Bytes>>(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        senders.push(sender);
    }
    let uri: http::Uri = url.parse().unwrap();
    let ready = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(256));
    for i in 0..n {
        let mut sender = senders[i % conns].clone();
        let (ready, failed, gate) = (ready.clone(), failed.clone(), gate.clone());
        let mut req = http::Request::get(uri.clone());
        if auth != "-" {
            req = req.header("authorization", format!("Basic {auth}"));
        }
        let req = req.body(http_body_util::Empty::new()).unwrap();
        tokio::spawn(async move {
            let permit = gate.acquire_owned().await.unwrap();
            let fail = || {
                failed.fetch_add(1, Ordering::SeqCst);
            };
            if sender.ready().await.is_err() {
                return fail();
            }
            let Ok(resp) = sender.send_request(req).await else {
                return fail();
            };
            if resp.status() != 200 {
                return fail();
            }
            let mut body = resp.into_body();
            let mut seen = Vec::new();
            loop {
                match body.frame().await {
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            seen.extend_from_slice(d);
                        }
                        if seen.windows(16).any(|w| w == b"server.connected") {
                            break;
                        }
                    }
                    _ => return fail(),
                }
            }
            drop(seen);
            ready.fetch_add(1, Ordering::SeqCst);
            drop(permit);
            while let Some(Ok(_)) = body.frame().await {}
        });
    }
    report_and_hold(n, &ready, &failed).await;
}

async fn latency(url: &str, n: usize, auth: &str, ca: &str) {
    let t = parse(url);
    let cfg = tls_config(ca, true);
    let mut io = connect(&t, &cfg).await.unwrap();
    io.write_all(request(&t, auth, false).as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let mut pending = String::new();
    let mut samples = Vec::with_capacity(n);
    while samples.len() < n {
        let k = io.read(&mut buf).await.unwrap();
        assert!(k > 0, "the stream ended");
        let arrived = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        pending.push_str(&String::from_utf8_lossy(&buf[..k]));
        while let Some(i) = pending.find("\n\n") {
            let event: String = pending.drain(..i + 2).collect();
            if let Some(ts) = event
                .split("\"t\":")
                .nth(1)
                .and_then(|r| r.trim_end_matches(['}', '\n']).parse::<u128>().ok())
            {
                samples.push((arrived.saturating_sub(ts)) as f64 / 1000.0);
            }
        }
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "events {} p50_us {:.0} p99_us {:.0} max_us {:.0}",
        samples.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    );
}

async fn handshakes(url: &str, n: usize, mode: &str, auth: &str, ca: &str) {
    let t = parse(url);
    let cfg = tls_config(ca, mode == "resume");
    let started = Instant::now();
    let mut ok = 0;
    for _ in 0..n {
        let Ok(mut io) = connect(&t, &cfg).await else { continue };
        if io.write_all(request(&t, auth, true).as_bytes()).await.is_err() {
            continue;
        }
        let mut out = Vec::new();
        let _ = io.read_to_end(&mut out).await;
        if out.starts_with(b"HTTP/1.1 200") {
            ok += 1;
        }
    }
    println!("handshakes {ok} of {n} in {:.2} s", started.elapsed().as_secs_f64());
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize| a.get(i).map(String::as_str).unwrap_or("-");
    match arg(1) {
        "hold" => hold(arg(2), arg(3).parse().unwrap(), arg(4), arg(5)).await,
        "latency" => latency(arg(2), arg(3).parse().unwrap(), arg(4), arg(5)).await,
        "handshakes" => handshakes(arg(2), arg(3).parse().unwrap(), arg(4), arg(5), arg(6)).await,
        "hold2" => hold2(arg(2), arg(3).parse().unwrap(), arg(4).parse().unwrap(), arg(5), arg(6)).await,
        _ => eprintln!("usage: client hold|hold2|latency|handshakes …"),
    }
}
