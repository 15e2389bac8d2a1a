//! `doctor` beside a running gateway (issue 38): the gateway its config describes may be up,
//! holding the configured ports. It is recognised by its control socket (`GET /status`, only its
//! OS user or root can ask), and then its own listeners are checked against what it says it
//! bound, rather than reported as ports in use, and each project's model is read from it.

use std::net::SocketAddr;
use std::path::Path;

use super::doctor_report::Report;
use crate::config::{Settings, UpstreamKind};

/// The running gateway's `status`, when one answers on this config's control socket.
pub(crate) fn ask(config: &Path) -> Option<serde_json::Value> {
    let (code, body) = super::admin_client::request(config, "GET", "/status").ok()?;
    serde_json::from_str(&body).ok().filter(|_| code == 200)
}

/// The address the running gateway bound for the listener `key`.
pub(crate) fn bound(running: Option<&serde_json::Value>, key: &str) -> Option<SocketAddr> {
    running?["listeners"].as_array()?.iter().find(|l| l["key"] == key)?["address"]
        .as_str()?
        .parse()
        .ok()
}

pub(crate) fn gateway(s: &Settings, r: &mut Report, running: Option<&serde_json::Value>) {
    if let Some(v) = running {
        r.ok(format!(
            "gateway: running (pid {}), asked through its control socket {}",
            v["pid"],
            crate::front::control::socket_path(s).display()
        ));
    }
}

/// Each configured listener: the running gateway's own, or free to bind, or held by another
/// process (a `fail`). A listener the running gateway did not bind (added or moved since it
/// started) is said to need a restart: listeners are bound at start only.
pub(crate) fn listeners(s: &Settings, r: &mut Report, running: Option<&serde_json::Value>) {
    for (key, addr) in s.listeners() {
        let theirs = bound(running, &key);
        match theirs {
            Some(at) if addr.port() == 0 || at == addr => {
                r.ok(format!("listener: {key} {at} is the running gateway's"));
                continue;
            }
            Some(at) => r.warn(format!(
                "listener: {key}: the running gateway listens on {at}, the config says {addr}. Fix: restart the gateway to move it (a reload binds no listener)"
            )),
            None if running.is_some() => r.warn(format!(
                "listener: {key} {addr}: the running gateway does not listen there (it was added after the gateway started). Fix: restart the gateway (a reload binds no listener)"
            )),
            None => {}
        }
        free(&key, addr, r);
    }
}

fn free(key: &str, addr: SocketAddr, r: &mut Report) {
    if addr.port() == 0 {
        r.ok(format!("listener: {key} {addr} (an ephemeral port)"));
        return;
    }
    match std::net::TcpListener::bind(addr) {
        Ok(_) => r.ok(format!("listener: {key} {addr} is free")),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => r.fail(format!(
            "listener: {key} {addr} is in use by another process (not this config's running gateway: its control socket did not name it). Fix: stop what listens there (`ss -ltnp 'sport = :{}'`), or pick another port",
            addr.port()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => r.fail(format!(
            "listener: {key} {addr}: permission denied. Fix: ports below 1024 need CAP_NET_BIND_SERVICE (AmbientCapabilities in the systemd unit)"
        )),
        Err(e) => r.fail(format!("listener: {key} {addr}: {e}")),
    }
}

/// Which model each project's server answers with, as the running gateway heard it from the
/// server when it became ready; with no gateway running, when it will be known. Reading the
/// configuration files instead would guess (see `upstream/model_report.rs`).
pub(crate) fn models(s: &Settings, r: &mut Report, running: Option<&serde_json::Value>) {
    let seen = |name: &str| {
        running?["projects"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    };
    for p in &s.projects {
        let name = &p.name;
        if p.upstream != UpstreamKind::Spawned {
            r.ok(format!(
                "project {name}: model: that of the OpenCode server it points at (the gateway does not run it, so does not ask)"
            ));
            continue;
        }
        let Some(status) = running else {
            r.ok(format!(
                "project {name}: model: known once its server starts (the gateway asks the server; run doctor again beside the running gateway, or see `{}`)",
                super::again(&s.path, "status")
            ));
            continue;
        };
        match seen(name) {
            None => r.warn(format!(
                "project {name}: the running gateway (pid {}) does not serve it yet. Fix: {}",
                status["pid"],
                super::again(&s.path, "reload")
            )),
            Some(v) => match (v["model"].as_str(), v["model_warning"].as_str()) {
                (Some(model), None) => r.ok(format!("project {name}: model {model}")),
                // The warning carries its fix.
                (Some(model), Some(why)) => r.warn(format!("project {name}: model {model}: {why}")),
                (None, Some(why)) => r.warn(format!("project {name}: {why}")),
                (None, None) => r.ok(format!(
                    "project {name}: model: known once its server is ready (now: {})",
                    v["status"].as_str().unwrap_or("?")
                )),
            },
        }
    }
}
