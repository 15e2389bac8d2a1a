//! The PROXY protocol header (issue 27), judged against the specification's reading
//! (`proxy_reference`, tests/oracle/proxy_protocol.rs) rather than against the gateway's own
//! encoder: headers HAProxy itself sent (tests/fixtures/proxy/) read as HAProxy meant them, and
//! generated headers, whole, cut, stretched or noise, are read by the gateway exactly as the
//! specification and the gateway's documented policy say.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use proptest::prelude::*;

use crate::proxy_reading::gateway_reads;
use crate::proxy_reference::{self as reference, Addresses, Command, Outcome, Reading};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proxy");

/// Each fixture's bytes and what its capture knew (`capture.py`: the client's sockets and
/// HAProxy's config, not the bytes).
fn fixtures() -> Vec<(String, Vec<u8>, serde_json::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(FIXTURES).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(Path::new(FIXTURES).join(format!("{name}.bin"))).unwrap();
            let meant = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            out.push((name, bytes, meant));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn socket(v: &serde_json::Value) -> SocketAddr {
    SocketAddr::new(v[0].as_str().unwrap().parse().unwrap(), v[1].as_u64().unwrap() as u16)
}

/// HAProxy 2.6's own headers (`send-proxy`, `send-proxy-v2` over IPv4 and IPv6, a health
/// check's LOCAL, `send-proxy-v2-ssl-cn` with ALPN, authority, CRC32c and unique-id TLVs) read,
/// by the reference, as the capture's client knew its connection; the client's bytes start
/// where the header ends; and the gateway reads each as its policy says: version 2 names the
/// client HAProxy connected from (or is HAProxy itself), version 1 is refused.
#[test]
fn haproxys_own_headers_read_as_haproxy_meant_by_the_reference_and_the_gateway() {
    let all = fixtures();
    let names: Vec<&str> = all.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "v1-tcp4",
            "v1-tcp6",
            "v2-local",
            "v2-tcp4",
            "v2-tcp4-tls-tlvs",
            "v2-tcp6"
        ]
    );
    for (name, bytes, meant) in &all {
        let Reading::Header(h) = reference::read(bytes) else {
            panic!(
                "{name}: the reference does not read HAProxy's header: {:?}",
                reference::read(bytes)
            );
        };
        assert_eq!(u64::from(h.version), meant["version"].as_u64().unwrap(), "{name}");
        let after = String::from_utf8_lossy(&bytes[h.len..]);
        assert_eq!(
            after,
            meant["after"].as_str().unwrap_or(""),
            "{name}: the client's bytes"
        );
        let (want, gateway) = match meant["command"].as_str().unwrap() {
            "LOCAL" => {
                assert_eq!(
                    (h.command, &h.addresses),
                    (Command::Local, &Addresses::Unspec),
                    "{name}"
                );
                (Outcome::Local, Outcome::Local)
            }
            _ => {
                let (source, destination) = (socket(&meant["source"]), socket(&meant["destination"]));
                let inet = Addresses::Inet {
                    stream: true,
                    source,
                    destination,
                };
                assert_eq!((h.command, &h.addresses), (Command::Proxy, &inet), "{name}");
                assert_eq!(source.is_ipv6(), meant["family"] == "TCP6", "{name}");
                let gateway = if h.version == 1 {
                    Outcome::Refused
                } else {
                    Outcome::Client(source)
                };
                (gateway, gateway)
            }
        };
        assert_eq!(reference::expected(bytes), want, "{name}: the policy");
        assert_eq!(gateway_reads(bytes), gateway, "{name}: the gateway");
        if let Some(tlvs) = meant.get("tlvs") {
            haproxys_tlvs(name, &bytes[..h.len], &h.extra, tlvs);
        } else {
            assert!(h.extra.is_empty(), "{name}: TLVs nobody asked for: {:?}", h.extra);
        }
    }
}

/// The TLVs `send-proxy-v2-ssl-cn` and `proxy-v2-options authority,crc32c,unique-id` add, as
/// the capture's TLS client and HAProxy's config say.
fn haproxys_tlvs(name: &str, header: &[u8], extra: &[u8], meant: &serde_json::Value) {
    let tlvs = reference::tlvs(extra).unwrap_or_else(|| panic!("{name}: TLVs do not read: {extra:?}"));
    let value = |t: u8| {
        tlvs.iter()
            .find(|(k, _)| *k == t)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name}: no TLV {t:#04x} in {tlvs:?}"))
    };
    let text = |t: u8| String::from_utf8(value(t)).unwrap();
    assert_eq!(text(0x01), meant["alpn"].as_str().unwrap(), "PP2_TYPE_ALPN");
    assert_eq!(text(0x02), meant["authority"].as_str().unwrap(), "PP2_TYPE_AUTHORITY");
    assert_eq!(text(0x05), meant["unique_id"].as_str().unwrap(), "PP2_TYPE_UNIQUE_ID");
    assert_eq!(reference::crc32c_holds(header), Some(true), "PP2_TYPE_CRC32C");
    // PP2_TYPE_SSL: client flags (PP2_CLIENT_SSL), verify, then sub-TLVs with the TLS version.
    let ssl = value(0x20);
    assert_eq!(ssl[0] & 0x01, 0x01, "PP2_CLIENT_SSL: {ssl:?}");
    let subs = reference::tlvs(&ssl[5..]).unwrap();
    assert!(
        subs.contains(&(0x21, meant["ssl_version"].as_str().unwrap().as_bytes().to_vec())),
        "PP2_SUBTYPE_SSL_VERSION: {subs:?}"
    );
}

/// A version 2 header built byte by byte from section 2.2, with room for every mistake: any
/// version and command nibble, families the gateway takes and others, address blocks of the
/// right size or not, TLVs, a length field that is right or off, then the client's bytes, and
/// possibly cut short.
fn v2_bytes() -> impl Strategy<Value = (Vec<u8>, Option<SocketAddr>)> {
    let ver_cmd = prop_oneof![4 => Just(0x21u8), 2 => Just(0x20u8), 1 => any::<u8>()];
    let fam = prop_oneof![
        3 => Just(0x11u8), 3 => Just(0x21u8), 1 => prop::sample::select(vec![0x00u8, 0x12, 0x22, 0x31, 0x32, 0x13, 0x41]), 1 => any::<u8>()
    ];
    let tlvs = prop::collection::vec((any::<u8>(), prop::collection::vec(any::<u8>(), 0..20)), 0..4);
    let skew = prop_oneof![6 => Just(0i32), 1 => -40i32..40, 1 => Just(2000)];
    let tail = prop::collection::vec(any::<u8>(), 0..8);
    (
        ver_cmd,
        fam,
        any::<[u8; 36]>(),
        tlvs,
        skew,
        tail,
        prop::option::of(0usize..80),
    )
        .prop_map(|(ver_cmd, fam, a, tlvs, skew, tail, cut)| {
            let block_len = match fam {
                0x11 | 0x12 => 12,
                0x21 | 0x22 => 36,
                0x31 | 0x32 => 216,
                _ => 0,
            };
            let mut block: Vec<u8> = a.iter().copied().cycle().take(block_len).collect();
            for (t, v) in &tlvs {
                block.push(*t);
                block.extend_from_slice(&(v.len() as u16).to_be_bytes());
                block.extend_from_slice(v);
            }
            let len = (block.len() as i32 + skew).clamp(0, 0xFFFF) as u16;
            let mut h = vec![
                0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, ver_cmd, fam,
            ];
            h.extend_from_slice(&len.to_be_bytes());
            h.extend_from_slice(&block);
            // A TLS ClientHello's first bytes follow, as from a real client.
            h.extend_from_slice(&[0x16, 0x03, 0x01]);
            h.extend_from_slice(&tail);
            let port = u16::from_be_bytes([a[8], a[9]]);
            let client = match fam {
                0x11 => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])), port),
                // IPv6: the source port follows both 16-byte addresses.
                _ => SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&a[..16]).unwrap())),
                    u16::from_be_bytes([a[32], a[33]]),
                ),
            };
            let whole = ver_cmd == 0x21 && (fam == 0x11 || fam == 0x21) && skew == 0 && cut.is_none();
            if let Some(cut) = cut {
                h.truncate(cut);
            }
            (h, whole.then_some(client))
        })
}

/// A version 1 line from section 2.1 (TCP4, TCP6 or UNKNOWN), sometimes with one byte changed.
fn v1_bytes() -> impl Strategy<Value = Vec<u8>> {
    let family = prop::sample::select(vec!["TCP4", "TCP6", "UNKNOWN"]);
    (
        family,
        any::<[u8; 4]>(),
        any::<u16>(),
        any::<(usize, u8)>(),
        any::<bool>(),
    )
        .prop_map(|(f, ip, port, (at, b), flip)| {
            let addr = if f == "TCP6" {
                Ipv6Addr::from([ip[0] as u16, 0, 0, 0, 0, 0, ip[1] as u16, ip[2] as u16]).to_string()
            } else {
                Ipv4Addr::from(ip).to_string()
            };
            let mut line = format!("PROXY {f} {addr} {addr} {port} 443\r\n").into_bytes();
            if flip {
                let at = at % line.len();
                line[at] = b;
            }
            line
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Whatever the first bytes, the gateway waits, refuses, passes them to TLS, takes the
    /// balancer as itself, or believes a client exactly as the reference says; a header built
    /// whole for TCP names the client it was built for, in the reference and in the gateway.
    #[test]
    fn the_gateway_reads_first_bytes_as_the_specification_and_its_policy_say(
        (v2, client) in v2_bytes(),
        v1 in v1_bytes(),
        noise in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        prop_assert_eq!(gateway_reads(&v2), reference::expected(&v2), "{:02x?}", v2);
        if let Some(client) = client {
            prop_assert_eq!(reference::expected(&v2), Outcome::Client(client), "{:02x?}", v2);
        }
        prop_assert_eq!(gateway_reads(&v1), reference::expected(&v1), "{:?}", String::from_utf8_lossy(&v1));
        prop_assert_eq!(gateway_reads(&noise), reference::expected(&noise), "{:02x?}", noise);
        // Every prefix of a header: never a client before the whole header is there.
        for n in 0..v2.len().min(60) {
            prop_assert_eq!(gateway_reads(&v2[..n]), reference::expected(&v2[..n]), "{:02x?}", &v2[..n]);
        }
    }
}
