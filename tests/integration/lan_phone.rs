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

use std::time::Duration;

use crate::common::gateway::{BIN, Gateway, TestUser, users_toml};
use crate::common::lan_phone::{
    model_in_the_box, pair_url, phone_home, printed_fingerprints, text, the_phone_answered, trust_the_printed_ca,
};
use crate::common::netns::{BOX_ADDR, Lan};
use crate::common::opencode::{FakeModel, opencode_bin};
use crate::common::process::bounded;
use crate::common::supervised::spawned;

const PROJECT: &str = "demo";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_phone_on_the_lan_pairs_from_the_printed_qr_code_and_answers_from_the_inbox() {
    let Some(lan) = Lan::make_or_skip("the LAN phone test (issue 22)") else {
        return;
    };

    let model = model_in_the_box(&lan);
    let project = tempfile::tempdir().unwrap();
    let project_dir = project.path().canonicalize().unwrap();
    let config = lan_config(&project_dir, &model);
    let gw = Gateway::start_wrapped(&config, &[], &["ip", "netns", "exec", &lan.box_ns], |_| {});
    assert_eq!(gw.https.ip(), BOX_ADDR, "the gateway listens on the box's LAN address");

    let printed = pair_on_the_box(&lan, &gw);
    let decoded = pair_url(&printed, gw.https.port());
    let page = decoded.split('#').next().unwrap();
    // Passkeys need a name: `pair` names the one the phone adds them at (issue 38).
    let named = format!("https://{}:{}", crate::named_host::local_name(), gw.https.port());
    assert!(
        printed.contains(&format!("passkeys: {named} ")),
        "pair does not say where passkeys work ({named}):\n{printed}"
    );

    // Before it trusts anything: the phone's Chromium refuses the gateway's certificate (so what
    // it accepts later is the import's doing, not a pin or an exception).
    let phone_home = phone_home(&lan);
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

    // The phone gets the CA from the page the gateway's terminal names, and trusts it.
    trust_the_printed_ca(&lan, phone_home.path(), &gw.stdout, &gw.ca(), &context);

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
    the_phone_answered(&crate::common::audit::file(&gw), "alice", PROJECT, &project_dir).await;
}

/// `pair`, run on the box as its operator would, printing a QR code for the phone's camera.
fn pair_on_the_box(lan: &Lan, gw: &Gateway) -> String {
    let out = bounded(
        Lan::command(&lan.box_ns, BIN)
            .args(["pair", "alice", "--label", "LAN phone", "-c"])
            .arg(&gw.config),
    );
    assert!(out.status.success(), "pair failed: {}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("WARNING"),
        "pair warns that the phone cannot open its URL: {}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The gateway in the box on the box's LAN address (ports 0), its project spawned in `dir` with
/// `model`, and `alice` who pairs.
fn lan_config(dir: &std::path::Path, model: &FakeModel) -> String {
    format!(
        "[server]\nlisten = \"{BOX_ADDR}:0\"\npublic_url = \"https://{BOX_ADDR}:0\"\nhttp_listen = \"{BOX_ADDR}:0\"\nstate_dir = \"state\"\nopencode_bin = \"{}\"\n\n\
         [tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n{}{}",
        opencode_bin().display(),
        spawned(PROJECT, dir, model, &format!("listen = \"{BOX_ADDR}:0\"\n")),
        users_toml(&[TestUser {
            name: "alice",
            password: "alice-password-1",
            projects: "[\"*\"]",
            role: "operator",
        }])
    )
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
        assert_eq!(crate::common::qr::decode_printed(&printed), url);
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
