//! `[budget]` and a project's `budget = { … }`: positive dollar amounts, a share to warn at, and
//! what an exhausted budget does. A project's table overrides `[budget]` key by key.

use super::Checker;
use crate::config::file::RawBudget;
use crate::config::settings::{Budget, OnExceed};

/// The defaults every project starts from, and the per-user daily limit.
pub(super) fn defaults(c: &mut Checker<'_>, raw: Option<&RawBudget>) -> (Budget, Option<f64>) {
    let empty = RawBudget::default();
    let raw = raw.unwrap_or(&empty);
    let budget = over(
        c,
        "budget",
        &Budget {
            warn_at: 0.8,
            ..Default::default()
        },
        raw,
    );
    (budget, amount(c, "budget.user_day_usd", raw.user_day_usd))
}

/// A project's limits: `[budget]`'s, with what its own table sets instead.
pub(super) fn project(c: &mut Checker<'_>, key: &str, defaults: &Budget, raw: Option<&RawBudget>) -> Budget {
    let Some(raw) = raw else { return *defaults };
    if raw.user_day_usd.is_some() {
        c.problem(
            format!("{key}.budget.user_day_usd"),
            "a user's daily limit counts across projects",
            "set user_day_usd in [budget], not in a project",
        );
    }
    over(c, &format!("{key}.budget"), defaults, raw)
}

fn over(c: &mut Checker<'_>, key: &str, base: &Budget, raw: &RawBudget) -> Budget {
    let on_exceed = action(c, &format!("{key}.on_exceed"), raw.on_exceed.as_deref(), base.on_exceed);
    // A table that says what a spent budget does and not what a runaway gets: the same.
    let runaway_base = if raw.on_exceed.is_some() {
        on_exceed
    } else {
        base.on_runaway
    };
    let on_runaway = action(c, &format!("{key}.on_runaway"), raw.on_runaway.as_deref(), runaway_base);
    let same_failure = match raw.same_failure {
        None => base.same_failure,
        Some(n) if (2..=100).contains(&n) => Some(n as u32),
        Some(n) => {
            c.problem(
                format!("{key}.same_failure"),
                format!("{n} is not a number of failures in a row"),
                "write a whole number from 2 to 100 (2 stops a session that fails the same way twice), or leave it out",
            );
            base.same_failure
        }
    };
    let max_busy_ms = match raw.max_busy_minutes {
        None => base.max_busy_ms,
        Some(m) if m.is_finite() && m > 0.0 && m <= 7.0 * 24.0 * 60.0 => Some((m * 60_000.0).round().max(1.0) as u64),
        Some(m) => {
            c.problem(
                format!("{key}.max_busy_minutes"),
                format!("{m} is not a number of minutes"),
                "write a positive number of minutes, at most a week (30 stops a session busy for half an hour without a word from the model)",
            );
            base.max_busy_ms
        }
    };
    let warn_at = match raw.warn_at {
        None => base.warn_at,
        Some(w) if w > 0.0 && w <= 1.0 => w,
        Some(w) => {
            c.problem(
                format!("{key}.warn_at"),
                format!("{w} is not a share of a limit"),
                "write a number above 0 and at most 1 (0.8 warns at 80 %)",
            );
            base.warn_at
        }
    };
    Budget {
        session_usd: amount(c, &format!("{key}.session_usd"), raw.session_usd).or(base.session_usd),
        project_day_usd: amount(c, &format!("{key}.project_day_usd"), raw.project_day_usd).or(base.project_day_usd),
        on_exceed,
        warn_at,
        same_failure,
        max_busy_ms,
        on_runaway,
        turn_usd: amount(c, &format!("{key}.turn_usd"), raw.turn_usd).or(base.turn_usd),
    }
}

/// `on_exceed` / `on_runaway`: stop, or only tell.
fn action(c: &mut Checker<'_>, key: &str, raw: Option<&str>, base: OnExceed) -> OnExceed {
    match raw {
        None => base,
        Some("abort") => OnExceed::Abort,
        Some("notify") => OnExceed::Notify,
        Some(other) => {
            c.problem(
                key,
                format!("{other:?} is not what a budget can do"),
                "write \"abort\" (refuse and stop) or \"notify\" (warn only)",
            );
            base
        }
    }
}

fn amount(c: &mut Checker<'_>, key: &str, v: Option<f64>) -> Option<f64> {
    match v {
        Some(x) if x.is_finite() && x > 0.0 => Some(x),
        Some(x) => {
            c.problem(
                key,
                format!("{x} is not an amount of US dollars"),
                "write a positive number (5.0 is five dollars), or leave the key out for no limit",
            );
            None
        }
        None => None,
    }
}
