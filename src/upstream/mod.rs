//! The OpenCode side: each server's endpoint (`endpoint`) and keep-alive pool (`pool`, the one
//! road to it: proxied requests and the gateway's own health checks, document reads, lookups and
//! the inbox's streams all take it), redaction of its credential (`redact`), supervision of
//! spawned servers (`supervise`); here, the request body that streams the client's upload,
//! bounded in size.

pub mod api;
mod backoff;
mod box_exec;
mod box_handler;
pub mod box_links;
pub mod chunked;
pub mod direct;
pub mod endpoint;
pub(crate) mod job;
mod job_spec;
pub(crate) mod model_report;
pub mod pool;
mod quick_ack;
pub mod redact;
pub mod ssh_link;
pub mod supervise;
#[cfg(test)]
pub(crate) mod test_box;
#[cfg(test)]
pub(crate) mod test_server;

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::Sleep;

pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// Bun (OpenCode's runtime) closes idle keep-alive connections after 10 s; pools let go first
/// so a request never lands on a socket the server is closing. Shared with `upstream_pool`.
pub(crate) const POOL_IDLE: Duration = Duration::from_secs(4);

/// A request body on its way upstream.
pub enum UpstreamBody {
    Empty,
    Full(Option<Bytes>),
    Client(Box<ClientBody>),
}

/// The client's upload: bounded in size, and cut when it stops arriving (a slow-body attack
/// would otherwise hold an upstream connection forever).
pub struct ClientBody {
    body: Incoming,
    remaining: u64,
    idle_after: Duration,
    /// Armed the first time the body has nothing to give, so a body that is already buffered
    /// (most are) never touches the timer wheel.
    idle: Option<Pin<Box<Sleep>>>,
    /// Bytes read so far, for an audited request that did not say its length.
    counted: Option<Arc<AtomicU64>>,
}

#[derive(Debug, thiserror::Error)]
#[error("the request body is larger than the gateway allows")]
pub(crate) struct BodyTooLarge;

#[derive(Debug, thiserror::Error)]
#[error("the request body stopped arriving")]
pub(crate) struct BodyIdle;

/// The client's body could not be read (a malformed chunk, a connection cut mid-body): the
/// client's fault, not the upstream's.
#[derive(Debug, thiserror::Error)]
#[error("the request body could not be read: {0}")]
pub(crate) struct BodyBroken(hyper::Error);

impl UpstreamBody {
    /// The client's body, cut off with an error once it passes `max` bytes or goes quiet for `idle`.
    /// A request without a body (most GETs) costs nothing here.
    pub(crate) fn client(body: Incoming, max: u64, idle: Duration) -> Self {
        if body.is_end_stream() {
            return UpstreamBody::Empty;
        }
        UpstreamBody::Client(Box::new(ClientBody {
            body,
            remaining: max,
            idle_after: idle,
            idle: None,
            counted: None,
        }))
    }

    /// Count the client's bytes into `counter` as they pass (the audit trail's size of a body
    /// sent without Content-Length).
    pub(crate) fn counting(mut self, counter: Option<Arc<AtomicU64>>) -> Self {
        if let UpstreamBody::Client(c) = &mut self {
            c.counted = counter;
        }
        self
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::Empty => Poll::Ready(None),
            UpstreamBody::Full(data) => Poll::Ready(data.take().map(|b| Ok(Frame::data(b)))),
            UpstreamBody::Client(c) => match Pin::new(&mut c.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        let n = data.len() as u64;
                        if n > c.remaining {
                            return Poll::Ready(Some(Err(Box::new(BodyTooLarge))));
                        }
                        c.remaining -= n;
                        if let Some(counted) = &c.counted {
                            counted.fetch_add(n, Ordering::Relaxed);
                        }
                    }
                    if let Some(idle) = c.idle.as_mut() {
                        idle.as_mut().reset(tokio::time::Instant::now() + c.idle_after);
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(BodyBroken(e))))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => match c
                    .idle
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(c.idle_after)))
                    .as_mut()
                    .poll(cx)
                {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyIdle)))),
                    Poll::Pending => Poll::Pending,
                },
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Empty => true,
            UpstreamBody::Full(d) => d.is_none(),
            UpstreamBody::Client(c) => c.body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Empty => SizeHint::with_exact(0),
            UpstreamBody::Full(d) => SizeHint::with_exact(d.as_ref().map_or(0, |b| b.len() as u64)),
            UpstreamBody::Client(c) => c.body.size_hint(),
        }
    }
}

/// A short, secret-free reason for a failed upstream request, for the 502 message and the log.
pub(crate) fn describe(err: &(dyn StdError + 'static)) -> String {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    let mut last = err.to_string();
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
                std::io::ErrorKind::TimedOut => "connection timed out".into(),
                std::io::ErrorKind::ConnectionReset => "connection reset".into(),
                _ => io.to_string(),
            };
        }
        if e.downcast_ref::<BodyTooLarge>().is_some() {
            return BodyTooLarge.to_string();
        }
        if e.downcast_ref::<BodyIdle>().is_some() {
            return BodyIdle.to_string();
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_incomplete_message()
        {
            return "the connection closed before a response".into();
        }
        last = e.to_string();
        cur = e.source();
    }
    if last.contains("timed out") || last.contains("timeout") {
        return "connection timed out".into();
    }
    last
}

/// Did the request fail because of the client's body (too large, or stopped arriving)?
pub(crate) fn client_body_fault(err: &(dyn StdError + 'static)) -> Option<ClientBodyFault> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.downcast_ref::<BodyTooLarge>().is_some() {
            return Some(ClientBodyFault::TooLarge);
        }
        if e.downcast_ref::<BodyIdle>().is_some() {
            return Some(ClientBodyFault::Idle);
        }
        if let Some(b) = e.downcast_ref::<BodyBroken>() {
            return Some(ClientBodyFault::Broken(b.0.to_string()));
        }
        cur = e.source();
    }
    None
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientBodyFault {
    TooLarge,
    Idle,
    Broken(String),
}
