//! An in-process stand-in for an OpenCode server, for fast tests of the proxy's own behaviour: it
//! demands its own Basic password like OpenCode, records every request it gets (to prove what the
//! gateway forwards), echoes what it got (to try to leak it back), streams SSE, never answers
//! `/slow`, issues PTY tickets and echoes WebSocket frames. Never the only proof: the real
//! OpenCode tests cover the same paths.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::broadcast;

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: HeaderMap,
}

pub struct FakeUpstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub events: broadcast::Sender<String>,
    task: tokio::task::JoinHandle<()>,
}

type Body = BoxBody<Bytes, Infallible>;

fn full(s: impl Into<Bytes>) -> Body {
    Full::new(s.into()).boxed()
}

/// What the fake says it is: `GET /global/health`'s version and, when set, `GET /doc`. Without a
/// document it answers `/doc` like any unknown path (not JSON), as a server without one would.
#[derive(Clone, Debug)]
pub struct Api {
    pub version: String,
    pub doc: Option<String>,
    /// How long `GET /doc` takes (a server busy at start).
    pub doc_delay: Duration,
}

impl Default for Api {
    fn default() -> Self {
        Api {
            version: "1.18.33".into(),
            doc: None,
            doc_delay: Duration::ZERO,
        }
    }
}

impl FakeUpstream {
    /// An upstream demanding Basic `opencode:<password>`; with an empty password, an open one.
    pub async fn start(password: &'static str) -> FakeUpstream {
        Self::start_with_api(password, Api::default()).await
    }

    /// Like [`FakeUpstream::start`], reporting `api`'s version and serving its document.
    pub async fn start_with_api(password: &'static str, api: Api) -> FakeUpstream {
        let api = Arc::new(api);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (events, _) = broadcast::channel(64);
        let (seen2, events2) = (seen.clone(), events.clone());
        let (addr, task) = serve(move |req| handle(req, password, seen2.clone(), events2.clone(), api.clone())).await;
        FakeUpstream {
            addr,
            seen,
            events,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What clients sent through the gateway (the gateway's own health probes left out).
    pub fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| {
                s.headers
                    .get("user-agent")
                    .is_none_or(|a| a != opencode_gateway::upstream::api::HEALTH_AGENT)
            })
            .cloned()
            .collect()
    }

    /// Wait (bounded) until `n` SSE subscribers are connected.
    pub async fn wait_subscribers(&self, n: usize) {
        for _ in 0..400 {
            if self.events.receiver_count() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no SSE subscriber reached the fake upstream");
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serve HTTP/1.1 (upgrades too) on 127.0.0.1:0, each request answered by `handle`; the address
/// and the task that accepts (abort it to stop accepting).
pub async fn serve<F, Fut, B>(handle: F) -> (SocketAddr, tokio::task::JoinHandle<()>)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service_fn(handle))
                    .with_upgrades()
                    .await;
            });
        }
    });
    (addr, task)
}

/// A stand-in that answers what the gateway's inbox reads, for tests of the inbox's own
/// behaviour ([`FakeUpstream`] turns the inbox away): lists what `permissions` holds (no
/// sessions, statuses or questions), streams `GET /global/event` to each subscriber until its
/// sender in `streams` is dropped (the stream then ends: a cut), and records each request's target
/// and whether one carried Basic `opencode:<password>` (it demands none).
pub struct InboxUpstream {
    pub addr: SocketAddr,
    pub state: Arc<InboxState>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
pub struct InboxState {
    pub permissions: Mutex<serde_json::Value>,
    /// `GET /session`'s list (none until a test sets it), whose entries `GET /session/<id>` answers.
    pub sessions: Mutex<Option<serde_json::Value>>,
    pub streams: Mutex<Vec<tokio::sync::mpsc::Sender<String>>>,
    pub targets: Mutex<Vec<String>>,
    pub password_seen: Mutex<bool>,
    /// OpenCode's order for the next `GET /global/event`: the headers at once, the stream
    /// subscribed (and `server.connected` sent) only after this long; halfway, this permission
    /// is asked, its event sent to no one (the gap a subscriber must not seed in).
    pub subscribe_late: Mutex<Option<(std::time::Duration, serde_json::Value)>>,
    /// OpenCode 1.18.33's order, read in its bundled source: `server.connected` at once, the
    /// stream joined to the bus only after this long (halfway, this permission is asked, its
    /// event sent to no one), and then a heartbeat, the first event only a joined stream sends.
    pub join_late: Mutex<Option<(std::time::Duration, serde_json::Value)>>,
}

impl InboxUpstream {
    pub async fn start(password: &str) -> InboxUpstream {
        let state = Arc::new(InboxState::default());
        *state.permissions.lock().unwrap() = serde_json::json!([]);
        let auth = super::client::basic("opencode", password);
        let s2 = state.clone();
        let (addr, task) = serve(move |req| inbox_handle(req, s2.clone(), auth.clone())).await;
        InboxUpstream { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for InboxUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Join `tx` to the stand-in's bus after `gap`, with `joined` as its first event then; halfway,
/// `asked` is listed as pending, its event sent to no one.
fn join_after(
    state: Arc<InboxState>,
    tx: tokio::sync::mpsc::Sender<String>,
    gap: std::time::Duration,
    asked: serde_json::Value,
    joined: &'static str,
) {
    tokio::spawn(async move {
        tokio::time::sleep(gap / 2).await;
        if let Some(list) = state.permissions.lock().unwrap().as_array_mut() {
            list.push(asked);
        }
        tokio::time::sleep(gap / 2).await;
        if tx.send(joined.into()).await.is_ok() {
            state.streams.lock().unwrap().push(tx);
        }
    });
}

async fn inbox_handle(
    req: Request<Incoming>,
    state: Arc<InboxState>,
    auth: String,
) -> Result<Response<http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>>, Infallible> {
    let target = req.uri().to_string();
    state.targets.lock().unwrap().push(target.clone());
    if req.headers().get("authorization").is_some_and(|a| a == auth.as_str()) {
        *state.password_seen.lock().unwrap() = true;
    }
    let path = req.uri().path();
    // One session, as OpenCode answers `GET /session/<id>` (the gateway asks it for a session's
    // directory): from `sessions`, else 404.
    if let Some(id) = path
        .strip_prefix("/session/")
        .filter(|id| !id.contains('/') && *id != "status")
    {
        let found = state
            .sessions
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|list| list.as_array().and_then(|l| l.iter().find(|s| s["id"] == id).cloned()));
        let mut r = Response::new(
            Full::new(Bytes::from(found.as_ref().map_or(String::new(), |s| s.to_string()))).boxed_unsync(),
        );
        if found.is_none() {
            *r.status_mut() = StatusCode::NOT_FOUND;
        }
        return Ok(r);
    }
    let body = match path {
        "/global/event" => {
            let (tx, rx) = tokio::sync::mpsc::channel::<String>(16);
            let connected = "data: {\"payload\":{\"type\":\"server.connected\",\"properties\":{}}}\n\n";
            let late = state.subscribe_late.lock().unwrap().take();
            let join_late = state.join_late.lock().unwrap().take();
            // The event that says the stream has joined the bus: `server.connected` in the older
            // order, the heartbeat in OpenCode 1.18.33's (whose `server.connected` comes first).
            let heartbeat = "data: {\"payload\":{\"type\":\"server.heartbeat\",\"properties\":{}}}\n\n";
            match (late, join_late) {
                (None, None) => {
                    tx.send(connected.into()).await.unwrap();
                    state.streams.lock().unwrap().push(tx);
                }
                (Some((gap, asked)), _) => join_after(state.clone(), tx, gap, asked, connected),
                (None, Some((gap, asked))) => {
                    tx.send(connected.into()).await.unwrap();
                    join_after(state.clone(), tx, gap, asked, heartbeat);
                }
            }
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|e| (Ok::<_, Infallible>(Frame::data(Bytes::from(e))), rx))
            });
            StreamBody::new(stream).boxed_unsync()
        }
        "/permission" => Full::new(Bytes::from(state.permissions.lock().unwrap().to_string())).boxed_unsync(),
        "/session/status" => Full::new(Bytes::from("{}")).boxed_unsync(),
        "/session" => {
            let list = state.sessions.lock().unwrap().clone();
            Full::new(Bytes::from(list.map_or("[]".to_string(), |l| l.to_string()))).boxed_unsync()
        }
        "/question" => Full::new(Bytes::from("[]")).boxed_unsync(),
        _ => Full::new(Bytes::from("ok")).boxed_unsync(),
    };
    let mut r = Response::new(body);
    if path == "/global/event" {
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
    }
    Ok(r)
}

async fn handle(
    mut req: Request<Incoming>,
    password: &'static str,
    seen: Arc<Mutex<Vec<Seen>>>,
    events: broadcast::Sender<String>,
    api: Arc<Api>,
) -> Result<Response<Body>, Infallible> {
    // The gateway's inbox watches every server; the stand-in is no OpenCode (its lists are not
    // JSON) and its tests count their own requests and subscribers: turn the inbox away
    // unrecorded (tests/integration/inbox.rs covers it with [`InboxUpstream`] and the real server).
    if req
        .headers()
        .get("user-agent")
        .is_some_and(|a| a == opencode_gateway::inbox::INBOX_AGENT)
    {
        let mut r = Response::new(full(""));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return Ok(r);
    }
    let target = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: req.method().to_string(),
        target: target.clone(),
        headers: req.headers().clone(),
    });
    let expected = super::client::basic("opencode", password);
    let authorized = password.is_empty()
        || req.headers().get("authorization").and_then(|v| v.to_str().ok()) == Some(expected.as_str());
    if !authorized {
        let mut r = Response::new(full(""));
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        r.headers_mut()
            .insert("www-authenticate", "Basic realm=\"Secure Area\"".parse().unwrap());
        return Ok(r);
    }
    let path = req.uri().path().to_string();
    let resp = match (req.method().as_str(), path.as_str()) {
        ("GET", "/global/health") => Response::new(full(format!(r#"{{"healthy":true,"version":"{}"}}"#, api.version))),
        // A web UI file sent as OpenCode 2 sends its files: chunked, no Content-Length, `n`
        // bytes of JavaScript in 64 KiB chunks (`/_chunked/<n>.js`).
        ("GET", p) if p.starts_with("/_chunked/") => {
            let n: usize = p["/_chunked/".len()..].trim_end_matches(".js").parse().unwrap_or(0);
            let chunks = (0..n.div_ceil(65536)).map(move |i| {
                let len = 65536.min(n - i * 65536);
                Ok::<_, Infallible>(Frame::data(Bytes::from("x=1;".repeat(len / 4 + 1)[..len].to_string())))
            });
            let mut r = Response::new(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(chunks))));
            r.headers_mut()
                .insert("content-type", "text/javascript".parse().unwrap());
            r
        }
        ("GET", "/doc") if api.doc.is_some() => {
            tokio::time::sleep(api.doc_delay).await;
            Response::new(full(api.doc.clone().unwrap_or_default()))
        }
        ("GET", "/echo") => {
            let headers: Vec<String> = req
                .headers()
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or("?")))
                .collect();
            let mut r = Response::new(full(format!("{target}\n{}", headers.join("\n"))));
            // An upstream that echoes credentials in a header too.
            if let Some(a) = req.headers().get("authorization") {
                r.headers_mut().insert("x-echo-authorization", a.clone());
            }
            r
        }
        ("GET", "/delay") => {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Response::new(full("done"))
        }
        ("GET", "/slow") => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Response::new(full(""))
        }
        ("POST", p) if !p.ends_with("/connect-token") => {
            let n = req.into_body().collect().await.map(|c| c.to_bytes().len()).unwrap_or(0);
            Response::new(full(n.to_string()))
        }
        ("GET", p) if p.ends_with("/event") => {
            let rx = events.subscribe();
            let first = futures_util::stream::once(async {
                Ok::<_, Infallible>(Frame::data(Bytes::from("data: {\"type\":\"server.connected\"}\n\n")))
            });
            let rest = futures_util::stream::unfold(rx, |mut rx| async move {
                match rx.recv().await {
                    Ok(ev) => Some((Ok(Frame::data(Bytes::from(format!("data: {ev}\n\n")))), rx)),
                    Err(_) => None,
                }
            });
            let mut r = Response::new(BodyExt::boxed(StreamBody::new(first.chain(rest))));
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            r
        }
        ("POST", p) if p.ends_with("/connect-token") => {
            let n = seen.lock().unwrap().len();
            let mut r = Response::new(full(format!(r#"{{"ticket":"ticket-{n}","expires_in":60}}"#)));
            r.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            r
        }
        ("GET", p) if p.ends_with("/connect") && req.headers().contains_key("upgrade") => {
            let key = req.headers().get("sec-websocket-key").cloned().unwrap();
            let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let on_upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let Ok(upgraded) = on_upgrade.await else {
                    return;
                };
                let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    TokioIo::new(upgraded),
                    tokio_tungstenite::tungstenite::protocol::Role::Server,
                    None,
                )
                .await;
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text()
                        && ws
                            .send(format!("echo:{}", msg.into_text().unwrap()).into())
                            .await
                            .is_err()
                    {
                        break;
                    }
                }
            });
            let mut r = Response::new(full(""));
            *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            r.headers_mut().insert("upgrade", "websocket".parse().unwrap());
            r.headers_mut().insert("connection", "Upgrade".parse().unwrap());
            r.headers_mut().insert("sec-websocket-accept", accept.parse().unwrap());
            r
        }
        _ => Response::new(full("ok")),
    };
    Ok(resp)
}

/// A config with `ext`, the stand-in at `fake` pinned to `dir`, and alice (admin) with
/// `password`.
pub fn ext_config(fake: &InboxUpstream, dir: &std::path::Path, password: &str) -> String {
    use super::gateway::{TestUser, base_config, external_project, users_toml};
    base_config(&format!(
        "{}\ndirectory = \"{}\"\n\n{}",
        external_project("ext", &fake.url()).trim_end(),
        dir.display(),
        users_toml(&[TestUser {
            name: "alice",
            password,
            projects: "[\"*\"]",
            role: "admin",
        }])
    ))
}

/// A permission request as OpenCode's `permission.asked` carries it (bash `ls`, session ses_1).
pub fn permission_json(id: &str) -> serde_json::Value {
    serde_json::json!({"id": id, "sessionID": "ses_1", "permission": "bash", "patterns": ["ls"],
        "metadata": {"command": "ls"}, "always": ["ls *"]})
}
