//! Unsigned webhook bodies cannot fill the gateway's memory (hostile round five, item 6: 60
//! connections each sending most of an 8 MiB body and then nothing took the gateway from 34 to
//! 518 MiB). A body's room is taken before a byte of it is read, in all and per address; past
//! either the delivery is refused at once (503 / 429, with the reason) and what was held comes
//! back when a body ends; a body must arrive whole within `limits.hook_body_timeout`. No OpenCode:
//! no delivery here gets past its signature.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::client::Https;
use crate::common::gateway::{Gateway, base_config};

const BIG: usize = 8 * 1024 * 1024;

fn config(limits: &str) -> String {
    base_config(&format!(
        r#"{limits}[[project]]
name = "demo"
upstream = "http://127.0.0.1:9"
upstream_password_env = "UNUSED_PW"

[[user]]
name = "bot"
password_hash = "{}"
projects = ["demo"]
role = "operator"

[[policy]]
name = "ci"
allow = ["bash: echo allowed*"]
otherwise = "reject"

[[trigger]]
name = "big"
project = "demo"
github_secret_env = "HOOK_SECRET"
events = ["push"]
prompt = "A push."
policy = "ci"
run_as_user = "bot"
max_body = {BIG}
"#,
        crate::common::gateway::hash("bot-password-nobody-uses-1")
    ))
}

fn start(limits: &str) -> Gateway {
    let env = [
        ("HOOK_SECRET", crate::triggers::SECRET),
        ("UNUSED_PW", "unused-password-1"),
    ];
    Gateway::start_with(&config(limits), &env, |_| {})
}

/// A delivery that declares `declared` bytes, sends `sent` of them and then nothing: the open
/// connection, to read the answer from when it comes.
async fn stalled(c: &Https, declared: usize, sent: usize) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut tls = c.tls().await;
    let head = format!(
        "POST /_gw/hook/big HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nx-github-event: push\r\nx-github-delivery: d-{sent}\r\nx-hub-signature-256: sha256=00\r\ncontent-length: {declared}\r\n\r\n",
        c.authority()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 64 * 1024];
    let mut left = sent;
    while left > 0 {
        let n = left.min(chunk.len());
        tls.write_all(&chunk[..n]).await.unwrap();
        left -= n;
    }
    tls.flush().await.unwrap();
    tls
}

/// The answer's status line and body, read within `within` (a refusal comes before the body is
/// read; a stalled one when the deadline ends it).
async fn answer(tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        match tokio::time::timeout(deadline - Instant::now(), tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some((head, body)) = text.split_once("\r\n\r\n")
                    && body.contains('}')
                {
                    return Some(format!("{}\n{body}", head.lines().next().unwrap_or_default()));
                }
            }
        }
    }
    (!got.is_empty()).then(|| String::from_utf8_lossy(&got).into_owned())
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Small bounds: a third body from one address is refused at once (429), a body past the
/// gateway-wide room too (503), before a byte of either is read; the stalled ones end at the
/// deadline (408) and give their room back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_bodies_take_room_in_all_and_per_address_before_they_are_read() {
    let gw =
        start("[limits]\nhook_body_bytes = 600000\nhook_body_bytes_per_ip = 400000\nhook_body_timeout = \"3s\"\n\n");
    let c = Https::new(gw.https, &gw.ca());
    let (one, two, three) = (c.from("127.0.0.1"), c.from("127.0.0.2"), c.from("127.0.0.3"));
    let mut held = vec![
        stalled(&one, 200_000, 1000).await,
        stalled(&one, 200_000, 1000).await,
        stalled(&two, 200_000, 1000).await,
    ];
    let mut third = stalled(&one, 200_000, 0).await;
    let said = answer(&mut third, Duration::from_secs(10)).await.unwrap_or_default();
    assert!(
        said.starts_with("HTTP/1.1 429") && said.contains("bodies_per_address"),
        "{said}"
    );
    let mut past = stalled(&three, 200_000, 0).await;
    let said = answer(&mut past, Duration::from_secs(10)).await.unwrap_or_default();
    assert!(
        said.starts_with("HTTP/1.1 503") && said.contains("bodies_in_all"),
        "{said}"
    );
    // The stalled bodies end at the deadline and give their room back.
    for tls in &mut held {
        let said = answer(tls, Duration::from_secs(20)).await.unwrap_or_default();
        assert!(
            said.starts_with("HTTP/1.1 408") && said.contains("within 3 s"),
            "{said}"
        );
    }
    let mut after = stalled(&three, 200_000, 0).await;
    drop(after.shutdown().await);
    let said = answer(&mut after, Duration::from_secs(10)).await.unwrap_or_default();
    assert!(
        !said.contains("bodies_in_all") && !said.contains("bodies_per_address"),
        "{said}"
    );
}

/// The round-five flood, with the default bounds (32 MiB in all, 8 MiB per address): 60
/// deliveries from 60 addresses, each declaring 8 MiB. Four are read; the other 56 are refused at
/// once, before a byte of theirs is read; the gateway's memory grows by about what the four
/// hold, not 60 times it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unsigned_bodies_is_refused_before_it_fills_memory() {
    let gw = start("");
    let c = Https::new(gw.https, &gw.ca());
    let before = rss_kib(gw.pid());
    let mut open = Vec::new();
    let mut refused = 0;
    for i in 1..=60 {
        let from = c.from(&format!("127.0.1.{i}"));
        let mut tls = stalled(&from, BIG, 0).await;
        match answer(&mut tls, Duration::from_millis(300)).await {
            Some(said) => {
                assert!(
                    said.starts_with("HTTP/1.1 503") && said.contains("bodies_in_all"),
                    "{said}"
                );
                refused += 1;
            }
            None => open.push(tls),
        }
    }
    assert_eq!((open.len(), refused), (4, 56), "32 MiB holds four 8 MiB bodies");
    let chunk = vec![b' '; 64 * 1024];
    for tls in &mut open {
        for _ in 0..(BIG / chunk.len()) {
            tls.write_all(&chunk).await.unwrap();
        }
        tls.flush().await.unwrap();
    }
    // Each whole body is read and judged (its signature is wrong): the four were held at once.
    for tls in &mut open {
        let said = answer(tls, Duration::from_secs(30)).await.unwrap_or_default();
        assert!(said.starts_with("HTTP/1.1 401"), "{said}");
    }
    let peak = rss_kib(gw.pid());
    let grew = peak.saturating_sub(before) / 1024;
    eprintln!(
        "gateway RSS {} MiB before, {} MiB after four 8 MiB bodies were read",
        before / 1024,
        peak / 1024
    );
    assert!(grew < 120, "the gateway grew by {grew} MiB under the flood");
}
