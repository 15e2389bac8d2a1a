//! The response body type: a small buffer the gateway made (errors, health), or the upstream's
//! body streamed frame by frame, never collected. It carries the request's access record, written
//! when the body ends or is dropped, so a stream's line has its real byte count and duration.

use crate::metrics::StreamGauge;
use crate::ratelimit::SlotGuard;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::Method;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::http::source::Source;
use crate::policy::event_scope::EventFilter;
use crate::upstream::BoxError;
use crate::upstream::pool::Lease;
use crate::upstream::redact::Redactor;

/// A request's body on its way upstream: the client's stream, or bytes the gateway holds for a
/// request it makes on a user's behalf (`pipeline/internal.rs`).
pub(crate) enum RequestBody {
    Stream(Incoming),
    Whole(Bytes),
}

/// One access-log line, filled in as the request goes through the pipeline.
/// What a long-lived request holds while it lives: the user's stream slot (none over SSH, whose
/// channel holds it) and its count in `streams_open`.
pub(crate) struct StreamHold {
    // Held for their Drop: the slot and the gauge are given back when the stream ends.
    pub _slot: Option<SlotGuard<Arc<str>>>,
    pub _gauge: StreamGauge,
}

pub(crate) struct AccessRecord {
    pub peer: IpAddr,
    pub transport: &'static str,
    pub user: Option<Arc<str>>,
    /// The project, once resolved (its name for the log, its counters for the metrics).
    pub project: Option<Arc<crate::gateway::state::ProjectState>>,
    /// What the request counts as in the metrics, from its resolved route.
    pub class: crate::policy::plan::RouteClass,
    pub method: Method,
    /// Path and query, with credential-like query values redacted.
    pub target: String,
    pub status: u16,
    pub reason: Option<&'static str>,
    pub started: Instant,
    /// The audit record begun for an audited route, finished when the status is known.
    pub audit: Option<Box<crate::http::audit::Pending>>,
    /// Whether the line was written (by the answer's body, at its end).
    written: bool,
}

/// A request dropped before it had an answer (its client went away while the gateway or the
/// upstream was still working on it) still gets its line, with status 0: an answer that never
/// came is what an operator looks for in the log.
impl Drop for AccessRecord {
    fn drop(&mut self) {
        if !self.written && self.status == 0 {
            self.emit(0, "client_gone");
        }
    }
}

impl AccessRecord {
    /// A new record; `target` is asked only when access lines are written (`RUST_LOG` can turn
    /// them off).
    pub(crate) fn new(peer: IpAddr, transport: &'static str, method: Method, target: impl FnOnce() -> String) -> Self {
        AccessRecord {
            peer,
            transport,
            user: None,
            project: None,
            class: crate::policy::plan::RouteClass::Other,
            method,
            target: if tracing::enabled!(target: "access", tracing::Level::INFO) {
                target()
            } else {
                String::new()
            },
            status: 0,
            reason: None,
            started: Instant::now(),
            audit: None,
            written: false,
        }
    }

    /// The answer's status, counted in its project's metrics (the handles were resolved with the
    /// state: one atomic add, no label lookup), or in those of requests that named none.
    pub(crate) fn answered(&mut self, status: u16, metrics: &crate::metrics::Metrics) {
        self.status = status;
        self.project
            .as_ref()
            .map_or(&metrics.unrouted, |p| &p.metrics)
            .count(self.class, status);
    }

    fn emit(&mut self, bytes: u64, outcome: &str) {
        self.written = true;
        tracing::info!(
            target: "access",
            peer = %self.peer,
            transport = self.transport,
            user = self.user.as_deref().unwrap_or("-"),
            project = self.project.as_ref().map_or("-", |p| &*p.name),
            method = %self.method,
            path = %self.target,
            status = self.status,
            bytes,
            duration_ms = self.started.elapsed().as_millis() as u64,
            reason = self.reason.unwrap_or("-"),
            outcome,
        );
    }
}

/// Writes the access line when the body is done.
struct Meter {
    record: AccessRecord,
    bytes: u64,
    outcome: &'static str,
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.record.emit(self.bytes, self.outcome);
    }
}

enum Kind {
    Full(Option<Bytes>),
    Stream(Source, Option<Arc<Redactor>>),
    /// An event stream: filtered to one directory when there is a filter, and ended cleanly
    /// (not cut) when the upstream's end breaks.
    Events(Source, Option<Box<EventFilter>>, Option<Arc<Redactor>>),
    /// Made by the gateway itself (its pages' live updates), chunk by chunk.
    Channel(tokio::sync::mpsc::Receiver<Bytes>),
}

pub(crate) struct ProxyBody {
    kind: Kind,
    meter: Option<Box<Meter>>,
    /// The upstream connection the body is read from, given back to its pool at the body's end.
    lease: Option<Lease>,
    /// The user's stream slot an event stream holds until it ends.
    slot: Option<StreamHold>,
}

impl ProxyBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        let b: Bytes = bytes.into();
        ProxyBody {
            kind: Kind::Full((!b.is_empty()).then_some(b)),
            meter: None,
            lease: None,
            slot: None,
        }
    }

    /// An event stream, filtered to one directory when there is a filter (see [`EventFilter`]).
    /// When the upstream's side breaks (its server died, a box's SSH connection fell), the
    /// client's stream ends as a stream ends: an event source then reconnects, as it would after
    /// any end, and an event cut half-way is dropped by it (an incomplete event is never
    /// dispatched). A body with a length is never treated so: its cut must show.
    pub(crate) fn events(
        body: impl Into<Source>,
        filter: Option<EventFilter>,
        redactor: Option<Arc<Redactor>>,
    ) -> Self {
        ProxyBody {
            kind: Kind::Events(body.into(), filter.map(Box::new), redactor),
            meter: None,
            lease: None,
            slot: None,
        }
    }

    /// A stream the gateway writes itself: each chunk sent on the channel, until it is dropped.
    pub(crate) fn channel(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Self {
        ProxyBody {
            kind: Kind::Channel(rx),
            meter: None,
            lease: None,
            slot: None,
        }
    }

    pub(crate) fn empty() -> Self {
        ProxyBody {
            kind: Kind::Full(None),
            meter: None,
            lease: None,
            slot: None,
        }
    }

    /// The upstream's body, frame by frame, with its credential overwritten if it ever appears.
    pub(crate) fn stream(body: impl Into<Source>, redactor: Option<Arc<Redactor>>) -> Self {
        ProxyBody {
            kind: Kind::Stream(body.into(), redactor),
            meter: None,
            lease: None,
            slot: None,
        }
    }

    /// The upstream connection this body comes from: back to the pool once the body is read.
    pub(crate) fn leased(mut self, lease: Option<Lease>) -> Self {
        match lease {
            Some(lease) if self.is_end_stream() => lease.release(),
            lease => self.lease = lease,
        }
        self
    }

    /// Hold the user's stream slot until the body ends.
    pub(crate) fn holding(mut self, slot: Option<StreamHold>) -> Self {
        if !self.is_end_stream() {
            self.slot = slot;
        }
        self
    }

    /// Attach the access record, written when the body ends. With access lines turned off there
    /// is nothing to attach and nothing is allocated.
    pub(crate) fn metered(mut self, record: AccessRecord) -> Self {
        if !tracing::enabled!(target: "access", tracing::Level::INFO) {
            return self;
        }
        let done = self.is_end_stream();
        self.meter = Some(Box::new(Meter {
            record,
            bytes: 0,
            outcome: "complete",
        }));
        if done {
            self.meter = None;
        }
        self
    }
}

impl ProxyBody {
    /// The upstream's event stream broke: the client's ends cleanly (its browser reconnects), the
    /// access line says why, and the broken connection never goes back to the pool.
    fn events_broke(&mut self, e: &BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        tracing::debug!(error = %e, "the upstream's event stream broke: ending the client's cleanly");
        if let Some(m) = self.meter.as_mut() {
            m.outcome = "upstream_error";
        }
        self.lease = None;
        Poll::Ready(None)
    }

    /// The bookkeeping after a poll: bytes counted for the access line; at the end the line
    /// written, the stream slot freed and the connection given back to its pool.
    #[inline]
    fn settle(&mut self, polled: &Poll<Option<Result<Frame<Bytes>, BoxError>>>) {
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(m)) = (frame.data_ref(), self.meter.as_mut()) {
                    m.bytes += data.len() as u64;
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(m) = self.meter.as_mut() {
                    m.outcome = "upstream_error";
                }
                self.meter = None;
            }
            Poll::Ready(None) => {
                self.meter = None;
                self.slot = None;
                if let Some(lease) = self.lease.take() {
                    lease.release();
                }
            }
            Poll::Pending => {}
        }
    }
}

/// The upstream's next frame, its data redacted.
#[inline]
fn poll_redacted(
    body: &mut Source,
    redactor: Option<&Redactor>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    match Pin::new(body).poll_frame(cx) {
        Poll::Ready(Some(Ok(frame))) => match (redactor, frame.into_data()) {
            (Some(r), Ok(data)) => Poll::Ready(Some(Ok(Frame::data(r.frame(data))))),
            (None, Ok(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
            (_, Err(frame)) => Poll::Ready(Some(Ok(frame))),
        },
        other => other,
    }
}

/// The next frame of an event stream that holds anything for the client: filtered to the
/// directory, then redacted. The upstream's error is handed back for the caller to end cleanly.
#[inline]
fn poll_events(
    body: &mut Source,
    mut filter: Option<&mut EventFilter>,
    redactor: Option<&Redactor>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    loop {
        let data = match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            },
            other => return other,
        };
        let kept = match filter.as_deref_mut() {
            Some(f) => f.push(&data),
            None => data,
        };
        // A frame that held only other directories' events: wait for the next.
        if kept.is_empty() {
            continue;
        }
        let kept = match redactor {
            Some(r) => r.frame(kept),
            None => kept,
        };
        return Poll::Ready(Some(Ok(Frame::data(kept))));
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = match &mut this.kind {
            Kind::Full(data) => Poll::Ready(data.take().map(|b| Ok(Frame::data(b)))),
            Kind::Channel(rx) => rx.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
            Kind::Stream(body, redactor) => poll_redacted(body, redactor.as_deref(), cx),
            Kind::Events(body, filter, redactor) => {
                match poll_events(body, filter.as_deref_mut(), redactor.as_deref(), cx) {
                    Poll::Ready(Some(Err(e))) => this.events_broke(&e),
                    other => other,
                }
            }
        };
        this.settle(&polled);
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(data) => data.is_none(),
            Kind::Stream(body, _) | Kind::Events(body, ..) => body.is_end_stream(),
            Kind::Channel(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Stream(body, _) => body.size_hint(),
            Kind::Events(..) | Kind::Channel(_) => SizeHint::default(),
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // Dropped before its end: the client went away (or the gateway is shutting down).
        let ended = self.is_end_stream();
        if let Some(m) = self.meter.as_mut()
            && !ended
        {
            m.outcome = "client_gone";
        }
        // Read to its end but never polled past it (hyper stops at a known length): the
        // connection is clean. Otherwise it goes with the lease, and hyper closes it.
        if ended && let Some(lease) = self.lease.take() {
            lease.release();
        }
    }
}

/// Bodies the gateway reads whole (directory and session checks, a captured ticket, a permission
/// answer) are small JSON.
pub(crate) const SMALL_BODY: usize = 1024 * 1024;

/// An upstream's answer read whole (at most `max` bytes), for the few routes the gateway must
/// look into; `None` when it was cut or larger.
pub(crate) async fn read_whole<B>(body: B, max: usize) -> Option<Bytes>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    use http_body_util::BodyExt;
    Some(http_body_util::Limited::new(body, max).collect().await.ok()?.to_bytes())
}
