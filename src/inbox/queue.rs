//! New cards and alerts waiting for the notifier (`notify`, which takes the receiving end). The inbox queues
//! them with `try_send` into a bounded channel (a full channel drops and counts), so a slow or
//! failing notification never holds the inbox, let alone a request.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use super::Notice;

const QUEUE: usize = 256;

/// The inbox's end of the channel.
pub(crate) struct Queue {
    tx: mpsc::Sender<Notice>,
    rx: Mutex<Option<mpsc::Receiver<Notice>>>,
    dropped: AtomicU64,
}

impl Queue {
    pub(crate) fn new() -> Queue {
        let (tx, rx) = mpsc::channel(QUEUE);
        Queue {
            tx,
            rx: Mutex::new(Some(rx)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Queue without waiting; a full queue drops the request (and counts it).
    pub(crate) fn push(&self, notice: Notice) {
        if self.tx.try_send(notice).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The receiving end, once (for the notifier).
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<Notice>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Default for Queue {
    fn default() -> Self {
        Queue::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::{CardKind, NewCard};

    #[test]
    fn a_full_queue_drops_and_counts() {
        let q = Queue::new();
        for _ in 0..QUEUE + 3 {
            q.push(Notice::Card(NewCard {
                project: "a".into(),
                id: "per_1".into(),
                kind: CardKind::Permission,
                tool: "bash".into(),
            }));
        }
        assert_eq!(q.dropped(), 3);
        assert!(q.take_receiver().is_some());
        assert!(q.take_receiver().is_none(), "one receiver");
    }
}
