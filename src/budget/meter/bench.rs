//! What `benches/meter.rs` measures (issue 43, target 6): a prompt's budget check and a cost
//! event, with a number of sessions known (each a root with one subagent, all prompted, so the
//! old walk over every session would show).

use std::time::Instant;

use super::{CostSeen, Meter};
use crate::config::Budget;

/// Nanoseconds per budget check and per cost event with `sessions` known root sessions, over
/// `rounds` of each; and the sessions the meter holds at the end (bounded by its policy).
pub fn per_op_nanos(sessions: usize, rounds: usize) -> (f64, f64, usize) {
    let m = Meter::default();
    let day = super::today();
    let event = |session: String, parent: Option<String>, now: f64| CostSeen {
        project: "web".into(),
        session,
        parent,
        before: None,
        now,
        inherited: false,
    };
    for n in 0..sessions {
        m.seen(&event(format!("ses_{n}"), None, 0.01), day);
        m.seen(&event(format!("sub_{n}"), Some(format!("ses_{n}")), 0.01), day);
        m.prompted("web", &format!("ses_{n}"), "ann");
    }
    let budget = Budget {
        session_usd: Some(1e9),
        project_day_usd: Some(1e9),
        ..Default::default()
    };
    let names: Vec<String> = (0..rounds).map(|r| format!("sub_{}", r % sessions.max(1))).collect();
    let started = Instant::now();
    for name in &names {
        assert!(m.check(&budget, Some(1e9), "web", "ann", Some(name), day).is_ok());
    }
    let check = started.elapsed().as_nanos() as f64 / rounds as f64;
    let events: Vec<CostSeen> = (0..rounds)
        .map(|r| event(names[r].clone(), None, 0.02 + r as f64 * 1e-6))
        .collect();
    let started = Instant::now();
    for e in &events {
        m.seen(e, day);
    }
    let seen = started.elapsed().as_nanos() as f64 / rounds as f64;
    let held = m.state.lock().unwrap_or_else(|e| e.into_inner()).sessions.len();
    (check, seen, held)
}
