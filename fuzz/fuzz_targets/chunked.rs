//! The event-stream road's chunked decoder (src/upstream/chunked.rs), fed the input in pieces
//! the first bytes choose, judged against RFC 9112's reading written apart from it
//! (tests/oracle/chunked.rs): the same data, end and refusal as the reference reading the whole.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::upstream::chunked::Chunked;

#[path = "../../tests/oracle/chunked.rs"]
mod chunked_reference;

fuzz_target!(|data: &[u8]| {
    let (cuts, input) = data.split_at(data.len().min(4));
    let mut points: Vec<usize> = cuts.iter().map(|&c| usize::from(c) % (input.len() + 1)).collect();
    points.extend([0, input.len()]);
    points.sort_unstable();
    points.dedup();
    let mut c = Chunked::default();
    let mut out = Vec::new();
    let mut outcome = Ok(None);
    for w in points.windows(2) {
        match c.feed(&input[w[0]..w[1]], |d| out.extend_from_slice(d)) {
            Err(_) => {
                outcome = Err(());
                break;
            }
            Ok(used) if c.is_done() => {
                outcome = Ok(Some((std::mem::take(&mut out), w[0] + used)));
                break;
            }
            Ok(used) => assert_eq!(used, w[1] - w[0]),
        }
    }
    let reference = chunked_reference::decode(input);
    match (&reference, &outcome) {
        (Err(()), Err(())) | (Ok(None), Ok(None)) => {}
        _ => assert_eq!(reference, outcome, "input {input:02x?}, cuts {points:?}"),
    }
});
