//! Reading what is left of a small request body before a refusal is sent, as nginx does.
//!
//! Over HTTP/2 an answer that ends the stream while the client is still sending its body makes
//! the server reset the client's half of the stream; common clients (Debian 12's curl: exit 92,
//! "Stream error in the HTTP/2 framing layer") then show neither the status nor the reason. A
//! body is read only when it is small by its own declaration, and only for a short while: a
//! large or slow one is left to the connection (reset or closed), which is what a refusal costs
//! it anyway. A client that asked `Expect: 100-continue` is never invited to send the body.

use std::time::Duration;

use http::{HeaderMap, header};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};

/// Bodies up to this size are read before a refusal.
pub(crate) const MAX_BYTES: u64 = 64 * 1024;
/// And for at most this long.
pub(crate) const WITHIN: Duration = Duration::from_secs(2);

/// Should this request's body be read before its refusal is sent? Only a body that says it is
/// small (Content-Length, or an HTTP/2 body whose frames fit the bound), and never one the client
/// waits for permission to send.
pub(crate) fn wanted(headers: &HeaderMap, body: &Incoming) -> bool {
    !body.is_end_stream()
        && body.size_hint().upper().is_none_or(|n| n <= MAX_BYTES)
        && !headers.contains_key(header::EXPECT)
}

/// Read and drop up to [`MAX_BYTES`] of `body` within [`WITHIN`]; stop early at either bound.
pub(crate) async fn discard(mut body: Incoming) {
    let read = async {
        let mut seen = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen += data.len() as u64;
                if seen > MAX_BYTES {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(WITHIN, read).await;
}
