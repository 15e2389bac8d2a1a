//! A load balancer in front (issue 27, fourth part): Debian's HAProxy with `send-proxy-v2`
//! between a client on 127.0.0.2 and the gateway, which trusts 127.0.0.1 (where HAProxy connects
//! from). The gateway must see 127.0.0.2 in its logs, the login limiter and the audit trail; a
//! PROXY header sent straight to the gateway from 127.0.0.3 (not trusted) must be refused before
//! any TLS, with that reason.

use std::process::Command;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::process::Guarded;

const ALICE: &str = "alice-password-1";

fn haproxy_in_front(gw: &Gateway) -> (Guarded, u16) {
    let port = crate::common::free_port();
    let backend = format!("  server g1 127.0.0.1:{} send-proxy-v2\n", gw.https.port());
    (crate::common::haproxy::start(gw.dir.path(), port, "", &backend), port)
}

/// curl from `from` through HAProxy: the form login (`password`), its status code.
fn login_from(from: &str, gw: &Gateway, port: u16, password: &str) -> String {
    let login = format!("https://gw.localhost:{port}");
    let out = crate::common::process::output_within(
        Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--interface", from])
            .arg("--resolve")
            .arg(format!("gw.localhost:{port}:127.0.0.1"))
            .arg("--cacert")
            .arg(gw.ca())
            .args(["-H", &format!("Origin: {login}"), "-H", "Sec-Fetch-Site: same-origin"])
            .arg("--data")
            .arg(format!("user=alice&password={password}&next=/"))
            .arg(format!("{login}/login")),
        None,
        Duration::from_secs(30),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs HAProxy: run scripts/test.sh"]
async fn behind_haproxy_the_gateway_sees_the_real_client_and_refuses_a_header_from_anyone_else() {
    let users = users_toml(&[TestUser {
        name: "alice",
        password: ALICE,
        projects: "[\"*\"]",
        role: "operator",
    }]);
    let config = base_config(&users).replace(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\ntrusted_proxies = [\"127.0.0.1\"]\n",
    );
    let gw = Gateway::start(&config);
    let (_haproxy, port) = haproxy_in_front(&gw);

    // Through HAProxy, from 127.0.0.2: a wrong password, then the right one.
    assert_eq!(login_from("127.0.0.2", &gw, port, "wrong-password"), "401");
    assert_eq!(login_from("127.0.0.2", &gw, port, ALICE), "303");
    the_login_limiter_counts_the_client_the_header_names(&gw, port);
    assert!(
        gw.wait_log("browser login peer=127.0.0.2 user=alice", Duration::from_secs(5))
            .await,
        "{}",
        gw.logs()
    );
    let audit = crate::common::audit::records(&crate::common::audit::file(&gw));
    let address_of = |event: &str| {
        audit
            .iter()
            .find(|r| r["event"] == event)
            .map(|r| r["address"].clone())
            .unwrap_or_else(|| panic!("no {event}: {audit:#?}"))
    };
    assert_eq!(address_of("login_failed"), "127.0.0.2");
    assert_eq!(address_of("login"), "127.0.0.2");
    let access: Vec<_> = gw
        .logs()
        .lines()
        .filter(|l| l.contains("path=/login"))
        .map(String::from)
        .collect();
    // Each of the 15 logins under the address of the client that made it.
    let from_4 = access.iter().filter(|l| l.contains("peer=127.0.0.4 ")).count();
    let from_2 = access.iter().filter(|l| l.contains("peer=127.0.0.2 ")).count();
    assert!(access.len() == 15 && from_2 == 14 && from_4 == 1, "{access:#?}");

    a_header_from_anyone_else_is_closed_unanswered_and_logged_once(&gw).await;
}

/// Through HAProxy, 127.0.0.2 spends its login allowance (10 at once) and is refused, the right
/// password included, while another client of the same HAProxy still logs in: the login limiter
/// counts the client the header names, not the balancer.
fn the_login_limiter_counts_the_client_the_header_names(gw: &Gateway, port: u16) {
    let wrong: Vec<String> = (0..11)
        .map(|_| login_from("127.0.0.2", gw, port, "wrong-again"))
        .collect();
    assert_eq!(wrong.last().map(String::as_str), Some("429"), "{wrong:?}");
    assert_eq!(
        login_from("127.0.0.2", gw, port, ALICE),
        "429",
        "127.0.0.2 is out of attempts"
    );
    assert_eq!(
        login_from("127.0.0.4", gw, port, ALICE),
        "303",
        "another client of the balancer"
    );
}

/// Straight to the gateway from addresses not trusted, headers naming someone else (version 2,
/// then version 1 text too): each closed before any TLS, not a byte answered (TLS would answer
/// an alert), the reason in the security log once (at most once per 10 s), and the claimed
/// address nowhere in the log.
async fn a_header_from_anyone_else_is_closed_unanswered_and_logged_once(gw: &Gateway) {
    // Straight to the gateway from 127.0.0.3 (not trusted), a header naming someone else: closed
    // before any TLS, with the reason in the security log.
    let header = opencode_gateway::front::proxy_header::encode("203.0.113.9:40000".parse().unwrap(), gw.https);
    let first = closed_unanswered("127.0.0.3", gw.https, &header).await;
    assert!(first.is_ok(), "the gateway answered a header from 127.0.0.3: {first:?}");
    assert!(
        gw.wait_log(
            "peer=127.0.0.3 reason=\"proxy_header_untrusted\"",
            Duration::from_secs(5)
        )
        .await,
        "{}",
        gw.logs()
    );
    assert!(
        !gw.logs().contains("203.0.113.9"),
        "the claimed address reached the logs"
    );
    // More of them, version 1 and 2, from 127.0.0.3 and 127.0.0.5: each closed unanswered (not
    // passed to TLS, which would answer an alert), and the security log still holds one line.
    let said = Instant::now();
    let v1 = b"PROXY TCP4 203.0.113.9 127.0.0.1 40000 443\r\n".to_vec();
    for (from, bytes) in [
        ("127.0.0.3", &header),
        ("127.0.0.5", &v1),
        ("127.0.0.5", &header),
        ("127.0.0.3", &v1),
    ] {
        let answer = closed_unanswered(from, gw.https, bytes).await;
        assert!(
            answer.is_ok(),
            "{from} {:?}: {answer:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    let lines = gw
        .logs()
        .matches("refused before the TLS handshake for its PROXY protocol header")
        .count();
    assert!(
        said.elapsed() < Duration::from_secs(10),
        "the burst outlasted the log's 10 s: cannot judge"
    );
    assert_eq!(lines, 1, "logged at most once per 10 s:\n{}", gw.logs());
}

/// Send `bytes` from `from` to the gateway: `Ok` if the gateway closed the connection without
/// a byte, else what it did.
async fn closed_unanswered(from: &str, to: std::net::SocketAddr, bytes: &[u8]) -> Result<(), String> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut tcp = socket.connect(to).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    let closed =
        matches!(&read, Ok(Ok(0))) || matches!(&read, Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset);
    if closed && answer.is_empty() {
        Ok(())
    } else {
        Err(format!("{read:?}, answered {answer:02x?}"))
    }
}

/// Part of a PROXY header (or of v1's text), then silence: closed by the handshake deadline, from
/// a trusted proxy and from anyone else (round four: such connections were still open after
/// 330 s against a 10 s deadline, each asked again every 5 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_of_a_proxy_header_then_silence_is_closed_at_the_handshake_deadline() {
    // A user: a config with no project and no user is refused as having nothing to serve.
    let config = base_config(&format!("[limits]\ntls_handshake_timeout = \"1s\"\n\n{}", one_user())).replace(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\ntrusted_proxies = [\"127.0.0.1\"]\n",
    );
    let gw = Gateway::start(&config);
    let signature = &opencode_gateway::front::proxy_header::SIGNATURE;
    let partial: [&[u8]; 3] = [b"P", b"\r\n", &signature[..11]];
    // 127.0.0.1 is trusted, 127.0.0.3 is not.
    for from in ["127.0.0.1", "127.0.0.3"] {
        let mut open = Vec::new();
        for bytes in partial {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
            let mut tcp = socket.connect(gw.https).await.unwrap();
            tcp.write_all(bytes).await.unwrap();
            open.push((bytes, tcp));
        }
        let started = std::time::Instant::now();
        for (bytes, mut tcp) in open {
            let mut answer = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
            let closed = matches!(&read, Ok(Ok(0)))
                || matches!(&read, Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset);
            assert!(
                closed && answer.is_empty(),
                "{bytes:?} from {from}: not closed 10 s after a 1 s deadline: {read:?} {answer:?}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "from {from}: closed only after {:?}",
            started.elapsed()
        );
    }
    assert!(
        gw.logs().contains("no handshake within tls_handshake_timeout"),
        "{}",
        gw.logs()
    );
}

/// Behind a balancer the per-address connection cap counts the client the PROXY header names,
/// not the balancer (round four: 20 direct, 60 through HAProxy): a client at the cap is refused
/// while another client of the same balancer, and the balancer itself, go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_balancer_the_connection_cap_counts_the_client_the_header_names() {
    let config = base_config(&format!("[limits]\nmax_connections_per_ip = 2\n\n{}", one_user())).replace(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\ntrusted_proxies = [\"127.0.0.1\"]\n",
    );
    let gw = Gateway::start(&config);
    let c = crate::common::client::Https::new(gw.https, &gw.ca()).from("127.0.0.1");
    let header = |client: &str| opencode_gateway::front::proxy_header::encode(client.parse().unwrap(), gw.https);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            c.try_tls_after(&header("198.51.100.7:40000"))
                .await
                .expect("within the cap"),
        );
    }
    crate::common::client::assert_closed_in_handshake(
        c.try_tls_after(&header("198.51.100.7:40001")).await,
        "a third connection for 198.51.100.7",
    );
    // Another client of the same balancer, and the balancer's own connections, are not counted
    // with it: four connections from 127.0.0.1 in all, over a cap of 2.
    for port in [40002, 40003] {
        held.push(
            c.try_tls_after(&header(&format!("198.51.100.8:{port}")))
                .await
                .expect("another client"),
        );
    }
    held.push(c.try_tls().await.expect("the balancer's own connection"));
    assert!(
        gw.wait_log("peer=198.51.100.7 reason=\"connection_limit\"", Duration::from_secs(5))
            .await,
        "{}",
        gw.logs()
    );
    drop(held);
}

/// One user, for a gateway whose test needs none (a config naming no project and no user is
/// refused as having nothing to serve).
fn one_user() -> String {
    users_toml(&[TestUser {
        name: "alice",
        password: "alice-password-1",
        projects: "[\"*\"]",
        role: "operator",
    }])
}
