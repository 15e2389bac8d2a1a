//! Giving memory back after a flood of connections (issue 21, C).
//!
//! A connection's buffers (rustls' records, hyper's read buffer, its task) are many small blocks
//! from glibc's heaps, spread over one arena per thread that served them. When the connections
//! end the blocks are free, but glibc returns a heap's memory only from its top and only past
//! `M_TRIM_THRESHOLD`: a few live blocks high in each heap keep everything below them resident.
//! 10 000 silent TLS connections took the gateway from 31 to 182 MiB, and it stayed at 178 MiB a
//! minute after they had all closed (bench/flood_rss.sh, docs/performance.md). `malloc_trim(0)`
//! walks every arena and returns each free page to the system (`MADV_DONTNEED`), wherever it is
//! in its heap. It costs a pass over the free lists, so it runs only when many connections have
//! ended since the last look, never per request.

/// Connections that must have ended since the janitor's last look (the peak then minus the
/// number open now) before the free memory is given back.
const TRIM_AFTER_CLOSED: u32 = 1024;

/// When to give memory back: once the connections that ended since the last trim (the most open
/// at once since then, minus the number open now) reach [`TRIM_AFTER_CLOSED`]. Counted from the
/// last trim, not from the last look: a flood that drains over several looks (each connection
/// closes at its own head timeout) is trimmed when enough of it has ended, not never (a first
/// version compared each look's peak alone, and a flood that ended a few hundred per look left
/// 40 MiB resident; docs/performance.md, issue 43).
#[derive(Debug, Default)]
pub(crate) struct TrimTrigger {
    peak_since_trim: u32,
}

impl TrimTrigger {
    /// A look: the most connections open at once since the previous look, and how many are open
    /// now. True when it is time to trim (the count then starts again from those open now).
    pub(crate) fn look(&mut self, peak: u32, open: u32) -> bool {
        self.peak_since_trim = self.peak_since_trim.max(peak);
        if self.peak_since_trim.saturating_sub(open) < TRIM_AFTER_CLOSED {
            return false;
        }
        self.peak_since_trim = open;
        true
    }
}

/// Return free heap pages to the system. Blocking: call it off the async runtime.
pub(crate) fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let started = std::time::Instant::now();
        // SAFETY: malloc_trim only releases memory the allocator holds free; it takes each
        // arena's lock as malloc itself does.
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!(
            released = released != 0,
            took_ms = started.elapsed().as_millis() as u64,
            "gave free heap memory back after connections ended"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_that_drains_over_many_looks_is_trimmed_once_enough_has_ended() {
        let mut t = TrimTrigger::default();
        // 3 000 open at the peak, then 400 close before each look.
        assert!(!t.look(3000, 2600));
        assert!(!t.look(2600, 2200));
        assert!(t.look(2200, 1800), "1 200 ended since the peak");
        assert!(!t.look(1800, 1400), "counted again from the trim: 400");
        assert!(!t.look(1400, 1000));
        assert!(t.look(1000, 600), "1 200 more");
        assert!(!t.look(600, 600), "nothing ended");
    }

    #[test]
    fn steady_traffic_is_never_trimmed() {
        let mut t = TrimTrigger::default();
        for _ in 0..100 {
            assert!(!t.look(900, 100), "fewer than the threshold ever open");
        }
    }
}
