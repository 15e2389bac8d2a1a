//! A connection's watchers (its idle tick, the connection table's shed token, the drain), polled
//! only when one of them woke the connection's task. The task wakes twice per request (the
//! request comes, the upstream answers); `tokio::select!` polled all three watchers each time,
//! about 900 instructions per keep-alive request for nothing (callgrind, docs/performance.md).
//! The watchers get a waker of their own that marks a flag before it wakes the task, so a wake
//! of the connection polls the connection only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// The watchers' waker: marks that a watcher woke, then wakes the task.
struct Flag {
    woken: AtomicBool,
    /// The task's waker, as last seen by [`Watchers::poll`]. Locked when it changes (once per
    /// task, in practice) and when a watcher fires (once per idle half-period, a shed, a drain).
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}

/// What decides when a connection's watchers are polled.
pub(crate) struct Watchers {
    flag: Arc<Flag>,
    /// `flag` as a waker, made once.
    waker: Waker,
    /// The task's waker last handed to `flag`, compared (not locked) on each poll.
    task: Option<Waker>,
}

impl Watchers {
    /// The first poll polls the watchers, so that each registers the watchers' waker.
    pub(crate) fn new() -> Watchers {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        Watchers {
            waker: Waker::from(flag.clone()),
            flag,
            task: None,
        }
    }

    /// Run `watch` (which polls the watchers with the context it is given) when one of them
    /// woke since the last time, or after [`Watchers::again`]; otherwise pending at once.
    pub(crate) fn poll<T>(&mut self, cx: &mut Context<'_>, watch: impl FnOnce(&mut Context<'_>) -> Poll<T>) -> Poll<T> {
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            let task = cx.waker().clone();
            *self.flag.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.clone());
            self.task = Some(task);
        }
        // Cleared before the watchers are polled: a watcher firing from here on wakes the task
        // again, and one that fired before is seen by the poll below.
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        watch(&mut Context::from_waker(&self.waker))
    }

    /// The next poll polls the watchers: one of them was ready, and must be polled again to
    /// register for its next event.
    pub(crate) fn again(&self) {
        self.flag.woken.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::sync::atomic::AtomicUsize;

    /// Counts the task's wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A watcher that is never ready: counts its polls, keeps the waker it was given.
    #[derive(Default)]
    struct Watcher {
        polls: Cell<usize>,
        registered: RefCell<Option<Waker>>,
    }

    impl Watcher {
        fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.set(self.polls.get() + 1);
            *self.registered.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }

        fn fire(&self) {
            self.registered.borrow_mut().take().expect("the watchers' waker").wake();
        }
    }

    #[test]
    fn watchers_are_polled_first_then_only_after_their_own_waker_fired() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let mut cx = Context::from_waker(&task);
        let mut watchers = Watchers::new();
        let w = Watcher::default();
        assert!(watchers.poll(&mut cx, |cx| w.poll(cx)).is_pending());
        assert_eq!(w.polls.get(), 1, "the first poll registers the watchers");
        // The task woken by something else (the connection): the watchers are not polled.
        assert!(watchers.poll(&mut cx, |cx| w.poll(cx)).is_pending());
        assert!(watchers.poll(&mut cx, |cx| w.poll(cx)).is_pending());
        assert_eq!(w.polls.get(), 1, "a wake that was not the watchers' polled them");
        // A watcher fires: the task is woken, and the next poll polls the watchers.
        w.fire();
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "the task was not woken");
        assert!(watchers.poll(&mut cx, |cx| w.poll(cx)).is_pending());
        assert_eq!(w.polls.get(), 2, "the watchers' own wake did not poll them");
        assert!(watchers.poll(&mut cx, |cx| w.poll(cx)).is_pending());
        assert_eq!(w.polls.get(), 2);
        watchers.again();
        assert!(watchers.poll(&mut cx, |cx| w.poll(cx)).is_pending());
        assert_eq!(w.polls.get(), 3, "again() did not poll them");
    }

    #[test]
    fn a_new_task_waker_is_the_one_woken() {
        let first = Arc::new(Count(AtomicUsize::new(0)));
        let second = Arc::new(Count(AtomicUsize::new(0)));
        let mut watchers = Watchers::new();
        let w = Watcher::default();
        let w1 = Waker::from(first.clone());
        assert!(
            watchers
                .poll(&mut Context::from_waker(&w1), |cx| w.poll(cx))
                .is_pending()
        );
        let w2 = Waker::from(second.clone());
        assert!(
            watchers
                .poll(&mut Context::from_waker(&w2), |cx| w.poll(cx))
                .is_pending()
        );
        w.fire();
        assert_eq!(first.0.load(Ordering::Relaxed), 0, "the old task waker was woken");
        assert_eq!(
            second.0.load(Ordering::Relaxed),
            1,
            "the current task waker was not woken"
        );
    }
}
