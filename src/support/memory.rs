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
pub(crate) const TRIM_AFTER_CLOSED: u32 = 1024;

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
