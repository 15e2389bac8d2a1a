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
    assert!(line("ok   opencode:").contains("(version 1.18.33)"));
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
