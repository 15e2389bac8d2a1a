//! Web Push to the control room's devices (issue 26): for a batch of new pending requests, one
//! message to each subscribed device of each user who may answer one of them (approvers and
//! above in its project). A message names the project and the tool and opens `/inbox`; it never
//! carries the command and never an answer. Only subscriptions made in a login that is still
//! live are sent to (a logout, an expiry, a new password or a revoked device ends them). Each delivery is a task of its own, retried with
//! backoff, so a slow or failing push service never holds the notifier, let alone a request; a
//! subscription the push service says is gone (404, 410) is deleted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;

use super::push_endpoint;
use super::send::{Via, exchange};
use super::webpush::{self, Vapid};
use crate::inbox::{CardKind, NewCard};
use crate::store::{PushStore, PushSubscription};

const ATTEMPTS: u32 = 4;
/// How long a push service keeps an undelivered message (seconds): a request that waited an
/// hour is better seen in the inbox.
const TTL: &str = "3600";

/// What the sender needs of the running gateway.
pub(crate) trait Audience: Send + Sync {
    /// May `user` answer requests in `project` (approver or above)?
    fn may_answer(&self, user: &str, project: &str) -> bool;
    /// `[push] allow_private_endpoints`.
    fn allow_private(&self) -> bool;
    /// VAPID's subject: how a push service may reach the operator (the public URL).
    fn subject(&self) -> String;
}

pub(crate) struct Pusher {
    store: Arc<dyn PushStore>,
    audience: Arc<dyn Audience>,
    state_dir: std::path::PathBuf,
    vapid: OnceLock<Result<Arc<Vapid>, String>>,
    /// Deliveries by how they ended, for `/metrics`: accepted, gone (deleted), given up.
    pub(crate) sent: AtomicU64,
    pub(crate) gone: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl Pusher {
    pub(crate) fn new(store: Arc<dyn PushStore>, audience: Arc<dyn Audience>, state_dir: &std::path::Path) -> Pusher {
        Pusher {
            store,
            audience,
            state_dir: state_dir.to_path_buf(),
            vapid: OnceLock::new(),
            sent: AtomicU64::new(0),
            gone: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// The gateway's VAPID key pair, made on first use.
    pub(crate) fn vapid(&self) -> Result<Arc<Vapid>, String> {
        self.vapid
            .get_or_init(|| {
                Vapid::load_or_create(&self.state_dir)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// Send `batch` to every subscribed device whose user may answer one of its requests.
    pub(crate) async fn send(self: &Arc<Self>, batch: &[NewCard]) {
        let store = self.store.clone();
        let now = crate::auth::tokens::now_unix();
        let subs = match tokio::task::spawn_blocking(move || store.push_subscriptions(now)).await {
            Ok(Ok(subs)) => subs,
            Ok(Err(e)) => return tracing::error!(error = %e, "cannot read the push subscriptions"),
            Err(_) => return,
        };
        if subs.is_empty() {
            return;
        }
        let vapid = match self.vapid() {
            Ok(v) => v,
            Err(e) => return tracing::error!(error = %e, "no VAPID key: push notifications are not sent"),
        };
        for sub in subs {
            let theirs: Vec<&NewCard> = batch
                .iter()
                .filter(|c| self.audience.may_answer(&sub.user, &c.project))
                .collect();
            let Some(payload) = payload(&theirs) else { continue };
            let body = match webpush::encrypt(&sub.p256dh, &sub.auth, payload.to_string().as_bytes()) {
                Ok(b) => Bytes::from(b),
                Err(e) => {
                    tracing::warn!(endpoint = %webpush::endpoint_tag(&sub.endpoint), error = %e, "a push subscription cannot take a message");
                    continue;
                }
            };
            tokio::spawn(self.clone().deliver(sub, body, vapid.clone()));
        }
    }

    /// POST one sealed message, again with backoff while the push service fails.
    async fn deliver(self: Arc<Self>, sub: PushSubscription, body: Bytes, vapid: Arc<Vapid>) {
        let tag = webpush::endpoint_tag(&sub.endpoint);
        let mut backoff = Duration::from_secs(1);
        for attempt in 1..=ATTEMPTS {
            match self.post(&sub.endpoint, body.clone(), &vapid).await {
                Ok(200..=299) => {
                    tracing::info!(endpoint = %tag, user = %sub.user, "push notification sent");
                    self.sent.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Ok(404 | 410) => {
                    self.gone.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(endpoint = %tag, user = %sub.user, "the push service says the subscription is gone: deleted");
                    // This user's subscription only: each user's row of an endpoint is theirs.
                    let (store, endpoint, user) = (self.store.clone(), sub.endpoint.clone(), sub.user.clone());
                    let _ = tokio::task::spawn_blocking(move || store.delete_push(&endpoint, Some(&user))).await;
                    return;
                }
                Ok(status) => tracing::warn!(endpoint = %tag, status, attempt, "push notification not delivered"),
                Err(e) => tracing::warn!(endpoint = %tag, error = %e, attempt, "push notification not delivered"),
            }
            if attempt == ATTEMPTS {
                self.failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff *= 4;
        }
    }

    async fn post(&self, endpoint: &str, body: Bytes, vapid: &Vapid) -> Result<u16, String> {
        let uri = push_endpoint::parse(endpoint)?;
        let addr = push_endpoint::resolve(&uri, self.audience.allow_private()).await?;
        let audience = webpush::audience(&uri).ok_or("no host")?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let headers = [
            (
                "authorization",
                vapid.authorization(&audience, &self.audience.subject(), now),
            ),
            ("content-encoding", "aes128gcm".to_string()),
            ("ttl", TTL.to_string()),
            ("urgency", "high".to_string()),
        ];
        // The address just checked, not what the name resolves to a moment later.
        let via = Via {
            roots: None,
            addr: Some(addr),
        };
        let (status, _) = exchange(
            http::Method::POST,
            endpoint,
            Some("application/octet-stream"),
            &headers,
            body,
            0,
            via,
        )
        .await?;
        Ok(status.as_u16())
    }
}

/// What a device is told of `cards` (its user's share of a batch): the project and the tool of
/// the first, how many there are, and where to look. `None` when none is theirs.
fn payload(cards: &[&NewCard]) -> Option<serde_json::Value> {
    let first = cards.first()?;
    let what = match first.kind {
        CardKind::Permission => format!("permission to use {}", first.tool),
        CardKind::Question => "a question".to_string(),
    };
    let (title, body) = match cards.len() {
        1 => (
            format!("{} waits for you", first.project),
            format!("{}: {what}", first.project),
        ),
        n => (
            format!("{n} requests wait for you"),
            format!("{}: {what}, and {} more", first.project, n - 1),
        ),
    };
    Some(serde_json::json!({
        "title": title,
        "body": body,
        "url": "/inbox",
        "project": first.project,
        "tool": first.tool,
        "kind": first.kind,
        "count": cards.len(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_project_tool_and_count() {
        let card = |project: &str, tool: &str| NewCard {
            project: project.into(),
            id: "per_1".into(),
            kind: CardKind::Permission,
            tool: tool.into(),
        };
        let (a, b) = (card("web", "bash"), card("api", "edit"));
        assert!(payload(&[]).is_none());
        let one = payload(&[&a]).unwrap();
        assert_eq!(one["title"], "web waits for you");
        assert_eq!(one["body"], "web: permission to use bash");
        assert_eq!((&one["url"], &one["count"]), (&"/inbox".into(), &1.into()));
        let two = payload(&[&a, &b]).unwrap();
        assert_eq!(two["title"], "2 requests wait for you");
        assert_eq!(two["body"], "web: permission to use bash, and 1 more");
    }
}
