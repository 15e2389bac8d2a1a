//! The gateway's reading of an answer head (src/upstream/direct/head.rs) in the reference's
//! terms (tests/oracle/answer_head.rs). Shared by the property tests and the fuzz target.

use opencode_gateway::upstream::direct::parse_head;

pub fn gateway(buf: &[u8]) -> crate::answer_head_reference::Reading {
    match parse_head(buf) {
        Err(_) => Err(()),
        Ok(None) => Ok(None),
        Ok(Some((parts, len))) => {
            let fields = parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                .collect();
            let version = u8::from(parts.version == http::Version::HTTP_11);
            Ok(Some((parts.status.as_u16(), version, fields, len)))
        }
    }
}
