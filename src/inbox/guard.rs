//! The budget guard: a session whose spend reaches its budget while it runs (`on_exceed =
//! "abort"`) is stopped with OpenCode's own abort, once, with the gateway's credential; the
//! stop is logged and audited (`budget_abort`). New prompts on it are refused by the pipeline.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;

use super::{By, Inbox};

/// A session (its root: subagents' spend counts toward it) whose spend reached its limit.
#[derive(Debug)]
pub(crate) struct OverBudget {
    pub project: String,
    pub session: String,
    pub spent: f64,
    pub limit: f64,
}

impl Inbox {
    /// After a session's cost was seen: if its project stops sessions over budget and this one's
    /// spend reached the limit, queue it for the guard (once per session).
    pub(super) fn stop_if_over(&self, cost: &crate::budget::CostSeen) {
        let Some(served) = self.parts.projects.get(&cost.project) else {
            return;
        };
        let budget = served.budget;
        let Some(limit) = budget.session_usd else { return };
        if budget.on_exceed != crate::config::settings::OnExceed::Abort {
            return;
        }
        if let Some((session, spent)) = self.meter.over_session(&cost.project, &cost.session, limit) {
            let _ = self.over_budget.send(OverBudget {
                project: cost.project.clone(),
                session,
                spent,
                limit,
            });
        }
    }
}

pub(super) async fn run(inbox: Arc<Inbox>, mut over: UnboundedReceiver<OverBudget>) {
    loop {
        let o = tokio::select! {
            o = over.recv() => match o { Some(o) => o, None => return },
            _ = inbox.parts.shutdown.cancelled() => return,
        };
        tracing::warn!(project = %o.project, session = %o.session, spent = o.spent, limit = o.limit, "a session reached its budget: stopping it");
        let outcome = inbox.abort_session(&By::Budget, &o.project, &o.session).await;
        if let Err(e) = &outcome {
            tracing::error!(project = %o.project, session = %o.session, error = %e, "a session over its budget could not be stopped");
        }
        inbox.parts.audit.record(
            crate::audit::Record::new("budget_abort")
                .project(&*o.project)
                .field("session", o.session.as_str())
                .field("budget", "session_usd")
                .field("stopped", outcome.is_ok()),
        );
    }
}
