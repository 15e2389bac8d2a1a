//! The HTTP core: serves any byte stream (a TLS stream, an SSH channel) with one hyper stack
//! (HTTP/1.1 and h2, upgrades) and the request pipeline. Connections drain on shutdown and are
//! cut when the drain deadline passes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Body;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::front::watchers::Watchers;
use crate::gateway::Gateway;
use crate::gateway::connections::Activity;
use crate::pipeline::{self, ConnInfo};

/// Answer every request on a connection to a removed project's own port with 404 and the reason
/// (reload does not close listeners). Such a connection lives at most twice `request_head_timeout`.
/// Served by the protocol's own builder, as every TLS connection is (see [`Alpn::from_tls`]).
pub(crate) async fn serve_gone<I>(gw: Arc<Gateway>, project: Arc<str>, io: I, alpn: Alpn)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |_req| {
        let body = format!("project {project} no longer exists; its port closes on restart\n");
        async move {
            let mut r = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
            *r.status_mut() = http::StatusCode::NOT_FOUND;
            r.headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
            Ok::<_, std::convert::Infallible>(r)
        }
    });
    let limit = gw.limits.request_head_timeout.saturating_mul(2);
    let io = TokioIo::new(io);
    match alpn {
        Alpn::Http1 => {
            let connection = gw.doors.http1.serve_connection(io, service);
            tokio::select! {
                _ = tokio::time::timeout(limit, connection) => {}
                _ = gw.lifecycle.shutdown.cancelled() => {}
            }
        }
        Alpn::H2 => {
            let connection = gw.doors.http2.serve_connection(io, service);
            tokio::select! {
                _ = tokio::time::timeout(limit, connection) => {}
                _ = gw.lifecycle.shutdown.cancelled() => {}
            }
        }
    }
}

/// How long a connection whose idle watcher closed it gracefully may take to finish closing (an h2
/// peer that never acknowledges the GOAWAY) before it is dropped.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// One request in flight; dropping it (body ended, or request abandoned) marks the end.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: &Arc<Activity>) -> Busy {
        a.start();
        Busy(a.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

pin_project_lite::pin_project! {
    /// The pipeline's answer to one request, its body marked with the request's [`Busy`]. A named
    /// future rather than an `async` block: the block kept the pipeline's future twice (as its
    /// captured value and as the value it awaited), 12 KiB instead of 6 for every connection's
    /// request in flight, which hyper allocates once per HTTP/1 connection and keeps.
    struct Handled<F> {
        #[pin]
        inner: F,
        busy: Option<Busy>,
    }
}

impl<F, B> Future for Handled<F>
where
    F: Future<Output = Result<http::Response<B>, std::convert::Infallible>>,
{
    type Output = Result<http::Response<Tracked<B>>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let resp = std::task::ready!(this.inner.poll(cx))?;
        let busy = this.busy.take().expect("Handled polled after it completed");
        Poll::Ready(Ok(resp.map(|inner| Tracked { inner, busy })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds its request's [`Busy`] mark until hyper drops it.
    pub(crate) struct Tracked<B> {
        #[pin]
        inner: B,
        busy: Busy,
    }
}

impl<B: Body> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The protocol a TLS handshake settled (ALPN), when it settled one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    Http1,
    H2,
}

impl Alpn {
    /// h2 only when the handshake chose it; anything else (http/1.1, or no ALPN at all) is
    /// HTTP/1.1. h2 over TLS requires ALPN (RFC 9113 section 3.2), so no client is owed h2
    /// without it, and serving such clients with the auto builder (which sniffs the preface)
    /// would leave them without the bound on the parsed head that only the HTTP/1 builder has.
    pub(crate) fn from_tls(protocol: Option<&[u8]>) -> Alpn {
        match protocol {
            Some(b"h2") => Alpn::H2,
            _ => Alpn::Http1,
        }
    }
}

/// Serve HTTP on one connection until it closes, the gateway drains it, the deadline cuts it, or it
/// sits idle: a connection with no request in flight for `request_head_timeout` (at most half of
/// it more: the watcher ticks twice per period) is closed. This is the one bound on a request
/// head that does not come or comes too slowly (hyper's own header timer is off: it cost a timer
/// per request), on the auto builder's preface read (which has no timer), on the keep-alive idle
/// time, and on an h2 connection whose peer answers pings.
///
/// A TLS connection (`alpn` is `Some`) is served by the HTTP/1 or h2 builder directly. The auto
/// builder (kept for SSH channels, `alpn` is `None`) reads the first 24 bytes to tell h2 from HTTP/1.1 and hands them
/// back; hyper's read buffer then grows from 8 to 16 KiB on the first request, and keeps that for
/// the connection's life. On h2 each request's future is boxed: hyper runs every h2 request as
/// its own task, sized for the pipeline's future (about 6 KiB), and that task lives as long as the
/// response body; boxed, the future's memory goes back when the response starts, and an event
/// stream's task keeps only the body (docs/performance.md, "Idle streams, round two").
pub(crate) fn serve_connection<I>(
    gw: Arc<Gateway>,
    mut conn: ConnInfo,
    io: I,
    alpn: Option<Alpn>,
) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // `drive` below ticks at this period whatever the requests do (`pipeline/deadline.rs`).
    conn.tick = Some(gw.limits.request_head_timeout / 2);
    let conn = Arc::new(conn);
    // An HTTPS connection's activity lives on its lease, where the connection table sees it.
    let (activity, shed) = match &conn.lease {
        Some(lease) => (lease.activity.clone(), Some(lease.shed.clone())),
        None => (Arc::new(Activity::default()), None),
    };
    let svc_gw = gw.clone();
    let svc_activity = activity.clone();
    let handle = move |req| {
        let busy = Busy::new(&svc_activity);
        Handled {
            inner: pipeline::handle(svc_gw.clone(), conn.clone(), req),
            busy: Some(busy),
        }
    };
    let io = TokioIo::new(io);
    // Built here and boxed, each protocol's connection on its own: the caller's task holds only
    // the box, not a future sized for the largest of the three. The connection gets a box of its
    // own too: an `async fn` keeps an argument it moves into a pinned local twice (1.8 KiB).
    match alpn {
        Some(Alpn::Http1) => {
            let connection = gw.doors.http1.serve_connection(io, service_fn(handle)).with_upgrades();
            Box::pin(drive(gw, activity, shed, Box::pin(connection), |c| {
                c.graceful_shutdown()
            }))
        }
        Some(Alpn::H2) => {
            let connection = gw
                .doors
                .http2
                .serve_connection(io, service_fn(move |req| Box::pin(handle(req))));
            Box::pin(drive(gw, activity, shed, Box::pin(connection), |c| {
                c.graceful_shutdown()
            }))
        }
        None => Box::pin(async move {
            let connection = gw.doors.http.serve_connection_with_upgrades(io, service_fn(handle));
            drive(gw.clone(), activity, shed, Box::pin(connection), |c| {
                c.graceful_shutdown()
            })
            .await
        }),
    }
}

/// What woke a connection's task and was ready.
enum Event<E> {
    Ended(Result<(), E>),
    Tick,
    Shed,
    Drain,
}

/// Which of a connection's watchers is ready, polled with the watchers' own waker: the idle
/// tick, the connection table's shed, the drain.
fn watched<E>(
    cx: &mut Context<'_>,
    tick: &mut tokio::time::Interval,
    shed: Pin<&mut impl Future>,
    drain: Pin<&mut impl Future>,
) -> Poll<Event<E>> {
    if tick.poll_tick(cx).is_ready() {
        Poll::Ready(Event::Tick)
    } else if shed.poll(cx).is_ready() {
        Poll::Ready(Event::Shed)
    } else if drain.poll(cx).is_ready() {
        Poll::Ready(Event::Drain)
    } else {
        Poll::Pending
    }
}

/// Close a connection gracefully; drop it if it has not closed within [`IDLE_CLOSE_GRACE`].
async fn close_within_grace<C: Future>(mut connection: Pin<&mut C>, shutdown: impl Fn(Pin<&mut C>)) {
    shutdown(connection.as_mut());
    let _ = tokio::time::timeout(IDLE_CLOSE_GRACE, connection).await;
}

/// Run a served connection under the idle watcher, the drain and the deadline; a connection the
/// connection table sheds (`shed` cancelled: it was idle and unauthenticated) is dropped at once.
async fn drive<C, E>(
    gw: Arc<Gateway>,
    activity: Arc<Activity>,
    shed: Option<tokio_util::sync::CancellationToken>,
    mut connection: Pin<Box<C>>,
    shutdown: impl Fn(Pin<&mut C>),
) where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let idle = gw.limits.request_head_timeout;
    let half = idle / 2;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + half, half);
    // Ticks in a row that saw no request in flight and none starting or ending.
    let mut quiet = 0u8;
    // Made once, not per turn of the loop: each future registers with its token once.
    let mut shed = std::pin::pin!(async move {
        match shed {
            Some(token) => token.cancelled_owned().await,
            None => std::future::pending().await,
        }
    });
    let mut drain = std::pin::pin!(gw.lifecycle.shutdown.cancelled());
    // The three watchers are polled only when one of them woke the task (`front/watchers.rs`).
    let mut watchers = Watchers::new();
    loop {
        let event = std::future::poll_fn(|cx| {
            if let Poll::Ready(res) = connection.as_mut().poll(cx) {
                return Poll::Ready(Event::Ended(res));
            }
            watchers.poll(cx, |cx| watched(cx, &mut tick, shed.as_mut(), drain.as_mut()))
        })
        .await;
        watchers.again();
        match event {
            Event::Ended(res) => {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            Event::Tick => {
                let touched = activity.touched.swap(false, Ordering::Relaxed);
                quiet = if activity.active.load(Ordering::Relaxed) == 0 && !touched {
                    quiet + 1
                } else {
                    0
                };
                // Two quiet half-periods: idle for at least `idle` (from the start, the first
                // tick counts the connection's first half-period).
                if quiet >= 2 {
                    tracing::debug!(idle_s = idle.as_secs_f32(), "closing an idle connection");
                    return close_within_grace(connection.as_mut(), &shutdown).await;
                }
            }
            Event::Shed => {
                tracing::debug!("closing an unauthenticated idle connection to make room");
                // The table chose it idle, but a request may have begun since: let that one
                // finish, briefly, rather than cut it. An idle one is dropped at once.
                if !activity.is_idle() {
                    close_within_grace(connection.as_mut(), &shutdown).await;
                }
                return;
            }
            Event::Drain => break,
        }
    }
    // Draining: finish requests in flight, accept no new ones on this connection.
    shutdown(connection.as_mut());
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = gw.lifecycle.abort.cancelled() => {}
    }
}
