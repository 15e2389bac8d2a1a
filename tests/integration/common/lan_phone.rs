//! A phone on the LAN reading what a person reads (shared by `lan_phone.rs` and
//! `newcomer_phone.rs`): the page and code `pair` printed (its QR code decoded from the terminal's
//! half blocks), and the dev CA fetched from the plain-HTTP page the gateway's terminal names, its
//! fingerprint compared with the printed one, imported into the phone's own NSS database (Chromium
//! on Linux reads `$HOME/.pki/nssdb`).

use std::path::Path;
use std::process::Output;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::netns::{BOX_ADDR, Lan};
use super::process::{bounded, output_within};

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The SHA-256 of a certificate (PEM or DER) as upper-case hex without separators.
pub fn fingerprint(cert: &[u8]) -> String {
    let der = match std::str::from_utf8(cert)
        .ok()
        .filter(|t| t.contains("-----BEGIN CERTIFICATE-----"))
    {
        Some(pem) => {
            let body: String = pem
                .split("-----BEGIN CERTIFICATE-----")
                .nth(1)
                .and_then(|r| r.split("-----END CERTIFICATE-----").next())
                .unwrap()
                .split_whitespace()
                .collect();
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body)
                .expect("the CA page's PEM is not base64")
        }
        None => cert.to_vec(),
    };
    ring::digest::digest(&ring::digest::SHA256, &der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// Every fingerprint a person could compare in `text`: 64 hex digits, pairs maybe separated by
/// colons, upper-cased without separators.
pub fn printed_fingerprints(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_hexdigit() && c != ':')
        .map(|piece| piece.replace(':', "").to_ascii_uppercase())
        .filter(|hex| hex.len() == 64)
        .collect()
}

/// The origin of the first `http://<box>:<port>` URL in the gateway's terminal output (the CA
/// page it tells the person to open on the phone), waited for (the banner follows the ready line).
fn printed_http_origin(stdout: &Mutex<String>, within: Duration) -> Option<String> {
    let prefix = format!("http://{BOX_ADDR}:");
    let deadline = Instant::now() + within;
    loop {
        let out = stdout.lock().unwrap().clone();
        if let Some(at) = out.find(&prefix) {
            let port: String = out[at + prefix.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            return Some(format!("{prefix}{port}"));
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The fake model in the box: the OpenCode the gateway spawns there reaches it on the box's
/// loopback. Its bash step appends a line to `ran.txt` in the project.
pub fn model_in_the_box(lan: &Lan) -> super::opencode::FakeModel {
    let listener = Lan::bind_in(&lan.box_ns, "127.0.0.1:0");
    listener.set_nonblocking(true).unwrap();
    super::opencode::FakeModel::start_on(
        tokio::net::TcpListener::from_std(listener).unwrap(),
        "echo RAN >> ran.txt",
    )
}

/// `certutil` on the phone's own NSS database.
pub fn certutil(lan: &Lan, home: &Path, args: &[&str]) -> Output {
    let db = format!("sql:{}", home.join(".pki/nssdb").display());
    let out = bounded(
        Lan::command(&lan.phone_ns, "certutil")
            .args(["-d", &db])
            .args(args)
            .env("HOME", home),
    );
    assert!(out.status.success(), "certutil {args:?} failed: {}", text(&out));
    out
}

/// A phone's home with an empty NSS database: it trusts nothing of the gateway's yet.
pub fn phone_home(lan: &Lan) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".pki/nssdb")).unwrap();
    certutil(lan, home.path(), &["-N", "--empty-password"]);
    home
}

/// What `pair` printed on a gateway whose HTTPS port is `port`: the URL its QR code holds, checked
/// to be the printed page with the printed code, on the box's LAN address.
pub fn pair_url(printed: &str, port: u16) -> String {
    let decoded = super::qr::decode_printed(printed);
    let page = printed
        .lines()
        .find_map(|l| l.split("open ").nth(1)?.split(" and type").next())
        .unwrap_or_else(|| panic!("pair printed no page to open:\n{printed}"));
    let code = printed
        .lines()
        .map(str::trim)
        .find(|l| l.len() == 14 && l.matches('-').count() == 2)
        .unwrap_or_else(|| panic!("pair printed no code to type:\n{printed}"));
    assert_eq!(
        decoded,
        format!("{page}#{code}"),
        "the QR code holds the printed page with the printed code"
    );
    let authority = decoded
        .strip_prefix("https://")
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("the QR code's URL is not https: {decoded}"));
    assert_eq!(
        authority,
        format!("{BOX_ADDR}:{port}"),
        "the QR code's host is the box's LAN address and the HTTPS port"
    );
    decoded
}

/// `url` fetched by the phone (curl in its namespace) into `to`; its body, once it answered 200.
fn fetch(lan: &Lan, url: &str, to: &Path, context: &dyn Fn() -> String) -> String {
    let out = output_within(
        Lan::command(&lan.phone_ns, "curl")
            .args(["-sS", "--max-time", "15", "-w", "%{http_code}", "-o"])
            .arg(to)
            .arg(url),
        None,
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "the phone could not reach {url}: {}\n{}",
        text(&out),
        context()
    );
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    let body = String::from_utf8_lossy(&std::fs::read(to).unwrap_or_default()).to_string();
    assert_eq!(status, "200", "{url} answered {status}: {body}\n{}", context());
    body
}

/// The phone opens the CA page the gateway's terminal (`stdout`) names (plain HTTP: nothing to
/// trust yet), compares the fingerprint it shows with the terminal's, downloads the certificate it
/// links (checked to be `gateway_ca`) and trusts it for TLS servers, and nothing else.
pub fn trust_the_printed_ca(
    lan: &Lan,
    home: &Path,
    stdout: &Mutex<String>,
    gateway_ca: &Path,
    context: &dyn Fn() -> String,
) {
    // The banner waits up to 30 s for an eager server's model line before it prints.
    let origin = printed_http_origin(stdout, Duration::from_secs(45)).unwrap_or_else(|| {
        panic!(
            "the gateway's terminal names no http://{BOX_ADDR}:<port>/ page for the phone to get the dev CA from:\n{}",
            context()
        )
    });
    let terminal = printed_fingerprints(&stdout.lock().unwrap());
    assert_eq!(
        terminal.len(),
        1,
        "the gateway's terminal prints one SHA-256 fingerprint of the dev CA: {terminal:?}\n{}",
        context()
    );
    // As a person reads it: the break chances between bytes (`<wbr>`) are no text.
    let page = fetch(lan, &format!("{origin}/ca"), &home.join("ca.html"), context).replace("<wbr>", "");
    assert_eq!(
        printed_fingerprints(&page),
        terminal,
        "the CA page shows the fingerprint the terminal printed:\n{page}"
    );
    assert!(page.contains("href=\"/ca.crt\""), "the CA page links /ca.crt:\n{page}");
    let ca_file = home.join("ca.crt");
    fetch(lan, &format!("{origin}/ca.crt"), &ca_file, context);
    let ca = std::fs::read(&ca_file).unwrap();
    assert_eq!(
        vec![fingerprint(&ca)],
        terminal,
        "the certificate the phone downloaded has the fingerprint the terminal printed"
    );
    assert_eq!(
        fingerprint(&ca),
        fingerprint(&std::fs::read(gateway_ca).unwrap()),
        "the CA page serves the gateway's dev CA"
    );
    let ca_arg = ca_file.to_str().unwrap();
    certutil(lan, home, &["-A", "-t", "C,,", "-n", "ocgw-dev", "-i", ca_arg]);
    let listed = String::from_utf8(certutil(lan, home, &["-L"]).stdout).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("ocgw-dev") && l.trim_end().ends_with("C,,")),
        "the phone's NSS database does not trust the CA: {listed}"
    );
}

/// What only the box sees, in the audit trail `audit`: `user`'s phone paired from the phone's
/// address, answered `project`'s permission "once" from /inbox as that device, and the tool ran
/// once in `dir` (the fake model's bash step appends a line to `ran.txt`).
pub async fn the_phone_answered(audit: &Path, user: &str, project: &str, dir: &Path) {
    use super::audit::find;
    use super::netns::PHONE_ADDR;
    let paired = find(audit, "device_paired", |r| r["user"] == user).await;
    assert_eq!(
        paired["address"],
        PHONE_ADDR.to_string(),
        "the phone paired from its namespace's address: {paired}"
    );
    let answered = find(audit, "permission_answer", |r| r["answer"] == "once").await;
    assert_eq!(
        (
            answered["from"].as_str(),
            answered["project"].as_str(),
            answered["via_id"].as_str(),
            answered["address"].as_str()
        ),
        (
            Some("control_room"),
            Some(project),
            paired["via_id"].as_str(),
            Some(PHONE_ADDR.to_string().as_str())
        ),
        "the answer was the paired phone's, from /inbox: {answered}"
    );
    // The tool's line is written by OpenCode's bash, after the answer (bounded: 30 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut ran = String::new();
    while ran.is_empty() && std::time::Instant::now() < deadline {
        ran = std::fs::read_to_string(dir.join("ran.txt")).unwrap_or_default();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        ran.lines().count(),
        1,
        "the answered permission ran the tool once: {ran:?}"
    );
}
