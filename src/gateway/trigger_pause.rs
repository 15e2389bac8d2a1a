//! Pausing a trigger (issue 40): a record per trigger in the state database (shared by every
//! gateway on it), holding why, kept until resumed. Paused by a person (`trigger pause`, the
//! portal: [`steer`]) or by the trigger's own failed runs (`trigger_runs.rs`); a paused trigger's
//! deliveries are refused and its due times skipped.

use std::sync::Arc;

use super::Gateway;
use crate::audit::Record;

/// The records of paused triggers.
fn paused_kind(gw: &Gateway) -> Arc<crate::auth::once::OnceKind<String>> {
    const FOR_EVER: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    let store = gw.browser.sessions.store().clone();
    Arc::new(crate::auth::once::OnceKind::new(
        store,
        "trigger-paused",
        FOR_EVER,
        10_000,
    ))
}

fn paused_key(name: &str) -> [u8; 32] {
    use blake2::{Blake2b256, Digest};
    Blake2b256::digest(format!("paused\0{name}")).into()
}

/// Why trigger `name` is paused (`trigger pause`, the portal, or itself after failed runs), or
/// `None` when it is not. A store that cannot answer counts as paused: an unattended run is not
/// started on a guess.
pub(crate) async fn paused_why(gw: &Gateway, name: &str) -> Option<String> {
    use crate::auth::once::{Seen, Verdict};
    match paused_kind(gw).settle(paused_key(name), |_, _| Verdict::Keep).await {
        Ok(Seen::Nothing | Seen::Expired(_)) => None,
        Ok(Seen::Live(why)) => Some(why),
        Err(_) => Some("the state database did not answer".into()),
    }
}

/// Is trigger `name` paused? ([`paused_why`].)
pub(crate) async fn paused(gw: &Gateway, name: &str) -> bool {
    paused_why(gw, name).await.is_some()
}

/// Pause trigger `name`, saying `why` (`Some`), or resume it (`None`); whether that changed
/// anything (a paused trigger keeps its first reason).
pub(crate) async fn set_paused(gw: &Gateway, name: &str, why: Option<&str>) -> Result<bool, crate::store::StoreError> {
    use crate::auth::once::{Seen, Verdict};
    let kind = paused_kind(gw);
    match why {
        Some(why) => {
            let put = kind.put(paused_key(name), why.to_string()).await?;
            Ok(matches!(put, crate::store::PutOnce::Kept))
        }
        None => {
            let seen = kind.settle(paused_key(name), |_, _| Verdict::Take).await?;
            Ok(matches!(seen, Seen::Live(_)))
        }
    }
}

/// A person's pause (`true`) or resume of trigger `name`, from `from` (`control_socket`,
/// `portal`) as `user` when known: whether it changed anything, audited when it did
/// (`trigger_paused` / `trigger_resumed`).
pub(crate) async fn steer(
    gw: &Gateway,
    name: &str,
    pause: bool,
    from: &str,
    user: Option<&str>,
) -> Result<bool, crate::store::StoreError> {
    let why = match user {
        Some(user) => format!("paused by {user} from the {}", from.replace('_', " ")),
        None => format!("paused from the {}", from.replace('_', " ")),
    };
    let changed = set_paused(gw, name, pause.then_some(why.as_str())).await?;
    if changed {
        let event = if pause { "trigger_paused" } else { "trigger_resumed" };
        let mut record = Record::new(event)
            .field("trigger", name.to_string())
            .field("from", from.to_string());
        if let Some(user) = user {
            record = record.user(user.to_string());
        }
        gw.audit.record(record);
        tracing::info!(target: "security", trigger = name, from, user, paused = pause, "a trigger was steered");
    }
    Ok(changed)
}
