//! `opencode-gateway doctor` on a test config with known faults: a certificate that misses the
//! gateway's names, a world-readable secret file, a listener in use. Each shows up as a `fail`
//! line with its fix, the exit status says so, and the sound parts say `ok` (the real OpenCode
//! binary's version included).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::common::gateway::{ALICE, BIN, base_config, users_toml};
use crate::common::opencode::opencode_bin;

#[test]
#[ignore = "needs OpenCode: run scripts/test.sh"]
fn doctor_names_uncovered_hosts_loose_secrets_and_busy_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let project = dir.path().join("demo");
    std::fs::create_dir(&project).unwrap();
    let config = base_config(&format!(
        "[[project]]\nname = \"demo\"\ndirectory = \"{}\"\nspawn = true\n\n{}",
        project.display(),
        users_toml(&[ALICE])
    ))
    .replace(
        "state_dir = \"state\"\n",
        &format!(
            "state_dir = \"state\"\nopencode_bin = \"{}\"\n",
            opencode_bin().display()
        ),
    )
    .replace(
        "[admin]\nlisten = \"127.0.0.1:0\"",
        &format!("[admin]\nlisten = \"{}\"", busy.local_addr().unwrap()),
    );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A dev certificate made for another domain: none of this config's names are in it.
    let certs = dir.path().join("certs");
    let paths =
        opencode_gateway::front::devcert::DevCertPaths::beside(&certs.join("server.crt"), &certs.join("server.key"));
    opencode_gateway::front::devcert::ensure(&paths, &["elsewhere.localhost".to_string()]).unwrap();

    let out = crate::common::process::bounded(Command::new(BIN).args(["doctor", "-c"]).arg(&path));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "doctor must fail:\n{stdout}{stderr}");
    assert!(stderr.contains("check(s) failed"), "{stderr}");
    let line = |prefix: &str| crate::common::line_starting(&stdout, prefix);
    let l = line("fail certificate: does not cover demo.gw.localhost");
    assert!(l.contains("Fix: remove"), "{l}");
    line("fail certificate: does not cover gw.localhost");
    line("fail certificate: does not cover 127.0.0.1");
    assert!(
        line("ok   certificate: expires in").contains("d "),
        "about 397 days left"
    );
    let l = line("fail permissions:");
    assert!(
        l.contains("gateway.toml (config file) is readable by group or others (mode 644)")
            && l.contains("Fix: chmod 600"),
        "{l}"
    );
    let l = line("fail listener: admin.listen");
    assert!(l.contains("is in use"), "{l}");
    line("ok   listener: server.listen 127.0.0.1:0");
    assert!(line("ok   opencode:").contains("(OpenCode 1.x, version 1.18.33)"));
    // No gateway runs on this config: its model is known once its server starts.
    line("ok   project demo: model: known once its server starts");
    assert!(!stdout.contains("gateway: running"), "{stdout}");
    // glibc may or may not resolve .localhost names: either way it is not a failure.
    assert!(
        stdout.contains("ok   base_domain: gw.localhost resolves to this machine")
            || stdout.contains("warn base_domain: gw.localhost does not resolve here"),
        "{stdout}"
    );
    assert!(
        stdout.contains("NODE_EXTRA_CA_CERTS="),
        "dev CA trust instructions:\n{stdout}"
    );
    assert!(stdout.contains("iOS:") && stdout.contains("Android:"));

    // Fixed: the secret's mode; the remaining failures are the certificate and the listener.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = crate::common::process::bounded(Command::new(BIN).args(["doctor", "-c"]).arg(&path));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ok   permissions:"), "{stdout}");
    assert!(!stdout.contains("fail permissions"), "{stdout}");
}

/// The address a "… ready" log line of `gw` gives as `listen=`.
fn bound_in_log(gw: &crate::common::gateway::Gateway, ready: &str) -> String {
    let logs = gw.logs();
    let line = logs
        .lines()
        .find(|l| l.contains(ready))
        .unwrap_or_else(|| panic!("no {ready:?} line in:\n{logs}"));
    let at = line.split_once("listen=").map(|(_, rest)| rest).unwrap_or_default();
    at.split_whitespace()
        .next()
        .unwrap_or_default()
        .trim_matches('"')
        .to_string()
}

/// `status`'s word on each project's model, once every one has one (bounded).
async fn models_known(gw: &crate::common::gateway::Gateway, n: usize) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, body) = gw.control("GET", "/status");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let known = v["projects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["model"].is_string())
            .count();
        if known == n {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "status never named {n} models: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Rewrite the config with the ports the gateway holds, as a config with fixed ports names
/// them: the HTTP listener's and the project's, as the log says them.
fn pin_bound_ports(gw: &crate::common::gateway::Gateway, config: &str) -> (String, String) {
    let (http, own) = (
        bound_in_log(gw, "plain HTTP listener ready"),
        bound_in_log(gw, "project listener ready"),
    );
    let fixed = config
        .replacen(
            "listen = \"127.0.0.1:0\"\nbase_domain",
            &format!("listen = \"{}\"\nbase_domain", gw.https),
            1,
        )
        .replacen(
            "[admin]\nlisten = \"127.0.0.1:0\"",
            &format!("[admin]\nlisten = \"{}\"", gw.admin),
            1,
        )
        .replacen("http_listen = \"127.0.0.1:0\"", &format!("http_listen = \"{http}\""), 1)
        .replacen(
            "spawn = true\nlisten = \"127.0.0.1:0\"",
            &format!("spawn = true\nlisten = \"{own}\""),
            1,
        );
    assert!(!fixed.contains(":0\""), "{fixed}");
    gw.write_config(&fixed);
    std::fs::set_permissions(&gw.config, std::fs::Permissions::from_mode(0o600)).unwrap();
    (http, own)
}

/// `doctor` beside the running gateway its config describes (issue 38: it reported the
/// gateway's own listening ports as `fail` and exited 1): it recognises the gateway by its
/// control socket, says each listener is the gateway's, prints each project's model (and the
/// warning with its fix for the one whose provider has no credentials), points a phone at the
/// `/ca` page, and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn doctor_on_a_running_gateway_checks_it_through_its_control_socket() {
    use crate::common::opencode::FakeModel;
    let model = FakeModel::start("true").await;
    let folders = tempfile::tempdir().unwrap();
    let (demo, strict) = (folders.path().join("demo"), folders.path().join("strict"));
    std::fs::create_dir(&demo).unwrap();
    std::fs::create_dir(&strict).unwrap();
    let tables = format!(
        "[[project]]\nname = \"demo\"\ndirectory = \"{}\"\nspawn = true\nlisten = \"127.0.0.1:0\"\nenv = {{ OPENCODE_DISABLE_MODELS_FETCH = \"1\" }}\n\n\
         [[project]]\nname = \"strict\"\ndirectory = \"{}\"\nspawn = true\nenv = {{ OPENCODE_DISABLE_MODELS_FETCH = \"1\", OPENCODE_CONFIG_CONTENT = '{{\"model\":\"anthropic/claude-sonnet-4-5\"}}' }}\n\n",
        demo.display(),
        strict.display()
    );
    let config = crate::common::supervised::server_config(&tables).replacen(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\nhttp_listen = \"127.0.0.1:0\"\n",
        1,
    );
    let global = model.config_json();
    let gw = crate::common::gateway::Gateway::start_with(&config, &[], |d| {
        crate::common::opencode::write_user_config(&d.join("home"), &global)
    });
    let c = crate::common::client::Https::new(gw.https, &gw.ca());
    let alice = crate::common::client::basic("alice", crate::common::stack::ALICE_PW);
    for p in ["demo", "strict"] {
        let r = c.get(&format!("/p/{p}/global/health"), Some(&alice)).await;
        assert_eq!(r.status, 200, "{p}: {}", r.body);
    }
    models_known(&gw, 2).await;
    let (http, own) = pin_bound_ports(&gw, &config);

    let (ok, out) = gw.cli(&["doctor"]);
    assert!(ok, "doctor failed beside its running gateway:\n{out}");
    assert!(!out.lines().any(|l| l.starts_with("fail")), "{out}");
    let line = |prefix: &str| crate::common::line_starting(&out, prefix);
    line(&format!("ok   gateway: running (pid {})", gw.pid()));
    for (key, addr) in [
        ("server.listen", gw.https.to_string()),
        ("admin.listen", gw.admin.to_string()),
        ("server.http_listen", http.clone()),
        ("project demo listen", own.clone()),
    ] {
        line(&format!("ok   listener: {key} {addr} is the running gateway's"));
    }
    line("ok   project demo: model fake/fake-model");
    let strict = line("warn project strict: model anthropic/claude-sonnet-4-5: ");
    assert!(
        strict.contains("needs provider anthropic, which has no credentials") && strict.contains("opencode auth login"),
        "{strict}"
    );
    let phone = line("  iOS and Android: open http://");
    assert!(
        phone.contains(&format!("http://127.0.0.1:{}/ca", http.rsplit(':').next().unwrap())),
        "{phone}"
    );
    assert!(!out.contains("AirDrop"), "{out}");
}
