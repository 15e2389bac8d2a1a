//! The guard: what the inbox sees of a session's spend and failures, judged against its project's
//! `[budget]`, and acted on off the event path.
//!
//! - Spend: at `warn_at` of a limit (the session's, the project's today, its prompter's today)
//!   an alert goes out, once; at the limit another, and with `on_exceed = "abort"` each session
//!   whose spend grows on a spent budget is stopped with OpenCode's own abort, once.
//! - Runaways: a session that fails the same way `same_failure` times in a row (a tool with the
//!   same error, or OpenCode's retry of the same provider error), or that is busy for
//!   `max_busy_minutes` without a word from the model, is stopped (`on_runaway = "abort"`) or
//!   only reported (`"notify"`).
//!
//! A stopped session is flagged for the pages ("stopped: retried the same failure twice", with
//! the failure's first line, and a resume button for approvers) until its next turn starts. Each
//! act is logged and audited once (`budget_abort`, `runaway`): a stop by the road that sends it
//! (the gateway's grant, `policy/grants.rs`), a flag without a stop here; alerts never carry a
//! prompt, a command or its output.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use super::model::{Effect, Flag, FlagWhy, Repeat};
use super::{Alert, AlertKind, Call, Inbox, InboxError, Notice, Road};
use crate::budget::CostSeen;
use crate::config::settings::OnExceed;
use crate::policy::grants::{BUDGET_STOP, RESUME, RUNAWAY_STOP};

/// How often busy sessions are looked at for silence.
const SILENCE_TICK: Duration = Duration::from_secs(1);

/// A session to stop (or, with `notify`, only to flag and report).
#[derive(Debug)]
pub(crate) struct Stop {
    pub project: String,
    pub session: String,
    pub why: FlagWhy,
    pub abort: bool,
    /// For the pages: what happened ("retried the same failure twice").
    pub says: String,
    /// For the pages only: the failure's first line, or the budget's figures.
    pub detail: String,
    /// For the alert: why, without a prompt, a command or its output.
    pub reason: String,
}

/// "twice", "3 times".
fn times(n: u32) -> String {
    match n {
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

impl Inbox {
    /// After a session's cost was seen: alert at `warn_at` and at each limit (once), and stop a
    /// session whose spend grows on a spent budget when its project says `abort`.
    pub(super) fn judge_spend(&self, cost: &CostSeen, day: u64) {
        let Some(served) = self.parts.projects.get(&cost.project) else {
            return;
        };
        let b = served.budget;
        if !b.any() && served.user_day_usd.is_none() {
            return;
        }
        let at = self.meter.standing(&cost.project, &cost.session, day);
        let (user, user_spent) = at.user.clone().unzip();
        use crate::budget::meter::{project_key, session_key, user_key};
        let limits = [
            (
                "session_usd",
                session_key(&cost.project, &at.root),
                at.session,
                b.session_usd,
            ),
            (
                "project_day_usd",
                project_key(&cost.project),
                at.project_day,
                b.project_day_usd,
            ),
            (
                "user_day_usd",
                user_key(user.as_deref().unwrap_or_default()),
                user_spent.unwrap_or(0.0),
                served.user_day_usd.filter(|_| user.is_some()),
            ),
        ];
        let stopping = b.on_exceed == OnExceed::Abort;
        let mut spent = None;
        for (name, key, spent_now, limit) in limits {
            // An operator's raise moves the limit.
            let Some(limit) = limit.map(|l| l + self.meter.raised(&key, day)) else {
                continue;
            };
            let figures = format!("${spent_now:.4} of {}, ${limit:.2}", crate::budget::meter::words(name));
            if spent_now >= limit {
                spent.get_or_insert_with(|| figures.clone());
                // With `abort`, the stop's own alert says it.
                if !stopping && self.meter.tell_once(key, "spent") {
                    self.alert(
                        &cost.project,
                        &at.root,
                        AlertKind::BudgetSpent,
                        format!("spent {figures}"),
                        false,
                    );
                }
            } else if spent_now >= b.warn_at * limit && self.meter.tell_once(key, "warn") {
                self.alert(
                    &cost.project,
                    &at.root,
                    AlertKind::BudgetWarning,
                    format!("has spent {figures}"),
                    false,
                );
            }
        }
        if let Some(figures) = spent.filter(|_| stopping)
            && self.meter.stop_once(&cost.project, &at.root)
        {
            let _ = self.stops.send(Stop {
                project: cost.project.clone(),
                session: at.root,
                why: FlagWhy::Budget,
                abort: true,
                says: "spent its budget".into(),
                detail: figures.clone(),
                reason: format!("spent {figures}"),
            });
        }
    }

    /// A session failed as it did before: at its project's `same_failure`, stop or report it.
    pub(super) fn judge_repeat(&self, r: &Repeat) {
        let Some(served) = self.parts.projects.get(&r.project) else {
            return;
        };
        let Some(n) = served.budget.same_failure else { return };
        if r.count != n {
            return;
        }
        let what = match r.failure.tool.as_str() {
            "retry" => "provider error".to_string(),
            tool => format!("{tool} failure"),
        };
        let _ = self.stops.send(Stop {
            project: r.project.clone(),
            session: r.session.clone(),
            why: FlagWhy::SameFailure,
            abort: served.budget.on_runaway == OnExceed::Abort,
            says: format!("retried the same failure {}", times(n)),
            detail: r.failure.first_line.clone(),
            reason: format!("the same {what} {} in a row", times(n)),
        });
    }

    /// Busy sessions whose model said nothing for their project's `max_busy_minutes`.
    fn silent(&self) -> Vec<Stop> {
        let now = super::now_ms();
        let watched = |project: &str| {
            let served = self.parts.projects.get(project)?;
            served.budget.max_busy_ms.map(|ms| (ms, served.budget.on_runaway))
        };
        let quiet = self.lock().silent_since(|p| watched(p).map(|(ms, _)| ms), now);
        quiet
            .into_iter()
            .filter_map(|(project, session, quiet_ms)| {
                let (_, on) = watched(&project)?;
                let minutes = (quiet_ms as f64 / 60_000.0 * 10.0).round() / 10.0;
                let says = format!("busy for {minutes} min without a word from the model");
                Some(Stop {
                    project,
                    session,
                    why: FlagWhy::Silent,
                    abort: on == OnExceed::Abort,
                    reason: says.clone(),
                    says,
                    detail: String::new(),
                })
            })
            .collect()
    }

    /// Queue an alert for the notifier, naming the session by its title.
    fn alert(&self, project: &str, session: &str, kind: AlertKind, reason: String, stopped: bool) {
        let title = (self.lock().projects.get(project))
            .and_then(|p| p.sessions.get(session))
            .map(|s| s.title.clone())
            .unwrap_or_default();
        self.notify.push(Notice::Alert(Alert {
            project: project.into(),
            session: session.into(),
            title,
            kind,
            reason,
            stopped,
        }));
    }

    /// Flag the session, stop it if asked (through `road`, under the guard's grant, which audits
    /// the stop), audit a flag without a stop, and alert.
    async fn act(&self, s: Stop, road: &dyn Road) {
        let flag = |stopped: bool, stopping: bool, says: String| Flag {
            why: s.why,
            stopped,
            stopping,
            says,
            detail: s.detail.clone(),
            at_ms: super::now_ms(),
        };
        // Flagged first (the silence check does not pick it again while the abort is on its
        // way), as stopped only once OpenCode answered the abort: "Resume" is for a session the
        // guard stopped, never one still running (round five, item 12).
        self.update(|m, _| Effect::changed(m.flag(&s.project, &s.session, flag(false, s.abort, s.says.clone()))));
        tracing::warn!(project = %s.project, session = %s.session, why = ?s.why, stopping = s.abort, reason = %s.reason, "the guard flagged a session");
        let (grant, kind) = match s.why {
            FlagWhy::Budget => (&BUDGET_STOP, AlertKind::BudgetSpent),
            FlagWhy::SameFailure | FlagWhy::Silent => (&RUNAWAY_STOP, AlertKind::Runaway),
        };
        let mut stopped = false;
        if s.abort {
            let note = vec![("reason", s.reason.clone())];
            match self.abort_as(road, &s.project, &s.session, Some(grant), note).await {
                Ok(_) => {
                    stopped = true;
                    self.update(|m, _| {
                        Effect::changed(m.flag(&s.project, &s.session, flag(true, true, s.says.clone())))
                    });
                }
                Err(e) => {
                    tracing::error!(project = %s.project, session = %s.session, error = %e, "the guard could not stop a session");
                    let says = format!("{}; could not be stopped: {e}", s.says);
                    self.update(|m, _| Effect::changed(m.flag(&s.project, &s.session, flag(false, false, says))));
                }
            }
        } else {
            self.parts.audit.record(
                crate::audit::Record::new(grant.audit.unwrap_or(grant.name))
                    .project(&*s.project)
                    .field("session", s.session.as_str())
                    .field("reason", s.reason.as_str())
                    .field("stopped", false),
            );
        }
        self.alert(&s.project, &s.session, kind, s.reason, stopped);
    }

    /// The guard stopped this session (its flag says so, set once OpenCode answered the abort)
    /// and it is not running: what "Resume" is for.
    pub(crate) fn stopped_by_guard(&self, project: &str, session: &str) -> bool {
        (self.lock().projects.get(project))
            .and_then(|p| p.sessions.get(session))
            .filter(|s| s.status == super::model::SessionStatus::Idle)
            .and_then(|s| s.flag.as_ref())
            .is_some_and(|f| f.stopped)
    }
}

impl Inbox {
    /// An approver's word on a session the guard stopped: the one fixed continuation, as the
    /// named act "Resume" (`policy/grants.rs::RESUME`) through `road`, the user's: the road
    /// judges the role, the stop, the budgets and audits it (`session_resumed`). A session not
    /// stopped (any more) is answered as gone.
    pub(crate) async fn resume(
        &self,
        road: &dyn Road,
        project: &str,
        session: &str,
    ) -> Result<super::Outcome, InboxError> {
        super::reply::check_id(session)?;
        if !self.stopped_by_guard(project, session) {
            return Ok(super::Outcome::AlreadyAnswered);
        }
        let call = Call {
            grant: Some(&RESUME),
            ..Call::post(project, format!("/session/{session}/prompt_async"), None)
        };
        match super::reply::send(road, call, 300).await? {
            (200..=299, _) => Ok(super::Outcome::Done),
            (404, _) => Ok(super::Outcome::AlreadyAnswered),
            (status, body) => Err(InboxError::Upstream { status, body }),
        }
    }
}

/// The guard's task: stops, silent sessions, and the permission policies' answers
/// (`policy.rs`), each through `road`, the gateway's under the guard's grants.
pub(super) async fn run(
    inbox: Arc<Inbox>,
    mut stops: UnboundedReceiver<Stop>,
    mut acts: UnboundedReceiver<super::policy::Act>,
    road: Box<dyn Road>,
) {
    let mut tick = tokio::time::interval(SILENCE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            s = stops.recv() => match s {
                Some(s) => inbox.act(s, &*road).await,
                None => return,
            },
            Some(a) = acts.recv() => inbox.policy_act(a, &*road).await,
            _ = tick.tick() => {
                for s in inbox.silent() {
                    inbox.act(s, &*road).await;
                }
            }
            _ = inbox.parts.shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::config::settings::Budget;
    use crate::inbox::{Parts, Projects, Served, Server};

    struct One(Budget);

    impl Projects for One {
        fn all(&self) -> Vec<Served> {
            self.get("web").into_iter().collect()
        }
        fn get(&self, name: &str) -> Option<Served> {
            (name == "web").then(|| Served {
                name: "web".into(),
                directory: None,
                server: Server::External(Arc::new(crate::upstream::endpoint::Endpoint::new(
                    "127.0.0.1:9".into(),
                    "opencode",
                    None,
                ))),
                budget: self.0,
                user_day_usd: None,
            })
        }
    }

    /// A road whose abort is answered 200 once the test lets it go.
    struct SlowAbort(Arc<tokio::sync::Semaphore>);

    impl Road for SlowAbort {
        fn name(&self) -> &str {
            "guard"
        }
        fn call<'a>(&'a self, call: Call<'a>) -> crate::inbox::Trip<'a> {
            assert!(call.path.ends_with("/abort"), "{}", call.path);
            Box::pin(async move {
                let _go = self.0.acquire().await.unwrap();
                Ok((http::StatusCode::OK, bytes::Bytes::from_static(b"true")))
            })
        }
    }

    /// "Resume" is for a session the guard stopped: not while its abort is on its way, not while
    /// it runs; once OpenCode answered the abort and the session is idle, yes (round five,
    /// item 12: an approver's Resume reached the model while the guard was still stopping it).
    #[tokio::test]
    async fn a_session_is_stopped_for_resume_only_once_the_abort_is_answered_and_it_is_idle() {
        let (inbox, _stops, _notices) = guarded(Budget::default());
        let inbox = Arc::new(inbox);
        let busy = json!({"type": "session.status", "properties": {"sessionID": "ses_1", "status": {"type": "busy"}}});
        let idle = json!({"type": "session.status", "properties": {"sessionID": "ses_1", "status": {"type": "idle"}}});
        let created = json!({"type": "session.created", "properties": {"info": {"id": "ses_1", "title": "t",
            "time": {"created": 1, "updated": 1}}}});
        inbox.update(|m, now| m.apply("web", &created, now));
        inbox.update(|m, now| m.apply("web", &busy, now));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let stop = Stop {
            project: "web".into(),
            session: "ses_1".into(),
            why: FlagWhy::SameFailure,
            abort: true,
            says: "retried the same failure twice".into(),
            detail: String::new(),
            reason: "the same bash failure twice in a row".into(),
        };
        let acting = {
            let (inbox, road) = (inbox.clone(), SlowAbort(gate.clone()));
            tokio::spawn(async move { inbox.act(stop, &road).await })
        };
        tokio::task::yield_now().await;
        assert!(!inbox.stopped_by_guard("web", "ses_1"), "the abort is not answered yet");
        inbox.update(|m, now| m.apply("web", &idle, now));
        assert!(
            !inbox.stopped_by_guard("web", "ses_1"),
            "idle, but the abort is not answered yet"
        );
        inbox.update(|m, now| m.apply("web", &busy, now));
        gate.add_permits(1);
        acting.await.unwrap();
        assert!(
            !inbox.stopped_by_guard("web", "ses_1"),
            "answered, but the session still runs"
        );
        inbox.update(|m, now| m.apply("web", &idle, now));
        assert!(inbox.stopped_by_guard("web", "ses_1"), "stopped and idle");
        assert!(!inbox.stopped_by_guard("web", "ses_other"));
    }

    fn guarded(budget: Budget) -> (Inbox, UnboundedReceiver<Stop>, tokio::sync::mpsc::Receiver<Notice>) {
        let inbox = Inbox::new(Parts {
            projects: Arc::new(One(budget)),
            connect_timeout: Duration::from_secs(1),
            shutdown: CancellationToken::new(),
            audit: crate::audit::Audit::off(),
            meter: Default::default(),
        });
        let stops = inbox.stops_rx.lock().unwrap().take().unwrap();
        let notices = inbox.notices().unwrap();
        (inbox, stops, notices)
    }

    fn cost(inbox: &Inbox, usd: f64) {
        let e = json!({"type": "session.updated", "properties": {"info": {"id": "ses_1", "title": "Fix the login",
            "cost": usd, "time": {"updated": 1}}}});
        inbox.update(|m, now| m.apply("web", &e, now));
    }

    fn alerts(rx: &mut tokio::sync::mpsc::Receiver<Notice>) -> Vec<Alert> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|n| match n {
                Notice::Alert(a) => a,
                other => panic!("an alert, not {other:?}"),
            })
            .collect()
    }

    /// With `notify`, the warning and the spent budget are each told once, and nothing is
    /// stopped; with `abort`, the spent budget stops the session (the stop tells it).
    #[test]
    fn spend_is_warned_at_told_when_spent_and_stopped_with_abort() {
        let budget = Budget {
            session_usd: Some(1.0),
            warn_at: 0.5,
            on_exceed: OnExceed::Notify,
            ..Default::default()
        };
        let (inbox, mut stops, mut notices) = guarded(budget);
        cost(&inbox, 0.0);
        cost(&inbox, 0.2);
        assert!(alerts(&mut notices).is_empty());
        cost(&inbox, 0.6);
        cost(&inbox, 0.7);
        let a = alerts(&mut notices);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(
            (a[0].kind, a[0].title.as_str()),
            (AlertKind::BudgetWarning, "Fix the login")
        );
        assert!(
            a[0].reason.contains("$0.6000 of this session's budget, $1.00"),
            "{}",
            a[0].reason
        );
        cost(&inbox, 1.1);
        cost(&inbox, 1.2);
        let a = alerts(&mut notices);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!((a[0].kind, a[0].stopped), (AlertKind::BudgetSpent, false));
        assert!(stops.try_recv().is_err(), "notify stops nothing");

        let (inbox, mut stops, mut notices) = guarded(Budget {
            on_exceed: OnExceed::Abort,
            ..budget
        });
        cost(&inbox, 0.0);
        cost(&inbox, 1.5);
        cost(&inbox, 1.6);
        let s = stops.try_recv().unwrap();
        assert_eq!((s.session.as_str(), s.why, s.abort), ("ses_1", FlagWhy::Budget, true));
        assert!(
            s.detail.contains("$1.5000 of this session's budget, $1.00"),
            "{}",
            s.detail
        );
        assert!(stops.try_recv().is_err(), "stopped once");
        assert!(alerts(&mut notices).is_empty(), "the stop tells it");
    }

    /// The second identical failure stops the session (or only flags it with `notify`); the
    /// page gets the failure's first line, the alert only the tool.
    #[test]
    fn the_same_failure_twice_is_a_runaway_and_its_output_stays_out_of_the_alert() {
        let fail = json!({"type": "message.part.updated", "properties": {"sessionID": "ses_1",
            "part": {"type": "tool", "tool": "bash", "state": {"status": "completed", "output": "secret-output: denied\n",
                "metadata": {"exit": 2}}}}});
        for on_runaway in [OnExceed::Abort, OnExceed::Notify] {
            let (inbox, mut stops, _notices) = guarded(Budget {
                same_failure: Some(2),
                on_runaway,
                ..Default::default()
            });
            inbox.update(|m, now| m.apply("web", &fail, now));
            assert!(stops.try_recv().is_err());
            inbox.update(|m, now| m.apply("web", &fail, now));
            let s = stops.try_recv().unwrap();
            assert_eq!(s.abort, on_runaway == OnExceed::Abort);
            assert_eq!(s.says, "retried the same failure twice");
            assert_eq!(s.detail, "exit 2: secret-output: denied");
            assert_eq!(s.reason, "the same bash failure twice in a row");
            inbox.update(|m, now| m.apply("web", &fail, now));
            assert!(stops.try_recv().is_err(), "once per streak");
        }
        assert_eq!(times(3), "3 times");
    }
}
