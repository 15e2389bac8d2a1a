//! The PROXY protocol v2 header a load balancer writes before TLS (`front/proxy_header.rs`):
//! reading never panics; what parses as a client came from the bytes' own address fields, and a
//! header is never shorter than its fixed part and its length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::front::proxy_header::{self, FIXED_LEN, Said};

fuzz_target!(|data: &[u8]| {
    let _ = proxy_header::classify(data);
    let Some(fixed) = data.get(..FIXED_LEN) else { return };
    let fixed: [u8; FIXED_LEN] = fixed.try_into().unwrap();
    let rest = &data[FIXED_LEN..];
    if let Ok(Said::Client(_)) = proxy_header::parse(&fixed, rest) {
        assert_eq!(proxy_header::rest_len(&fixed), Ok(rest.len()));
        assert!(rest.len() >= 12);
    }
});
