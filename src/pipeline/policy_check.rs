//! A permission policy at the proxy (issue 40): what a client's request may not do to a session
//! under a policy, judged on the request's small body in the forward (the phase that reads it),
//! and the session a policy token makes, kept once its id is known.
//!
//! - A permission answer (`POST /permission/{id}/reply`, `/session/{id}/permissions/{id}`) that
//!   approves (`once`, `always`) a request of a session under a policy, or made with a token
//!   that carries one, is refused before OpenCode unless the policy allows it: a deny, or an
//!   `otherwise = "reject"`, refuses it for everyone; a request the policy leaves to a person
//!   (`otherwise = "ask"`) may be approved by a person, never by the policy's own token
//!   (`opencode run --attach … --auto` answers every request it sees with `once`). `always` is
//!   refused in such a session: OpenCode would then approve later requests of the whole project
//!   without asking, and the gateway would never see them.
//! - A session made with a policy token may not bring its own `allow` rules
//!   (`POST /session {"permission": [...]}`): OpenCode would then never ask. `deny` and `ask`
//!   rules only narrow (`opencode run` sends three `deny` rules of its own).
//!
//! The gateway's own acts (its policy's answers, its control socket's) are not judged here.

use std::sync::Arc;
use std::time::Duration;

use crate::config::permissions::PermissionPolicy;
use crate::gateway::Gateway;
use crate::http::error::HttpError;
use crate::policy::permission::{Verdict, judge};

/// How long an approval waits for the gateway's watch to see the request it answers, while
/// sessions are under a policy (a client's own event stream may be quicker than the watch).
const UNSEEN_WAIT: Duration = Duration::from_secs(3);

fn refused(why: String) -> HttpError {
    tracing::warn!(target: "security", reason = "policy_refuses_answer", "{why}");
    HttpError::Forbidden(why)
}

fn policy_named(gw: &Gateway, name: &str) -> Option<Arc<PermissionPolicy>> {
    gw.state().settings.policies.iter().find(|p| p.name == name).cloned()
}

/// May this answer (`body`, the one reading) to the permission request `id` of `project` be
/// sent, from a principal whose token carries `own` (a policy name)?
///
/// An approval of a request the gateway has not judged is never let through while a policy
/// could own it: a policy token's is refused at once; another principal's waits (at most
/// [`UNSEEN_WAIT`]) for the gateway's watch to see the request, then is judged like any other,
/// or refused when it never came; one the gateway saw answered (or is answering) is refused.
pub(super) async fn answer(
    gw: &Gateway,
    project: &str,
    id: Option<&str>,
    own: Option<&str>,
    body: &serde_json::Value,
) -> Result<(), HttpError> {
    let said = crate::policy::permission::answer(body);
    if !said.approves {
        return Ok(());
    }
    let id = id.unwrap_or("-");
    let asked = match gw.inbox.approvable(project, id, own, UNSEEN_WAIT).await {
        Ok(Some(asked)) => asked,
        Ok(None) => return Ok(()),
        Err(why) => return Err(refused(why)),
    };
    let session = gw.inbox.session_policy(project, &asked.session);
    for name in [session.as_deref(), own].into_iter().flatten() {
        if said.always {
            return Err(refused(format!(
                "\"always\" is not available under the gateway's policy {name}: answer once"
            )));
        }
        let Some(policy) = policy_named(gw, name) else {
            return Err(refused(format!("the gateway's policy {name} is not configured")));
        };
        judged(gw, &policy, &asked, own)?;
    }
    Ok(())
}

/// The policy's verdict on `asked`, for an approval by a person or by the policy's own token.
fn judged(
    gw: &Gateway,
    policy: &PermissionPolicy,
    asked: &crate::inbox::Asked,
    own: Option<&str>,
) -> Result<(), HttpError> {
    let name = &policy.name;
    let patterns = gw.inbox.judged_patterns(asked);
    match judge(policy, &asked.permission, &patterns) {
        Verdict::Allow(_) => Ok(()),
        Verdict::Deny(r) => Err(refused(format!("denied by the gateway's policy {name}: {}", r.pattern))),
        Verdict::Reject => Err(refused(format!(
            "rejected by the gateway's policy {name}: no rule allows {} {}",
            asked.permission,
            patterns.join(", ")
        ))),
        Verdict::Ask if own.is_some() => Err(refused(format!(
            "the gateway's policy {name} leaves this request to a person in the inbox, not to this token"
        ))),
        Verdict::Ask => Ok(()),
    }
}

/// A session's own permission rules (`POST /session`, `PATCH /session/{id}`) may only narrow
/// (`deny`, `ask`) when the session is under a policy: the asker's token's, the session's own
/// (`session`, for a change), or its parent's (`parentID`, for a new child session).
pub(super) fn session_rules(
    gw: &Gateway,
    project: &str,
    own: Option<&str>,
    session: Option<&str>,
    v: &serde_json::Value,
) -> Result<(), HttpError> {
    if !crate::policy::permission::allows_of_its_own(v) {
        return Ok(());
    }
    let parent = v.get("parentID").and_then(|p| p.as_str());
    let under = [session, parent]
        .into_iter()
        .flatten()
        .find_map(|s| gw.inbox.session_policy(project, s));
    match own.or(under.as_deref()) {
        Some(policy) => Err(refused(format!(
            "a session under the gateway's policy {policy} cannot have allow rules of its own (only \"deny\" or \"ask\")"
        ))),
        None => Ok(()),
    }
}

/// Keep which policy the session a policy token just made answers by: in the inbox at once
/// (before the client has its id) and in the state database (so it outlives a restart).
pub(super) async fn keep(gw: &Gateway, project: &str, session: &str, policy: &str) {
    gw.inbox.keep_session_policy(session, policy);
    let store = gw.browser.sessions.store().clone();
    let record = crate::store::SessionPolicy {
        session: session.into(),
        project: project.into(),
        policy: policy.into(),
    };
    let at = crate::auth::tokens::now_unix();
    let _ = crate::store::blocking("keeping a session's policy", move || {
        store.set_session_policy(&record, at)
    })
    .await;
    tracing::info!(project, session, policy, "a session under a permission policy");
}
