//! Notifications of new pending requests (`[notify]`): a webhook (POST JSON) and/or an ntfy topic
//! (POST text with `Title` and `Click` headers). A message names the project and the tool and links
//! to `<public_url>/inbox`; it never carries the command, a diff or an approve link (a notification
//! is read on a lock screen and kept by third parties).
//!
//! The inbox queues new requests with `try_send` into a bounded channel (a full channel drops and
//! counts: `inbox::Queue`), so nothing here is ever on a request's path. One task takes the first
//! request, waits `debounce` for more, sends one message counting them, and retries a failed
//! delivery with backoff. Plain `http://` is accepted for loopback receivers only; `https://` is verified against
//! the system's CA bundle (`SSL_CERT_FILE`, else `/etc/ssl/certs/ca-certificates.crt`).

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

pub(crate) mod send;

use crate::config::Notify;
use crate::inbox::{CardKind, NewCard};

const ATTEMPTS: u32 = 6;
const SEND_TIMEOUT: Duration = Duration::from_secs(15);
/// Projects named in one message at most.
const LISTED: usize = 5;

/// One message about `count` new requests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Message {
    pub project: String,
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
            "tool": self.tool,
            "kind": self.kind,
            "count": self.count,
            "projects": self.projects,
            "url": self.url,
        })
    }
}

/// The notifier task: batches, sends, retries; ends with `stop` (the gateway's shutdown). `config`
/// is read when a batch starts (the `[notify]` settings and the public URL, if notifications are
/// on), so a reload applies to the next message.
pub(crate) async fn run(
    rx: mpsc::Receiver<NewCard>,
    config: impl Fn() -> Option<(Notify, String)>,
    stop: tokio_util::sync::CancellationToken,
) {
    pump(rx, config, stop, Duration::from_secs(1)).await;
}

/// Take a request, wait `debounce` for more, send one message, retry it with backoff (from
/// `first_retry`, doubling); until `stop` or the channel closes.
pub(crate) async fn pump(
    mut rx: mpsc::Receiver<NewCard>,
    config: impl Fn() -> Option<(Notify, String)>,
    stop: tokio_util::sync::CancellationToken,
    first_retry: Duration,
) {
    loop {
        let first = tokio::select! {
            c = rx.recv() => match c { Some(c) => c, None => return },
            _ = stop.cancelled() => return,
        };
        let Some((cfg, public_url)) = config() else {
            continue;
        };
        let mut batch = vec![first];
        let until = tokio::time::Instant::now() + cfg.debounce;
        loop {
            tokio::select! {
                c = rx.recv() => match c { Some(c) => batch.push(c), None => break },
                _ = tokio::time::sleep_until(until) => break,
                _ = stop.cancelled() => return,
            }
        }
        let Some(msg) = Message::new(&batch, &public_url) else {
            continue;
        };
        let mut backoff = first_retry;
        for attempt in 1..=ATTEMPTS {
            match deliver(&cfg, &msg).await {
                Ok(()) => {
                    tracing::info!(project = %msg.project, count = msg.count, "notification sent");
                    break;
                }
                Err(why) => {
                    tracing::warn!(reason = %why, attempt, "notification not delivered");
                    if attempt == ATTEMPTS {
                        break;
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.cancelled() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(60));
        }
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
    let mut to = Vec::new();
    if let Some(u) = &cfg.webhook {
        to.push(format!("webhook {}", host(u)));
    }
    if let Some(u) = &cfg.ntfy {
        to.push(format!("ntfy {}", host(u)));
    }
    format!(
        "  notify {}  (new pending requests, debounce {} ms)\n",
        to.join(", "),
        cfg.debounce.as_millis()
    )
}

/// Send `msg` to every configured receiver; an error if any failed (all are tried again: a
/// receiver may then see a message twice, which beats never).
pub(crate) async fn deliver(cfg: &Notify, msg: &Message) -> Result<(), String> {
    let mut errors = Vec::new();
    if let Some(url) = &cfg.webhook {
        let body = Bytes::from(msg.json().to_string());
        if let Err(e) = send::post(url, "application/json", &[], body).await {
            errors.push(format!("webhook: {e}"));
        }
    }
    if let Some(url) = &cfg.ntfy {
        let headers = [
            ("Title", msg.title()),
            ("Click", msg.url.clone()),
            ("Tags", "bell".into()),
        ];
        if let Err(e) = send::post(url, "text/plain; charset=utf-8", &headers, Bytes::from(msg.text())).await {
            errors.push(format!("ntfy: {e}"));
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
        assert_eq!(one.json()["tool"], "bash");
        assert_eq!(one.json()["kind"], "permission");
        let many: Vec<NewCard> = (0..9).map(|i| card(&format!("p{i}"), "edit")).collect();
        let m = Message::new(&many, "https://gw").unwrap();
        assert_eq!(m.count, 9);
        assert_eq!(m.projects.len(), LISTED, "bounded");
        assert!(m.title().contains("9 requests"));
        assert!(Message::new(&[], "https://gw").is_none());
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
            stop.clone(),
            Duration::from_millis(50),
        ));
        q.push(card("web", "bash"));
        q.push(card("api", "edit"));
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
