//! The direct road's one-pass request head (src/http/upstream_head.rs) against the head written
//! from the header map as `rewrite::request_headers` and `pin::pin_headers` edit it (hyper's
//! road): for any fields a client sends, the same request line and the same values under each
//! name. The input's first byte chooses the case's switches; then lines of `name: value`.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/upstream_heads.rs"]
mod upstream_heads;

fuzz_target!(|data: &[u8]| {
    let Some((&switches, rest)) = data.split_first() else { return };
    let mut lines = rest.split(|&b| b == b'\n');
    let original_host = lines.next().and_then(|h| std::str::from_utf8(h).ok()).map(str::to_owned);
    let fields = lines
        .filter_map(|l| {
            let at = l.iter().position(|&b| b == b':')?;
            let name = std::str::from_utf8(&l[..at]).ok()?.to_owned();
            let value = l[at + 1..].strip_prefix(b" ").unwrap_or(&l[at + 1..]).to_vec();
            Some((name, value))
        })
        .collect();
    let bit = |i: u8| switches & (1 << i) != 0;
    let case = upstream_heads::Case {
        head_only: bit(0),
        fields,
        client_ip: if bit(1) { "2001:db8::1".parse().unwrap() } else { "198.51.100.4".parse().unwrap() },
        original_host: original_host.filter(|_| bit(2)),
        upstream_auth: bit(3),
        upgrade: bit(4),
        pinned: bit(5),
    };
    let (edited, written) = upstream_heads::both(&case);
    let reference = upstream_heads::fields(&edited).expect("the map's head reads back");
    assert_eq!(upstream_heads::fields(&written), Some(reference));
});
