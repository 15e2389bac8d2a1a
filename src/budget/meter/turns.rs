//! Every prompt on a limit reserves its turn's cost until the turn ends (hostile round five,
//! item 11). A prompt's cost is known only once its turn ends, so prompts admitted before that
//! were all judged on the spend before them: round four sent 16 prompts at once with $1 of $2
//! left, and all 16 ran ($17 spent); the one-prompt hold that followed started only once the
//! meter had seen a turn, so a fresh project raced past its limit the same way.
//!
//! Now each prompt counting against a limit reserves an estimate of its turn: the larger of the
//! project's largest turn so far and the budget's `turn_usd`. A prompt is admitted while what is
//! spent and reserved leaves room (is below the limit); otherwise it gets 429 until a running
//! turn ends. Before any estimate exists (no turn seen, no `turn_usd`), a limit admits one
//! prompt at a time. A reservation lasts until its session went idle and the turn's cost was
//! reported (OpenCode reports it after the idle event; [`COST_WAIT`] at most), its request fails,
//! or [`HOLD_MAX`] passes. So a limit is overshot by about one turn
//! (the estimate; a turn larger than every one before can exceed it), however many prompts race,
//! from the first prompt on.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Meter, project_key, session_key, user_key};
use crate::config::settings::Budget;

/// How long a reservation may last without its session going idle (events lost, a turn without
/// end): then it lapses.
pub(crate) const HOLD_MAX: Duration = Duration::from_secs(15 * 60);

/// The turns running on each limit, and how large turns have been.
#[derive(Default)]
pub(super) struct Turns {
    /// A limit's key → the reservations of the prompts admitted on it.
    held: HashMap<String, Vec<Held>>,
    /// Sessions with a turn running since a prompt: their spend when it was admitted.
    started: HashMap<(String, String), f64>,
    /// The largest turn seen per project (USD).
    largest: HashMap<String, f64>,
    /// Turns that ended lately: their spend when admitted, to measure them by the cost OpenCode
    /// reports after the idle event (1.18.33 sends `session.updated` with the cost after it).
    ended: HashMap<(String, String), (f64, Instant)>,
    next: u64,
}

/// How long an ended turn waits for its cost to be reported.
const ENDED_FOR: Duration = Duration::from_secs(120);

impl Turns {
    /// `session` of `project` reported its root's total `total`: a turn of it that ended lately
    /// is measured (the largest turn grows to its size).
    pub(super) fn cost_after_end(&mut self, project: &str, session: &str, total: f64) {
        if self.ended.is_empty() {
            return;
        }
        let now = Instant::now();
        self.ended.retain(|_, (_, at)| now.duration_since(*at) < ENDED_FOR);
        if let Some((start, _)) = self.ended.get(&(project.to_string(), session.to_string())) {
            let size = total - start;
            let largest = self.largest.entry(project.to_string()).or_default();
            *largest = largest.max(size);
            // The cost is in the spend now: the turn's reservations go.
            for held in self.held.values_mut() {
                held.retain(|h| h.ended.is_none() || h.project != project || h.session != session);
            }
        }
    }
}

/// Turns remembered at most (sessions prompted and not yet idle); past it the oldest are
/// forgotten, which only makes a turn's size unknown.
const MAX_STARTED: usize = 10_000;

struct Held {
    id: u64,
    project: String,
    session: String,
    since: Instant,
    /// The turn's estimated cost; `None` before any estimate existed (the limit then admits one
    /// prompt at a time).
    usd: Option<f64>,
    /// When its session went idle: the reservation stays until the turn's cost is reported (or
    /// [`COST_WAIT`] passes), since OpenCode sends the cost after the idle event.
    ended: Option<Instant>,
}

/// How long an ended turn's reservation waits for its cost to be reported.
const COST_WAIT: Duration = Duration::from_secs(10);

/// A prompt admitted on a limit: hand it back with [`Meter::turn_answered`].
#[derive(Debug)]
pub(crate) struct Ticket(u64);

/// A limit has no room left for another turn beside the running ones.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Busy {
    pub budget: &'static str,
    pub spent: f64,
    pub limit: f64,
    /// What the running turns reserve, and how many they are.
    pub reserved: f64,
    pub running: usize,
    /// The estimate of a turn; `None`: no turn seen yet and no `turn_usd`.
    pub estimate: Option<f64>,
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (budget, spent, limit) = (self.budget, self.spent, self.limit);
        match self.estimate {
            None => write!(
                f,
                "budget.{budget}: ${spent:.4} of ${limit:.2} spent, and no turn's cost is known yet (no turn seen, no turn_usd): one prompt at a time until the running one's cost is known; try again when it ends"
            ),
            Some(e) => write!(
                f,
                "budget.{budget}: ${spent:.4} of ${limit:.2} spent and ${:.4} reserved by {} running turn{}: no room for another turn of about ${e:.4}; try again when one ends",
                self.reserved,
                self.running,
                if self.running == 1 { "" } else { "s" }
            ),
        }
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

/// Whether a limit admits one more turn beside `held`: room left below it, and no running turn
/// of unknown size.
fn room(budget: &'static str, spent: f64, limit: f64, held: &[Held], estimate: Option<f64>) -> Result<(), Busy> {
    let reserved: f64 = held.iter().filter_map(|h| h.usd).sum();
    let unknown = held.iter().any(|h| h.usd.is_none());
    let full = match estimate {
        None => !held.is_empty(),
        Some(_) => unknown || spent + reserved >= limit,
    };
    match full {
        false => Ok(()),
        true => Err(Busy {
            budget,
            spent,
            limit,
            reserved,
            running: held.len(),
            estimate,
        }),
    }
}

impl Meter {
    /// Admit a prompt in `session`: `Ok(None)` when it counts against no limit, `Ok(Some(ticket))`
    /// when it reserved its turn on those it counts against, `Err` when one has no room.
    pub(crate) fn begin_turn(&self, p: &Prompt<'_>, day: u64, now: Instant) -> Result<Option<Ticket>, Busy> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        for held in st.turns.held.values_mut() {
            held.retain(|h| {
                now.duration_since(h.since) < HOLD_MAX && h.ended.is_none_or(|e| now.duration_since(e) < COST_WAIT)
            });
        }
        st.turns.held.retain(|_, held| !held.is_empty());
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
        let largest = st.turns.largest.get(p.project).copied().filter(|l| *l > 0.0);
        let estimate = match (largest, p.budget.turn_usd) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let mut counted = Vec::new();
        for (budget, key, spent, limit) in limits {
            let Some(limit) = limit.map(|l| l + st.raised(|| key.clone())) else {
                continue;
            };
            let held = st.turns.held.get(&key).map_or(&[][..], Vec::as_slice);
            room(budget, spent, limit, held, estimate)?;
            counted.push(key);
        }
        if counted.is_empty() {
            return Ok(None);
        }
        // A prompt into a session already running joins its turn: the turn began earlier.
        if st.turns.started.len() >= MAX_STARTED {
            st.turns.started.clear();
        }
        let turn = (p.project.to_string(), p.session.to_string());
        st.turns.started.entry(turn).or_insert(session_spent);
        st.turns.next += 1;
        let id = st.turns.next;
        for key in counted {
            let held = Held {
                id,
                project: p.project.to_string(),
                session: p.session.to_string(),
                since: now,
                usd: estimate,
                ended: None,
            };
            st.turns.held.entry(key).or_default().push(held);
        }
        Ok(Some(Ticket(id)))
    }

    /// The prompt's request was answered: a refused or failed one starts no turn, so it lets go
    /// of its reservations; an accepted one keeps them until its session goes idle.
    pub(crate) fn turn_answered(&self, ticket: Ticket, accepted: bool) {
        if accepted {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for held in st.turns.held.values_mut() {
            held.retain(|h| h.id != ticket.0);
        }
    }

    /// `session` went idle: its turn is over. Its prompts' reservations stay until its cost is
    /// reported ([`Turns::cost_after_end`], at most [`COST_WAIT`]), which measures the turn as the
    /// project's estimate.
    pub(crate) fn turn_ended(&self, project: &str, session: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(start) = st.turns.started.remove(&(project.to_string(), session.to_string())) else {
            return;
        };
        let root = st.root(project, session).to_string();
        let cost = st.session_total(project, &root) - start;
        let now = Instant::now();
        for held in st.turns.held.values_mut() {
            // A cost reported before the idle event is in already: the reservations go now.
            if cost > 0.0 {
                held.retain(|h| h.project != project || h.session != session);
                continue;
            }
            for h in held.iter_mut().filter(|h| h.project == project && h.session == session) {
                h.ended.get_or_insert(now);
            }
        }
        let largest = st.turns.largest.entry(project.to_string()).or_default();
        *largest = largest.max(cost);
        if st.turns.ended.len() >= MAX_STARTED {
            st.turns.ended.clear();
        }
        st.turns
            .ended
            .insert((project.to_string(), session.to_string()), (start, now));
    }
}
