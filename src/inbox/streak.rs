//! A session's failure streak: the same failure (tool and error) again, call after call, is a
//! repeat the guard judges (`guard.rs`, `judge_repeat`); a success or another failure ends it.

use super::cards::Session;
use super::parse::Failure;

/// A session that failed as it did the time before: `count` times in a row now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Repeat {
    pub project: String,
    pub session: String,
    pub failure: Failure,
    pub count: u32,
}

/// A finished call (or retry) of `session`: a success ends its failure streak; the failure of
/// the last time again continues it (and is announced), any other starts a new one.
pub(super) fn streak(project: &str, session: &mut Session, outcome: Result<(), Failure>) -> Option<Repeat> {
    let failure = match outcome {
        Ok(()) => {
            session.streak = None;
            return None;
        }
        Err(f) => f,
    };
    let count = match &session.streak {
        Some((key, n)) if *key == failure.key => n + 1,
        _ => 1,
    };
    session.streak = Some((failure.key.clone(), count));
    (count > 1).then(|| Repeat {
        project: project.to_string(),
        session: session.id.clone(),
        failure,
        count,
    })
}
