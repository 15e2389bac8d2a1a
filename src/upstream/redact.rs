//! The upstream's credential must never reach a client, even if the upstream reflects it (an
//! echoing endpoint, an error that quotes the request). Response headers that contain it are
//! dropped; body frames that contain it have it overwritten with `*` (same length, so
//! Content-Length stays true). Frames are checked one by one as they stream, never held back:
//! a credential split across two frames is not caught, which is stated in the threat model.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use memchr::memmem::Finder;

pub struct Redactor {
    finders: Vec<Finder<'static>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor(<redacted>)")
    }
}

impl Redactor {
    /// Look for each of `secrets` (empty ones are ignored).
    pub fn new(secrets: &[&[u8]]) -> Option<Redactor> {
        let finders: Vec<Finder<'static>> = secrets
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| Finder::new(s).into_owned())
            .collect();
        (!finders.is_empty()).then_some(Redactor { finders })
    }

    fn found_in(&self, haystack: &[u8]) -> bool {
        self.finders.iter().any(|f| f.find(haystack).is_some())
    }

    /// Drop every header whose value contains a secret; true when one was dropped.
    pub(crate) fn headers(&self, headers: &mut HeaderMap) -> bool {
        // The common case, nothing found, allocates nothing.
        if !headers.values().any(|v| self.found_in(v.as_bytes())) {
            return false;
        }
        let leaking: Vec<_> = headers
            .iter()
            .filter(|(_, v)| self.found_in(v.as_bytes()))
            .map(|(k, _)| k.clone())
            .collect();
        for name in &leaking {
            headers.remove(name);
        }
        !leaking.is_empty()
    }

    /// The frame with every occurrence of a secret overwritten; untouched (no copy) when clean.
    pub fn frame(&self, data: Bytes) -> Bytes {
        if !self.found_in(&data) {
            return data;
        }
        let mut buf = BytesMut::from(&data[..]);
        for f in &self.finders {
            let n = f.needle().len();
            let mut from = 0;
            while let Some(i) = f.find(&buf[from..]) {
                let at = from + i;
                buf[at..at + n].fill(b'*');
                from = at + n;
            }
        }
        tracing::warn!(target: "security", reason = "upstream_reflected_credential", "the upstream sent its own credential back; it was overwritten");
        buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_overwritten_and_clean_frames_untouched() {
        let r = Redactor::new(&[b"hunter2", b"aHVudGVyMg=="]).unwrap();
        let clean = Bytes::from_static(b"nothing here");
        assert_eq!(r.frame(clean.clone()).as_ptr(), clean.as_ptr(), "no copy when clean");
        let out = r.frame(Bytes::from_static(b"pw=hunter2 and aHVudGVyMg== and hunter2"));
        assert_eq!(&out[..], b"pw=******* and ************ and *******");
        let mut h = HeaderMap::new();
        h.insert("x-echo", "Basic aHVudGVyMg==".parse().unwrap());
        h.insert("x-fine", "ok".parse().unwrap());
        assert!(r.headers(&mut h));
        assert!(h.get("x-echo").is_none() && h.get("x-fine").is_some());
        assert!(Redactor::new(&[b""]).is_none());
    }
}
