//! The direct road: a request without a body (a GET or a HEAD: most of the API, and every event
//! stream) is written and its answer read by the gateway itself, on a kept-alive connection of
//! the pool's, instead of through hyper's client. That takes out, per request, the client's
//! dispatch channel, its connection task and the wake-up between it and the request, and for an
//! idle event stream the client's buffers (docs/performance.md). Requests with a body and
//! upgrades keep hyper's client.
//!
//! The connection is made by the pool's dial (TCP, or a box's channel: one road, two
//! transports) and given back when the answer was read to its end; a kept connection the server
//! had closed meanwhile is noticed when nothing comes back, and the request (idempotent, with no
//! body) is sent again on another.
//!
//! Strict where it reads: the head by `httparse` (at most [`MAX_HEADERS`] fields and
//! [`MAX_HEAD`] bytes), the framing by RFC 9112 §6.3 (chunked last: chunked; another coding:
//! read to the close; otherwise one Content-Length, or to the close), chunks by `chunked.rs`.

mod body;
mod head;

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http::{Method, Response, StatusCode};
use tokio::io::AsyncWriteExt;

use super::BoxError;
use super::pool::{Io, Owner, Pool};
pub use body::DirectBody;
use body::Return;
pub use head::{
    Framing, MAX_HEAD, MAX_HEADERS, framing, keeps_alive, parse_answer_head, parse_head, request_head, take_answer_head,
};

/// Informational answers (100, 102, 103) skipped before the answer; a server that sends more is
/// refused rather than read forever.
pub const MAX_INFORMATIONAL: usize = 8;
/// The first read of an answer: room for a head and a small body.
const FIRST_READ: usize = 4 * 1024;

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

/// How an exchange failed: with nothing of an answer read (a kept connection may have been
/// closed by the server meanwhile), or after.
enum Failure {
    Unanswered(BoxError),
    Answered(BoxError),
}

/// Send `head` (a GET's or a HEAD's, without a body: [`request_head`], or the pipeline's
/// `http/upstream_head.rs`) on a kept connection of `pool`'s, or a new one, and read the
/// answer's head; the body is read as the client takes it.
pub(crate) async fn send(
    pool: &Arc<Pool>,
    head: &[u8],
    method: &Method,
    owner: Owner,
    connect_timeout: Duration,
) -> Result<Response<DirectBody>, BoxError> {
    let head_only = *method == Method::HEAD;
    let worker = pool.worker();
    loop {
        let (io, kept) = match pool.take_kept(worker, owner) {
            Some(io) => (io, true),
            // Boxed: a new connection is rare once the pool is warm, and the request's future
            // (which hyper keeps for an HTTP/1.1 connection's life) would be sized for it.
            None => (Box::pin(pool.dial_io(connect_timeout)).await?, false),
        };
        let back = Return {
            pool: pool.clone(),
            worker,
            owner,
        };
        match exchange(io, head, head_only, back).await {
            Ok(response) => return Ok(response),
            // The server had closed the kept connection: nothing was answered, and a request
            // without a body that changes nothing may be sent again, as hyper's client does.
            Err(Failure::Unanswered(_)) if kept => continue,
            Err(Failure::Unanswered(e) | Failure::Answered(e)) => return Err(e),
        }
    }
}

/// Write `head` on `io` and read the answer's head. Informational answers (1xx but 101) are
/// skipped, as hyper does.
async fn exchange(mut io: Io, head: &[u8], head_only: bool, back: Return) -> Result<Response<DirectBody>, Failure> {
    let unanswered = |e: std::io::Error| Failure::Unanswered(e.into());
    io.write_all(head).await.map_err(unanswered)?;
    io.flush().await.map_err(unanswered)?;
    let mut buf = BytesMut::with_capacity(FIRST_READ);
    let mut informational = 0;
    let answered = |e: DirectError| Failure::Answered(e.into());
    loop {
        if let Some((mut parts, closes)) = take_answer_head(&mut buf).map_err(answered)? {
            if parts.status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(answered(DirectError::Switched));
            }
            if parts.status.is_informational() {
                informational += 1;
                if informational > MAX_INFORMATIONAL {
                    return Err(answered(DirectError::TooManyInformational));
                }
                continue;
            }
            let framing = framing(&mut parts, head_only).map_err(answered)?;
            let back = (!closes && keeps_alive(&parts, &framing)).then_some(back);
            let body = DirectBody::new(io, framing, buf.freeze(), back).map_err(answered)?;
            return Ok(Response::from_parts(parts, body));
        }
        if buf.capacity() == buf.len() {
            buf.reserve(FIRST_READ.min(MAX_HEAD - buf.len()).max(1));
        }
        let nothing_yet = buf.is_empty() && informational == 0;
        let read = tokio::io::AsyncReadExt::read_buf(&mut io, &mut buf).await;
        match read {
            Ok(0) if nothing_yet => return Err(Failure::Unanswered(DirectError::ClosedBeforeAnswer.into())),
            Err(e) if nothing_yet => return Err(Failure::Unanswered(e.into())),
            Ok(0) => return Err(answered(DirectError::ClosedBeforeAnswer)),
            Err(e) => return Err(Failure::Answered(e.into())),
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
