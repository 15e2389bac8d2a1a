//! The PROXY protocol, versions 1 and 2, read from its specification alone (HAProxy's
//! doc/proxy-protocol.txt, Debian: /usr/share/doc/haproxy/proxy-protocol.txt.gz), not from the
//! gateway's parser: `read` says what bytes mean, and `expected` what the gateway's documented
//! policy (docs/threat-model.md, "A forged client address in a PROXY protocol header") does with
//! that. tests/properties/proxy_header.rs and fuzz/fuzz_targets/proxy_header.rs judge the
//! gateway's parser (src/front/proxy_header.rs) against it, and tests/properties checks it
//! against headers HAProxy sent (tests/fixtures/proxy/). Nothing here calls the gateway's crate.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Section 2.2: the 12 bytes a version 2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A];
/// Section 2.1: the longest version 1 line, CRLF included.
pub const V1_MAX: usize = 107;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// The proxy's own connection (health checks): use the real endpoints.
    Local,
    /// On behalf of a client: use the addresses the header gives.
    Proxy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addresses {
    /// None to use: the UNSPEC family or transport, v1's UNKNOWN, or a LOCAL command's block.
    Unspec,
    /// TCP (`stream`) or UDP over IPv4 or IPv6.
    Inet {
        stream: bool,
        source: SocketAddr,
        destination: SocketAddr,
    },
    /// AF_UNIX: 108 bytes each.
    Unix { stream: bool },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub command: Command,
    pub addresses: Addresses,
    /// The whole header's length: the client's own bytes start here.
    pub len: usize,
    /// Version 2: the bytes after the address block (TLVs), whole.
    pub extra: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Neither signature: the specification does not cover it.
    NotProxy,
    /// The start of a header (or too few bytes to tell): wait for more.
    Incomplete,
    /// A header that breaks the specification, and the rule it breaks.
    Invalid(&'static str),
    Header(Header),
}

/// What `bytes`, the first a connection sent, mean (section 2.2's "identifying the protocol
/// version", then section 2.1 or 2.2).
pub fn read(bytes: &[u8]) -> Reading {
    let n = bytes.len().min(V2_SIGNATURE.len());
    if bytes[..n] == V2_SIGNATURE[..n] && !bytes.is_empty() {
        return if bytes.len() < V2_SIGNATURE.len() {
            Reading::Incomplete
        } else {
            read_v2(bytes)
        };
    }
    let n = bytes.len().min(5);
    if n > 0 && bytes[..n] == b"PROXY"[..n] {
        return if bytes.len() < 5 {
            Reading::Incomplete
        } else {
            read_v1(bytes)
        };
    }
    Reading::NotProxy
}

fn read_v2(b: &[u8]) -> Reading {
    let Some(&ver_cmd) = b.get(12) else {
        return Reading::Incomplete;
    };
    // "it must always be sent as \x2 and the receiver must only accept this value"
    if ver_cmd >> 4 != 2 {
        return Reading::Invalid("version is not 2");
    }
    let command = match ver_cmd & 0x0F {
        0 => Command::Local,
        1 => Command::Proxy,
        _ => return Reading::Invalid("command is neither LOCAL nor PROXY"),
    };
    let (Some(&fam), Some(len)) = (b.get(13), b.get(14..16)) else {
        return Reading::Incomplete;
    };
    let len = 16 + usize::from(u16::from_be_bytes([len[0], len[1]]));
    // "The receiver must not start to parse an address before the whole address block is received."
    let Some(block) = b.get(16..len) else {
        return Reading::Incomplete;
    };
    let header = |addresses, used: usize| {
        Reading::Header(Header {
            version: 2,
            command,
            addresses,
            len,
            extra: block[used..].to_vec(),
        })
    };
    // LOCAL: "discard the protocol block including the family which is ignored".
    if command == Command::Local {
        return header(Addresses::Unspec, 0);
    }
    let stream = match fam & 0x0F {
        0 => return header(Addresses::Unspec, 0),
        1 => true,
        2 => false,
        _ => return Reading::Invalid("transport is not UNSPEC, STREAM or DGRAM"),
    };
    let need = match fam >> 4 {
        0 => return header(Addresses::Unspec, 0),
        1 => 12,
        2 => 36,
        3 => 216,
        _ => return Reading::Invalid("family is not UNSPEC, INET, INET6 or UNIX"),
    };
    if block.len() < need {
        return Reading::Invalid("the length is shorter than the family's address block");
    }
    let port = |at: usize| u16::from_be_bytes([block[at], block[at + 1]]);
    let addresses = match fam >> 4 {
        1 => {
            let ip = |at: usize| IpAddr::V4(Ipv4Addr::new(block[at], block[at + 1], block[at + 2], block[at + 3]));
            Addresses::Inet {
                stream,
                source: SocketAddr::new(ip(0), port(8)),
                destination: SocketAddr::new(ip(4), port(10)),
            }
        }
        2 => {
            let ip = |at: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&block[at..at + 16]).unwrap()));
            Addresses::Inet {
                stream,
                source: SocketAddr::new(ip(0), port(32)),
                destination: SocketAddr::new(ip(16), port(34)),
            }
        }
        _ => Addresses::Unix { stream },
    };
    header(addresses, need)
}

fn read_v1(b: &[u8]) -> Reading {
    if b.get(5).is_some_and(|&c| c != b' ') {
        return Reading::Invalid("v1: PROXY is not followed by one space");
    }
    // "The receiver must wait for the CRLF sequence"; "not found in the first 107 characters":
    // invalid; "must not tolerate a single CR or LF".
    let window = &b[..b.len().min(V1_MAX)];
    let Some(end) = window.iter().position(|&c| c == b'\r' || c == b'\n') else {
        return if b.len() >= V1_MAX {
            Reading::Invalid("v1: no CRLF in the first 107 bytes")
        } else {
            Reading::Incomplete
        };
    };
    match (window[end], window.get(end + 1)) {
        (b'\r', Some(b'\n')) => {}
        (b'\r', None) if b.len() == end + 1 => return Reading::Incomplete,
        _ => return Reading::Invalid("v1: a CR or LF alone"),
    }
    let Ok(line) = std::str::from_utf8(&b[6..end]) else {
        return Reading::Invalid("v1: not US-ASCII");
    };
    let header = |addresses| {
        Reading::Header(Header {
            version: 1,
            command: Command::Proxy,
            addresses,
            len: end + 2,
            extra: Vec::new(),
        })
    };
    // "For UNKNOWN ... the receiver must ignore anything presented before the CRLF".
    if line == "UNKNOWN" || line.starts_with("UNKNOWN ") {
        return header(Addresses::Unspec);
    }
    let fields: Vec<&str> = line.split(' ').collect();
    let [family, src, dst, sport, dport] = fields[..] else {
        return Reading::Invalid("v1: not five fields separated by single spaces");
    };
    let addr = |s: &str| match family {
        "TCP4" => v1_ipv4(s),
        "TCP6" => s.parse::<Ipv6Addr>().ok().filter(|_| !s.contains('.')).map(IpAddr::V6),
        _ => None,
    };
    match (addr(src), addr(dst), v1_port(sport), v1_port(dport)) {
        (Some(s), Some(d), Some(sp), Some(dp)) => header(Addresses::Inet {
            stream: true,
            source: SocketAddr::new(s, sp),
            destination: SocketAddr::new(d, dp),
        }),
        _ if family != "TCP4" && family != "TCP6" => Reading::Invalid("v1: family is not TCP4, TCP6 or UNKNOWN"),
        _ => Reading::Invalid("v1: an address or port is not canonical"),
    }
}

/// "exactly 4 integers in the range [0..255] ... Heading zeroes are not permitted".
fn v1_ipv4(s: &str) -> Option<IpAddr> {
    let parts: Vec<u8> = s
        .split('.')
        .map(v1_number)
        .collect::<Option<Vec<u32>>>()?
        .into_iter()
        .map(u8::try_from)
        .collect::<Result<_, _>>()
        .ok()?;
    let [a, b, c, d] = parts[..] else { return None };
    Some(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
}

fn v1_port(s: &str) -> Option<u16> {
    v1_number(s).and_then(|n| u16::try_from(n).ok())
}

/// Decimal digits, no heading zero (but "0" itself).
fn v1_number(s: &str) -> Option<u32> {
    let ok =
        !s.is_empty() && s.len() <= 5 && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
}

/// Section 2.2: the TLVs of a version 2 header's `extra` bytes, as (type, value); `None` if
/// they are not a whole number of TLVs.
pub fn tlvs(mut extra: &[u8]) -> Option<Vec<(u8, Vec<u8>)>> {
    let mut out = Vec::new();
    while !extra.is_empty() {
        let [t, hi, lo, rest @ ..] = extra else { return None };
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        let value = rest.get(..len)?;
        out.push((*t, value.to_vec()));
        extra = &rest[len..];
    }
    Some(out)
}

/// Section 2.2.3: CRC32c (RFC 4960 appendix B) of the whole version 2 `header` with its
/// PP2_TYPE_CRC32C value zeroed equals that value (network order). `None`: no such TLV.
pub fn crc32c_holds(header: &[u8]) -> Option<bool> {
    let Reading::Header(h) = read(header) else { return None };
    let mut at = h.len.checked_sub(h.extra.len())?;
    while at + 3 <= h.len {
        let len = usize::from(u16::from_be_bytes([header[at + 1], header[at + 2]]));
        let value = at + 3..at + 3 + len;
        if header[at] == 0x03 && len == 4 && value.end <= h.len {
            let stored = u32::from_be_bytes(header[value.clone()].try_into().unwrap());
            let mut zeroed = header[..h.len].to_vec();
            zeroed[value].fill(0);
            return Some(crc32c(&zeroed) == stored);
        }
        at = value.end;
    }
    None
}

fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// What the gateway does with a trusted balancer's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not a header: the bytes are left for the TLS handshake.
    NotAHeader,
    /// The start of a header: it waits for more (bounded by the handshake's deadline).
    Wait,
    /// The connection is closed.
    Refused,
    /// The balancer's own connection: the peer is the balancer.
    Local,
    /// The client the header names.
    Client(SocketAddr),
}

/// The gateway's most for a header's addresses and TLVs (docs/threat-model.md: "at most 1 KiB").
pub const MOST_AFTER_FIXED: usize = 1024;

/// What the gateway should do with `bytes` from a trusted balancer, by its documented policy
/// (docs/threat-model.md, docs/architecture.md "Behind a load balancer") applied to what the
/// specification says they are: version 2 only (a version 1 line, known by `PROXY `, is
/// refused at once); the 16-byte fixed part is waited for, then the whole header (at most 1 KiB
/// after the fixed part, more is refused at once), and only then judged; LOCAL is the balancer
/// itself; PROXY is believed only for TCP over IPv4 or IPv6 (UDP, UNIX and UNSPEC refused, as a
/// receiver may); TLVs are skipped. `PROXY` followed by anything but a space is not a header the
/// gateway knows: its bytes go to TLS, which refuses them.
pub fn expected(bytes: &[u8]) -> Outcome {
    if bytes.starts_with(b"PROXY ") {
        return Outcome::Refused;
    }
    if bytes.starts_with(&V2_SIGNATURE) {
        if bytes.len() < 16 {
            return Outcome::Wait;
        }
        let len = usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
        if bytes[12] >> 4 == 2 && len > MOST_AFTER_FIXED {
            return Outcome::Refused;
        }
        if bytes[12] >> 4 == 2 && bytes.len() < 16 + len {
            return Outcome::Wait;
        }
    }
    match read(bytes) {
        Reading::NotProxy => Outcome::NotAHeader,
        Reading::Incomplete => Outcome::Wait,
        Reading::Invalid(_) if bytes.starts_with(b"PROXY") => Outcome::NotAHeader,
        Reading::Invalid(_) => Outcome::Refused,
        Reading::Header(h) => match (h.version, h.command, h.addresses) {
            (2, Command::Local, _) => Outcome::Local,
            (
                2,
                Command::Proxy,
                Addresses::Inet {
                    stream: true, source, ..
                },
            ) => Outcome::Client(source),
            _ => Outcome::Refused,
        },
    }
}
