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

use crate::config::permissions::PermissionPolicy;
use crate::gateway::Gateway;
use crate::http::error::HttpError;
use crate::policy::permission::{Verdict, judge};

/// What an answer's body says: approving (`once` or `always` under either name), and `always`.
fn approves(body: &[u8]) -> (bool, bool) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (false, false);
    };
    let said: Vec<&str> = ["reply", "response"]
        .iter()
        .filter_map(|k| v.get(k).and_then(|a| a.as_str()))
        .collect();
    (
        said.iter().any(|a| matches!(*a, "once" | "always")),
        said.contains(&"always"),
    )
}

fn refused(why: String) -> HttpError {
    tracing::warn!(target: "security", reason = "policy_refuses_answer", "{why}");
    HttpError::Forbidden(why)
}

fn policy_named(gw: &Gateway, name: &str) -> Option<Arc<PermissionPolicy>> {
    gw.state().settings.policies.iter().find(|p| p.name == name).cloned()
}

/// May this answer (`body`) to the permission request `id` of `project` be sent, from a
/// principal whose token carries `own` (a policy name)?
pub(super) fn answer(
    gw: &Gateway,
    project: &str,
    id: Option<&str>,
    own: Option<&str>,
    body: &[u8],
) -> Result<(), HttpError> {
    let (approving, always) = approves(body);
    if !approving {
        return Ok(());
    }
    let asked = id.and_then(|id| gw.inbox.permission_request(project, id));
    let Some(asked) = asked else {
        return match own {
            // Not seen yet (or gone): a policy token approves only what its policy was shown.
            Some(name) => Err(refused(format!(
                "the gateway's policy {name} has not seen permission request {} of project {project}: it cannot be approved with this token",
                id.unwrap_or("-")
            ))),
            None => Ok(()),
        };
    };
    let session = gw.inbox.session_policy(project, &asked.session);
    for name in [session.as_deref(), own].into_iter().flatten() {
        if always {
            return Err(refused(format!(
                "\"always\" is not available under the gateway's policy {name}: answer once"
            )));
        }
        let Some(policy) = policy_named(gw, name) else {
            return Err(refused(format!("the gateway's policy {name} is not configured")));
        };
        match judge(&policy, &asked.permission, &asked.patterns) {
            Verdict::Allow(_) => {}
            Verdict::Deny(r) => return Err(refused(format!("denied by the gateway's policy {name}: {}", r.pattern))),
            Verdict::Reject => {
                return Err(refused(format!(
                    "rejected by the gateway's policy {name}: no rule allows {} {}",
                    asked.permission,
                    asked.patterns.join(", ")
                )));
            }
            Verdict::Ask if own.is_some() => {
                return Err(refused(format!(
                    "the gateway's policy {name} leaves this request to a person in the inbox, not to this token"
                )));
            }
            Verdict::Ask => {}
        }
    }
    Ok(())
}

/// Does this body set session rules that allow (anything but `deny` and `ask`)?
fn widens(v: &serde_json::Value) -> bool {
    v.get("permission").and_then(|p| p.as_array()).is_some_and(|rules| {
        rules
            .iter()
            .any(|r| !matches!(r["action"].as_str(), Some("deny" | "ask")))
    })
}

/// A session's own permission rules (`POST /session`, `PATCH /session/{id}`) may only narrow
/// (`deny`, `ask`) when the session is under a policy: the asker's token's, the session's own
/// (`session`, for a change), or its parent's (`parentID`, for a new child session).
pub(super) fn session_rules(
    gw: &Gateway,
    project: &str,
    own: Option<&str>,
    session: Option<&str>,
    body: &[u8],
) -> Result<(), HttpError> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(()); // not JSON: OpenCode refuses it
    };
    if !widens(&v) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_approves_by_either_name_and_only_deny_and_ask_rules_narrow() {
        assert_eq!(approves(br#"{"reply":"once"}"#), (true, false));
        assert_eq!(approves(br#"{"response":"always"}"#), (true, true));
        assert_eq!(approves(br#"{"reply":"reject","response":"once"}"#), (true, false));
        assert_eq!(approves(br#"{"reply":"reject","message":"no"}"#), (false, false));
        assert_eq!(approves(b"not json"), (false, false));
        // What `opencode run` 1.18.33 sends, and an allow of its own.
        let json = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
        let run = br#"{"permission":[{"permission":"question","action":"deny","pattern":"*"},{"permission":"plan_enter","action":"ask","pattern":"*"}]}"#;
        assert!(!widens(&json(run)));
        assert!(!widens(&json(b"{}")));
        assert!(widens(&json(
            br#"{"permission":[{"permission":"bash","action":"allow","pattern":"*"}]}"#
        )));
        assert!(widens(&json(
            br#"{"permission":[{"permission":"bash","pattern":"*"}]}"#
        )));
    }
}
