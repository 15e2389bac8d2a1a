//! The chunked decoder of the event-stream road (src/upstream/chunked.rs), held to the reading
//! of RFC 9112 written apart from it (tests/oracle/chunked.rs): whatever the bytes and however
//! the reads split them, the decoder gives the same data, the same end and the same refusal as
//! the reference reading the whole; and any chunks, extensions and trailers a server may write
//! decode to exactly the data written.

use opencode_gateway::upstream::chunked::Chunked;
use proptest::prelude::*;

use crate::chunked_reference;

/// The decoder fed `input` in pieces cut at `cuts`: its data and where the answer ended, `None`
/// if it did not; `Err` when it refused.
pub fn decoded_in_pieces(input: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, Option<usize>), ()> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.push(0);
    points.push(input.len());
    points.sort_unstable();
    points.dedup();
    let mut c = Chunked::default();
    let mut out = Vec::new();
    for w in points.windows(2) {
        let used = c
            .feed(&input[w[0]..w[1]], |d| out.extend_from_slice(d))
            .map_err(|_| ())?;
        if c.is_done() {
            return Ok((out, Some(w[0] + used)));
        }
        assert_eq!(used, w[1] - w[0], "a piece is read whole until the answer ends");
    }
    Ok((out, None))
}

fn encoded(chunks: &[Vec<u8>], exts: &[String], trailers: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate().filter(|(_, c)| !c.is_empty()) {
        let ext = exts.get(i).map_or("", String::as_str);
        out.extend_from_slice(format!("{:x}{ext}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    for t in trailers {
        out.extend_from_slice(format!("{t}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

proptest! {
    #[test]
    fn any_bytes_read_in_any_pieces_agree_with_the_reference(
        input in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(prop::sample::select(b"0123456789aAfF;= \t\r\nxX:-".to_vec()), 0..96),
        ],
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let reference = chunked_reference::decode(&input);
        let whole = decoded_in_pieces(&input, &[]);
        let pieces = decoded_in_pieces(&input, &cuts);
        prop_assert_eq!(&whole, &pieces, "the reads' boundaries changed the reading");
        match reference {
            Err(()) => prop_assert!(pieces.is_err(), "the reference refuses {:?}", String::from_utf8_lossy(&input)),
            Ok(None) => prop_assert!(matches!(pieces, Ok((_, None))), "not ended: {:?}", pieces),
            Ok(Some((data, end))) => prop_assert_eq!(pieces, Ok((data, Some(end)))),
        }
    }

    #[test]
    fn what_a_server_writes_decodes_to_its_data(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..6),
        exts in proptest::collection::vec(prop_oneof![Just(String::new()), Just(";a=b".to_string()), Just(" ; name=\"v\"".to_string())], 0..6),
        trailers in proptest::collection::vec("[A-Za-z-]{1,12}: [ -~]{0,20}", 0..3),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        tail in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut input = encoded(&chunks, &exts, &trailers);
        let end = input.len();
        input.extend_from_slice(&tail);
        let data: Vec<u8> = chunks.concat();
        prop_assert_eq!(decoded_in_pieces(&input, &cuts), Ok((data, Some(end))));
    }
}
