//! The event streams' folder filter (`policy::event_scope::EventFilter`), both shapes: any bytes,
//! never a panic, and the same frames kept however the stream is cut (a cut after each byte
//! here, against the stream pushed whole).
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::policy::event_scope::{EventFilter, Shape};

fuzz_target!(|data: &[u8]| {
    for shape in [Shape::Global, Shape::Located] {
        let mut whole = EventFilter::new("/home/a/web".into(), shape);
        let expected = whole.push(data);
        let mut pieces = EventFilter::new("/home/a/web".into(), shape);
        let mut out = Vec::new();
        for b in data.chunks(7) {
            out.extend_from_slice(&pieces.push(b));
        }
        assert_eq!(out, expected.to_vec(), "cut into pieces, the same frames kept");
    }
});
