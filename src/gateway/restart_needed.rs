//! What a reload cannot apply (issue 38: a reload answered "reloaded" after a project's new
//! `listen`, and no port opened). These are fixed when the gateway starts: the listeners are
//! bound then (`lib::start`), the SSH server keeps its host key and methods, `[limits]` size the
//! limiters and timers, `[audit]` opens its file, the state database (`state_dir`, `[store] url`)
//! is opened, the ACME task is started or not, and the log format is set. A reload applies
//! everything else; each of these changed is named in its answer and its log, never dropped.

use std::collections::BTreeMap;

use crate::config::Settings;

/// Each change from `old` to `new` that takes a restart, in words ("project web's listen (new:
/// 127.0.0.1:0)"); empty when the reload applies all of it.
pub(crate) fn needs_restart(old: &Settings, new: &Settings) -> Vec<String> {
    let mut out = listeners(old, new);
    let ssh = |s: &Settings| s.ssh.as_ref().map(|s| (s.host_key.clone(), s.password_auth));
    if old.ssh.is_some() && new.ssh.is_some() && ssh(old) != ssh(new) {
        out.push("[ssh] host_key or password_auth".into());
    }
    if old.limits != new.limits {
        out.push("[limits]".into());
    }
    if old.audit != new.audit {
        out.push("[audit]".into());
    }
    if old.server.state_dir != new.server.state_dir {
        out.push("server.state_dir".into());
    }
    // Compared, never printed: the URL may hold a password.
    let store = |s: &Settings| s.store_url.as_ref().map(|u| u.expose().to_string());
    if store(old) != store(new) {
        out.push("[store] url".into());
    }
    if old.tls.acme.is_some() != new.tls.acme.is_some() {
        out.push("[tls] acme turned on or off".into());
    }
    if old.server.log_format != new.server.log_format {
        out.push("server.log_format".into());
    }
    out
}

/// Listeners added, moved or removed, by config key.
fn listeners(old: &Settings, new: &Settings) -> Vec<String> {
    let (before, after): (BTreeMap<_, _>, BTreeMap<_, _>) = (
        old.listeners().into_iter().collect(),
        new.listeners().into_iter().collect(),
    );
    let mut out = Vec::new();
    for (key, addr) in &after {
        match before.get(key) {
            None => out.push(format!("{} (new: {addr})", words(key))),
            Some(was) if was != addr => out.push(format!("{} ({was} → {addr})", words(key))),
            Some(_) => {}
        }
    }
    for (key, was) in &before {
        if after.contains_key(key) {
            continue;
        }
        let removed = key
            .strip_prefix("project ")
            .and_then(|k| k.strip_suffix(" listen"))
            .is_some_and(|name| !new.projects.iter().any(|p| p.name == name));
        let what = if removed {
            "project removed: its own port stays open until a restart and answers 404"
        } else {
            "removed: it stays open until a restart"
        };
        out.push(format!("{} {was} ({what})", words(key)));
    }
    out
}

/// `project web listen` → `project web's listen`; other keys as they are.
fn words(key: &str) -> String {
    match key.strip_prefix("project ").and_then(|k| k.strip_suffix(" listen")) {
        Some(name) => format!("project {name}'s listen"),
        None => key.to_string(),
    }
}

#[cfg(test)]
#[path = "restart_needed_tests.rs"]
mod tests;
