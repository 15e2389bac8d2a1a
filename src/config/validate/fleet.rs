//! `[fleet]` (issue 41, item 5): how many sessions may be busy at once per user and per project,
//! how many of a user's tasks may wait for review before New task is refused, and what a prompt
//! past a cap does: waits in a queue (`over_cap = "queue"`, up to `queue_wait`) or is refused.

use std::time::Duration;

use super::Checker;
use super::checker::parse_duration;
use crate::config::file::RawFleet;
use crate::config::settings::Fleet;

const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

pub(super) fn fleet(c: &mut Checker<'_>, raw: Option<&RawFleet>) -> Fleet {
    let mut fleet = Fleet::default();
    let Some(raw) = raw else {
        return fleet;
    };
    let mut count = |key: &str, v: Option<i64>| match v {
        None => None,
        Some(n) if (1..=10_000).contains(&n) => Some(n as usize),
        Some(n) => {
            c.problem(
                format!("fleet.{key}"),
                format!("{n} is not a count from 1 to 10000"),
                format!("write {key} = 3, or leave it out for no cap"),
            );
            None
        }
    };
    fleet.max_busy_per_user = count("max_busy_per_user", raw.max_busy_per_user);
    fleet.max_busy_per_project = count("max_busy_per_project", raw.max_busy_per_project);
    fleet.max_waiting_reviews = count("max_waiting_reviews", raw.max_waiting_reviews);
    match raw.over_cap.as_deref() {
        None | Some("queue") => {}
        Some("refuse") => fleet.queue = false,
        Some(other) => c.problem(
            "fleet.over_cap",
            format!("{other:?} is not \"queue\" or \"refuse\""),
            "write over_cap = \"queue\" (a prompt waits for room) or \"refuse\"",
        ),
    }
    if let Some(w) = raw.queue_wait.as_deref() {
        match parse_duration(w).filter(|d| !d.is_zero() && *d <= MAX_WAIT) {
            Some(d) => fleet.queue_wait = d,
            None => c.problem(
                "fleet.queue_wait",
                format!("{w:?} is not a duration up to 24h"),
                "write queue_wait = \"30m\"",
            ),
        }
    }
    fleet
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(raw: &str) -> (Fleet, Vec<String>) {
        let base = std::path::PathBuf::from("/");
        let mut c = Checker {
            base: &base,
            problems: Vec::new(),
        };
        let raw: RawFleet = toml::from_str(raw).unwrap();
        let f = fleet(&mut c, Some(&raw));
        (f, c.problems.iter().map(|p| format!("{p:?}")).collect())
    }

    #[test]
    fn caps_are_counts_and_the_mode_and_wait_are_named_or_refused_with_their_key() {
        let (f, problems) = checked("max_busy_per_user = 1\nover_cap = \"refuse\"\nqueue_wait = \"5m\"");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            (f.max_busy_per_user, f.queue, f.queue_wait),
            (Some(1), false, Duration::from_secs(300))
        );
        assert_eq!(f.max_busy_per_project, None);
        let (_, problems) = checked("max_busy_per_project = 0\nover_cap = \"wait\"\nqueue_wait = \"forever\"");
        let all = problems.join("\n");
        for key in ["fleet.max_busy_per_project", "fleet.over_cap", "fleet.queue_wait"] {
            assert!(all.contains(key), "{key}: {all}");
        }
    }
}
