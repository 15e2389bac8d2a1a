//! An answer head read the plain way, apart from the gateway's (src/upstream/direct/head.rs,
//! which keeps each value as a slice of the head's bytes): httparse with initialized fields,
//! each name and value copied. Shared by the property tests and the fuzz target.

use http::{HeaderName, HeaderValue, StatusCode};

/// What a head reads as: its status, version (1 for HTTP/1.1), fields in order and length;
/// `Ok(None)` while it is not whole; `Err` when it is refused.
pub type Reading = Result<Option<(u16, u8, Vec<(String, Vec<u8>)>, usize)>, ()>;

pub fn read(buf: &[u8], max_head: usize, max_fields: usize) -> Reading {
    let mut fields = vec![httparse::EMPTY_HEADER; max_fields];
    let mut parsed = httparse::Response::new(&mut fields);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= max_head => return Err(()),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    if len > max_head {
        return Err(());
    }
    let code = parsed.code.ok_or(())?;
    StatusCode::from_u16(code).map_err(|_| ())?;
    // Listed as a header map lists them: by name, each name's values in the order they came.
    let mut map = http::HeaderMap::new();
    for f in parsed.headers.iter() {
        let name = HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| ())?;
        let value = HeaderValue::from_bytes(f.value).map_err(|_| ())?;
        map.append(name, value);
    }
    let out = map
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    Ok(Some((code, parsed.version.unwrap_or(0), out, len)))
}
