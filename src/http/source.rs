//! The upstream's answer body, by either road: hyper's client's (`Incoming`, for requests with a
//! body and upgrades), or the direct road's (`upstream/direct.rs`, for requests without one).
//! One type for the response body's redaction and event filtering, whichever road it took.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::upstream::BoxError;
use crate::upstream::direct::DirectBody;

pub(crate) enum Source {
    Pooled(Incoming),
    /// Boxed: every answer's body is as large as its largest variant and is moved several times
    /// per request; unboxed, the direct body's decoder state cost the keep-alive path about 280
    /// instructions of copying per request (callgrind, docs/performance.md).
    Direct(Box<DirectBody>),
    /// What [`Source::read_up_to`] read first, then the rest of the body it read from.
    Prefixed(Box<Prefixed>),
}

pub(crate) struct Prefixed {
    head: Option<Bytes>,
    rest: Source,
}

impl Source {
    /// The body read whole when it ends within `cap` bytes; past that, given back as a body that
    /// yields what was read and then the rest (a web UI file without a declared length: OpenCode
    /// 2 sends its files chunked; compressed when small, streamed as it comes when not). `None`:
    /// the body failed while it was read.
    pub(crate) async fn read_up_to(mut self, cap: usize) -> Option<Result<Bytes, Source>> {
        use http_body_util::BodyExt;
        let mut read = bytes::BytesMut::new();
        while let Some(frame) = self.frame().await {
            let Ok(data) = frame.ok()?.into_data() else {
                continue;
            };
            read.extend_from_slice(&data);
            if read.len() > cap {
                let head = Some(read.freeze());
                return Some(Err(Source::Prefixed(Box::new(Prefixed { head, rest: self }))));
            }
        }
        Some(Ok(read.freeze()))
    }
}

impl From<Incoming> for Source {
    fn from(body: Incoming) -> Self {
        Source::Pooled(body)
    }
}

impl From<DirectBody> for Source {
    fn from(body: DirectBody) -> Self {
        Source::Direct(Box::new(body))
    }
}

impl Body for Source {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Source::Pooled(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            Source::Direct(b) => Pin::new(&mut **b).poll_frame(cx).map_err(Into::into),
            Source::Prefixed(p) => match p.head.take() {
                Some(head) => Poll::Ready(Some(Ok(Frame::data(head)))),
                None => Pin::new(&mut p.rest).poll_frame(cx),
            },
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            Source::Pooled(b) => b.is_end_stream(),
            Source::Direct(b) => b.is_end_stream(),
            Source::Prefixed(p) => p.head.is_none() && p.rest.is_end_stream(),
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match self {
            Source::Pooled(b) => b.size_hint(),
            Source::Direct(b) => b.size_hint(),
            Source::Prefixed(p) => {
                let head = p.head.as_ref().map_or(0, |h| h.len() as u64);
                let rest = p.rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + head);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + head);
                }
                hint
            }
        }
    }
}
