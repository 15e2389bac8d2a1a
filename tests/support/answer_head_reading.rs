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

/// The direct road's own reading (`take_answer_head`: the fields that only speak of the
/// connection settled, not put in the map) held to the full reading once the answer's rules
/// (`http::rewrite::response_headers`) ran on each: the same status, version, length, framing
/// and fields, and the same verdict on keeping the connection. `Err` says how they differ.
pub fn settled_matches_full(buf: &[u8]) -> Result<(), String> {
    use opencode_gateway::upstream::direct::{framing, keeps_alive, parse_answer_head};
    let origin = http::HeaderValue::from_static("http://127.0.0.1:4096");
    // Each name's values in order; the order between names means nothing (a map's removal
    // moves its last field into the gap).
    let fields = |h: &http::HeaderMap| -> std::collections::BTreeMap<String, Vec<Vec<u8>>> {
        let mut by_name = std::collections::BTreeMap::<String, Vec<Vec<u8>>>::new();
        for (n, v) in h {
            by_name
                .entry(n.as_str().to_owned())
                .or_default()
                .push(v.as_bytes().to_vec());
        }
        by_name
    };
    match (parse_head(buf), parse_answer_head(buf)) {
        (Err(a), Err(b)) if a == b => Ok(()),
        (Ok(None), Ok(None)) => Ok(()),
        (Ok(Some((mut full, len))), Ok(Some((mut settled, closes, settled_len)))) => {
            let (a, b) = (
                (full.status, full.version, len),
                (settled.status, settled.version, settled_len),
            );
            if a != b {
                return Err(format!("status, version, length: {a:?} against {b:?}"));
            }
            let head_only = buf.len() % 2 == 1;
            let (fa, fb) = (framing(&mut full, head_only), framing(&mut settled, head_only));
            if format!("{fa:?}") != format!("{fb:?}") {
                return Err(format!("framing: {fa:?} against {fb:?}"));
            }
            if let (Ok(fa), Ok(fb)) = (&fa, &fb) {
                let (ka, kb) = (keeps_alive(&full, fa), !closes && keeps_alive(&settled, fb));
                if ka != kb {
                    return Err(format!("keeps alive: {ka} against {kb}"));
                }
            }
            opencode_gateway::http::rewrite::response_headers(&mut full.headers, false, &origin);
            opencode_gateway::http::rewrite::response_headers(&mut settled.headers, false, &origin);
            let (a, b) = (fields(&full.headers), fields(&settled.headers));
            if a != b {
                return Err(format!("fields after the answer's rules: {a:?} against {b:?}"));
            }
            Ok(())
        }
        (a, b) => Err(format!(
            "full reading {:?}, settled {:?}",
            a.map(|r| r.map(|(p, l)| (p.status, l))),
            b.map(|r| r.map(|(p, c, l)| (p.status, c, l)))
        )),
    }
}
