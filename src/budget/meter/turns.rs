//! A budget near its end admits one prompt at a time. A prompt's cost is known only once its
//! turn ends, so every prompt admitted before that was judged on the spend before it: round four
//! sent 16 prompts at once with $1 of $2 left, and all 16 ran ($17 spent). Now, once what is left
//! of a limit is no more than its project's largest turn so far (or `1 - warn_at` of the limit,
//! before any turn was seen), that limit is held by the one prompt it admits until the prompt's
//! session goes idle (its turn's cost is then in), its request fails, or [`HOLD_MAX`] passes;
//! another prompt counting against it meanwhile gets 429. So a limit is overshot by about one
//! turn (the largest seen, unless a turn is larger than any before), however many prompts race.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Meter, project_key, session_key, user_key};
use crate::config::settings::Budget;

/// How long a hold may last without its session going idle (events lost, a turn without end):
/// then the next prompt may go.
pub(crate) const HOLD_MAX: Duration = Duration::from_secs(15 * 60);

/// The limits held by running turns, and how large turns have been.
#[derive(Default)]
pub(super) struct Turns {
    /// A limit's key → the prompt holding it.
    held: HashMap<String, Held>,
    /// Sessions with a turn running since a prompt: their spend when it was admitted.
    started: HashMap<(String, String), f64>,
    /// The largest turn seen per project (USD).
    largest: HashMap<String, f64>,
    next: u64,
}

/// Turns remembered at most (sessions prompted and not yet idle); past it the oldest are
/// forgotten, which only makes a turn's size unknown.
const MAX_STARTED: usize = 10_000;

struct Held {
    id: u64,
    project: String,
    session: String,
    since: Instant,
}

/// A prompt admitted on a limit near its end: hand it back with [`Meter::turn_answered`].
#[derive(Debug)]
pub(crate) struct Ticket(u64);

/// A limit near its end is held by another running turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Busy {
    pub budget: &'static str,
    pub spent: f64,
    pub limit: f64,
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "budget.{} is nearly spent (${:.4} of ${:.2}): one prompt at a time until the running one's cost is known; try again when it ends",
            self.budget, self.spent, self.limit
        )
    }
}

/// The prompt's question: which limits it counts against.
pub(crate) struct Prompt<'a> {
    pub budget: &'a Budget,
    pub user_day_usd: Option<f64>,
    pub project: &'a str,
    pub user: &'a str,
    pub session: &'a str,
}

impl Meter {
    /// Admit a prompt in `session`: `Ok(None)` when no limit it counts against is near its end,
    /// `Ok(Some(ticket))` when it now holds those that are, `Err` when another turn holds one.
    pub(crate) fn begin_turn(&self, p: &Prompt<'_>, day: u64, now: Instant) -> Result<Option<Ticket>, Busy> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        st.turns.held.retain(|_, h| now.duration_since(h.since) < HOLD_MAX);
        let root = st.root(p.project, p.session).to_string();
        let session_spent = st.session_total(p.project, &root);
        let limits = [
            (
                "session_usd",
                session_key(p.project, &root),
                session_spent,
                p.budget.session_usd,
            ),
            (
                "project_day_usd",
                project_key(p.project),
                st.project_day.get(p.project).copied().unwrap_or(0.0),
                p.budget.project_day_usd,
            ),
            (
                "user_day_usd",
                user_key(p.user),
                st.user_day.get(p.user).copied().unwrap_or(0.0),
                p.user_day_usd,
            ),
        ];
        // A prompt into a session already running joins its turn: the turn began earlier.
        if st.turns.started.len() >= MAX_STARTED {
            st.turns.started.clear();
        }
        let turn = (p.project.to_string(), p.session.to_string());
        st.turns.started.entry(turn).or_insert(session_spent);
        let largest = st.turns.largest.get(p.project).copied().unwrap_or(0.0);
        let mut near = Vec::new();
        for (budget, key, spent, limit) in limits {
            let Some(limit) = limit.map(|l| l + st.raised(|| key.clone())) else {
                continue;
            };
            if limit - spent > largest.max((1.0 - p.budget.warn_at) * limit) {
                continue;
            }
            if st.turns.held.contains_key(&key) {
                return Err(Busy { budget, spent, limit });
            }
            near.push(key);
        }
        if near.is_empty() {
            return Ok(None);
        }
        st.turns.next += 1;
        let id = st.turns.next;
        for key in near {
            let held = Held {
                id,
                project: p.project.to_string(),
                session: p.session.to_string(),
                since: now,
            };
            st.turns.held.insert(key, held);
        }
        Ok(Some(Ticket(id)))
    }

    /// The prompt's request was answered: a refused or failed one starts no turn, so it lets go
    /// of what it held; an accepted one holds on until its session goes idle.
    pub(crate) fn turn_answered(&self, ticket: Ticket, accepted: bool) {
        if accepted {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.turns.held.retain(|_, h| h.id != ticket.0);
    }

    /// `session` went idle: its turn's cost is in. The limits its prompt held are free again, and
    /// the turn's size is remembered for how near the end is near.
    pub(crate) fn turn_ended(&self, project: &str, session: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(start) = st.turns.started.remove(&(project.to_string(), session.to_string())) else {
            return;
        };
        let root = st.root(project, session).to_string();
        let cost = st.session_total(project, &root) - start;
        st.turns
            .held
            .retain(|_, h| h.project != project || h.session != session);
        let largest = st.turns.largest.entry(project.to_string()).or_default();
        *largest = largest.max(cost);
    }
}
