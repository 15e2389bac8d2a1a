//! The admin listener (loopback, read-only health and metrics, its own slots and timeouts, a Host
//! check) and the control socket (status and reload, the gateway's OS user only).

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::client::{Https, basic};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{ALICE, BIN, Gateway, base_config, external_project, http_exchange, users_toml};

const PW: &str = "admin-upstream-pw";

async fn gateway(extra: &str) -> (Gateway, FakeUpstream) {
    let web = FakeUpstream::start(PW).await;
    // A directory (the repository's demo folder) is set so /metrics has one to leave out.
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/demo");
    let config = base_config(&format!(
        "{extra}\n{}directory = \"{demo}\"\n\n{}",
        external_project("web", &web.url()),
        users_toml(&[ALICE])
    ));
    (Gateway::start_behind(&config, PW), web)
}

fn admin_with_host(gw: &Gateway, method: &str, path: &str, host: &str) -> (u16, String) {
    let s = TcpStream::connect(gw.admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    http_exchange(s, method, path, host)
}

#[tokio::test]
async fn the_admin_listener_serves_only_health_and_metrics_to_loopback_hosts() {
    let (gw, _web) = gateway("").await;
    let port = gw.admin.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(admin_with_host(&gw, "GET", "/healthz", &host).0, 200, "{host}");
    }
    // DNS rebinding: a web page's name resolved to 127.0.0.1, or the right name with another port.
    for host in [
        format!("evil.example:{port}"),
        format!("localhost:{}", port + 1),
        "localhost".into(),
    ] {
        let (code, body) = admin_with_host(&gw, "GET", "/metrics", &host);
        assert_eq!(code, 421, "{host}: {body}");
        assert!(body.contains("host not allowed"), "{body}");
    }
    // Status and reload are not on this listener: a cross-site simple POST reloads nothing.
    let before = gw.logs().matches("configuration reloaded").count();
    let (code, body) = gw.admin("POST", "/reload");
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("control socket"), "{body}");
    assert_eq!(gw.admin("GET", "/status").0, 404);
    assert_eq!(gw.logs().matches("configuration reloaded").count(), before);
    // Metrics name no user and no directory.
    let (code, metrics) = gw.admin("GET", "/metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("opencode_gateway_requests_total"));
    assert!(!metrics.contains("alice") && !metrics.contains("/demo"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_admin_connections_neither_lock_out_https_nor_outlive_their_timeout() {
    let (gw, _web) = gateway("[limits]\nmax_connections_per_ip = 8\n").await;
    // Far more idle admin connections than the per-address cap of HTTPS and SSH.
    let mut idle: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(gw.admin).unwrap()).collect();
    let c = Https::new(gw.https, &gw.ca());
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        c.get("/p/web/global/health", Some(&basic("alice", "alice-password-1"))),
    )
    .await
    .expect("HTTPS answered while admin connections were held");
    assert_eq!(r.status, 200);
    // Past the admin table's size, admin connections are closed at once.
    let mut closed = 0;
    for s in idle.iter_mut() {
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut b = [0u8; 1];
        let refused = match s.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        };
        closed += usize::from(refused);
    }
    assert_eq!(closed, 40 - 16, "admin connections refused past its table of 16");
    // The ones admitted are cut at the head timeout (5 s), without sending anything.
    let started = Instant::now();
    for s in idle.iter_mut() {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut b = [0u8; 256];
        while let Ok(n) = s.read(&mut b) {
            if n == 0 {
                break;
            }
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "idle admin connections held {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn status_and_reload_go_through_a_socket_only_the_gateways_user_can_open() {
    let (gw, _web) = gateway("").await;
    let sock = gw.control_socket();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sock), 0o600, "the socket");
    assert_eq!(mode(sock.parent().unwrap()), 0o700, "its folder");
    let run = |verb: &str| {
        crate::common::process::bounded(std::process::Command::new(BIN).arg(verb).arg("-c").arg(&gw.config))
    };
    let status = run("status");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("\"web\"") && text.contains("alice"), "{text}");
    let reload = run("reload");
    assert!(reload.status.success(), "{}", String::from_utf8_lossy(&reload.stderr));
    assert!(gw.wait_log("configuration reloaded", Duration::from_secs(5)).await);
    // Another OS user ("nobody") cannot open it.
    if !crate::common::os_users::root_or_skip("opening the control socket as another user") {
        return;
    }
    use crate::common::os_users::unix_connect_as;
    let nobody = 65534;
    let refused = |what: &str| {
        let r = unix_connect_as(nobody, nobody, &sock);
        assert_eq!(
            r.as_ref().map_err(|e| e.raw_os_error()),
            Err(Some(libc::EACCES)),
            "{what}: another user opened the control socket ({r:?})"
        );
    };
    // The test's own folder (0700) lets others through, so only the gateway's modes stand.
    let open = |p: &std::path::Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    open(gw.dir.path(), 0o711);
    refused("as the gateway made it");
    // With the gateway's folders opened up too, the socket's own mode refuses.
    let state = gw.dir.path().join("state");
    open(&state, 0o711);
    open(sock.parent().unwrap(), 0o711);
    refused("the socket's own mode");
    // The probe can connect when the mode lets it: the refusals above are the modes'.
    open(&sock, 0o666);
    let allowed = unix_connect_as(nobody, nobody, &sock);
    open(&sock, 0o600);
    assert!(
        allowed.is_ok(),
        "the probe cannot connect even to an open socket: {allowed:?}"
    );
    // The gateway's own user still can.
    assert!(std::os::unix::net::UnixStream::connect(&sock).is_ok());
}
