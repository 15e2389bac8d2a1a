//! Running as a service: the systemd unit in contrib/ passes `systemd-analyze verify`, keeps the
//! hardening it promises (root, with a bounded capability set, so that projects run as users of
//! their own), and NoNewPrivileges (which it sets) still lets the gateway switch a spawned project
//! to its `run_as` user with only the capabilities the unit names.

use std::path::Path;
use std::process::Command;

use crate::common::gateway::BIN;

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/systemd/opencode-gateway.service");
const INSTALLED: &str = "/usr/bin/opencode-gateway";

/// `systemd-analyze verify` on `unit` (a file named `opencode-gateway.service` in `dir`): its
/// exit status and everything it said.
fn verify(dir: &Path, unit: &str) -> (bool, String) {
    let path = dir.join("opencode-gateway.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd; scripts/test.sh installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
#[ignore = "needs OpenCode: run scripts/test.sh"]
fn the_systemd_unit_passes_systemd_analyze_verify_and_keeps_its_hardening() {
    let text = std::fs::read_to_string(UNIT).unwrap();
    assert!(text.contains(&format!("ExecStart={INSTALLED} serve ")), "{text}");
    // verify checks that ExecStart is executable: point it at the binary just built.
    let unit = text.replace(INSTALLED, BIN);
    let dir = tempfile::tempdir().unwrap();
    let (ok, said) = verify(dir.path(), &unit);
    // It only warns (exit 0) about unknown keys: any word from it is a failure.
    assert!(ok && said.trim().is_empty(), "systemd-analyze verify:\n{said}");
    // The checker is live: a misspelled key and a missing binary are reported.
    let (_, said) = verify(dir.path(), &unit.replace("ProtectSystem=", "ProtectSystm="));
    assert!(said.contains("Unknown key"), "{said}");
    let (ok, said) = verify(dir.path(), &text.replace(INSTALLED, "/nonexistent/opencode-gateway"));
    assert!(!ok && said.contains("not executable"), "{said}");

    let settings: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    for want in [
        "User=root",
        "StateDirectoryMode=0711",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ReadWritePaths=/var/lib/opencode-gateway",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "SystemCallFilter=@system-service",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_SETUID CAP_SETGID CAP_CHOWN CAP_FOWNER CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_KILL",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
    ] {
        assert!(settings.contains(&want), "{want} missing from the unit");
    }
    // Root, but never with the capabilities that reach past its own sandbox.
    for never in [
        "CAP_SYS_ADMIN",
        "CAP_SYS_PTRACE",
        "CAP_NET_ADMIN",
        "CAP_SYS_MODULE",
        "AmbientCapabilities",
    ] {
        assert!(!settings.iter().any(|l| l.contains(never)), "{never} in the unit");
    }
}

/// What the unit's notes claim for `run_as`, checked with the same system calls the gateway's
/// spawn makes (std's `Command::uid/gid`: setgroups, setgid, setuid between fork and exec),
/// done by `setpriv` under `--no-new-privs` with the bounding set cut to those capabilities.
#[test]
#[ignore = "needs OpenCode: run scripts/test.sh"]
fn no_new_privileges_still_lets_a_root_gateway_switch_to_the_run_as_user() {
    if crate::common::os_users::ensure(&[]).is_none() {
        return;
    }
    let switch = |bounding: &str| {
        Command::new("setpriv")
            .args([
                "--no-new-privs",
                "--inh-caps=-all",
                &format!("--bounding-set={bounding}"),
            ])
            .args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
            .args([
                "grep",
                "-E",
                "^(Uid|CapEff|CapPrm|CapAmb|NoNewPrivs):",
                "/proc/self/status",
            ])
            .output()
            .expect("setpriv (util-linux)")
    };
    let out = switch("-all,+setuid,+setgid");
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{status}{}", String::from_utf8_lossy(&out.stderr));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("{name} in {status}"))
    };
    // Switched, under NoNewPrivileges, and holding no capability at all afterwards.
    assert_eq!(field("Uid:"), "65534 65534 65534 65534");
    assert_eq!(field("NoNewPrivs:"), "1");
    for caps in ["CapEff:", "CapPrm:", "CapAmb:"] {
        assert_eq!(field(caps), "0000000000000000", "{caps}");
    }
    // Without CAP_SETUID/CAP_SETGID in the bounding set, the same switch is refused.
    let out = switch("-all");
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}
