//! LAN mode's parts a phone meets before it trusts anything (issue 22): the dev CA on the
//! plain-HTTP listener with the fingerprint the terminal printed, `cert dev --name`, and `doctor`
//! saying when another device could not reach what the gateway prints. The phone itself, in a
//! network namespace of its own, is in lan_phone.rs; port mode's cookies in project_ports.rs.

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use crate::common::gateway::{ALICE, BIN, Gateway, base_config, users_toml};

/// One plain HTTP/1.1 GET: the status, the headers (lower-cased names) and the body's bytes.
fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, raw[end + 4..].to_vec())
}

fn sha256_colon_hex(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[tokio::test]
async fn the_ca_page_on_plain_http_serves_the_ca_whose_fingerprint_the_terminal_printed() {
    let config = base_config(&users_toml(&[ALICE])).replace(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\nhttp_listen = \"127.0.0.1:0\"\n",
    );
    let gw = Gateway::start(&config);
    let logs = gw.logs();
    let http: std::net::SocketAddr = logs
        .lines()
        .find(|l| l.contains("plain HTTP listener ready"))
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("listen=")))
        .unwrap_or_else(|| panic!("no plain HTTP listener line:\n{logs}"))
        .parse()
        .unwrap();
    // The banner: where the phone gets the CA, and the fingerprint to compare.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let banner = loop {
        let out = gw.stdout.lock().unwrap().clone();
        if out.contains("SHA-256 fingerprint") {
            break out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no fingerprint in the banner:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let line = banner.lines().find(|l| l.contains("SHA-256 fingerprint")).unwrap();
    assert!(line.contains(&format!("http://127.0.0.1:{}/ca", http.port())), "{line}");
    let printed = line.rsplit(' ').next().unwrap().to_string();

    let (status, head, der) = http_get(http, "/ca.crt");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: application/x-x509-ca-cert"), "{head}");
    assert!(!head.contains("set-cookie"), "{head}");
    assert_eq!(
        sha256_colon_hex(&der),
        printed,
        "the served CA is the one whose fingerprint was printed"
    );
    // And it is the CA on disk, the one that signed the gateway's certificate.
    let pem = std::fs::read_to_string(gw.ca()).unwrap();
    use rustls::pki_types::pem::PemObject;
    let on_disk = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    assert_eq!(der, on_disk.to_vec());

    let (status, head, page) = http_get(http, "/ca");
    assert_eq!(status, 200);
    assert!(head.contains("text/html"), "{head}");
    let page = String::from_utf8(page).unwrap();
    // As a person reads it: the break chances between bytes (`<wbr>`) are no text.
    assert!(
        page.replace("<wbr>", "").contains(&printed),
        "the page shows the fingerprint"
    );
    assert!(
        page.contains(&format!("https://127.0.0.1:{}/", gw.https.port())),
        "and where to go next"
    );

    let (status, head, profile) = http_get(http, "/ca.mobileconfig");
    assert_eq!(status, 200);
    assert!(head.contains("application/x-apple-aspen-config"), "{head}");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&der);
    assert!(
        String::from_utf8(profile)
            .unwrap()
            .contains(&format!("<data>{b64}</data>"))
    );

    // Everything else on plain HTTP still goes to HTTPS, the login page included.
    let (status, head, _) = http_get(http, "/login");
    assert_eq!(status, 308, "{head}");
    assert!(
        head.contains(&format!("location: https://127.0.0.1:{}/login", gw.https.port())),
        "{head}"
    );
}

fn cli(args: &[&str], cwd: &std::path::Path) -> std::process::Output {
    crate::common::process::output_within(
        Command::new(BIN).args(args).current_dir(cwd),
        None,
        Duration::from_secs(60),
    )
}

#[test]
fn cert_dev_name_adds_names_it_remembers_and_refuses_one_the_ca_cannot_vouch_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(
        &[
            "cert",
            "dev",
            "--out",
            "c",
            "-c",
            "/nonexistent.toml",
            "--name",
            "198.18.0.7",
            "--name",
            "mybox.local",
        ],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let paths = opencode_gateway::front::devcert::DevCertPaths::beside(
        &dir.path().join("c/server.crt"),
        &dir.path().join("c/server.key"),
    );
    for name in ["198.18.0.7", "mybox.local", "localhost", "gw.localhost"] {
        opencode_gateway::front::devcert::verify(&paths, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Another address later: the same CA, a new certificate, the earlier names kept.
    let ca = std::fs::read(&paths.ca_cert).unwrap();
    let out = cli(
        &[
            "cert",
            "dev",
            "--out",
            "c",
            "-c",
            "/nonexistent.toml",
            "--name",
            "198.18.0.8",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for name in ["198.18.0.7", "198.18.0.8", "mybox.local"] {
        opencode_gateway::front::devcert::verify(&paths, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(std::fs::read(&paths.ca_cert).unwrap(), ca);
    // A domain the CA's name constraints do not permit: refused with the reason and the fix,
    // and not remembered.
    let out = cli(
        &[
            "cert",
            "dev",
            "--out",
            "c",
            "-c",
            "/nonexistent.toml",
            "--name",
            "other.example",
        ],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot vouch for other.example") && err.contains("Fix: remove"),
        "{err}"
    );
    let remembered = std::fs::read_to_string(dir.path().join("c/added-names.txt")).unwrap();
    assert!(
        remembered.contains("198.18.0.8") && !remembered.contains("other.example"),
        "{remembered}"
    );
    // Not a name at all.
    let out = cli(
        &["cert", "dev", "--out", "c", "-c", "/nonexistent.toml", "--name", "a b"],
        dir.path(),
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither an IP address nor a DNS name"));
}

fn doctor(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    let out = cli(&["doctor", "-c", path.to_str().unwrap()], dir.path());
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn doctor_says_when_another_device_could_not_reach_what_the_gateway_prints() {
    let base = base_config(&users_toml(&[ALICE]));
    // Loopback: fine here, unreachable from a phone.
    let out = doctor(&base);
    assert!(
        out.lines()
            .any(|l| l.starts_with("warn reach: the public URL https://127.0.0.1:0 is this machine only")),
        "{out}"
    );
    // A LAN public URL in front of a loopback listener.
    let out = doctor(&base.replace(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\npublic_url = \"https://198.18.0.1:8443\"\n",
    ));
    assert!(
        out.lines().any(|l| l.starts_with(
            "fail reach: the public URL https://198.18.0.1:8443 names 198.18.0.1, but server.listen 127.0.0.1:0"
        )),
        "{out}"
    );
    // Every address, with *.localhost project hosts and no CA page: two warnings, each with its fix.
    let lan = base
        .replace(
            "listen = \"127.0.0.1:0\"\nbase_domain",
            "listen = \"0.0.0.0:0\"\nbase_domain",
        )
        .replace(
            "state_dir = \"state\"\n",
            "state_dir = \"state\"\npublic_url = \"https://127.0.0.2:0\"\n",
        );
    let out = doctor(&lan);
    assert!(
        out.contains("warn reach: base_domain gw.localhost is a .localhost name"),
        "{out}"
    );
    assert!(out.contains("Fix: set server.http_listen"), "{out}");
}

/// The committed LAN variant of the dev config (the README's phone path) validates beside the dev
/// config, listens on every address, and names this machine's LAN address, not loopback.
#[test]
fn the_committed_lan_config_serves_every_address_under_this_machines_lan_address() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shown = Command::new("git")
        .args(["show", "HEAD:config/gateway.lan.toml"])
        .current_dir(repo)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap());
    let text = shown.unwrap_or_else(|| std::fs::read_to_string(repo.join("config/gateway.lan.toml")).unwrap());
    assert!(
        !text.contains("[[user]]"),
        "users are the first start's to make, in the users file"
    );
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("config")).unwrap();
    std::fs::create_dir_all(root.path().join("demo")).unwrap();
    let path = root.path().join("config/gateway.lan.toml");
    std::fs::write(&path, &text).unwrap();
    let out = cli(&["check", "-c", path.to_str().unwrap()], root.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("https  0.0.0.0:8443"), "{stdout}");
    let lan = opencode_gateway::support::host::lan_addresses();
    if let Some(ip) = lan.iter().find(|ip| ip.is_ipv4()) {
        assert!(
            stdout.contains(&format!("(https://{ip}:8443)"))
                || lan.iter().any(|a| stdout.contains(&format!("(https://{a}:8443)"))),
            "the public URL is a LAN address of this machine ({lan:?}):\n{stdout}"
        );
        assert!(stdout.contains(":8444/"), "demo's web UI on its own port:\n{stdout}");
    }
    assert!(!stdout.contains("(https://127.0.0.1"), "{stdout}");
    // It keeps no secret (users go to the users file): readable like any source file, no warning.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("(config file) is readable"), "{stderr}");
}
