//! Who an HTTPS connection is from: its peer, or, from a load balancer in
//! `server.trusted_proxies`, the client its PROXY protocol v2 header names
//! ([`crate::front::proxy_header`]). Decided before the TLS handshake, from the first bytes:
//! a connection that starts like a header from any other address is refused (a client must not
//! name itself someone else), and so is a malformed one. The first bytes are peeked, not read,
//! unless they are a trusted header: the handshake reads them as before. A trusted proxy may
//! also send no header (health checks, or `X-Forwarded-For` from an HTTP proxy, as before).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::front::proxy_header::{self, FIXED_LEN, Said, Start};

/// Why a connection was refused before its handshake (a log's `reason`).
pub(crate) type Reason = &'static str;
/// No first bytes (or no whole header) by the deadline: a handshake that never came.
pub(crate) const NOTHING_IN_TIME: Reason = "no_bytes_in_time";
/// The peer closed (or the socket failed) first.
pub(crate) const CLOSED: Reason = "closed";

pub(crate) async fn client_of(
    tcp: &mut TcpStream,
    peer: SocketAddr,
    trusted: bool,
    deadline: Instant,
) -> Result<SocketAddr, Reason> {
    let mut start = [0u8; FIXED_LEN];
    let mut seen = 0;
    let mut wait = Duration::from_millis(5);
    loop {
        // Checked on every turn, not left to the peek's timeout: a peek that has bytes to show
        // answers at once, so a peer that sent `P` or `\r\n` and went quiet would be asked again
        // every few milliseconds forever (round four: open after 330 s, 3 % of a core for 180).
        if Instant::now() >= deadline {
            return Err(NOTHING_IN_TIME);
        }
        let n = match tokio::time::timeout_at(deadline, tcp.peek(&mut start)).await {
            Err(_) => return Err(NOTHING_IN_TIME),
            Ok(Err(_) | Ok(0)) => return Err(CLOSED),
            Ok(Ok(n)) => n,
        };
        match (proxy_header::classify(&start[..n]), trusted) {
            (Start::Other, _) => return Ok(peer),
            (Start::V1 | Start::V2, false) => return Err("proxy_header_untrusted"),
            (Start::V1, true) => return Err("proxy_header_v1"),
            (Start::V2, true) if n >= FIXED_LEN => break,
            _ => {
                // Begins like a header but not all of it is here: peek answers at once with what
                // there is, so wait a little before asking again (bounded by the deadline).
                if n == seen {
                    tokio::time::sleep_until(deadline.min(Instant::now() + wait)).await;
                    wait = (wait * 2).min(Duration::from_millis(200));
                }
                seen = n;
            }
        }
    }
    let header = async {
        let mut fixed = [0u8; FIXED_LEN];
        tcp.read_exact(&mut fixed).await.map_err(|_| CLOSED)?;
        let len = proxy_header::rest_len(&fixed).map_err(|r| r.code())?;
        let mut rest = vec![0u8; len];
        tcp.read_exact(&mut rest).await.map_err(|_| CLOSED)?;
        proxy_header::parse(&fixed, &rest).map_err(|r| r.code())
    };
    match tokio::time::timeout_at(deadline, header).await {
        Err(_) => Err(NOTHING_IN_TIME),
        Ok(Err(reason)) => Err(reason),
        Ok(Ok(Said::Client(client))) => Ok(client),
        Ok(Ok(Said::Local)) => Ok(peer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A peer that sends the start of a header (or of the v1 text) and goes quiet is closed at
    /// the deadline, trusted or not: every byte before the handshake is under its deadline.
    #[tokio::test]
    async fn part_of_a_header_then_silence_ends_at_the_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let partial: [&[u8]; 3] = [b"P", b"\r\n", &proxy_header::SIGNATURE[..11]];
        for bytes in partial {
            for trusted in [false, true] {
                let mut client = tokio::net::TcpStream::connect(at).await.unwrap();
                client.write_all(bytes).await.unwrap();
                let (mut tcp, peer) = listener.accept().await.unwrap();
                let deadline = Instant::now() + Duration::from_millis(300);
                let judged = tokio::time::timeout(Duration::from_secs(5), client_of(&mut tcp, peer, trusted, deadline))
                    .await
                    .unwrap_or_else(|_| panic!("{bytes:?} (trusted {trusted}) still open 5 s after a 300 ms deadline"));
                assert_eq!(judged, Err(NOTHING_IN_TIME), "{bytes:?} trusted {trusted}");
                assert!(Instant::now() < deadline + Duration::from_secs(1));
            }
        }
    }

    /// The headers HAProxy itself sent (tests/fixtures/proxy/, with what the capture's client knew
    /// of its connection) through the real accept path, from a trusted balancer: version 2 names
    /// the client HAProxy connected from, its health check's LOCAL is the balancer itself, and
    /// version 1 is refused; the header is consumed exactly, the client's own bytes left to read.
    #[tokio::test]
    async fn haproxys_own_headers_name_the_client_haproxy_meant() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proxy");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut seen = 0;
        for name in [
            "v1-tcp4",
            "v1-tcp6",
            "v2-local",
            "v2-tcp4",
            "v2-tcp6",
            "v2-tcp4-tls-tlvs",
        ] {
            let bytes = std::fs::read(dir.join(format!("{name}.bin"))).unwrap();
            let meant: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap()).unwrap();
            let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            client.write_all(&bytes).await.unwrap();
            client.shutdown().await.unwrap();
            let (mut tcp, peer) = listener.accept().await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            let judged = client_of(&mut tcp, peer, true, deadline).await;
            let want = match (meant["version"].as_u64(), meant["command"].as_str()) {
                (Some(1), _) => Err("proxy_header_v1"),
                (_, Some("LOCAL")) => Ok(peer),
                _ => Ok(SocketAddr::new(
                    meant["source"][0].as_str().unwrap().parse().unwrap(),
                    meant["source"][1].as_u64().unwrap() as u16,
                )),
            };
            assert_eq!(judged, want, "{name}");
            if judged.is_ok() {
                let mut rest = Vec::new();
                tcp.read_to_end(&mut rest).await.unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&rest),
                    meant["after"].as_str().unwrap_or(""),
                    "{name}"
                );
            }
            seen += 1;
        }
        assert_eq!(
            seen,
            std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "bin"))
                .count()
        );
    }
}
