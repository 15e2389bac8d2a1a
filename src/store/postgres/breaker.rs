//! When the database last left a call unanswered (issue 43's pool, and the bound of a hung
//! database): after an unanswered call the next ones fail at once for as long as a call may take,
//! then one tries again, so a hung database costs one caller the bound, not every caller once per
//! store call.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// When a call last went unanswered.
#[derive(Default)]
pub(super) struct Breaker {
    unanswered_at: Mutex<Option<Instant>>,
}

impl Breaker {
    fn at(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.unanswered_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An error at once while the database recently did not answer (within `bound`).
    pub(super) fn check(&self, bound: Duration) -> Result<(), StoreError> {
        match *self.at() {
            Some(at) if at.elapsed() < bound => Err(StoreError::Unanswered(bound)),
            _ => Ok(()),
        }
    }

    /// A call ended, answered or not.
    pub(super) fn ended(&self, unanswered: bool) {
        *self.at() = unanswered.then(Instant::now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_millis(200);

    #[test]
    fn after_an_unanswered_call_the_next_fail_at_once_then_one_tries_again() {
        let breaker = Breaker::default();
        assert!(breaker.check(BOUND).is_ok());
        breaker.ended(true);
        assert!(matches!(breaker.check(BOUND), Err(StoreError::Unanswered(b)) if b == BOUND));
        std::thread::sleep(BOUND);
        assert!(breaker.check(BOUND).is_ok(), "one call is let through after the bound");
        breaker.ended(true);
        breaker.ended(false);
        assert!(breaker.check(BOUND).is_ok(), "an answered call clears it");
    }
}
