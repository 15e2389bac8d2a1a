//! Triggers' runs (issue 40): each firing of a `[[trigger]]` (a webhook delivery, a schedule's
//! due time, an operator's `trigger fire`), begun as `running` once its session is known and
//! ended once, by whichever gateway on the store sees the session's turn end first. Read by the
//! portal's trigger cards, `trigger list`, and the self-pause after failed runs in a row. The
//! newest [`KEPT_PER_TRIGGER`] of each trigger are kept.

use super::StoreError;
use super::backend::{Backend, Record, all, record};
use super::statements as st;

/// Runs kept per trigger (older ones are deleted as new ones begin).
pub(crate) const KEPT_PER_TRIGGER: i64 = 50;

/// One run of a trigger.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TriggerRun {
    /// The gateway's own id for the run (random).
    pub id: String,
    pub trigger_name: String,
    pub project: String,
    /// The session it prompted (none: the firing failed before there was one).
    pub session: Option<String>,
    /// The delivery's id (GitHub's, the body's MAC), `schedule:<due>` or `manual:<ms>`.
    pub delivery: String,
    /// Unix milliseconds.
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// `running`, `ok` or `failed`.
    pub outcome: String,
    /// Why it failed (the guard's words, OpenCode's error, the firing's refusal); empty when ok.
    pub detail: String,
    /// What its session had cost when it ended (subagents' included), in US dollars.
    pub usd: Option<f64>,
}

record!(TriggerRun {
    id,
    trigger_name,
    project,
    session,
    delivery,
    started_at,
    ended_at,
    outcome,
    detail,
    usd,
});

/// The runs' half of the store.
pub(crate) trait RunStore: Send + Sync {
    /// Keep a run (begun, or already over); the trigger's runs past the newest
    /// [`KEPT_PER_TRIGGER`] go.
    fn add_trigger_run(&self, run: &TriggerRun) -> Result<(), StoreError>;
    /// End run `id` at `at` with `outcome`, if it is still running: true when this call ended it
    /// (of several gateways seeing the same turn end, one does).
    fn end_trigger_run(
        &self,
        id: &str,
        at: i64,
        outcome: &str,
        detail: &str,
        usd: Option<f64>,
    ) -> Result<bool, StoreError>;
    /// The newest `n` runs of `trigger`, newest first.
    fn trigger_runs(&self, trigger: &str, n: i64) -> Result<Vec<TriggerRun>, StoreError>;
    /// The runs still running in `session`.
    fn running_in(&self, session: &str) -> Result<Vec<TriggerRun>, StoreError>;
}

impl<B: Backend> RunStore for B {
    fn add_trigger_run(&self, run: &TriggerRun) -> Result<(), StoreError> {
        self.write_all("add_trigger_run", |c| {
            c.execute(&st::TRIGGER_RUN_INSERT, &run.fields())?;
            c.execute(&st::TRIGGER_RUNS_PRUNE, &[&run.trigger_name, &KEPT_PER_TRIGGER])
                .map(drop)
        })
    }

    fn end_trigger_run(
        &self,
        id: &str,
        at: i64,
        outcome: &str,
        detail: &str,
        usd: Option<f64>,
    ) -> Result<bool, StoreError> {
        self.write("end_trigger_run", |c| {
            let n = c.execute(&st::TRIGGER_RUN_END, &[&id, &at, &outcome, &detail, &usd])?;
            Ok(n == 1)
        })
    }

    fn trigger_runs(&self, trigger: &str, n: i64) -> Result<Vec<TriggerRun>, StoreError> {
        self.on_connection(|c| all(c, &st::TRIGGER_RUNS_OF, &[&trigger, &n]))
    }

    fn running_in(&self, session: &str) -> Result<Vec<TriggerRun>, StoreError> {
        self.on_connection(|c| all(c, &st::TRIGGER_RUNS_RUNNING_IN, &[&session]))
    }
}
