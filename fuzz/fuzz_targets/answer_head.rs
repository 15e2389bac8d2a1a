//! The direct road's answer-head reader (src/upstream/direct/head.rs), which keeps each value as
//! a slice of the head's bytes found by offsets, against the plain reading that copies them
//! (tests/oracle/answer_head.rs): the same status, version, fields, length or refusal for any
//! bytes; the framing and keep-alive rules read any head it accepts without a panic; and the
//! direct road's own reading (connection fields settled) leaves what the answer's rules leave.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::upstream::direct::{MAX_HEAD, MAX_HEADERS, framing, keeps_alive, parse_head};

#[path = "../../tests/oracle/answer_head.rs"]
mod answer_head_reference;
#[path = "../../tests/support/answer_head_reading.rs"]
mod answer_head_reading;

fuzz_target!(|data: &[u8]| {
    assert_eq!(
        answer_head_reading::gateway(data),
        answer_head_reference::read(data, MAX_HEAD, MAX_HEADERS)
    );
    assert_eq!(answer_head_reading::settled_matches_full(data), Ok(()));
    if let Ok(Some((mut parts, _))) = parse_head(data) {
        let head_only = data.first().is_some_and(|b| b & 1 == 1);
        if let Ok(f) = framing(&mut parts, head_only) {
            let _ = keeps_alive(&parts, &f);
        }
    }
});
