//! The gateway's answers to the permission requests of sessions under a permission policy
//! (issue 40; `[[policy]]`, judged by `policy/permission.rs`). A session made with a token that
//! carries a policy is kept here (and in the state database, by the pipeline); so are its
//! subagents' sessions, through their parent. Each new permission request of such a session is
//! judged off the event path, by the guard's task: allowed ones are answered "once" at once,
//! denied ones and (with `otherwise = "reject"`) unmatched ones rejected with a message the agent
//! reads; with `otherwise = "ask"` the card stays for a person until `ask_timeout`, then it is
//! rejected. Every answer goes the one road as the gateway under `POLICY_ANSWER`, which audits it
//! once (`policy_answer`, with the policy and the rule).

use super::paths::Asked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::{Inbox, Road};
use crate::policy::grants::POLICY_ANSWER;
use crate::policy::permission::{Verdict, judge};

/// How deep a subagent's session may be under the session that carries the policy.
const MAX_DEPTH: usize = 16;

/// A permission request to judge (or, once its `ask_timeout` passed, to reject).
#[derive(Debug)]
pub(crate) struct Act {
    project: String,
    id: String,
    timed_out: bool,
}

/// Sessions under a policy, and the queue of requests to judge.
pub(crate) struct Desk {
    sessions: Mutex<HashMap<String, Arc<str>>>,
    tx: UnboundedSender<Act>,
    pub(super) rx: Mutex<Option<UnboundedReceiver<Act>>>,
}

impl Default for Desk {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Desk {
            sessions: Mutex::new(HashMap::new()),
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl Desk {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<str>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `30m`, `2s`, `500ms`: as the config writes a duration.
fn words(d: Duration) -> String {
    match (d.as_secs(), d.subsec_millis()) {
        (s, 0) if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{}ms", d.as_millis()),
    }
}

impl Inbox {
    /// `session` (of `project`) was made under `policy`: its requests, and its subagents', are
    /// the policy's to answer.
    pub(crate) fn keep_session_policy(&self, session: &str, policy: &str) {
        self.desk.sessions().insert(session.to_string(), policy.into());
    }

    /// Is any session under a policy (else nothing here needs a request's body)?
    pub(crate) fn any_session_policy(&self) -> bool {
        !self.desk.sessions().is_empty()
    }

    /// The policy `session` is under: its own, or the nearest parent's (a subagent's session).
    pub(crate) fn session_policy(&self, project: &str, session: &str) -> Option<Arc<str>> {
        let model = self.lock();
        let kept = self.desk.sessions();
        let mut at = session.to_string();
        for _ in 0..MAX_DEPTH {
            if let Some(p) = kept.get(&at) {
                return Some(p.clone());
            }
            let parent = model.projects.get(project)?.sessions.get(&at)?.parent_id.clone()?;
            at = parent;
        }
        None
    }

    /// The pending permission request `id` of `project`, as the model holds it.
    pub(crate) fn permission_request(&self, project: &str, id: &str) -> Option<Asked> {
        let model = self.lock();
        let p = model.projects.get(project)?.permissions.get(id)?;
        Some(Asked {
            project: project.to_string(),
            session: p.session_id.clone(),
            permission: p.tool.clone(),
            patterns: p.patterns.clone(),
            filepath: p.filepath.clone(),
            command: p.command.clone(),
        })
    }

    /// The patterns a policy judges for `asked`: OpenCode's own; for a file tool's path that
    /// crosses a symbolic link, the path it really reaches too; for a shell command whose patterns
    /// may not hold all it does, the whole command line too (`paths.rs`); so that every one must
    /// be allowed and a deny of any wins.
    pub(crate) fn judged_patterns(&self, asked: &Asked) -> Vec<String> {
        let root = self.parts.projects.get(&asked.project).and_then(|s| s.directory);
        super::paths::judged(asked, root.as_deref().map(std::path::Path::new))
    }

    /// Was permission request `id` of `project` answered, or is the gateway answering it now (its
    /// policy's reply on its way)? Kept as long as the inbox keeps resolved cards.
    pub(crate) fn permission_answered(&self, project: &str, id: &str) -> bool {
        self.lock().answered_or_answering(project, id)
    }

    /// The pending permission request `id` of `project`, waiting up to `within` for the inbox's
    /// watch to see it (a client's own stream may bring it sooner than the gateway's): `None`
    /// when it was never seen, or was answered meanwhile.
    pub(crate) async fn await_permission_request(&self, project: &str, id: &str, within: Duration) -> Option<Asked> {
        let mut changes = self.changes();
        let wait = async {
            loop {
                if let Some(asked) = self.permission_request(project, id) {
                    return Some(asked);
                }
                if self.permission_answered(project, id) {
                    return None;
                }
                changes.changed().await.ok()?;
            }
        };
        tokio::time::timeout(within, wait).await.ok().flatten()
    }

    /// The request an approval of `id` (from a principal whose token carries `own`) is judged
    /// on: the pending one the inbox holds; one not seen yet, once the watch sees it (waiting at
    /// most `within`) while any session is under a policy; `None` when no policy can own it
    /// (passed as before: no session is under one and the token carries none); `Err` with the
    /// reason when it was answered already, never came, or the token's policy never saw it.
    pub(crate) async fn approvable(
        &self,
        project: &str,
        id: &str,
        own: Option<&str>,
        within: Duration,
    ) -> Result<Option<Asked>, String> {
        if let Some(asked) = self.permission_request(project, id) {
            return Ok(Some(asked));
        }
        let answered = || format!("permission request {id} of project {project} was answered already");
        if self.permission_answered(project, id) {
            return Err(answered());
        }
        if let Some(name) = own {
            return Err(format!(
                "the gateway's policy {name} has not seen permission request {id} of project {project}: it cannot be approved with this token"
            ));
        }
        if !self.any_session_policy() {
            return Ok(None);
        }
        match self.await_permission_request(project, id, within).await {
            Some(asked) => Ok(Some(asked)),
            None if self.permission_answered(project, id) => Err(answered()),
            None => Err(format!(
                "the gateway has not seen permission request {id} of project {project}: while sessions are under its policies it approves only what it has judged; try again in a moment"
            )),
        }
    }

    /// A new permission request: judged by the guard's task when its session is under a policy.
    pub(super) fn judge_permission(&self, project: &str, id: &str) {
        if self.desk.sessions().is_empty() {
            return;
        }
        let _ = self.desk.tx.send(Act {
            project: project.into(),
            id: id.into(),
            timed_out: false,
        });
    }

    /// Judge one request and answer it through `road` (or leave it for a person, with a timer).
    pub(super) async fn policy_act(&self, act: Act, road: &dyn Road) {
        let Some(asked) = self.permission_request(&act.project, &act.id) else {
            return; // answered meanwhile
        };
        let Some(name) = self.session_policy(&act.project, &asked.session) else {
            return;
        };
        let policy = self.parts.projects.policy(&name);
        let (reply, rule) = match (&policy, act.timed_out) {
            (None, _) => (
                Err(format!(
                    "rejected: the gateway's policy {name} is not configured any more"
                )),
                "policy missing".to_string(),
            ),
            (Some(p), true) => (
                Err(format!(
                    "rejected by the gateway's policy {name}: nobody answered within {}",
                    words(p.ask_timeout)
                )),
                "otherwise: ask (timed out)".to_string(),
            ),
            (Some(p), false) => {
                let patterns = self.judged_patterns(&asked);
                let verdict = judge(p, &asked.permission, &patterns);
                let reply = match &verdict {
                    Verdict::Allow(_) => Ok(()),
                    Verdict::Deny(r) => Err(format!("denied by the gateway's policy {name}: {}", r.pattern)),
                    Verdict::Reject => Err(format!(
                        "rejected by the gateway's policy {name}: no rule allows {} {}",
                        asked.permission,
                        patterns.join(", ")
                    )),
                    Verdict::Ask => {
                        self.ask_a_person(act, p.ask_timeout);
                        return;
                    }
                };
                (reply, verdict.rule())
            }
        };
        let body = match &reply {
            Ok(()) => serde_json::json!({"reply": "once"}),
            Err(message) => serde_json::json!({"reply": "reject", "message": message}),
        };
        let note = vec![
            ("policy", name.to_string()),
            ("rule", rule),
            ("session", asked.session.clone()),
        ];
        tracing::info!(project = %act.project, id = %act.id, policy = %name, once = reply.is_ok(), "the gateway answers a permission request by its policy");
        if let Err(e) = self
            .reply_permission_as(road, (&act.project, &act.id), body, &POLICY_ANSWER, note)
            .await
        {
            tracing::error!(project = %act.project, id = %act.id, error = %e, "the gateway could not answer a permission request by its policy");
        }
    }

    /// Leave the request to a person; reject it when `timeout` has passed unanswered.
    fn ask_a_person(&self, act: Act, timeout: Duration) {
        tracing::info!(project = %act.project, id = %act.id, timeout = %words(timeout), "a policy leaves a permission request to a person");
        let tx = self.desk.tx.clone();
        let shutdown = self.parts.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(timeout) => {
                    let _ = tx.send(Act { timed_out: true, ..act });
                }
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A subagent's session (OpenCode's `parentID`) is under its parent's policy, however deep;
    /// a session of no policy, and one of another project, are under none; a new permission
    /// request is queued for judgement only while some session is under a policy.
    #[test]
    fn a_subagents_session_is_under_its_parents_policy() {
        let inbox = crate::inbox::detached();
        let mut acts = inbox.desk.rx.lock().unwrap().take().unwrap();
        let asked = json!({"type": "permission.asked", "properties": {"id": "per_1", "sessionID": "ses_c2",
            "permission": "bash", "patterns": ["ls"], "always": ["ls *"], "metadata": {"command": "ls"}}});
        inbox.update(|m, now| m.apply("web", &asked, now));
        assert!(acts.try_recv().is_err(), "no session is under a policy yet");
        for (id, parent) in [
            ("ses_root", None),
            ("ses_c1", Some("ses_root")),
            ("ses_c2", Some("ses_c1")),
        ] {
            let e = json!({"type": "session.created", "properties": {"info": {"id": id, "parentID": parent,
                "title": id, "time": {"created": 1, "updated": 1}}}});
            inbox.update(|m, now| m.apply("web", &e, now));
        }
        inbox.keep_session_policy("ses_root", "ci");
        assert_eq!(inbox.session_policy("web", "ses_c2").as_deref(), Some("ci"));
        assert_eq!(inbox.session_policy("web", "ses_root").as_deref(), Some("ci"));
        assert_eq!(inbox.session_policy("api", "ses_c2"), None, "another project's model");
        assert_eq!(inbox.session_policy("web", "ses_other"), None);
        let asked = json!({"type": "permission.asked", "properties": {"id": "per_2", "sessionID": "ses_c2",
            "permission": "bash", "patterns": ["ls"], "always": ["ls *"], "metadata": {"command": "ls"}}});
        inbox.update(|m, now| m.apply("web", &asked, now));
        let act = acts.try_recv().unwrap();
        assert_eq!(
            (act.project.as_str(), act.id.as_str(), act.timed_out),
            ("web", "per_2", false)
        );
        let r = inbox.permission_request("web", "per_2").unwrap();
        assert_eq!(
            (r.session.as_str(), r.permission.as_str(), r.patterns),
            ("ses_c2", "bash", vec!["ls".to_string()])
        );
    }

    /// An approval that beats the gateway's watch to a request (round five, item 10: 1 of 8
    /// races approved a denied `rm`) waits for the watch to see it and is then judged; one the
    /// watch never sees, or saw answered, is refused; with no session under a policy, nothing
    /// waits.
    #[tokio::test]
    async fn an_approval_the_gateway_has_not_judged_waits_for_the_request_or_is_refused() {
        let inbox = std::sync::Arc::new(crate::inbox::detached());
        let within = Duration::from_secs(5);
        assert_eq!(
            inbox
                .approvable("web", "per_1", None, within)
                .await
                .map(|a| a.is_some()),
            Ok(false)
        );
        inbox.keep_session_policy("ses_1", "ci");
        let waiting = {
            let inbox = inbox.clone();
            tokio::spawn(async move { inbox.approvable("web", "per_1", None, within).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "it waits for the watch");
        let asked = json!({"type": "permission.asked", "properties": {"id": "per_1", "sessionID": "ses_1",
            "permission": "bash", "patterns": ["rm -rf x"], "always": ["rm *"], "metadata": {"command": "rm -rf x"}}});
        inbox.update(|m, now| m.apply("web", &asked, now));
        let got = waiting.await.unwrap().unwrap().expect("judged on the request");
        assert_eq!(
            (got.session.as_str(), got.patterns),
            ("ses_1", vec!["rm -rf x".to_string()])
        );
        // The policy answered it: remembered as answered.
        let replied = json!({"type": "permission.replied", "properties": {"sessionID": "ses_1", "requestID": "per_1", "reply": "reject"}});
        inbox.update(|m, now| m.apply("web", &replied, now));
        let why = inbox.approvable("web", "per_1", None, within).await.unwrap_err();
        assert!(why.contains("was answered already"), "{why}");
        // Never seen: refused once the wait is over.
        let why = inbox
            .approvable("web", "per_9", None, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(why.contains("has not seen permission request per_9"), "{why}");
        let why = inbox.approvable("web", "per_8", Some("ci"), within).await.unwrap_err();
        assert!(why.contains("cannot be approved with this token"), "{why}");
    }

    #[test]
    fn timeouts_are_said_as_the_config_writes_them() {
        assert_eq!(words(Duration::from_secs(1800)), "30m");
        assert_eq!(words(Duration::from_secs(7200)), "2h");
        assert_eq!(words(Duration::from_secs(2)), "2s");
        assert_eq!(words(Duration::from_millis(1500)), "1500ms");
    }
}
