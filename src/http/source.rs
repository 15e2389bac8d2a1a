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
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            Source::Pooled(b) => b.is_end_stream(),
            Source::Direct(b) => b.is_end_stream(),
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match self {
            Source::Pooled(b) => b.size_hint(),
            Source::Direct(b) => b.size_hint(),
        }
    }
}
