//! HTTPS connections are served by one single-threaded runtime per core, as nginx serves them by
//! one process per core. A connection, the requests on it, and the upstream connections they borrow
//! (the pool keeps one idle list per worker) all live on one thread, so the hand-off between the
//! upstream connection's task and the client connection's task need not wake another thread. With
//! tokio's work-stealing runtime an SSE event's p99 through the gateway was 5.7 to 10 ms, 1.8 ms
//! with one worker thread; under load the gateway made 2 969 futex calls in 3 s, 6 after this
//! change (docs/performance.md).
//!
//! The main runtime keeps the rest: accept loops, SSH, the admin listener, the supervisor.

use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;

thread_local! {
    /// 1-based index of the worker this thread runs; 0 elsewhere.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

pub struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
}

/// How many workers serve connections: one per core.
pub(crate) fn count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// This thread's worker index (1..=count()), or 0 off the workers.
pub(crate) fn current() -> usize {
    INDEX.with(Cell::get)
}

impl Workers {
    /// Start the workers. Their threads live as long as the process; a worker idles when no
    /// connection is given to it.
    pub(crate) fn start() -> std::io::Result<Workers> {
        let mut handles = Vec::with_capacity(count());
        for i in 1..=count() {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            handles.push(runtime.handle().clone());
            std::thread::Builder::new()
                .name(format!("gateway-worker-{i}"))
                .spawn(move || {
                    INDEX.with(|c| c.set(i));
                    runtime.block_on(std::future::pending::<()>());
                })?;
        }
        Ok(Workers {
            handles,
            next: AtomicUsize::new(0),
        })
    }

    /// Run `task` on the next worker, round robin.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        self.handles[i].spawn(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_on_the_workers_in_turn() {
        let workers = Workers::start().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..count() * 2 {
            let tx = tx.clone();
            workers.spawn(async move {
                tokio::task::yield_now().await;
                tx.send(current()).unwrap();
            });
        }
        let mut seen: Vec<usize> = (0..count() * 2)
            .map(|_| rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap())
            .collect();
        seen.sort();
        let expected: Vec<usize> = (1..=count()).flat_map(|i| [i, i]).collect();
        assert_eq!(seen, expected);
    }
}
