//! Notifications of new pending requests and of the guard's alerts (`[notify]`): a webhook (POST
//! JSON) and/or an ntfy topic (POST text with `Title` and `Click` headers). A message names the
//! project and the tool (a request) or the session and the reason (an alert: a budget warned at or
//! spent, a runaway) and links to `<public_url>/inbox`; it never carries a prompt, a command, its
//! output, a diff or an approve link (a notification is read on a lock screen and kept by third
//! parties).
//!
//! The inbox queues new requests with `try_send` into a bounded channel (a full channel drops and
//! counts: `inbox::Queue`), so nothing here is ever on a request's path. One task takes the first
//! request, waits `debounce` for more, sends one message counting them, and retries a failed
//! delivery with backoff. An alert goes alone, as it comes (one that comes during a request's
//! wait goes after that message). Plain `http://` is accepted for loopback receivers only; `https://` is verified against
//! the system's CA bundle (`SSL_CERT_FILE`, else `/etc/ssl/certs/ca-certificates.crt`).

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

pub(crate) mod push;
pub(crate) mod push_endpoint;
pub(crate) mod send;
pub(crate) mod webpush;

use crate::config::Notify;
use crate::inbox::{Alert, AlertKind, CardKind, NewCard, Notice};

const ATTEMPTS: u32 = 6;
/// Requests gathered into one push message when `[notify]` (which sets the window) is absent.
const PUSH_DEBOUNCE: Duration = Duration::from_secs(1);
const SEND_TIMEOUT: Duration = Duration::from_secs(15);
/// Projects named in one message at most.
const LISTED: usize = 5;

/// One message about `count` new requests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Message {
    pub project: String,
    /// The (first) request's id.
    pub id: String,
    pub tool: String,
    pub kind: CardKind,
    pub count: usize,
    pub projects: Vec<String>,
    pub url: String,
}

impl Message {
    pub(crate) fn new(batch: &[NewCard], public_url: &str) -> Option<Message> {
        let first = batch.first()?;
        let mut projects: Vec<String> = Vec::new();
        for c in batch {
            if !projects.contains(&c.project) && projects.len() < LISTED {
                projects.push(c.project.clone());
            }
        }
        Some(Message {
            project: first.project.clone(),
            id: first.id.clone(),
            tool: first.tool.clone(),
            kind: first.kind,
            count: batch.len(),
            projects,
            url: format!("{}/inbox", public_url.trim_end_matches('/')),
        })
    }

    pub(crate) fn title(&self) -> String {
        match self.count {
            1 => format!("OpenCode: {} waits for you", self.project),
            n => format!("OpenCode: {n} requests wait for you"),
        }
    }

    pub(crate) fn text(&self) -> String {
        let what = |kind: CardKind, tool: &str| match kind {
            CardKind::Permission => format!("permission to use {tool}"),
            CardKind::Question => "a question".to_string(),
        };
        match self.count {
            1 => format!("{}: {}", self.project, what(self.kind, &self.tool)),
            n => format!("{n} new requests in {}", self.projects.join(", ")),
        }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "project": self.project,
            "id": self.id,
            "tool": self.tool,
            "kind": self.kind,
            "count": self.count,
            "projects": self.projects,
            "url": self.url,
        })
    }

    fn outgoing(&self) -> Outgoing {
        Outgoing {
            title: self.title(),
            text: self.text(),
            json: self.json(),
            url: self.url.clone(),
        }
    }
}

/// A message as the receivers get it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outgoing {
    pub title: String,
    pub text: String,
    pub json: serde_json::Value,
    pub url: String,
}

/// An alert's message: project, session (title and id), what happened and why.
pub(crate) fn alert(a: &Alert, public_url: &str) -> Outgoing {
    let url = format!("{}/inbox", public_url.trim_end_matches('/'));
    let title = match (a.kind, a.stopped) {
        (AlertKind::BudgetWarning, _) => format!("OpenCode: {} nears its budget", a.project),
        (AlertKind::TriggerPaused, _) => format!("OpenCode: a trigger of {} paused itself", a.project),
        (AlertKind::ReadyForReview, _) => format!("OpenCode: {} is ready for review", a.project),
        (_, true) => format!("OpenCode: a session of {} was stopped", a.project),
        (AlertKind::BudgetSpent, false) => format!("OpenCode: {} spent its budget", a.project),
        (AlertKind::Runaway, false) => format!("OpenCode: a session of {} looks stuck", a.project),
    };
    let session = match a.title.trim() {
        "" => a.session.clone(),
        t => format!("\u{201c}{t}\u{201d}"),
    };
    let text = format!(
        "{}: {session}: {}{}",
        a.project,
        a.reason,
        if a.stopped { "; stopped" } else { "" }
    );
    let json = serde_json::json!({
        "project": a.project,
        "kind": a.kind,
        "session": a.session,
        "title": a.title,
        "reason": a.reason,
        "stopped": a.stopped,
        "url": url,
    });
    Outgoing { title, text, json, url }
}

/// The notifier task: batches, sends, retries; ends with `stop` (the gateway's shutdown). `config`
/// is read when a batch starts (the `[notify]` settings and the public URL, if notifications are
/// on), so a reload applies to the next message.
pub(crate) async fn run(
    rx: mpsc::Receiver<Notice>,
    config: impl Fn() -> Option<(Notify, String)>,
    push: std::sync::Arc<push::Pusher>,
    leads: impl Fn() -> bool,
    stop: tokio_util::sync::CancellationToken,
) {
    pump(rx, config, Some(push), leads, stop, Duration::from_secs(1)).await;
}

/// Take a request, wait `debounce` for more, send one message, retry it with backoff (from
/// `first_retry`, doubling); an alert goes alone; until `stop` or the channel closes.
///
/// Of several gateways on one shared store, only the one that `leads` sends (each sees the same
/// requests and alerts): the others drop theirs, so the team is told once.
pub(crate) async fn pump(
    mut rx: mpsc::Receiver<Notice>,
    config: impl Fn() -> Option<(Notify, String)>,
    push: Option<std::sync::Arc<push::Pusher>>,
    leads: impl Fn() -> bool,
    stop: tokio_util::sync::CancellationToken,
    first_retry: Duration,
) {
    // Alerts that came while requests were being gathered: sent next.
    let mut later: std::collections::VecDeque<Alert> = Default::default();
    loop {
        let first = match later.pop_front() {
            Some(a) => Notice::Alert(a),
            None => tokio::select! {
                n = rx.recv() => match n { Some(n) => n, None => return },
                _ = stop.cancelled() => return,
            },
        };
        let cfg = config();
        // Without `[notify]`, requests still go to subscribed devices (Web Push), batched alike.
        let debounce = cfg.as_ref().map_or(PUSH_DEBOUNCE, |(c, _)| c.debounce);
        let out = match first {
            Notice::Alert(a) => cfg.as_ref().map(|(_, url)| alert(&a, url)),
            Notice::Card(card) => {
                let mut batch = vec![card];
                let until = tokio::time::Instant::now() + debounce;
                loop {
                    tokio::select! {
                        n = rx.recv() => match n {
                            Some(Notice::Card(c)) => batch.push(c),
                            Some(Notice::Alert(a)) => later.push_back(a),
                            None => break,
                        },
                        _ = tokio::time::sleep_until(until) => break,
                        _ = stop.cancelled() => return,
                    }
                }
                if !leads() {
                    tracing::info!(
                        requests = batch.len(),
                        "not told here: another gateway on the state database sends the notifications"
                    );
                    continue;
                }
                if let Some(push) = &push {
                    push.send(&batch).await;
                }
                cfg.as_ref()
                    .and_then(|(_, url)| Message::new(&batch, url))
                    .map(|m| m.outgoing())
            }
        };
        if let (Some((cfg, _)), Some(out)) = (&cfg, &out)
            && leads()
            && !send_with_retries(cfg, out, first_retry, &stop).await
        {
            return;
        }
    }
}

/// Deliver `out`, again with backoff while it fails (at most [`ATTEMPTS`] times); false when the
/// gateway stops meanwhile.
async fn send_with_retries(
    cfg: &Notify,
    out: &Outgoing,
    first_retry: Duration,
    stop: &tokio_util::sync::CancellationToken,
) -> bool {
    let mut backoff = first_retry;
    for attempt in 1..=ATTEMPTS {
        match deliver(cfg, out).await {
            Ok(()) => {
                tracing::info!(title = %out.title, "notification sent");
                return true;
            }
            Err(why) => {
                tracing::warn!(reason = %why, attempt, "notification not delivered");
                if attempt == ATTEMPTS {
                    return true;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return false,
        }
        backoff = (backoff * 2).min(Duration::from_secs(60));
    }
    true
}

/// A receiver of `[notify]`: each kind is one way of posting the same message to the team.
/// (Web Push is not one of them: it tells each device only of the requests its user may answer,
/// sealed for that device, `push.rs`.)
#[derive(Debug, Clone, Copy)]
pub(crate) enum Channel<'a> {
    /// POST the message's JSON.
    Webhook(&'a str),
    /// POST its text to an ntfy topic, with `Title` and `Click` headers.
    Ntfy(&'a str),
}

impl<'a> Channel<'a> {
    /// The receivers `cfg` names.
    pub(crate) fn all(cfg: &'a Notify) -> impl Iterator<Item = Channel<'a>> {
        let webhook = cfg.webhook.as_deref().map(Channel::Webhook);
        let ntfy = cfg.ntfy.as_deref().map(Channel::Ntfy);
        webhook.into_iter().chain(ntfy)
    }

    fn name(self) -> &'static str {
        match self {
            Channel::Webhook(_) => "webhook",
            Channel::Ntfy(_) => "ntfy",
        }
    }

    fn url(self) -> &'a str {
        match self {
            Channel::Webhook(u) | Channel::Ntfy(u) => u,
        }
    }

    pub(crate) async fn send(self, msg: &Outgoing) -> Result<(), String> {
        match self {
            Channel::Webhook(url) => send::post(url, "application/json", &[], Bytes::from(msg.json.to_string())).await,
            Channel::Ntfy(url) => {
                let headers = [
                    ("Title", msg.title.clone()),
                    ("Click", msg.url.clone()),
                    ("Tags", "bell".into()),
                ];
                let text = Bytes::from(msg.text.clone());
                send::post(url, "text/plain; charset=utf-8", &headers, text).await
            }
        }
        .map_err(|e| format!("{}: {e}", self.name()))
    }
}

/// One line for `check`: the receivers' hosts only (an ntfy topic's name is its password).
pub(crate) fn describe(cfg: &Notify) -> String {
    let host = |u: &str| {
        u.parse::<http::Uri>()
            .ok()
            .and_then(|u| u.authority().map(|a| a.to_string()))
            .unwrap_or_default()
    };
    let to: Vec<String> = Channel::all(cfg)
        .map(|c| format!("{} {}", c.name(), host(c.url())))
        .collect();
    format!(
        "  notify {}  (new pending requests, debounce {} ms; budget and runaway alerts)\n",
        to.join(", "),
        cfg.debounce.as_millis()
    )
}

/// Send `msg` to every configured receiver; an error if any failed (all are tried again: a
/// receiver may then see a message twice, which beats never).
async fn deliver(cfg: &Notify, msg: &Outgoing) -> Result<(), String> {
    let mut errors = Vec::new();
    for channel in Channel::all(cfg) {
        if let Err(e) = channel.send(msg).await {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::inbox::Queue;

    fn card(project: &str, tool: &str) -> NewCard {
        NewCard {
            project: project.into(),
            id: format!("per_{project}"),
            kind: CardKind::Permission,
            tool: tool.into(),
        }
    }

    #[test]
    fn a_message_names_project_and_tool_counts_a_batch_and_links_the_inbox() {
        let one = Message::new(&[card("web", "bash")], "https://gw.example:8443/").unwrap();
        assert_eq!(one.url, "https://gw.example:8443/inbox");
        assert_eq!(one.text(), "web: permission to use bash");
        assert_eq!(one.json()["project"], "web");
        assert_eq!(one.json()["id"], "per_web", "the request it is about");
        assert_eq!(one.json()["tool"], "bash");
        assert_eq!(one.json()["kind"], "permission");
        let many: Vec<NewCard> = (0..9).map(|i| card(&format!("p{i}"), "edit")).collect();
        let m = Message::new(&many, "https://gw").unwrap();
        assert_eq!(m.count, 9);
        assert_eq!(m.projects.len(), LISTED, "bounded");
        assert!(m.title().contains("9 requests"));
        assert!(Message::new(&[], "https://gw").is_none());
    }

    #[test]
    fn an_alert_names_project_session_and_reason() {
        let a = Alert {
            project: "web".into(),
            session: "ses_1".into(),
            title: "Fix the login".into(),
            kind: AlertKind::Runaway,
            reason: "the same bash failure twice in a row".into(),
            stopped: true,
        };
        let out = alert(&a, "https://gw/");
        assert_eq!(out.title, "OpenCode: a session of web was stopped");
        assert_eq!(
            out.text,
            "web: \u{201c}Fix the login\u{201d}: the same bash failure twice in a row; stopped"
        );
        assert_eq!(out.json["kind"], "runaway");
        assert_eq!(out.json["session"], "ses_1");
        assert_eq!(out.url, "https://gw/inbox");
        let warn = alert(
            &Alert {
                kind: AlertKind::BudgetWarning,
                stopped: false,
                title: String::new(),
                ..a
            },
            "https://gw",
        );
        assert_eq!(warn.title, "OpenCode: web nears its budget");
        assert!(warn.text.starts_with("web: ses_1: "), "{}", warn.text);
    }

    /// A receiver on 127.0.0.1:0 that answers the statuses in `script` in turn (then 200) and
    /// records each request's head and body.
    async fn receiver(script: Vec<u16>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (seen2, script) = (seen.clone(), Arc::new(Mutex::new(script.into_iter())));
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (seen, script) = (seen2.clone(), script.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (seen, script) = (seen.clone(), script.clone());
                        async move {
                            let head = format!("{:?}", req.headers());
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            seen.lock()
                                .unwrap()
                                .push(format!("{head}\n{}", String::from_utf8_lossy(&body)));
                            let status = script.lock().unwrap().next().unwrap_or(200);
                            let mut r = http::Response::new(Full::new(Bytes::new()));
                            *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        (url, seen)
    }

    async fn wait_for(seen: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = seen.lock().unwrap().clone();
            if got.len() >= n {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} deliveries expected, got {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn requests_in_the_window_go_as_one_message_and_a_failed_delivery_is_retried() {
        let (hook, hook_seen) = receiver(vec![500]).await;
        let (ntfy, ntfy_seen) = receiver(vec![]).await;
        let cfg = Notify {
            webhook: Some(hook),
            ntfy: Some(ntfy),
            debounce: Duration::from_millis(200),
        };
        let q = Queue::new();
        let rx = q.take_receiver().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(pump(
            rx,
            move || Some((cfg.clone(), "https://gw.example:8443".to_string())),
            None,
            || true,
            stop.clone(),
            Duration::from_millis(50),
        ));
        q.push(Notice::Card(card("web", "bash")));
        q.push(Notice::Card(card("api", "edit")));
        // The webhook answered 500 first: the message is sent again, to both receivers.
        let hooks = wait_for(&hook_seen, 2).await;
        let ntfys = wait_for(&ntfy_seen, 1).await;
        for h in &hooks {
            let body: serde_json::Value = serde_json::from_str(h.rsplit_once('\n').unwrap().1).unwrap();
            assert_eq!(body["project"], "web");
            assert_eq!(body["tool"], "bash");
            assert_eq!(body["count"], 2, "one message for both");
            assert_eq!(body["url"], "https://gw.example:8443/inbox");
        }
        assert!(
            ntfys[0].contains("\"title\": \"OpenCode: 2 requests wait for you\""),
            "{}",
            ntfys[0]
        );
        assert!(
            ntfys[0].contains("\"click\": \"https://gw.example:8443/inbox\""),
            "{}",
            ntfys[0]
        );
        assert!(ntfys[0].ends_with("2 new requests in web, api"), "{}", ntfys[0]);
        // Nothing more arrives for those two.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(hook_seen.lock().unwrap().len(), 2);
        stop.cancel();
        task.await.unwrap();
    }
}
