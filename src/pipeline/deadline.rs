//! The upstream's time to answer, with a timer armed only for requests that last. A timer per
//! request (`tokio::time::timeout`: registered in the runtime's wheel on the first poll, taken
//! out again when dropped) was about 550 instructions of each keep-alive request, nearly all of
//! which are answered long before their deadline (callgrind, docs/performance.md, issue 43).
//!
//! An HTTP/1.1 request's future is polled by hyper whenever its connection's task is, and that
//! task wakes at least every half `request_head_timeout` for its idle tick
//! (`front/connection.rs::drive`). So such a request does not arm its timer on its first poll,
//! only on a later one (its answer arriving in parts, or the tick) that still finds it waiting:
//! at most half the head timeout after it began. The timer is set for the same instant either
//! way (`asked` plus the limit), so a deadline further off than that half is kept exactly.
//! Anything else arms on the first poll, as before: an h2 request runs as its own task, which
//! no tick polls, and a deadline nearer than the half could pass before the tick came. While a
//! connection drains, `drive` no longer ticks: a request still unarmed then is bounded by the
//! drain deadline instead, which cuts every connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The upstream did not answer in time.
#[derive(Debug)]
pub(crate) struct Elapsed;

pin_project_lite::pin_project! {
    pub(crate) struct Deadline<F> {
        #[pin]
        inner: F,
        at: Instant,
        #[pin]
        timer: Option<tokio::time::Sleep>,
        // Whether the first poll may leave the timer unarmed (see the module's comment).
        lazy: bool,
    }
}

/// `inner`, cut with [`Elapsed`] at `asked + limit`. `ticked` says the request's future is polled
/// at least every `tick` whatever else wakes it (an HTTP/1.x request: see the module's comment).
pub(crate) fn deadline<F: Future>(inner: F, asked: Instant, limit: Duration, ticked: Option<Duration>) -> Deadline<F> {
    Deadline {
        inner,
        at: asked + limit,
        timer: None,
        lazy: ticked.is_some_and(|tick| limit > tick),
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(v) = this.inner.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if this.timer.is_none() {
            if *this.lazy {
                // The next poll arms it: one comes within a tick.
                *this.lazy = false;
                return Poll::Pending;
            }
            this.timer
                .set(Some(tokio::time::sleep_until(tokio::time::Instant::from_std(*this.at))));
        }
        match this.timer.as_pin_mut() {
            Some(timer) => timer.poll(cx).map(|()| Err(Elapsed)),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never() -> std::future::Pending<()> {
        std::future::pending()
    }

    /// Poll once: `Some` with the output when ready.
    async fn poll_once<F: Future + Unpin>(mut f: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut f).poll(cx) {
                Poll::Ready(v) => Some(v),
                Poll::Pending => None,
            })
        })
        .await
    }

    /// When the armed timer fires, if one is armed.
    fn armed_at<F>(d: &Pin<&mut Deadline<F>>) -> Option<Instant> {
        d.timer.as_ref().map(|t| t.deadline().into_std())
    }

    #[tokio::test]
    async fn an_eager_deadline_is_armed_on_the_first_poll_and_cuts_at_the_limit() {
        let asked = Instant::now();
        let limit = Duration::from_millis(50);
        let mut cut = std::pin::pin!(deadline(never(), asked, limit, None));
        assert!(poll_once(cut.as_mut()).await.is_none());
        assert_eq!(armed_at(&cut), Some(asked + limit), "not armed for asked + limit");
        assert!(cut.await.is_err(), "the deadline did not cut a future that never ends");
        assert!(asked.elapsed() >= limit);
    }

    #[tokio::test]
    async fn a_lazy_deadline_arms_on_its_second_poll_for_the_same_instant() {
        let asked = Instant::now() - Duration::from_secs(7);
        let limit = Duration::from_secs(600);
        let mut cut = std::pin::pin!(deadline(never(), asked, limit, Some(Duration::from_secs(15))));
        assert!(poll_once(cut.as_mut()).await.is_none());
        assert_eq!(armed_at(&cut), None, "the first poll armed the timer");
        // The tick's poll (seven seconds in) arms it for `asked + limit`, not the limit from now.
        assert!(poll_once(cut.as_mut()).await.is_none());
        assert_eq!(
            armed_at(&cut),
            Some(asked + limit),
            "the second poll did not arm it, or not for asked + limit"
        );
    }

    #[tokio::test]
    async fn a_deadline_no_further_than_the_tick_is_armed_at_once() {
        let asked = Instant::now();
        for limit in [Duration::from_secs(1), Duration::from_secs(15)] {
            let mut cut = std::pin::pin!(deadline(never(), asked, limit, Some(Duration::from_secs(15))));
            assert!(poll_once(cut.as_mut()).await.is_none());
            assert_eq!(
                armed_at(&cut),
                Some(asked + limit),
                "a deadline of {limit:?} was left unarmed"
            );
        }
    }

    #[tokio::test]
    async fn an_answer_before_the_deadline_is_passed_on() {
        let answer = async {
            tokio::task::yield_now().await;
            7
        };
        let got = deadline(
            answer,
            Instant::now(),
            Duration::from_secs(5),
            Some(Duration::from_secs(1)),
        )
        .await;
        assert_eq!(got.ok(), Some(7));
        let now = deadline(std::future::ready(8), Instant::now(), Duration::from_secs(5), None).await;
        assert_eq!(now.ok(), Some(8));
    }
}
