//! An answer's body on the direct road, read straight from its connection as the client takes
//! it; between reads it holds nothing but the connection and the decoder's state. When the body
//! has ended where its framing says and the server keeps the connection, the connection goes back
//! to its pool; anything else (a cut, an error, bytes past the end, a body dropped early) closes it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, ReadBuf};

use super::DirectError;
use super::head::Framing;
use crate::upstream::pool::{Io, Pool};

/// Bytes read at a time; from a buffer on the stack, so an idle stream keeps none.
const READ_SIZE: usize = 8 * 1024;

/// Where a connection goes back once its answer was read whole.
pub(crate) struct Return {
    pub pool: Arc<Pool>,
    pub worker: usize,
    /// Whose answer it was: the connection stays theirs for the pool's reuse grace.
    pub owner: crate::upstream::pool::Owner,
}

pub struct DirectBody {
    io: Option<Io>,
    framing: Framing,
    /// Data decoded but not yet handed on (what came with the head).
    ready: Option<Bytes>,
    /// Where the connection goes when the answer ends cleanly; `None` when it may not be reused.
    back: Option<Return>,
}

impl DirectBody {
    /// The body whose first bytes (`early`) came with the head. A body wholly in them has ended
    /// here, and its connection is back in the pool before the answer is passed on.
    pub(crate) fn new(io: Io, framing: Framing, early: Bytes, back: Option<Return>) -> Result<Self, DirectError> {
        let mut body = DirectBody {
            io: Some(io),
            framing,
            ready: None,
            back,
        };
        if !early.is_empty() {
            let data = body.decode(early)?;
            body.ready = (!data.is_empty()).then_some(data);
        }
        body.end_if_done();
        Ok(body)
    }

    fn ended(&self) -> bool {
        match &self.framing {
            Framing::Empty => true,
            Framing::Length(n) => *n == 0,
            Framing::Chunked(c) => c.is_done(),
            Framing::Close => false,
        }
    }

    /// Once the framing says the body is whole, the connection goes back to its pool (when it
    /// may) or is closed.
    fn end_if_done(&mut self) {
        if !self.ended() {
            return;
        }
        if let (Some(io), Some(back)) = (self.io.take(), self.back.take()) {
            back.pool.give_back(back.worker, io, back.owner);
        }
    }

    /// The data in `bytes` (read from the connection), as the framing says. Bytes past the
    /// body's end mean the connection is not reused.
    fn decode(&mut self, bytes: Bytes) -> Result<Bytes, DirectError> {
        let (data, read) = match &mut self.framing {
            Framing::Empty => (Bytes::new(), 0),
            Framing::Close => (bytes.clone(), bytes.len()),
            Framing::Length(left) => {
                let take = bytes.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= take as u64;
                (bytes.slice(..take), take)
            }
            Framing::Chunked(c) => {
                // One run of data (the usual case) is a slice of what was read; more are joined.
                let mut first: Option<&[u8]> = None;
                let mut joined: Option<bytes::BytesMut> = None;
                let read = c.feed(&bytes, |d| match (first, joined.as_mut()) {
                    (None, _) => first = Some(d),
                    (Some(f), None) => {
                        let mut j = bytes::BytesMut::with_capacity(f.len() + d.len());
                        j.extend_from_slice(f);
                        j.extend_from_slice(d);
                        joined = Some(j);
                    }
                    (Some(_), Some(j)) => j.extend_from_slice(d),
                })?;
                let data = match (joined, first) {
                    (Some(j), _) => j.freeze(),
                    (None, Some(one)) => bytes.slice_ref(one),
                    (None, None) => Bytes::new(),
                };
                (data, read)
            }
        };
        if read < bytes.len() {
            self.back = None;
        }
        Ok(data)
    }

    /// The next data from the connection, or its end.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, DirectError>>> {
        if let Some(ready) = self.ready.take() {
            return Poll::Ready(Some(Ok(ready)));
        }
        let Some(io) = self.io.as_mut() else {
            return Poll::Ready(None);
        };
        let mut space = [std::mem::MaybeUninit::<u8>::uninit(); READ_SIZE];
        let mut read = ReadBuf::uninit(&mut space);
        match Pin::new(io).poll_read(cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Some(Err(DirectError::Cut))),
            Poll::Ready(Ok(())) if read.filled().is_empty() => match self.framing {
                Framing::Close => Poll::Ready(None),
                _ => Poll::Ready(Some(Err(DirectError::Cut))),
            },
            Poll::Ready(Ok(())) => Poll::Ready(Some(self.decode(Bytes::copy_from_slice(read.filled())))),
        }
    }
}

impl Body for DirectBody {
    type Data = Bytes;
    type Error = DirectError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, DirectError>>> {
        let this = &mut *self;
        loop {
            if this.io.is_none() && this.ready.is_none() {
                return Poll::Ready(None);
            }
            let polled = std::task::ready!(this.poll_data(cx));
            this.end_if_done();
            match polled {
                None => {
                    this.io = None;
                    return Poll::Ready(None);
                }
                Some(Err(e)) => {
                    this.io = None;
                    return Poll::Ready(Some(Err(e)));
                }
                // Only a chunk's line or a trailer in this read: read on.
                Some(Ok(data)) if data.is_empty() => continue,
                Some(Ok(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.io.is_none() && self.ready.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let ready = self.ready.as_ref().map_or(0, |r| r.len() as u64);
        match &self.framing {
            Framing::Length(n) => SizeHint::with_exact(n + ready),
            Framing::Empty => SizeHint::with_exact(ready),
            _ => SizeHint::default(),
        }
    }
}
