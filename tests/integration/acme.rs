//! ACME against a real ACME server: Debian's pebble on loopback, its validation ports pointed at
//! the gateway's ephemeral HTTPS port (TLS-ALPN-01), names resolved to 127.0.0.1 by
//! pebble-challtestsrv's DNS. One stack shows a failure and retry (pebble not up yet), issuance (a
//! client trusting pebble's root trusts the gateway for every name), a renewal without a restart
//! (a reload adds a project host), and a failed renewal (pebble gone: the old certificate keeps
//! serving, the log says why, the order is retried with backoff).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, plain, read};
use crate::common::gateway::{ALICE, Gateway, external_project, users_toml};
use crate::common::process::Guarded;

/// A child process stopped (and reaped) when the test ends, however it ends, and its output.
struct Proc(
    #[allow(dead_code, reason = "held for its drop, which stops the process")] Guarded,
    Arc<Mutex<String>>,
);

fn spawn(cmd: &mut Command) -> Proc {
    let mut child = Guarded::new(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("pebble is installed (scripts/test.sh)"),
        Duration::from_secs(2),
    );
    let log = Arc::new(Mutex::new(String::new()));
    crate::common::pump_lines(child.stdout.take().unwrap(), log.clone());
    crate::common::pump_lines(child.stderr.take().unwrap(), log.clone());
    Proc(child, log)
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free port for pebble, which binds it itself after the gateways started: from below the
/// kernel's ephemeral range, so the gateways' own listeners (bound to port 0) cannot be given it
/// meanwhile. With `free_port()` a gateway's admin listener once got the port picked for
/// pebble's management API, and pebble exited ("address already in use"). Random, and tried
/// before it is returned.
fn port_for_pebble() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let low: u16 = range
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(32768);
    let span = u32::from(low.saturating_sub(10_000)).max(1);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    for i in 0..200u32 {
        let port = 10_000 + (seed.wrapping_add(i.wrapping_mul(7_919)) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below {low} for pebble in 200 tries");
}

/// A CA and a certificate for 127.0.0.1 signed by it, for pebble's own HTTPS API.
fn pebble_api_cert(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.join("pebble-api-ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("pebble-api.crt"), leaf.pem()).unwrap();
    std::fs::write(dir.join("pebble-api.key"), key.serialize_pem()).unwrap();
}

fn config(pebble: u16, projects: &[&str]) -> String {
    config_with(pebble, projects, "")
}

fn config_with(pebble: u16, projects: &[&str], server: &str) -> String {
    let projects: String = projects
        .iter()
        .map(|p| external_project(p, "http://127.0.0.1:9"))
        .collect();
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nbase_domain = \"gw.localhost\"\nstate_dir = \"state\"\n{server}\n\
         [tls]\nacme = {{ directory = \"https://127.0.0.1:{pebble}/dir\", email = \"ops@gw.localhost\", ca_bundle = \"pebble-api-ca.pem\" }}\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n{projects}{}",
        users_toml(&[ALICE])
    )
}

/// Start pebble-challtestsrv (DNS: every name is 127.0.0.1) and pebble, validating on `tls_port`.
fn start_pebble(dir: &Path, api: u16, mgmt: u16, tls_port: u16, http_port: u16) -> (Proc, Proc) {
    let dns = free_udp_port();
    let challtest = spawn(Command::new("pebble-challtestsrv").args([
        "-dns01",
        &format!("127.0.0.1:{dns}"),
        "-http01",
        "",
        "-https01",
        "",
        "-tlsalpn01",
        "",
        "-management",
        &format!("127.0.0.1:{}", crate::common::free_port()),
        "-defaultIPv4",
        "127.0.0.1",
        "-defaultIPv6",
        "",
    ]));
    let cfg = serde_json::json!({"pebble": {
        "listenAddress": format!("127.0.0.1:{api}"),
        "managementListenAddress": format!("127.0.0.1:{mgmt}"),
        "certificate": dir.join("pebble-api.crt"),
        "privateKey": dir.join("pebble-api.key"),
        "httpPort": http_port,
        "tlsPort": tls_port,
        "ocspResponderURL": "",
        "externalAccountBindingRequired": false
    }});
    std::fs::write(dir.join("pebble.json"), cfg.to_string()).unwrap();
    let pebble = spawn(
        Command::new("pebble")
            .arg("-config")
            .arg(dir.join("pebble.json"))
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            // Fresh authorizations each order, so every order is validated against the gateway.
            .env("PEBBLE_AUTHZREUSE", "0")
            .env("PEBBLE_WFE_NONCEREJECT", "0"),
    );
    (challtest, pebble)
}

fn covered(cert: &[u8], names: &[&str]) -> bool {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    opencode_gateway::gateway::certs::uncovered(&cert.to_vec().into(), &names).is_empty()
}

async fn wait_count(gw: &Gateway, needle: &str, count: usize, within: Duration, pebble: &Proc) {
    let deadline = std::time::Instant::now() + within;
    while gw.logs().matches(needle).count() < count {
        assert!(
            std::time::Instant::now() < deadline,
            "no {count}x {needle:?} within {within:?}:\n{}\npebble:\n{}",
            gw.logs(),
            pebble.1.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble: run scripts/test.sh"]
async fn acme_issues_renews_and_survives_a_failing_ca_against_pebble() {
    let (api, mgmt) = (port_for_pebble(), port_for_pebble());
    let gw = Gateway::start_with(&config(api, &["demo"]), &[], |d| {
        pebble_api_cert(d);
        crate::common::write_secret(&d.join("pw"), "unused-password-1");
    });
    let dir = gw.dir.path().to_path_buf();
    // A second gateway validated by HTTP-01 on its plain-HTTP listener (pebble's httpPort).
    let (gw80, http_port) = Gateway::start_on_a_picked_port(
        |port| config_with(api, &["demo"], &format!("http_listen = \"127.0.0.1:{port}\"\n")),
        |d| {
            std::fs::copy(dir.join("pebble-api-ca.pem"), d.join("pebble-api-ca.pem")).unwrap();
            crate::common::write_secret(&d.join("pw"), "unused-password-1");
        },
    );

    // Pebble is not up yet: the first order fails, says why, and is retried.
    wait_count(
        &gw,
        "ACME: order failed",
        1,
        Duration::from_secs(20),
        &Proc(
            Guarded::spawn(&mut Command::new("true"), Duration::ZERO),
            Default::default(),
        ),
    )
    .await;
    assert!(gw.logs().contains("Connection refused"), "{}", gw.logs());
    let (_challtest, pebble) = start_pebble(&dir, api, mgmt, gw.https.port(), http_port);

    // Issuance: TLS-ALPN-01 on the gateway's own HTTPS port.
    wait_count(
        &gw,
        "ACME: certificate issued and serving",
        1,
        Duration::from_secs(60),
        &pebble,
    )
    .await;
    let mgmt_client = Https::new(
        format!("127.0.0.1:{mgmt}").parse().unwrap(),
        &dir.join("pebble-api-ca.pem"),
    );
    let root = mgmt_client.get("/roots/0", None).await;
    assert_eq!(root.status, 200, "{}", root.body);
    std::fs::write(dir.join("pebble-root.pem"), &root.body).unwrap();
    let c = Https::new(gw.https, &dir.join("pebble-root.pem")).host("demo.gw.localhost");
    let first = crate::common::client::served_certificate(&c).await;
    assert!(covered(&first, &["gw.localhost", "demo.gw.localhost"]));
    let mut before = c.http1().await;
    let get = || c.request("GET", "/", None).body(Full::default()).unwrap();
    read(before.send_request(get()).await.unwrap()).await;
    for (name, mode) in [
        ("account.json", 0o600),
        ("cert.pem", 0o600),
        ("key.pem", 0o600),
        ("", 0o700),
    ] {
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(dir.join("state/acme").join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(m, mode, "state/acme/{name}");
    }
    assert!(
        !gw.logs().contains("PRIVATE KEY") && !gw.logs().contains("\"d\":"),
        "no key material in the log"
    );

    // HTTP-01: the other gateway got its certificate through its plain-HTTP listener, which
    // otherwise only redirects to HTTPS.
    wait_count(
        &gw80,
        "ACME: certificate issued and serving",
        1,
        Duration::from_secs(60),
        &pebble,
    )
    .await;
    let c80 = Https::new(gw80.https, &dir.join("pebble-root.pem")).host("gw.localhost");
    assert!(covered(
        &crate::common::client::served_certificate(&c80).await,
        &["gw.localhost", "demo.gw.localhost"]
    ));
    let http_addr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let host = format!("demo.gw.localhost:{http_port}");
    let r = plain(http_addr, "GET", "/p/demo/session?x=1", &[("host", host.as_str())], "").await;
    assert_eq!(r.status, 308);
    assert_eq!(
        r.headers["location"],
        format!("https://demo.gw.localhost:{}/p/demo/session?x=1", gw80.https.port()).as_str()
    );
    let r = plain(
        http_addr,
        "GET",
        "/.well-known/acme-challenge/unknown",
        &[("host", "gw.localhost")],
        "",
    )
    .await;
    assert_eq!(r.status, 404, "no answer for a token that is not being validated");
    drop(gw80);

    // Renewal without a restart: a reload adds a project host; a new certificate covers it.
    gw.write_config(&config(api, &["demo", "extra"]));
    let (status, body) = gw.control("POST", "/reload");
    assert_eq!(status, 200, "{body}");
    wait_count(
        &gw,
        "ACME: certificate issued and serving",
        2,
        Duration::from_secs(60),
        &pebble,
    )
    .await;
    let second = crate::common::client::served_certificate(&c).await;
    assert!(first != second, "a new certificate serves:\n{}", gw.logs());
    assert!(covered(
        &second,
        &["gw.localhost", "demo.gw.localhost", "extra.gw.localhost"]
    ));
    read(
        before
            .send_request(get())
            .await
            .expect("a connection opened before keeps working"),
    )
    .await;

    // A failed renewal: pebble is gone. The old certificate keeps serving; the log says why; the
    // order is retried with a growing backoff.
    drop(pebble);
    let failures = gw.logs().matches("ACME: order failed").count();
    gw.write_config(&config(api, &["demo", "extra", "third"]));
    let (status, body) = gw.control("POST", "/reload");
    assert_eq!(status, 200, "{body}");
    let quiet = Proc(
        Guarded::spawn(&mut Command::new("true"), Duration::ZERO),
        Default::default(),
    );
    wait_count(&gw, "ACME: order failed", failures + 2, Duration::from_secs(30), &quiet).await;
    let logs = gw.logs();
    let tail = &logs[logs.rfind("ACME: ordering a certificate").unwrap()..];
    assert!(tail.contains("Connection refused"), "{tail}");
    assert!(
        logs.contains("retry_in_s=2") && logs.contains("retry_in_s=4"),
        "backoff doubles:\n{logs}"
    );
    assert_eq!(
        crate::common::client::served_certificate(&c).await,
        second,
        "the old certificate keeps serving"
    );
}
