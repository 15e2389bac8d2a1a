//! The two ways the gateway makes a request's head for the upstream, side by side: the header
//! map edited by `rewrite::request_headers` and `pin::pin_headers` then written as hyper's client
//! writes it (`direct::request_head`: the reference, what hyper's road sends), and the direct
//! road's one-pass writer (`http/upstream_head.rs`). Shared by the property tests and the fuzz
//! target.

use std::collections::BTreeMap;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use opencode_gateway::http::rewrite::{self, Forward};
use opencode_gateway::http::upstream_head;
use opencode_gateway::policy::pin;
use opencode_gateway::upstream::direct::request_head;

/// What a request brings and what the gateway knows of it.
#[derive(Debug, Clone)]
pub struct Case {
    pub head_only: bool,
    /// The client's fields, in order; names and values that are not valid fields are skipped.
    pub fields: Vec<(String, Vec<u8>)>,
    pub client_ip: IpAddr,
    pub original_host: Option<String>,
    pub upstream_auth: bool,
    pub upgrade: bool,
    pub pinned: bool,
}

/// A head as a reader sees it: the request line, and each name's values in order (the order of
/// different names means nothing to a server).
pub type Fields = (String, BTreeMap<String, Vec<Vec<u8>>>);

/// Both heads for `case`: (the map's, the writer's).
pub fn both(case: &Case) -> (Vec<u8>, Vec<u8>) {
    let mut headers = HeaderMap::new();
    for (name, value) in &case.fields {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    let method = if case.head_only { Method::HEAD } else { Method::GET };
    let target = "/session/ses_1/message?limit=2";
    let host = HeaderValue::from_static("127.0.0.1:4096");
    let origin = HeaderValue::from_static("http://127.0.0.1:4096");
    let auth = HeaderValue::from_static("Basic b3BlbmNvZGU6c2VjcmV0");
    let dir = HeaderValue::from_static("%2Fhome%2Fdev%2Fweb");
    let forward = Forward {
        client_ip: case.client_ip,
        proto: "https",
        original_host: case.original_host.as_deref(),
        upstream_host: &host,
        upstream_origin: &origin,
        upstream_auth: case.upstream_auth.then_some(&auth),
        upgrade: case.upgrade.then(|| HeaderValue::from_static("websocket")),
    };
    let dir = case.pinned.then_some(&dir);
    let (path, query) = target.split_once('?').map_or((target, None), |(p, q)| (p, Some(q)));
    let written = upstream_head::write(&method, upstream_head::Target { path, query }, &headers, &forward, dir);
    let mut edited = headers;
    rewrite::request_headers(&mut edited, &forward);
    if let Some(dir) = dir {
        pin::pin_headers(&mut edited, dir);
    }
    let mut parts = http::Request::new(()).into_parts().0;
    parts.method = method;
    parts.uri = target.parse().unwrap();
    parts.headers = edited;
    (request_head(&parts), written)
}

/// A head's request line and fields; `None` if it is not a whole head of CRLF-ended lines.
pub fn fields(head: &[u8]) -> Option<Fields> {
    // Every line ends in CRLF, the blank one last.
    let text = head.strip_suffix(b"\r\n")?;
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let at = rest.windows(2).position(|w| w == b"\r\n")?;
        lines.push(&rest[..at]);
        rest = &rest[at + 2..];
    }
    let (line, lines) = lines.split_first()?;
    let line = String::from_utf8(line.to_vec()).ok()?;
    let mut out: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for l in lines {
        let at = l.windows(2).position(|w| w == b": ")?;
        let name = String::from_utf8(l[..at].to_vec()).ok()?;
        out.entry(name).or_default().push(l[at + 2..].to_vec());
    }
    Some((line, out))
}
