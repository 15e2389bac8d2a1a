//! The PROXY protocol's version 2 header (HAProxy's `send-proxy-v2`), which a load balancer
//! writes before the client's first byte to say who the client is. The gateway believes it only
//! from an address in `server.trusted_proxies` (`front/listen/mod.rs::client_of`); from any other
//! address a header is refused, so a client cannot name itself someone else. Only the fixed part
//! and the addresses are read; TLVs are skipped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The 12 bytes every v2 header starts with.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The fixed part: the signature, version and command, family, and the length of the rest.
pub const FIXED_LEN: usize = 16;
/// The longest header taken (addresses and TLVs): HAProxy's own fit in far less.
pub const MAX_REST: usize = 1024;

/// What a header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// A proxied connection from this client.
    Client(SocketAddr),
    /// The proxy's own connection (a health check): the peer is who it is.
    Local,
}

/// Why a header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("not a PROXY protocol v2 signature")]
    Signature,
    #[error("version {0} (only 2 is spoken)")]
    Version(u8),
    #[error("command {0} (only LOCAL and PROXY exist)")]
    Command(u8),
    #[error("address family and protocol {0:#04x} (only TCP over IPv4 or IPv6)")]
    Family(u8),
    #[error("{0} bytes of addresses and TLVs (at most {MAX_REST}, and enough for the family's addresses)")]
    Length(usize),
}

impl Refused {
    /// For logs and tests.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::Signature => "proxy_header_signature",
            Refused::Version(_) => "proxy_header_version",
            Refused::Command(_) => "proxy_header_command",
            Refused::Family(_) => "proxy_header_family",
            Refused::Length(_) => "proxy_header_length",
        }
    }
}

/// What a connection's first bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A v2 header's signature.
    V2,
    /// A v1 (text) header: `PROXY `.
    V1,
    /// Anything else (a TLS handshake starts with 0x16, SSH with `SSH-`).
    Other,
    /// Too few bytes to tell: they begin like a header.
    Undecided,
}

/// Classify the first bytes a peer sent (any number of them).
pub fn classify(start: &[u8]) -> Start {
    const V1: &[u8] = b"PROXY ";
    if start.len() >= SIGNATURE.len() && start[..SIGNATURE.len()] == SIGNATURE {
        return Start::V2;
    }
    if start.starts_with(V1) {
        return Start::V1;
    }
    let prefix_of = |whole: &[u8]| !start.is_empty() && start.len() < whole.len() && whole.starts_with(start);
    if prefix_of(&SIGNATURE) || prefix_of(V1) {
        Start::Undecided
    } else {
        Start::Other
    }
}

/// The length of the rest of the header (after [`FIXED_LEN`]), read from its fixed part.
pub fn rest_len(fixed: &[u8; FIXED_LEN]) -> Result<usize, Refused> {
    if fixed[..12] != SIGNATURE {
        return Err(Refused::Signature);
    }
    let version = fixed[12] >> 4;
    if version != 2 {
        return Err(Refused::Version(version));
    }
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if len > MAX_REST {
        return Err(Refused::Length(len));
    }
    Ok(len)
}

/// Read a whole header: `fixed` and the `rest` whose length [`rest_len`] gave.
pub fn parse(fixed: &[u8; FIXED_LEN], rest: &[u8]) -> Result<Said, Refused> {
    let len = rest_len(fixed)?;
    if rest.len() != len {
        return Err(Refused::Length(rest.len()));
    }
    match fixed[12] & 0x0f {
        // LOCAL: the proxy speaking for itself; whatever follows is ignored.
        0x0 => return Ok(Said::Local),
        0x1 => {}
        other => return Err(Refused::Command(other)),
    }
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    match fixed[13] {
        // TCP over IPv4: source, destination, source port, destination port.
        0x11 if len >= 12 => {
            let ip = Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3]);
            Ok(Said::Client(SocketAddr::new(IpAddr::V4(ip), port(&rest[8..10]))))
        }
        0x21 if len >= 36 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&rest[..16]);
            Ok(Said::Client(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(octets)),
                port(&rest[32..34]),
            )))
        }
        0x11 | 0x21 => Err(Refused::Length(len)),
        other => Err(Refused::Family(other)),
    }
}

/// A header for `client` (to `to`) as HAProxy writes it, with no TLV: for tests.
pub fn encode(client: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let mut h = SIGNATURE.to_vec();
    h.push(0x21);
    let mut rest = Vec::new();
    match (client, to) {
        (SocketAddr::V4(c), SocketAddr::V4(t)) => {
            h.push(0x11);
            rest.extend_from_slice(&c.ip().octets());
            rest.extend_from_slice(&t.ip().octets());
        }
        (c, t) => {
            h.push(0x21);
            let v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            rest.extend_from_slice(&v6(c).octets());
            rest.extend_from_slice(&v6(t).octets());
        }
    }
    rest.extend_from_slice(&client.port().to_be_bytes());
    rest.extend_from_slice(&to.port().to_be_bytes());
    h.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    h.extend_from_slice(&rest);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(h: &[u8]) -> ([u8; FIXED_LEN], &[u8]) {
        (h[..FIXED_LEN].try_into().unwrap(), &h[FIXED_LEN..])
    }

    #[test]
    fn a_header_names_its_client_over_ipv4_and_ipv6() {
        let to: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        for client in ["192.0.2.7:51000", "[2001:db8::5]:443"] {
            let client: SocketAddr = client.parse().unwrap();
            let to = if client.is_ipv6() {
                "[::1]:8443".parse().unwrap()
            } else {
                to
            };
            let h = encode(client, to);
            let (fixed, rest) = split(&h);
            assert_eq!(rest_len(&fixed).unwrap(), rest.len());
            assert_eq!(parse(&fixed, rest).unwrap(), Said::Client(client));
        }
    }

    #[test]
    fn local_is_the_proxy_itself_and_other_commands_versions_and_families_are_refused() {
        let h = encode("192.0.2.7:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
        let (mut fixed, rest) = split(&h);
        fixed[12] = 0x20;
        assert_eq!(parse(&fixed, rest), Ok(Said::Local));
        fixed[12] = 0x22;
        assert_eq!(parse(&fixed, rest), Err(Refused::Command(2)));
        fixed[12] = 0x11;
        assert_eq!(parse(&fixed, rest), Err(Refused::Version(1)));
        fixed[12] = 0x21;
        fixed[13] = 0x12; // UDP over IPv4
        assert_eq!(parse(&fixed, rest), Err(Refused::Family(0x12)));
        fixed[13] = 0x21; // IPv6 addresses need 36 bytes; 12 are there
        assert_eq!(parse(&fixed, rest), Err(Refused::Length(12)));
        fixed[..12].copy_from_slice(b"\r\n\r\n\0\r\nQUIX\n");
        assert_eq!(rest_len(&fixed), Err(Refused::Signature));
        let mut long = h[..FIXED_LEN].to_vec();
        long[14..16].copy_from_slice(&2000u16.to_be_bytes());
        assert_eq!(rest_len(&long.try_into().unwrap()), Err(Refused::Length(2000)));
    }

    #[test]
    fn only_proxy_headers_are_classified_as_one_and_a_tls_hello_is_not() {
        let h = encode("192.0.2.7:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
        for n in 1..SIGNATURE.len() {
            assert_eq!(classify(&h[..n]), Start::Undecided, "{n}");
        }
        assert_eq!(classify(&h), Start::V2);
        assert_eq!(classify(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), Start::V1);
        assert_eq!(classify(b"PRO"), Start::Undecided);
        assert_eq!(classify(b"POST / HTTP/1.1"), Start::Other);
        assert_eq!(classify(&[0x16, 0x03, 0x01, 0x02, 0x00]), Start::Other);
        assert_eq!(classify(b"SSH-2.0-OpenSSH_9.2"), Start::Other);
        assert_eq!(classify(b""), Start::Other);
    }
}
