//! The audit trail: an append-only JSON-lines file of who logged in, prompted, answered, opened a
//! terminal, ran a shell command, wrote a file, reloaded or lost a server. Separate from the
//! access log (which RUST_LOG can turn off and which carries paths): this one is on by default,
//! 0600, rotated by size, and holds names, ids, sizes and outcomes only.
//!
//! Recording never blocks the proxy: [`Audit::record`] puts the record on a bounded channel to
//! one writer thread (file I/O and `flock` are blocking); a full channel drops the record and
//! counts it.

pub mod diff;
pub mod reader;
pub mod record;
pub mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};

pub(crate) use crate::config::AuditConfig;
pub(crate) use record::{Record, Via, Who, created_session, rfc3339};

/// Records waiting for the writer before new ones are dropped.
const QUEUE: usize = 4096;

#[derive(Default)]
struct Counters {
    dropped: AtomicU64,
    warned: AtomicBool,
    /// Records the writer could not write (a full disk, a removed directory).
    lost: AtomicU64,
    /// The last write failed; cleared by the next one that works.
    failing: AtomicBool,
}

/// The handle the gateway records through. Cheap to clone; off (`[audit] enabled = false`, or
/// the file could not be opened at start) it records nothing.
/// What the writer thread receives.
enum Msg {
    /// A record, and whom to tell once it is written (or could not be).
    Record(Box<Record>, Option<tokio::sync::oneshot::Sender<()>>),
    /// Answer once everything sent before is written.
    Flush(std::sync::mpsc::Sender<()>),
}

#[derive(Clone, Default)]
pub struct Audit {
    tx: Option<SyncSender<Msg>>,
    counters: Arc<Counters>,
}

impl Audit {
    pub fn off() -> Audit {
        Audit::default()
    }

    /// Open the file (so a bad path fails the start, not the first record) and start the writer.
    pub(crate) fn start(cfg: AuditConfig) -> std::io::Result<Audit> {
        let mut appender = writer::Appender::open(cfg.clone())?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Msg>(QUEUE);
        let counters = Arc::new(Counters::default());
        let seen = counters.clone();
        std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || {
                // Lost since the failure began, for the line that says it works again.
                let mut lost_now = 0u64;
                for msg in rx {
                    let (record, written) = match msg {
                        Msg::Record(r, written) => (r, written),
                        Msg::Flush(done) => {
                            let _ = done.send(());
                            continue;
                        }
                    };
                    let result = appender.append(&record.to_line());
                    if let Some(w) = written {
                        let _ = w.send(());
                    }
                    match result {
                        Ok(()) => {
                            if seen.failing.swap(false, Ordering::Relaxed) {
                                tracing::warn!(file = %cfg.file.display(), lost = lost_now, "the audit log is written again");
                                lost_now = 0;
                            }
                        }
                        Err(e) => {
                            seen.lost.fetch_add(1, Ordering::Relaxed);
                            lost_now += 1;
                            // Said once per run of failures, not per record: a full disk must
                            // not flood the log that may share it.
                            if !seen.failing.swap(true, Ordering::Relaxed) {
                                tracing::error!(file = %cfg.file.display(), reason = %e, "cannot write the audit log; records are lost until it works again (audit_write_failures_total, status)");
                            }
                        }
                    }
                }
            })?;
        Ok(Audit { tx: Some(tx), counters })
    }

    pub(crate) fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    pub(crate) fn record(&self, record: Record) {
        self.send(record, None);
    }

    /// Record an act and wait, at most `within`, until the writer has written it: the answer to
    /// an audited act then reaches its client only once its record is in the file (in the kernel:
    /// a `kill -9` of the gateway right after loses nothing; a machine crash may, as no `fsync`
    /// is done). A writer more than `within` behind (a slow disk) does not hold the answer back.
    pub(crate) async fn record_written(&self, record: Record, within: std::time::Duration) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.send(record, Some(done)) {
            let _ = tokio::time::timeout(within, written).await;
        }
    }

    /// Queue a record; false when it was dropped (or the trail is off).
    fn send(&self, record: Record, written: Option<tokio::sync::oneshot::Sender<()>>) -> bool {
        let Some(tx) = &self.tx else { return false };
        match tx.try_send(Msg::Record(Box::new(record), written)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                if !self.counters.warned.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "the audit writer is behind: audit records are being dropped (counted in audit_dropped_total)"
                    );
                }
                false
            }
        }
    }

    /// Wait (at most `within`) until every record recorded so far is in the file: at shutdown.
    pub(crate) fn flush(&self, within: std::time::Duration) {
        let Some(tx) = &self.tx else { return };
        let (done, wait) = std::sync::mpsc::channel();
        // Blocking send: at shutdown, waiting behind a full queue is the point.
        if tx.send(Msg::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(within);
        }
    }

    /// Records dropped because the writer could not keep up.
    pub(crate) fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Records the writer could not write.
    pub(crate) fn lost(&self) -> u64 {
        self.counters.lost.load(Ordering::Relaxed)
    }

    /// Is the audit trail being written (on, and its last write worked)?
    pub(crate) fn writing(&self) -> bool {
        self.enabled() && !self.counters.failing.load(Ordering::Relaxed)
    }
}

/// Record a CLI command's act (a revocation): appended by the CLI itself under the writer's lock,
/// so it is recorded whether or not a gateway runs, and never interleaves with the gateway's
/// lines. The actor is the operating-system user who ran the command.
pub(crate) fn append_from_cli(settings: &crate::config::Settings, record: Record) {
    let Some(cfg) = &settings.audit else { return };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let record = record.field("by_uid", uid).field("from", "cli");
    if let Err(e) = writer::append_once(cfg, &record) {
        eprintln!("warning: could not write the audit log {}: {e}", cfg.file.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        // A writer that never drains: the channel's receiver is held, not read.
        let (tx, _rx) = std::sync::mpsc::sync_channel::<Msg>(1);
        let audit = Audit {
            tx: Some(tx),
            counters: Arc::default(),
        };
        audit.record(Record::new("a"));
        audit.record(Record::new("b"));
        audit.record(Record::new("c"));
        assert_eq!(audit.dropped(), 2);
    }

    #[test]
    fn records_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = AuditConfig {
            file: dir.path().join("a/audit.jsonl"),
            max_bytes: 1 << 20,
            keep: 1,
        };
        let audit = Audit::start(cfg.clone()).unwrap();
        audit.record(Record::new("config_reload").user("alice"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&cfg.file).unwrap_or_default();
            if text.contains("config_reload") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the record never reached the file"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
