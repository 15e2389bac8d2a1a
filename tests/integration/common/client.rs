//! A real TLS client for the tests: rustls trusting only the gateway's dev CA, hyper HTTP/1.1 or
//! h2 on top, any host name resolved to the gateway's loopback address.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

pub fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[derive(Clone)]
pub struct Https {
    pub addr: SocketAddr,
    pub config: Arc<rustls::ClientConfig>,
    /// The host name to send (SNI and Host); the connection always goes to `addr`.
    pub host: String,
    /// The local address to connect from (127.0.0.2, 127.0.0.3 … stand for distinct clients).
    pub source: Option<std::net::IpAddr>,
    /// The network namespace to connect from (`common::netns`), when not this process's own.
    pub netns: Option<Arc<str>>,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Https {
    pub fn new(addr: SocketAddr, ca: &Path) -> Https {
        Self::with_alpn(addr, ca, vec![b"http/1.1".to_vec()])
    }

    pub fn with_alpn(addr: SocketAddr, ca: &Path, alpn: Vec<Vec<u8>>) -> Https {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.alpn_protocols = alpn;
        Https {
            addr,
            config: Arc::new(config),
            host: addr.ip().to_string(),
            source: None,
            netns: None,
        }
    }

    /// The same client, naming another host (e.g. `demo.gw.localhost`).
    pub fn host(&self, host: &str) -> Https {
        Https {
            host: host.to_string(),
            ..self.clone()
        }
    }

    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.addr.port())
    }

    /// The same client, connecting from another local address.
    pub fn from(&self, source: &str) -> Https {
        Https {
            source: Some(source.parse().unwrap()),
            ..self.clone()
        }
    }

    /// The same client, connecting from inside the network namespace `ns`.
    pub fn in_netns(&self, ns: &str) -> Https {
        Https {
            netns: Some(ns.into()),
            ..self.clone()
        }
    }

    pub async fn tcp(&self) -> std::io::Result<TcpStream> {
        if let Some(ns) = &self.netns {
            let stream = crate::common::netns::Lan::connect_in(ns, self.addr)?;
            stream.set_nonblocking(true)?;
            return TcpStream::from_std(stream);
        }
        match self.source {
            None => TcpStream::connect(self.addr).await,
            Some(ip) => {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.bind(std::net::SocketAddr::new(ip, 0))?;
                socket.connect(self.addr).await
            }
        }
    }

    /// A TLS connection, or the error if the gateway refused or dropped it.
    pub async fn try_tls(&self) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = self.tcp().await?;
        let name = ServerName::try_from(self.host.clone()).unwrap();
        TlsConnector::from(self.config.clone()).connect(name, tcp).await
    }

    /// A TLS connection after `prefix` (a PROXY protocol header, as a load balancer writes it).
    pub async fn try_tls_after(&self, prefix: &[u8]) -> std::io::Result<TlsStream<TcpStream>> {
        use tokio::io::AsyncWriteExt;
        let mut tcp = self.tcp().await?;
        tcp.write_all(prefix).await?;
        let name = ServerName::try_from(self.host.clone()).unwrap();
        TlsConnector::from(self.config.clone()).connect(name, tcp).await
    }

    pub async fn tls(&self) -> TlsStream<TcpStream> {
        let tcp = self.tcp().await.unwrap();
        let name = ServerName::try_from(self.host.clone()).unwrap();
        TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
            .unwrap()
    }

    /// A kept-alive HTTP/1.1 connection.
    pub async fn http1(&self) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(self.tls().await))
            .await
            .unwrap();
        tokio::spawn(conn.with_upgrades());
        send
    }

    pub fn request(&self, method: &str, path: &str, auth: Option<&str>) -> http::request::Builder {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.authority());
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        b
    }

    /// Send one request on a new connection and wait for its head (the body streams).
    pub async fn send(&self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        let mut s = self.http1().await;
        tokio::time::timeout(Duration::from_secs(60), s.send_request(req))
            .await
            .expect("a response within 60 s")
            .unwrap()
    }

    /// Send and read the whole body.
    pub async fn call(&self, req: Request<Full<Bytes>>) -> Reply {
        read(self.send(req).await).await
    }

    pub async fn get(&self, path: &str, auth: Option<&str>) -> Reply {
        self.call(self.request("GET", path, auth).body(Full::default()).unwrap())
            .await
    }
}

pub async fn read(resp: Response<Incoming>) -> Reply {
    let (parts, body) = resp.into_parts();
    let bytes = tokio::time::timeout(Duration::from_secs(60), body.collect())
        .await
        .expect("the body within 60 s")
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Read a streaming body until `pred` holds for the text so far; fails the test, with what did
/// arrive, when the stream ends or `within` passes first.
pub async fn read_until(body: &mut Incoming, within: Duration, pred: impl Fn(&str) -> bool) -> String {
    match try_read_until(body, within, pred).await {
        Ok(text) => text,
        Err(text) => panic!("the expected text never came within {within:?}; the stream said: {text:?}"),
    }
}

/// [`read_until`] for a raw connection (a test writing HTTP/1.1 by hand): reads into `seen`
/// until `done(seen)`, within 10 s; fails the test with what came when the connection closes or
/// the time passes first.
pub async fn read_raw_until(
    conn: &mut (impl tokio::io::AsyncRead + Unpin),
    seen: &mut String,
    done: impl Fn(&str) -> bool,
) {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while !done(seen) {
        let n = tokio::time::timeout_at(deadline, conn.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("not within 10 s; so far: {seen:?}"))
            .unwrap();
        assert!(n > 0, "the connection closed; so far: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

/// Like [`read_until`], for retry loops: `Err` with the text so far when it never came.
pub async fn try_read_until(
    body: &mut Incoming,
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> Result<String, String> {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + within;
    while !pred(&text) {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    text.push_str(&String::from_utf8_lossy(d));
                }
            }
            _ => return Err(text),
        }
    }
    Ok(text)
}

/// A plain HTTP/1.1 request to `addr` (an SSH tunnel's local end), one connection.
pub async fn plain(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    read(plain_send(addr, method, path, headers, body).await).await
}

/// Like [`plain`], returning as soon as the head arrives (the body streams).
pub async fn plain_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response<Incoming> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn.with_upgrades());
    let mut b = Request::builder().method(method).uri(path);
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        b = b.header("host", addr.to_string());
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if !body.is_empty() {
        b = b.header("content-type", "application/json");
    }
    tokio::time::timeout(
        Duration::from_secs(60),
        send.send_request(b.body(Full::<Bytes>::from(body.to_string())).unwrap()),
    )
    .await
    .expect("a response within 60 s")
    .unwrap()
}

/// A request straight to an upstream (no gateway), with its own password.
pub async fn direct_call(
    port: u16,
    password: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("authorization", basic("opencode", password))
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = send
        .send_request(b.body(Full::<bytes::Bytes>::from(body.to_string())).unwrap())
        .await
        .unwrap();
    crate::common::client::read(resp).await.body
}

/// Collects an SSE stream's text in the background.
pub struct EventLog {
    text: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl EventLog {
    pub async fn open(c: &Https, path: &str, auth: &str) -> EventLog {
        let resp = c
            .send(c.request("GET", path, Some(auth)).body(Full::default()).unwrap())
            .await;
        assert_eq!(resp.status(), 200, "event stream {path}");
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        let task = tokio::spawn(async move {
            let mut body = resp.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(d) = frame.data_ref() {
                    sink.lock().unwrap().push_str(&String::from_utf8_lossy(d));
                }
            }
        });
        EventLog { text, task }
    }

    /// The `data:` payloads of one event type seen so far.
    pub fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        self.text
            .lock()
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .map(|v| {
                if v.get("payload").is_some() {
                    v["payload"].clone()
                } else {
                    v
                }
            })
            .filter(|v| v["type"] == kind)
            .collect()
    }

    pub async fn wait_for(&self, kind: &str, within: Duration) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = self.events(kind).into_iter().next() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no {kind} event within {within:?}; got:\n{}",
                self.text.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl EventLog {
    /// OpenCode joins a stream to its bus just after saying "server.connected": an event made in
    /// that instant is never sent. Create sessions with `POST session_path` until one's
    /// `session.created` arrives here (bounded: 5 sessions, 3 s each) and return that session;
    /// fails with the sessions made and what the stream said.
    pub async fn until_subscribed(&self, c: &Https, session_path: &str, auth: &str) -> serde_json::Value {
        let mut made = Vec::new();
        for _ in 0..5 {
            let (status, session) = json(c, "POST", session_path, auth, "{}").await;
            assert_eq!(status, 200, "a probe session: {session}");
            let id = session["id"].as_str().unwrap().to_string();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if self
                    .events("session.created")
                    .iter()
                    .any(|e| e.to_string().contains(&id))
                {
                    return session;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            made.push(id);
        }
        panic!(
            "none of the sessions {made:?} was announced on the stream; it said:\n{}",
            self.text.lock().unwrap()
        );
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A JSON request through the gateway from the gateway's own origin: the status and the parsed
/// body (a string when it is not JSON).
pub async fn json(c: &Https, method: &str, path: &str, auth: &str, body: &str) -> (u16, serde_json::Value) {
    let own = format!("https://{}", c.authority());
    let req = c
        .request(method, path, Some(auth))
        .header("content-type", "application/json")
        .header("origin", own)
        .body(Full::from(body.to_string()))
        .unwrap();
    let r = c.call(req).await;
    (
        r.status.as_u16(),
        serde_json::from_str(&r.body).unwrap_or(serde_json::Value::String(r.body)),
    )
}

/// The gateway closed the connection during the TLS handshake (how a connection over a cap is
/// refused): the handshake ends early, never a certificate or protocol failure.
pub fn assert_closed_in_handshake(result: std::io::Result<TlsStream<TcpStream>>, what: &str) {
    use std::io::ErrorKind::{ConnectionReset, UnexpectedEof};
    match result {
        Ok(_) => panic!("{what}: the connection was served"),
        Err(e) => assert!(
            matches!(e.kind(), UnexpectedEof | ConnectionReset),
            "{what}: refused for another reason: {e:?}"
        ),
    }
}

/// A terminal's WebSocket through the gateway (`path` is its `…/connect` URL), with our Origin.
pub async fn pty_socket(
    c: &Https,
    path: &str,
    auth: Option<&str>,
) -> tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut req = format!("wss://{}{path}", c.authority()).into_client_request().unwrap();
    if let Some(a) = auth {
        req.headers_mut().insert("authorization", a.parse().unwrap());
    }
    req.headers_mut()
        .insert("origin", format!("https://{}", c.authority()).parse().unwrap());
    tokio_tungstenite::client_async(req, c.tls().await)
        .await
        .expect("websocket through the gateway")
        .0
}

/// What a terminal prints until `needle` appears (or 20 s pass).
pub async fn read_terminal_until(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    needle: &str,
) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while !seen.contains(needle) {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => seen.push_str(t.as_str()),
            Ok(Some(Ok(Message::Binary(b)))) => seen.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(Ok(_))) => {}
            _ => break,
        }
    }
    seen
}

/// A WebSocket handshake (same-origin, with `auth`) through the gateway: the status, and the
/// body when it was refused.
pub async fn upgrade(c: &Https, path: &str, auth: &str) -> (u16, String) {
    let own = format!("https://{}", c.authority());
    let req = c
        .request("GET", path, Some(auth))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("origin", own)
        .body(Full::default())
        .unwrap();
    let resp = c.send(req).await;
    let status = resp.status().as_u16();
    if status == 101 {
        return (status, String::new());
    }
    (status, read(resp).await.body)
}

/// A session created straight on the upstream (no gateway) in another directory: what a client
/// of another project, or anyone with the server's password, could make.
pub async fn session_in(port: u16, password: &str, directory: &str) -> serde_json::Value {
    let raw = direct_call(
        port,
        password,
        "POST",
        &format!("/session?directory={directory}"),
        &[],
        "{}",
    )
    .await;
    serde_json::from_str(&raw).unwrap_or_else(|_| panic!("a session, not: {raw}"))
}

/// Percent-encode everything but RFC 3986's unreserved characters (a query value).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The DER of the certificate a new connection is served. A client with no session cache: a
/// resumed session reports the certificate of the session it resumes, not the one the server
/// would send now.
pub async fn served_certificate(c: &Https) -> Vec<u8> {
    let mut config = (*c.config).clone();
    config.resumption = rustls::client::Resumption::disabled();
    let fresh = Https {
        config: Arc::new(config),
        ..c.clone()
    };
    fresh.tls().await.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}
