//! Heads on the direct road: the request head written as hyper's client writes it, the answer's
//! head read by `httparse` without copying its values, and how the answer's body is framed.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, Version, header};

use super::DirectError;
use crate::upstream::chunked::Chunked;

/// The largest answer head read, and the most header fields in it (hyper's client allows 100).
pub const MAX_HEAD: usize = 64 * 1024;
pub const MAX_HEADERS: usize = 100;

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// Headers the gateway may add to an answer.
const ROOM: usize = 4;

/// How an answer's body ends.
#[derive(Debug, Clone)]
pub enum Framing {
    Empty,
    Length(u64),
    Chunked(Chunked),
    /// Until the upstream closes the connection.
    Close,
}

/// The request head, as hyper's client would write it for a request without a body: the request
/// line and every field but the client's framing (`Content-Length`, `Transfer-Encoding`). The
/// road carries no body, so none is announced: a length or coding the client sent with an empty
/// body would leave the server waiting for bytes, and read the next request on the kept
/// connection as them.
pub fn request_head(req: &http::request::Parts) -> Vec<u8> {
    let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
    let fields: usize = req.headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    let mut head = Vec::with_capacity(req.method.as_str().len() + target.len() + fields + 14);
    head.extend_from_slice(req.method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &req.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
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
    let mut bytes = BytesMut::from(buf);
    Ok(read_head(&mut bytes, false)?.map(|(parts, _)| (parts, buf.len() - bytes.len())))
}

/// An answer's head from the start of `buf` as the direct road reads it ([`take_answer_head`]):
/// its parts, whether its connection fields said `close`, and the head's length.
pub fn parse_answer_head(buf: &[u8]) -> Result<Option<(http::response::Parts, bool, usize)>, DirectError> {
    let mut bytes = BytesMut::from(buf);
    Ok(read_head(&mut bytes, true)?.map(|(parts, closes)| (parts, closes, buf.len() - bytes.len())))
}

/// Where a field's name and value lie in the head.
#[derive(Clone, Copy, Default)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
}

/// The answer's head taken off the front of `buf`, when it is whole. The values are slices of
/// the head's bytes, not copies (as hyper's client keeps them). Unlike [`parse_head`] (every
/// field, as read), the fields that only speak of this connection (a `Connection` that names no
/// field but `keep-alive` or `close`, and `Keep-Alive`) are settled here, not put in the map:
/// whether they said `close` comes beside it. The answer's rules (`http::rewrite::
/// response_headers`) would only remove them again; nginx and Node send `Connection: keep-alive`
/// on every answer (docs/performance.md, issue 43).
pub fn take_answer_head(buf: &mut BytesMut) -> Result<Option<(http::response::Parts, bool)>, DirectError> {
    read_head(buf, true)
}

/// The items of a comma-separated field value, trimmed (empty ones included).
fn items(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// Whether a `Connection` value names no field but `keep-alive` and `close`, and if so whether it
/// says `close`.
fn settled_connection(value: &[u8]) -> Option<bool> {
    let mut closes = false;
    for token in items(value) {
        if token.eq_ignore_ascii_case(b"close") {
            closes = true;
        } else if !token.is_empty() && !token.eq_ignore_ascii_case(b"keep-alive") {
            return None;
        }
    }
    Some(closes)
}

fn read_head(buf: &mut BytesMut, settle: bool) -> Result<Option<(http::response::Parts, bool)>, DirectError> {
    // Left uninitialized until parsed, as hyper's client does: this runs on every request.
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut parsed, buf, &mut fields)
    {
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
    let version = if parsed.version == Some(1) {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    let start = buf.as_ptr() as usize;
    let at = |s: &[u8]| {
        let from = (s.as_ptr() as usize - start) as u32;
        (from, from + s.len() as u32)
    };
    let mut places = [Field::default(); MAX_HEADERS];
    let count = parsed.headers.len();
    for (place, f) in places.iter_mut().zip(parsed.headers.iter()) {
        *place = Field {
            name: at(f.name.as_bytes()),
            value: at(f.value),
        };
    }
    let head: Bytes = buf.split_to(len).freeze();
    let slice = |(from, to): (u32, u32)| head.slice(from as usize..to as usize);
    // Room for the few headers the answer's rules add (`http/rewrite.rs`), so the map is not
    // grown (and rehashed) on its way to the client.
    let mut headers = HeaderMap::with_capacity(count + ROOM);
    let mut closes = false;
    for place in &places[..count] {
        let name = HeaderName::from_bytes(&slice(place.name)).map_err(|e| DirectError::BadHead(e.to_string()))?;
        if settle && name == header::CONNECTION {
            let bytes = &head[place.value.0 as usize..place.value.1 as usize];
            if let Some(close) = settled_connection(bytes) {
                closes |= close;
                continue;
            }
        } else if settle && name == KEEP_ALIVE {
            continue;
        }
        let value =
            HeaderValue::from_maybe_shared(slice(place.value)).map_err(|e| DirectError::BadHead(e.to_string()))?;
        headers.append(name, value);
    }
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.version = version;
    parts.headers = headers;
    Ok(Some((parts, closes)))
}

/// How the body of an answer with this head ends (RFC 9112 §6.3). A Content-Length beside a
/// transfer coding is dropped: the coding frames the body, and the client must not be told a
/// length the body does not have. An answer to a HEAD has no body, whatever its head says.
pub fn framing(parts: &mut http::response::Parts, head_only: bool) -> Result<Framing, DirectError> {
    let status = parts.status;
    if head_only || status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Empty);
    }
    // The few fields of an answer scanned by name (enum comparisons) rather than a hashed
    // lookup per name: this runs on every answer (docs/performance.md, issue 43).
    if parts.headers.keys().any(|n| n == header::TRANSFER_ENCODING) {
        let codings = parts.headers.get_all(header::TRANSFER_ENCODING);
        let last = codings
            .iter()
            .flat_map(|v| items(v.as_bytes()))
            .rfind(|c| !c.is_empty());
        let framing = match last {
            Some(c) if c.eq_ignore_ascii_case(b"chunked") => Framing::Chunked(Chunked::default()),
            _ => Framing::Close,
        };
        parts.headers.remove(header::CONTENT_LENGTH);
        return Ok(framing);
    }
    let mut length = None;
    let lengths = parts.headers.iter().filter(|(n, _)| *n == header::CONTENT_LENGTH);
    for (_, value) in lengths {
        for item in items(value.as_bytes()) {
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

/// Whether the connection may carry another request once this answer's body has ended: an
/// HTTP/1.1 answer whose end is framed and whose server did not say `Connection: close`.
pub fn keeps_alive(parts: &http::response::Parts, framing: &Framing) -> bool {
    let mut connection = parts.headers.iter().filter(|(n, _)| *n == header::CONNECTION);
    let closes = connection.any(|(_, v)| items(v.as_bytes()).any(|t| t.eq_ignore_ascii_case(b"close")));
    parts.version == Version::HTTP_11 && !closes && !matches!(framing, Framing::Close)
}
