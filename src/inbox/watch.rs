//! One subscription to a running OpenCode server's `GET /global/event`, shared by every project
//! that server serves (a shared upstream serves several directories: events are dispatched by the
//! envelope's `directory`). After every (re)connect the projects are re-seeded from the server's
//! lists, because events sent while the stream was down are lost; the stream is opened first and
//! read after the seed, so nothing falls between the two (an event that repeats the seed is a
//! no-op). A stream that breaks or goes quiet past two missed heartbeats is reconnected with backoff.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

use super::Inbox;
use super::model::{Effect, Seed, ServerState};
use crate::upstream::endpoint::Endpoint;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const SEED_TIMEOUT: Duration = Duration::from_secs(15);
/// OpenCode sends a heartbeat every 10 s.
const QUIET_LIMIT: Duration = Duration::from_secs(35);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// An event larger than this (a huge message part) is skipped, not buffered.
const MAX_EVENT_BYTES: usize = 8 << 20;
const MAX_LIST_BYTES: usize = 16 << 20;
/// Sessions read per re-seed.
const SEED_SESSIONS: usize = super::model::MAX_SESSIONS;

/// A project served by the watched server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub project: String,
    /// The directory the project is pinned to (seeds ask for it).
    pub directory: Option<String>,
    /// Only events from inside this directory are the project's (a shared upstream); `None`: all.
    pub only_inside: Option<String>,
}

/// Watch until `stop`. `external`: the watcher is what tells whether the server is reachable.
pub(crate) async fn run(
    inbox: Arc<Inbox>,
    endpoint: Arc<Endpoint>,
    targets: Vec<Target>,
    external: bool,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let started = tokio::time::Instant::now();
        let why = tokio::select! {
            why = subscription(&inbox, &endpoint, &targets, external) => why,
            _ = stop.cancelled() => return,
        };
        tracing::debug!(upstream = %endpoint.authority, reason = %why, "inbox: event stream ended; reconnecting");
        // What was pending may be answered while we are away: the next seed says.
        inbox.update(|m, _| {
            let mut changed = false;
            for t in &targets {
                if external {
                    changed |= m.set_server(
                        &t.project,
                        ServerState::Failed {
                            reason: format!("unreachable: {why}"),
                        },
                        t.directory.clone(),
                    );
                }
            }
            Effect::changed(changed)
        });
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: subscribe, seed, then apply events until the stream ends. Returns why it ended.
/// `GET path` with the gateway's credential and the inbox's User-Agent.
fn get(endpoint: &Endpoint, path: &str) -> Result<http::Request<crate::upstream::UpstreamBody>, String> {
    let mut req = endpoint.get(path)?;
    req.headers_mut().insert(
        http::header::USER_AGENT,
        http::HeaderValue::from_static(super::INBOX_AGENT),
    );
    Ok(req)
}

async fn subscription(inbox: &Inbox, endpoint: &Endpoint, targets: &[Target], external: bool) -> String {
    let req = match get(endpoint, "/global/event") {
        Ok(r) => r,
        Err(e) => return e,
    };
    let resp = match tokio::time::timeout(CONNECT_TIMEOUT, endpoint.send(req, inbox.parts.connect_timeout)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return crate::upstream::describe(&*e),
        Err(_) => return "no answer in 10 s".into(),
    };
    if !resp.status().is_success() {
        return format!("GET /global/event answered {}", resp.status());
    }
    // Counted open from the stream's answer, before the seed is published: whoever sees the
    // re-seeded inbox also sees the subscription that seeded it.
    let _open = Open::new(&inbox.subscriptions);
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    // OpenCode answers the headers before it subscribes the stream to its bus (the subscription
    // is made in the stream's callback, which then writes `server.connected`): a session made
    // between the headers and the subscription was in no seed and in no event, and never
    // showed. The first event says the subscription exists; a server that sends none is seeded
    // after a short wait, as before.
    if let Err(why) = first_event(&mut body, &mut buf).await {
        return why;
    }
    if let Err(why) = seed_all(inbox, endpoint, targets, external).await {
        return why;
    }
    // OpenCode 1.18.33 writes `server.connected` first and joins its bus only when the stream is
    // read past it (its bundled source: the bus subscription is the stream after the first
    // event, merged with a heartbeat every 10 s), so a session made just then is in neither the
    // seed above nor any event. Any second event (a bus event, or the heartbeat) says the
    // stream has joined: the lists are read once more then, and nothing made in the gap is lost.
    let mut events = 0usize;
    let mut skipping = false;
    loop {
        let frame = match tokio::time::timeout(QUIET_LIMIT, body.frame()).await {
            Err(_) => return "no event or heartbeat for 35 s".into(),
            Ok(None) => return "the server closed the stream".into(),
            Ok(Some(Err(e))) => return crate::upstream::describe(&e),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else { continue };
        buf.extend_from_slice(&data);
        while let Some(end) = memchr::memmem::find(&buf, b"\n\n") {
            let event = buf.split_to(end + 2);
            if std::mem::take(&mut skipping) {
                continue;
            }
            // Redacted as the proxy's own event stream is: a card or a flag carries no secret of
            // the upstream's to a page (whole events here, so none is split across frames).
            let event = match &endpoint.redactor {
                Some(r) => r.frame(event.freeze()),
                None => event.freeze(),
            };
            dispatch(inbox, targets, &event);
            events += 1;
            if events == 2
                && let Err(why) = seed_all(inbox, endpoint, targets, external).await
            {
                return why;
            }
        }
        if buf.len() > MAX_EVENT_BYTES {
            // Drop what we have of an oversized event, and the rest of it when it ends.
            buf.advance(buf.len());
            skipping = true;
        }
    }
}

/// Every target's lists read and published (the inbox then shows what they hold).
async fn seed_all(inbox: &Inbox, endpoint: &Endpoint, targets: &[Target], external: bool) -> Result<(), String> {
    for t in targets {
        let seed = seed(inbox, endpoint, t.directory.as_deref())
            .await
            .map_err(|why| format!("reading the lists: {why}"))?;
        inbox.update(|m, now| {
            let mut e = m.seed(&t.project, &seed, now);
            if external {
                m.set_server(&t.project, ServerState::Running, t.directory.clone());
            }
            e.changed = true;
            e
        });
    }
    Ok(())
}

/// How long the seed waits for the stream's first event.
const FIRST_EVENT_WAIT: Duration = Duration::from_secs(5);

/// Read until the stream holds one whole event (kept in `buf`, dispatched after the seed), or
/// [`FIRST_EVENT_WAIT`] passes. An error only when the stream ends or fails.
async fn first_event(body: &mut crate::upstream::pool::Leased, buf: &mut BytesMut) -> Result<(), String> {
    let until = tokio::time::Instant::now() + FIRST_EVENT_WAIT;
    while memchr::memmem::find(buf, b"\n\n").is_none() && buf.len() <= MAX_EVENT_BYTES {
        match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => {
                tracing::debug!("no first event in 5 s: seeding anyway");
                return Ok(());
            }
            Ok(None) => return Err("the server closed the stream".into()),
            Ok(Some(Err(e))) => return Err(crate::upstream::describe(&e)),
            Ok(Some(Ok(f))) => {
                if let Ok(data) = f.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
    Ok(())
}

/// Event types the model reads; anything else (message parts, deltas, diffs, plugins…) is not
/// parsed. A match inside some other event's text only costs a parse: the reducer checks the type.
const INTERESTING: [&[u8]; 11] = [
    b"\"permission.asked\"",
    b"\"permission.replied\"",
    b"\"question.asked\"",
    b"\"question.replied\"",
    b"\"question.rejected\"",
    b"\"session.created\"",
    b"\"session.updated\"",
    b"\"session.deleted\"",
    b"\"session.status\"",
    b"\"session.idle\"",
    b"\"message.updated\"",
];

/// A finished tool call (the runaway guard's count): of the busiest event type, only these are
/// parsed. OpenCode 1.18.33 writes its events as compact JSON.
fn finished_tool_call(event: &[u8]) -> bool {
    let has = |n: &[u8]| memchr::memmem::find(event, n).is_some();
    has(b"\"message.part.updated\"")
        && has(b"\"type\":\"tool\"")
        && (has(b"\"status\":\"error\"") || has(b"\"status\":\"completed\""))
}

/// A text part's last update (`time.end` set): the agent's words, for the board's cards.
fn finished_text(event: &[u8]) -> bool {
    let has = |n: &[u8]| memchr::memmem::find(event, n).is_some();
    has(b"\"message.part.updated\"") && has(b"\"type\":\"text\"") && has(b"\"end\":")
}

fn dispatch(inbox: &Inbox, targets: &[Target], event: &[u8]) {
    if !INTERESTING.iter().any(|n| memchr::memmem::find(event, n).is_some())
        && !finished_tool_call(event)
        && !finished_text(event)
    {
        return;
    }
    let text = String::from_utf8_lossy(event);
    let Some(json) = text.lines().find_map(|l| l.strip_prefix("data:")) else {
        return;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json.trim_start()) else {
        return;
    };
    let dir = v["directory"].as_str();
    for t in targets {
        // The proxy's own scope test; an event naming no directory is no pinned project's.
        let mine = match (&t.only_inside, dir) {
            (None, _) => true,
            (Some(root), Some(d)) => crate::policy::scope::dir_inside(d, std::path::Path::new(root)),
            (Some(_), None) => false,
        };
        if mine {
            inbox.update(|m, now| m.apply(&t.project, &v["payload"], now));
        }
    }
}

async fn get_json(inbox: &Inbox, endpoint: &Endpoint, path: &str) -> Result<serde_json::Value, String> {
    let req = get(endpoint, path)?;
    let resp = endpoint
        .send(req, inbox.parts.connect_timeout)
        .await
        .map_err(|e| crate::upstream::describe(&*e))?;
    if !resp.status().is_success() {
        return Err(format!(
            "GET {} answered {}",
            path.split('?').next().unwrap_or(path),
            resp.status()
        ));
    }
    let body = http_body_util::Limited::new(resp.into_body(), MAX_LIST_BYTES)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let body = match &endpoint.redactor {
        Some(r) => r.frame(body),
        None => body,
    };
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

async fn seed(inbox: &Inbox, endpoint: &Endpoint, dir: Option<&str>) -> Result<Seed, String> {
    let read = async {
        let list = |v: serde_json::Value| v.as_array().cloned().unwrap_or_default();
        Ok(Seed {
            sessions: list(
                get_json(
                    inbox,
                    endpoint,
                    &with_directory(&format!("/session?limit={SEED_SESSIONS}"), dir),
                )
                .await?,
            ),
            statuses: get_json(inbox, endpoint, &with_directory("/session/status", dir)).await?,
            permissions: list(get_json(inbox, endpoint, &with_directory("/permission", dir)).await?),
            questions: list(get_json(inbox, endpoint, &with_directory("/question", dir)).await?),
        })
    };
    tokio::time::timeout(SEED_TIMEOUT, read)
        .await
        .map_err(|_| "no answer in 15 s".to_string())?
}

/// Counts an open subscription while it lives.
struct Open<'a>(&'a AtomicUsize);

impl<'a> Open<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Open(n)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `path` with `?directory=<dir>` (percent-encoded) when the project has one: the watch's reads
/// of one project on a shared server.
fn with_directory(path: &str, dir: Option<&str>) -> String {
    let Some(dir) = dir else {
        return path.to_string();
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut out = format!("{path}{sep}directory=");
    for b in dir.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::finished_tool_call;

    /// Events as OpenCode 1.18.33 sent them (a failing `read`, a running `bash`, its `sync` twin).
    #[test]
    fn only_finished_tool_calls_of_the_part_events_are_read() {
        let error = br#"data: {"directory":"/p","payload":{"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"type":"tool","tool":"read","callID":"call_2","state":{"status":"error","input":{"filePath":"/x"},"error":"File not found: /x"}}}}}"#;
        let done = br#"data: {"payload":{"type":"message.part.updated","properties":{"part":{"type":"tool","tool":"bash","state":{"status":"completed","metadata":{"exit":1}}}}}}"#;
        let running = br#"data: {"payload":{"type":"message.part.updated","properties":{"part":{"type":"tool","tool":"bash","state":{"status":"running"}}}}}"#;
        let text = br#"data: {"payload":{"type":"message.part.updated","properties":{"part":{"type":"text","text":"status completed"}}}}"#;
        let sync = br#"data: {"payload":{"type":"sync","syncEvent":{"type":"message.part.updated.1","data":{"part":{"type":"tool","state":{"status":"error"}}}}}}"#;
        assert!(finished_tool_call(error));
        assert!(finished_tool_call(done));
        assert!(!finished_tool_call(running));
        assert!(!finished_tool_call(text));
        assert!(!finished_tool_call(sync));
    }
}
