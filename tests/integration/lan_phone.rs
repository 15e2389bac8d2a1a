//! A phone on the same Wi-Fi (issue 22, "Tests (real parts)"), with nothing borrowed from the
//! host: two network namespaces joined by a veth pair (`common::netns`, 198.18.0.0/15), the
//! gateway and the real `opencode serve` it spawns (with the fake model) in "box" at 198.18.0.1,
//! headless Chromium in "phone" at 198.18.0.2. The test reads what a person reads: the QR code
//! `pair` printed is decoded from the terminal's half blocks, the phone fetches the dev CA from the
//! gateway's plain-HTTP page and checks its fingerprint against the one the gateway printed,
//! imports it into the phone's own NSS database (no pin, no --ignore-certificate-errors, no host
//! file), then pairs, sees the portal, opens the project's web UI without a second login, sends a
//! prompt and answers the permission from /inbox; then, resolving `<host>.local` as multicast DNS
//! would, it follows the portal's button to the named host and adds a passkey there without a
//! password (tests/browser/lan_phone.mjs).

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::gateway::{BIN, Gateway, TestUser, users_toml};
use crate::common::netns::{BOX_ADDR, Lan, PHONE_ADDR};
use crate::common::opencode::{FakeModel, opencode_bin};
use crate::common::process::{bounded, output_within};
use crate::common::qr;
use crate::common::supervised::spawned;

const PROJECT: &str = "demo";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The SHA-256 of a certificate (PEM or DER) as upper-case hex without separators.
fn fingerprint(cert: &[u8]) -> String {
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
fn printed_fingerprints(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_hexdigit() && c != ':')
        .map(|piece| piece.replace(':', "").to_ascii_uppercase())
        .filter(|hex| hex.len() == 64)
        .collect()
}

/// The origin of the first `http://<box>:<port>` URL in the gateway's terminal output (the CA
/// page it tells the person to open on the phone), waited for (the banner follows the ready line).
fn printed_http_origin(gw: &Gateway, within: Duration) -> Option<String> {
    let prefix = format!("http://{BOX_ADDR}:");
    let deadline = Instant::now() + within;
    loop {
        let out = gw.stdout.lock().unwrap().clone();
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

/// `certutil` on the phone's own NSS database (Chromium on Linux reads `$HOME/.pki/nssdb`).
fn certutil(lan: &Lan, home: &Path, args: &[&str]) -> Output {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_phone_on_the_lan_pairs_from_the_printed_qr_code_and_answers_from_the_inbox() {
    let Some(lan) = Lan::make_or_skip("the LAN phone test (issue 22)") else {
        return;
    };

    // The fake model lives in the box too: the OpenCode the gateway spawns there reaches it on the
    // box's loopback.
    let listener = Lan::bind_in(&lan.box_ns, "127.0.0.1:0");
    listener.set_nonblocking(true).unwrap();
    let model = FakeModel::start_on(
        tokio::net::TcpListener::from_std(listener).unwrap(),
        "echo RAN >> ran.txt",
    );
    let project = tempfile::tempdir().unwrap();
    let project_dir = project.path().canonicalize().unwrap();
    let config = format!(
        "[server]\nlisten = \"{BOX_ADDR}:0\"\npublic_url = \"https://{BOX_ADDR}:0\"\nhttp_listen = \"{BOX_ADDR}:0\"\nstate_dir = \"state\"\nopencode_bin = \"{}\"\n\n\
         [tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n{}{}",
        opencode_bin().display(),
        spawned(PROJECT, &project_dir, &model, &format!("listen = \"{BOX_ADDR}:0\"\n")),
        users_toml(&[TestUser {
            name: "alice",
            password: "alice-password-1",
            projects: "[\"*\"]",
            role: "operator",
        }])
    );
    let gw = Gateway::start_wrapped(&config, &[], &["ip", "netns", "exec", &lan.box_ns], |_| {});
    assert_eq!(gw.https.ip(), BOX_ADDR, "the gateway listens on the box's LAN address");

    // `pair`, run on the box as its operator would, printing a QR code for the phone's camera.
    let out = bounded(
        Lan::command(&lan.box_ns, BIN)
            .args(["pair", "alice", "--label", "LAN phone", "-c"])
            .arg(&gw.config),
    );
    assert!(out.status.success(), "pair failed: {}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("WARNING"),
        "pair warns that the phone cannot open its URL: {}",
        text(&out)
    );
    let decoded = qr::decode_printed(&printed);
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
        format!("{BOX_ADDR}:{}", gw.https.port()),
        "the QR code's host is the box's LAN address and the HTTPS port"
    );
    // Passkeys need a name: `pair` names the one the phone adds them at (issue 38).
    let named = format!("https://{}:{}", crate::named_host::local_name(), gw.https.port());
    assert!(
        printed.contains(&format!("passkeys: {named} ")),
        "pair does not say where passkeys work ({named}):\n{printed}"
    );

    // Before it trusts anything: the phone's Chromium refuses the gateway's certificate (so what
    // it accepts later is the import's doing, not a pin or an exception).
    let phone_home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(phone_home.path().join(".pki/nssdb")).unwrap();
    certutil(&lan, phone_home.path(), &["-N", "--empty-password"]);
    let shots = crate::common::browser::shots("lan_phone");
    let phone = ["ip", "netns", "exec", lan.phone_ns.as_str()];
    let context = || {
        format!(
            "gateway output:\n{}\ngateway log:\n{}",
            gw.stdout.lock().unwrap(),
            gw.logs()
        )
    };
    crate::common::browser::run_wrapped(
        &phone,
        "lan_phone.mjs",
        &[
            ("HOME", phone_home.path().as_os_str()),
            ("UNTRUSTED_URL", page.as_ref()),
        ],
        Duration::from_secs(60),
        context,
    )
    .await;

    // The phone opens the CA page the gateway's terminal names (plain HTTP: nothing to trust yet),
    // compares the fingerprint it shows with the terminal's, and downloads the certificate it links.
    // The banner waits up to 30 s for an eager server's model line before it prints.
    let http_origin = printed_http_origin(&gw, Duration::from_secs(45)).unwrap_or_else(|| {
        panic!(
            "the gateway's terminal names no http://{BOX_ADDR}:<port>/ page for the phone to get the dev CA from:\n{}",
            context()
        )
    });
    let terminal = printed_fingerprints(&gw.stdout.lock().unwrap());
    assert_eq!(
        terminal.len(),
        1,
        "the gateway's terminal prints one SHA-256 fingerprint of the dev CA: {terminal:?}\n{}",
        context()
    );
    let ca_file = phone_home.path().join("ca.crt");
    let fetch = |path: &str, to: &Path| -> String {
        let url = format!("{http_origin}{path}");
        let out = output_within(
            Lan::command(&lan.phone_ns, "curl")
                .args(["-sS", "--max-time", "15", "-w", "%{http_code}", "-o"])
                .arg(to)
                .arg(&url),
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
    };
    // As a person reads it: the break chances between bytes (`<wbr>`) are no text.
    let page = fetch("/ca", &phone_home.path().join("ca.html")).replace("<wbr>", "");
    assert_eq!(
        printed_fingerprints(&page),
        terminal,
        "the CA page shows the fingerprint the terminal printed:\n{page}"
    );
    assert!(page.contains("href=\"/ca.crt\""), "the CA page links /ca.crt:\n{page}");
    fetch("/ca.crt", &ca_file);
    let ca = std::fs::read(&ca_file).unwrap();
    assert_eq!(
        vec![fingerprint(&ca)],
        terminal,
        "the certificate the phone downloaded has the fingerprint the terminal printed"
    );
    assert_eq!(
        fingerprint(&ca),
        fingerprint(&std::fs::read(gw.ca()).unwrap()),
        "the CA page serves the gateway's dev CA"
    );

    // The phone's own NSS database, trusting the fetched CA for TLS servers and nothing else.
    let ca_arg = ca_file.to_str().unwrap();
    certutil(
        &lan,
        phone_home.path(),
        &["-A", "-t", "C,,", "-n", "ocgw-dev", "-i", ca_arg],
    );
    let listed = String::from_utf8(certutil(&lan, phone_home.path(), &["-L"]).stdout).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("ocgw-dev") && l.trim_end().ends_with("C,,")),
        "the phone's NSS database does not trust the CA: {listed}"
    );

    let said = crate::common::browser::run_wrapped(
        &phone,
        "lan_phone.mjs",
        &[
            ("HOME", phone_home.path().as_os_str()),
            ("PAIR_URL", decoded.as_ref()),
            ("NAMED", named.as_ref()),
            ("PROJECT", PROJECT.as_ref()),
            ("PROJECT_DIR", project_dir.as_os_str()),
            ("SHOT_DIR", shots.as_os_str()),
        ],
        Duration::from_secs(300),
        context,
    )
    .await;

    eprintln!("{said}");

    // What only the box sees: the pairing and the answer came from the phone's address, by the
    // paired device, and the tool ran once, in the project.
    use crate::common::audit::{file, find};
    let f = file(&gw);
    let paired = find(&f, "device_paired", |r| r["user"] == "alice").await;
    assert_eq!(
        paired["address"],
        PHONE_ADDR.to_string(),
        "the phone paired from its namespace's address: {paired}"
    );
    let answered = find(&f, "permission_answer", |r| r["answer"] == "once").await;
    assert_eq!(
        (
            answered["from"].as_str(),
            answered["project"].as_str(),
            answered["via_id"].as_str(),
            answered["address"].as_str()
        ),
        (
            Some("control_room"),
            Some(PROJECT),
            paired["via_id"].as_str(),
            Some(PHONE_ADDR.to_string().as_str())
        ),
        "the answer was the paired phone's, from /inbox: {answered}"
    );
    let ran = std::fs::read_to_string(project_dir.join("ran.txt")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        1,
        "the answered permission ran the tool once: {ran:?}"
    );
}

#[test]
fn the_pair_commands_qr_code_decodes_to_its_url() {
    for url in [
        "https://198.18.0.1:40123/pair#K7QM-4M2P-XW9H",
        "https://gw.example.com/pair#ABCD-EFGH-JKLM",
    ] {
        let printed = format!(
            "{}\nScan it with the phone's camera\n",
            opencode_gateway::cli::pair::render(url).unwrap()
        );
        assert_eq!(qr::decode_printed(&printed), url);
    }
}

#[test]
fn fingerprints_are_found_as_people_print_them() {
    let fp = "AB".repeat(32);
    let colons = fp
        .as_bytes()
        .chunks(2)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(":");
    assert_eq!(
        printed_fingerprints(&format!("CA SHA-256 {colons}\n")),
        vec![fp.clone()]
    );
    assert_eq!(printed_fingerprints(&format!("sha256={}", fp.to_lowercase())), vec![fp]);
    assert!(printed_fingerprints("short ABCD").is_empty());
}
