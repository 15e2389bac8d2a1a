//! The PROXY protocol header a load balancer writes before TLS (`front/proxy_header.rs`), judged
//! against the specification's reading (tests/oracle/proxy_protocol.rs, written from HAProxy's
//! doc/proxy-protocol.txt apart from the parser) instead of restating the parser's checks: for
//! any first bytes, the gateway's reading, step by step as its accept path takes them
//! (tests/support/proxy_reading.rs), is exactly what the specification and the gateway's
//! documented policy say: wait, refuse, leave the bytes to TLS, the balancer itself, or the
//! client the header names. Seeded with HAProxy's own headers (tests/fixtures/proxy/).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/oracle/proxy_protocol.rs"]
mod proxy_reference;
#[path = "../../tests/support/proxy_reading.rs"]
mod proxy_reading;

fuzz_target!(|data: &[u8]| {
    let gateway = proxy_reading::gateway_reads(data);
    let reference = proxy_reference::expected(data);
    assert_eq!(gateway, reference, "first bytes {data:02x?}");
});
