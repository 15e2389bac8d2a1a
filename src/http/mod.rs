//! The HTTP core: serves any byte stream (a TLS stream, an SSH channel) with one hyper stack
//! (HTTP/1.1 and h2, upgrades) and the request pipeline. Connections drain on shutdown and are
//! cut when the drain deadline passes.

pub mod audit;
pub mod body;
pub mod compress;
pub mod error;
pub mod forward;
pub mod own_files;
pub mod pipeline;
pub mod request;
pub mod response;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Body;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::gateway::Gateway;

/// How a connection reached the gateway.
#[derive(Debug, Clone)]
pub enum Front {
    /// HTTPS; `bound` is set on a project's own listener.
    Tls { bound: Option<Arc<str>> },
    /// An SSH `direct-tcpip` channel: the SSH login is the identity, the target is the project.
    Ssh { user: Arc<str>, project: Arc<str> },
}

pub struct ConnInfo {
    pub peer: SocketAddr,
    pub front: Front,
    /// The last password credential verified on this connection (`auth/memo.rs`).
    pub auth_memo: crate::auth::memo::AuthMemo,
}

impl ConnInfo {
    pub fn new(peer: SocketAddr, front: Front) -> ConnInfo {
        ConnInfo {
            peer,
            front,
            auth_memo: Default::default(),
        }
    }
}

impl ConnInfo {
    pub fn scheme(&self) -> &'static str {
        match self.front {
            Front::Tls { .. } => "https",
            Front::Ssh { .. } => "http",
        }
    }

    pub fn transport(&self) -> &'static str {
        match self.front {
            Front::Tls { .. } => "tls",
            Front::Ssh { .. } => "ssh",
        }
    }

    pub fn bound_project(&self) -> Option<&str> {
        match &self.front {
            Front::Tls { bound } => bound.as_deref(),
            Front::Ssh { project, .. } => Some(project),
        }
    }
}

/// Answer every request on a connection to a removed project's own port with 404 and the reason
/// (reload does not close listeners). Such a connection lives at most twice `request_head_timeout`.
pub async fn serve_gone<I>(gw: Arc<Gateway>, project: Arc<str>, io: I)
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
    let connection = gw.http.serve_connection(TokioIo::new(io), service);
    let limit = gw.limits.request_head_timeout.saturating_mul(2);
    tokio::select! {
        _ = tokio::time::timeout(limit, connection) => {}
        _ = gw.shutdown.cancelled() => {}
    }
}

/// How long a connection whose idle watcher closed it gracefully may take to finish closing (an h2
/// peer that never acknowledges the GOAWAY) before it is dropped.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Requests in flight on one connection (a request counts until its response body ends or is
/// dropped), and whether one started or ended since the idle watcher last looked.
#[derive(Default)]
struct Activity {
    active: AtomicUsize,
    touched: AtomicBool,
}

/// One request in flight; dropping it (body ended, or request abandoned) marks the end.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: &Arc<Activity>) -> Busy {
        a.active.fetch_add(1, Ordering::Relaxed);
        a.touched.store(true, Ordering::Relaxed);
        Busy(a.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
        self.0.touched.store(true, Ordering::Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds its request's [`Busy`] mark until hyper drops it.
    pub struct Tracked<B> {
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

/// Serve HTTP on one connection until it closes, the gateway drains it, the deadline cuts it, or it
/// sits idle: a connection with no request in flight for `request_head_timeout` (at most half of
/// it more: the watcher ticks twice per period) is closed. This is the one bound on a request
/// head that does not come or comes too slowly (hyper's own header timer is off: it cost a timer
/// per request), on the auto builder's preface read (which has no timer), on the keep-alive idle
/// time, and on an h2 connection whose peer answers pings.
pub async fn serve_connection<I>(gw: Arc<Gateway>, conn: Arc<ConnInfo>, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let svc_gw = gw.clone();
    let svc_activity = activity.clone();
    let service = service_fn(move |req| {
        let busy = Busy::new(&svc_activity);
        let handled = pipeline::handle(svc_gw.clone(), conn.clone(), req);
        async move {
            let resp = handled.await?;
            Ok::<_, std::convert::Infallible>(resp.map(|inner| Tracked { inner, busy }))
        }
    });
    let connection = gw.http.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(connection);
    let idle = gw.limits.request_head_timeout;
    let half = idle / 2;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + half, half);
    // Ticks in a row that saw no request in flight and none starting or ending.
    let mut quiet = 0u8;
    loop {
        tokio::select! {
            res = connection.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = tick.tick() => {
                let touched = activity.touched.swap(false, Ordering::Relaxed);
                quiet = if activity.active.load(Ordering::Relaxed) == 0 && !touched { quiet + 1 } else { 0 };
                // Two quiet half-periods: idle for at least `idle` (from the start, the first
                // tick counts the connection's first half-period).
                if quiet >= 2 {
                    tracing::debug!(idle_s = idle.as_secs_f32(), "closing an idle connection");
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(IDLE_CLOSE_GRACE, connection.as_mut()).await;
                    return;
                }
            }
            _ = gw.shutdown.cancelled() => break,
        }
    }
    // Draining: finish requests in flight, accept no new ones on this connection.
    connection.as_mut().graceful_shutdown();
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = gw.abort.cancelled() => {}
    }
}
