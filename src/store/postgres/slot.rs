//! The store's one connection, lent to one call at a time. A call waits for it only until its
//! own deadline (a call the database does not answer holds it at most until the deadline of
//! that call), and after a call went unanswered the next ones fail at once for as long as a call
//! may take, then one tries again: a hung database costs one caller the bound, not every caller
//! once per store call (a login asks the store two or three times).

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::conn::Conn;
use crate::store::StoreError;

#[derive(Default)]
pub(super) struct Slot {
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Default)]
struct State {
    busy: bool,
    idle: Option<Conn>,
    /// When a call last went unanswered.
    unanswered_at: Option<Instant>,
}

/// The connection while a call has it (`None`: open one); handed back when dropped.
pub(super) struct Lent<'a> {
    slot: &'a Slot,
    pub(super) conn: Option<Conn>,
    unanswered: bool,
}

impl Slot {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection once no other call has it, by `deadline`; an error at once while the
    /// database recently did not answer (within `bound`, the call's own bound).
    pub(super) fn lend(&self, deadline: Instant, bound: Duration) -> Result<Lent<'_>, StoreError> {
        let mut s = self.state();
        loop {
            if s.unanswered_at.is_some_and(|at| at.elapsed() < bound) {
                return Err(StoreError::Unanswered(bound));
            }
            if !s.busy {
                s.busy = true;
                return Ok(Lent {
                    slot: self,
                    conn: s.idle.take(),
                    unanswered: false,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StoreError::Unanswered(bound));
            }
            s = self.freed.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

impl Lent<'_> {
    /// The database did not answer this call (when opening a connection).
    pub(super) fn unanswered(&mut self) {
        self.unanswered = true;
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let conn = self.conn.take();
        let unanswered = self.unanswered || conn.as_ref().is_some_and(Conn::timed_out);
        // A call that panicked may have left its connection anywhere.
        let keep = conn.filter(|c| !c.unusable() && !std::thread::panicking());
        let answered = keep.is_some();
        let mut s = self.slot.state();
        s.busy = false;
        s.idle = keep;
        if unanswered {
            s.unanswered_at = Some(Instant::now());
        } else if answered {
            s.unanswered_at = None;
        }
        drop(s);
        self.slot.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_millis(200);

    fn soon() -> Instant {
        Instant::now() + BOUND
    }

    #[test]
    fn a_call_waits_for_the_connection_only_until_its_deadline() {
        let slot = Slot::default();
        let held = slot.lend(soon(), BOUND).unwrap();
        let began = Instant::now();
        let waited = slot.lend(soon(), BOUND);
        assert!(matches!(waited, Err(StoreError::Unanswered(b)) if b == BOUND));
        let took = began.elapsed();
        assert!(took >= BOUND && took < BOUND * 5, "{took:?}");
        drop(held);
        assert!(slot.lend(soon(), BOUND).is_ok(), "handed back");
    }

    #[test]
    fn after_an_unanswered_call_the_next_fail_at_once_then_one_tries_again() {
        let slot = Slot::default();
        let mut lent = slot.lend(soon(), BOUND).unwrap();
        lent.unanswered();
        drop(lent);
        let began = Instant::now();
        assert!(matches!(slot.lend(soon(), BOUND), Err(StoreError::Unanswered(_))));
        assert!(began.elapsed() < BOUND / 2, "not at once: {:?}", began.elapsed());
        let until = Instant::now() + BOUND * 10;
        while slot.lend(soon(), BOUND).is_err() {
            assert!(Instant::now() < until, "no call is let through after the bound");
            std::thread::sleep(BOUND / 10);
        }
    }
}
