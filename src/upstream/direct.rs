//! The event-stream road: a long-lived GET (an event stream) gets a connection of its own, and
//! the gateway writes the request and reads the answer itself instead of through hyper's client.
//! An idle stream then keeps no buffer upstream: hyper's client connection holds a dispatch
//! channel, an 8 KiB read and an 8 KiB write buffer and a task for as long as the stream lives,
//! about 17 KiB resident per idle stream (docs/performance.md, "Idle streams, round three").
//! The connection is made by the pool's dial (TCP, or a box's channel: one road, two
//! transports) and closed when the stream ends; it never goes back to the pool.
//!
//! Strict where it reads: the head by `httparse` (at most [`MAX_HEADERS`] fields and
//! [`MAX_HEAD`] bytes), the framing by RFC 9112 §6.3 (chunked last: chunked; another coding:
//! read to the close; otherwise one Content-Length, or to the close), chunks by `chunked.rs`.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};

use super::BoxError;
use super::chunked::Chunked;
use super::pool::{Io, Pool};

/// The largest answer head read, and the most header fields in it (hyper's client allows 100).
pub const MAX_HEAD: usize = 64 * 1024;
pub const MAX_HEADERS: usize = 100;
/// Informational answers (100, 102, 103) skipped before the answer; a server that sends more is
/// refused rather than read forever.
pub const MAX_INFORMATIONAL: usize = 8;
/// Bytes read at a time; from a buffer on the stack, so an idle stream keeps none.
const READ_SIZE: usize = 8 * 1024;

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DirectError {
    #[error("the upstream's answer head is malformed ({0})")]
    BadHead(String),
    #[error("the upstream's answer head is larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("the upstream's answer has an invalid Content-Length")]
    BadLength,
    #[error("the upstream switched protocols unasked")]
    Switched,
    #[error("the upstream sent more than {MAX_INFORMATIONAL} informational answers")]
    TooManyInformational,
    #[error("the connection closed before a response")]
    ClosedBeforeAnswer,
    #[error("the upstream closed the connection in the middle of the answer")]
    Cut,
    #[error("the upstream's chunked answer is malformed: {0}")]
    Chunk(#[from] super::chunked::ChunkError),
}

/// How an answer's body ends.
#[derive(Debug, Clone)]
pub enum Framing {
    Empty,
    Length(u64),
    Chunked(Chunked),
    /// Until the upstream closes the connection.
    Close,
}

/// The request head, as hyper's client would write it: the request line and every field.
pub fn request_head(req: &http::request::Parts) -> Vec<u8> {
    let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(req.method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &req.headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// An answer's head from the start of `buf`: its parts, and the head's length; `None` while the
/// head is not whole.
pub fn parse_head(buf: &[u8]) -> Result<Option<(http::response::Parts, usize)>, DirectError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut fields);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(DirectError::HeadTooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(DirectError::BadHead(e.to_string())),
    };
    if len > MAX_HEAD {
        return Err(DirectError::HeadTooLarge);
    }
    let code = parsed.code.ok_or_else(|| DirectError::BadHead("no status".into()))?;
    let status = StatusCode::from_u16(code).map_err(|e| DirectError::BadHead(e.to_string()))?;
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    for f in parsed.headers.iter() {
        let name = HeaderName::from_bytes(f.name.as_bytes()).map_err(|e| DirectError::BadHead(e.to_string()))?;
        let value = HeaderValue::from_bytes(f.value).map_err(|e| DirectError::BadHead(e.to_string()))?;
        headers.append(name, value);
    }
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.headers = headers;
    Ok(Some((parts, len)))
}

/// How the body of an answer with this head ends (RFC 9112 §6.3, for an answer to a GET). A
/// Content-Length beside a transfer coding is dropped: the coding frames the body, and the
/// client must not be told a length the body does not have.
pub fn framing(parts: &mut http::response::Parts) -> Result<Framing, DirectError> {
    let status = parts.status;
    if status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::Empty);
    }
    let codings = parts.headers.get_all(header::TRANSFER_ENCODING);
    if codings.iter().next().is_some() {
        let last = codings
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .map(|c| c.trim_ascii())
            .rfind(|c| !c.is_empty());
        let framing = match last {
            Some(c) if c.eq_ignore_ascii_case(b"chunked") => Framing::Chunked(Chunked::default()),
            _ => Framing::Close,
        };
        parts.headers.remove(header::CONTENT_LENGTH);
        return Ok(framing);
    }
    let mut length = None;
    for value in parts.headers.get_all(header::CONTENT_LENGTH) {
        for item in value.as_bytes().split(|&b| b == b',') {
            let item = item.trim_ascii();
            if item.is_empty() || !item.iter().all(u8::is_ascii_digit) || item.len() > 19 {
                return Err(DirectError::BadLength);
            }
            let n: u64 = std::str::from_utf8(item)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(DirectError::BadLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(DirectError::BadLength);
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    })
}

/// A long-lived GET (an event stream) on a connection of its own, made by `pool`'s dial and
/// closed when the answer ends.
pub(crate) async fn open(
    pool: &Pool,
    head: &http::request::Parts,
    connect_timeout: std::time::Duration,
) -> Result<Response<DirectBody>, BoxError> {
    let io = pool.dial_io(connect_timeout).await?;
    exchange(io, head).await
}

/// Send `req` (a GET without a body) on `io` and read the answer's head; the body is read as the
/// client takes it. Informational answers (1xx but 101) are skipped, as hyper does.
async fn exchange(mut io: Io, req: &http::request::Parts) -> Result<Response<DirectBody>, BoxError> {
    io.write_all(&request_head(req)).await?;
    io.flush().await?;
    let mut buf = BytesMut::with_capacity(1024);
    let mut informational = 0;
    loop {
        if let Some((mut parts, len)) = parse_head(&buf)? {
            let rest = buf.split_off(len).freeze();
            if parts.status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(DirectError::Switched.into());
            }
            if parts.status.is_informational() {
                informational += 1;
                if informational > MAX_INFORMATIONAL {
                    return Err(DirectError::TooManyInformational.into());
                }
                buf = BytesMut::from(&rest[..]);
                continue;
            }
            let framing = framing(&mut parts)?;
            let body = DirectBody::new(io, framing, rest);
            return Ok(Response::from_parts(parts, body));
        }
        buf.reserve(READ_SIZE.min(MAX_HEAD - buf.len()).max(1));
        if tokio::io::AsyncReadExt::read_buf(&mut io, &mut buf).await? == 0 {
            return Err(DirectError::ClosedBeforeAnswer.into());
        }
    }
}

/// An answer's body read straight from its connection. Between reads it holds nothing but the
/// connection and the decoder's state.
pub struct DirectBody {
    io: Option<Io>,
    framing: Framing,
    /// Body bytes that came with the head.
    early: Option<Bytes>,
}

impl DirectBody {
    fn new(io: Io, framing: Framing, early: Bytes) -> Self {
        let mut body = DirectBody {
            io: Some(io),
            framing,
            early: (!early.is_empty()).then_some(early),
        };
        if body.ended() {
            body.io = None;
        }
        body
    }

    fn ended(&self) -> bool {
        match &self.framing {
            Framing::Empty => true,
            Framing::Length(n) => *n == 0,
            Framing::Chunked(c) => c.is_done(),
            Framing::Close => false,
        }
    }

    /// The data in `bytes` (read from the connection), as the framing says.
    fn decode(&mut self, bytes: &[u8]) -> Result<Bytes, DirectError> {
        match &mut self.framing {
            Framing::Empty => Ok(Bytes::new()),
            Framing::Close => Ok(Bytes::copy_from_slice(bytes)),
            Framing::Length(left) => {
                let take = bytes.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= take as u64;
                Ok(Bytes::copy_from_slice(&bytes[..take]))
            }
            Framing::Chunked(c) => {
                let mut data = BytesMut::new();
                c.feed(bytes, |d| data.extend_from_slice(d))?;
                Ok(data.freeze())
            }
        }
    }

    /// The next data from the connection, or its end.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, DirectError>>> {
        if let Some(early) = self.early.take() {
            return Poll::Ready(Some(self.decode(&early)));
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
            Poll::Ready(Ok(())) => Poll::Ready(Some(self.decode(read.filled()))),
        }
    }
}

impl Body for DirectBody {
    type Data = Bytes;
    type Error = DirectError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, DirectError>>> {
        let this = &mut *self;
        loop {
            if this.io.is_none() && this.early.is_none() {
                return Poll::Ready(None);
            }
            let polled = std::task::ready!(this.poll_data(cx));
            if this.ended() {
                // The connection is not reused: closed as soon as the answer is whole.
                this.io = None;
            }
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
        self.io.is_none() && self.early.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.framing {
            Framing::Length(n) if self.early.is_none() => SizeHint::with_exact(*n),
            Framing::Empty => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests;
