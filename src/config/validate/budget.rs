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
    let on_exceed = match raw.on_exceed.as_deref() {
        None => base.on_exceed,
        Some("abort") => OnExceed::Abort,
        Some("notify") => OnExceed::Notify,
        Some(other) => {
            c.problem(
                format!("{key}.on_exceed"),
                format!("{other:?} is not what a budget can do"),
                "write on_exceed = \"abort\" (refuse and stop) or \"notify\" (warn only)",
            );
            base.on_exceed
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
