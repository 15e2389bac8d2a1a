//! The gateway's reading of a trusted balancer's first bytes, step by step as its accept path
//! (src/front/listen/proxied.rs::client_of) takes them: peek at most the 16-byte fixed part and
//! classify it, then read the fixed part and exactly the length it gives, then parse. Shared by
//! tests/properties/proxy_header.rs and fuzz/fuzz_targets/proxy_header.rs, which compare it with
//! the specification's reading (tests/oracle/proxy_protocol.rs, as `proxy_reference`).

use opencode_gateway::front::proxy_header::{self, FIXED_LEN, Said, Start};

use super::proxy_reference::Outcome;

/// What the gateway does with `bytes`, all the balancer sent so far.
pub fn gateway_reads(bytes: &[u8]) -> Outcome {
    let peeked = &bytes[..bytes.len().min(FIXED_LEN)];
    match proxy_header::classify(peeked) {
        Start::Other => return Outcome::NotAHeader,
        Start::V1 => return Outcome::Refused,
        Start::Undecided => return Outcome::Wait,
        Start::V2 if bytes.len() < FIXED_LEN => return Outcome::Wait,
        Start::V2 => {}
    }
    let fixed: [u8; FIXED_LEN] = bytes[..FIXED_LEN].try_into().unwrap();
    let Ok(len) = proxy_header::rest_len(&fixed) else {
        return Outcome::Refused;
    };
    let Some(rest) = bytes.get(FIXED_LEN..FIXED_LEN + len) else {
        return Outcome::Wait;
    };
    match proxy_header::parse(&fixed, rest) {
        Ok(Said::Client(client)) => Outcome::Client(client),
        Ok(Said::Local) => Outcome::Local,
        Err(_) => Outcome::Refused,
    }
}
