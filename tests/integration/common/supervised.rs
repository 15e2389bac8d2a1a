//! Projects whose `opencode serve` the gateway runs itself: their config tables, and what the
//! tests read about their servers (status, port, process).

use std::path::Path;

use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::opencode::{FakeModel, opencode_bin};

/// alice, admin of every project (password "alice-password-1").
pub fn admin_user() -> String {
    users_toml(&[TestUser {
        name: "alice",
        password: "alice-password-1",
        projects: "[\"*\"]",
        role: "admin",
    }])
}

/// A spawned-project table with the fake model configured.
pub fn spawned(name: &str, dir: &Path, model: &FakeModel, extra: &str) -> String {
    let config = model.config_json().replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "[[project]]\nname = \"{name}\"\ndirectory = \"{}\"\nspawn = true\n{extra}\nenv = {{ OPENCODE_CONFIG_CONTENT = \"{config}\", OPENCODE_DISABLE_MODELS_FETCH = \"1\" }}\n\n",
        dir.display()
    )
}

/// `[server]` for spawned projects. The servers run as the test's own OS user, whoever the
/// tests' users are: that is said in the config (`allow_projects_as_gateway_user`), as a team
/// that accepts it would say it; the refusal without it is `config_cli.rs`'s test.
pub fn server_config(projects: &str) -> String {
    base_config(&format!("{projects}{}", admin_user())).replace(
        "state_dir = \"state\"\n",
        &format!(
            "state_dir = \"state\"\nopencode_bin = \"{}\"\nallow_projects_as_gateway_user = true\n",
            opencode_bin().display()
        ),
    )
}

/// Processes whose command line contains `needle`.
pub fn pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

/// Live processes (not zombies) working inside `dir`: a spawned server runs in its project's
/// folder (its command line never names it), and so do the shells and tools it starts.
pub fn pids_in(dir: &std::path::Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "));
        if let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd"))
            && cwd.starts_with(&dir)
            && !zombie
        {
            out.push(pid);
        }
    }
    out
}

/// The port a spawned project's server listens on, from the admin status.
pub fn project_port(gw: &Gateway, project: &str) -> Option<u16> {
    let (_, body) = gw.control("GET", "/status");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let p = v["projects"].as_array()?.iter().find(|p| p["name"] == project)?.clone();
    p["status"].as_str()?.strip_prefix("ready at 127.0.0.1:")?.parse().ok()
}

pub fn project_status(gw: &Gateway, project: &str) -> String {
    let (_, body) = gw.control("GET", "/status");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == project)
        .unwrap()["status"]
        .as_str()
        .unwrap()
        .to_string()
}

pub fn server_pid(port: u16) -> u32 {
    let pids = pids_with(&format!("serve --hostname 127.0.0.1 --port {port}"));
    assert_eq!(pids.len(), 1, "one server on port {port}: {pids:?}");
    pids[0]
}
