//! When to try a box again after its SSH connection failed: 1 s, doubling to 30 s, each wait
//! lengthened by up to a quarter at random so that many gateways (or many boxes) do not retry
//! in step. A request that comes before the next try fails at once with the last error.

use std::time::{Duration, Instant};

const FIRST: Duration = Duration::from_secs(1);
const MOST: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
    next_try: Option<Instant>,
}

impl Backoff {
    /// A try failed at `now`; `jitter` in `[0, 1)` lengthens the wait by up to a quarter.
    pub(crate) fn failed(&mut self, now: Instant, jitter: f64) {
        self.failures = self.failures.saturating_add(1);
        let base = FIRST.saturating_mul(1 << (self.failures - 1).min(5)).min(MOST);
        self.next_try = Some(now + base.mul_f64(1.0 + jitter.clamp(0.0, 1.0) / 4.0));
    }

    /// A try worked: the next failure starts again from the first wait.
    pub(crate) fn reset(&mut self) {
        *self = Backoff::default();
    }

    /// How long from `now` until the next try may be made (zero: now).
    pub(crate) fn wait(&self, now: Instant) -> Duration {
        self.next_try
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }
}

/// A number in `[0, 1)` from the OS's generator (0 if it cannot give one).
pub(crate) fn jitter() -> f64 {
    let mut b = [0u8; 4];
    match getrandom::fill(&mut b) {
        Ok(()) => f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_one_second_to_thirty_with_up_to_a_quarter_more() {
        let now = Instant::now();
        let mut b = Backoff::default();
        assert_eq!(b.wait(now), Duration::ZERO, "nothing failed: try now");
        let mut seen = Vec::new();
        for _ in 0..8 {
            b.failed(now, 0.0);
            seen.push(b.wait(now).as_secs());
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 30, 30, 30]);
        b.failed(now, 0.999);
        let w = b.wait(now);
        assert!(
            w > Duration::from_secs(37) && w <= Duration::from_millis(37_500),
            "{w:?}"
        );
        assert_eq!(b.wait(now + Duration::from_secs(60)), Duration::ZERO, "due");
        b.reset();
        b.failed(now, 0.0);
        assert_eq!(b.wait(now), Duration::from_secs(1), "a success starts again from 1 s");
    }

    #[test]
    fn jitter_is_in_range() {
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
