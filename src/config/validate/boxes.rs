//! `[[box]]` tables: machines whose OpenCode servers the gateway reaches over SSH. The address,
//! the gateway's key (an OpenSSH private key, owner-only) and the box's pinned host key are
//! checked here, so `check` says what is wrong before anything connects.

use std::collections::HashSet;
use std::path::Path;

use super::{Checker, valid_project_name};
use crate::config::file::{RawBox, RawProject};
use crate::config::settings::BoxConfig;

pub(super) fn boxes(c: &mut Checker<'_>, raw: &[RawBox]) -> Vec<BoxConfig> {
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for (i, b) in raw.iter().enumerate() {
        let key = format!("box[{i}] ({})", b.name);
        c.valid_name(
            &key,
            "box",
            &b.name,
            valid_project_name,
            "use lower-case letters, digits and '-'",
        );
        if !names.insert(b.name.as_str()) {
            c.problem(
                format!("{key}.name"),
                format!("{:?} is used twice", b.name),
                "give each box its own name",
            );
        }
        let address = ssh_address(c, &format!("{key}.ssh"), &b.ssh);
        let key_path = c.path(&b.key);
        client_key(c, &format!("{key}.key"), &key_path);
        let host_keys = address.as_ref().and_then(|(_, address)| host_keys(c, &key, b, address));
        let opencode = b.opencode.clone().unwrap_or_else(|| "opencode".into());
        // Sent to the box's shell as data, never as code; still one plain line.
        if opencode.is_empty() || opencode.chars().any(char::is_control) {
            c.problem(
                format!("{key}.opencode"),
                format!("{opencode:?} is not a command"),
                "write the path of opencode on the box, for example \"/usr/local/bin/opencode\"",
            );
        }
        if let (Some((user, address)), Some((host_keys, revoked_host_keys))) = (address, host_keys) {
            out.push(BoxConfig {
                name: b.name.clone(),
                user,
                address,
                key: key_path,
                host_keys,
                revoked_host_keys,
                opencode,
            });
        }
    }
    out
}

/// Boxes whose `known_hosts` file revokes every key it has for them: the config loads (so a
/// revocation takes effect at a reload), and the box is refused until its current key is added.
/// A project's `box` names one of the `[[box]]` tables.
pub(super) fn projects_name_known_boxes(c: &mut Checker<'_>, projects: &[RawProject], boxes: &[RawBox]) {
    for (i, p) in projects.iter().enumerate() {
        if let Some(b) = &p.on_box
            && !boxes.iter().any(|d| &d.name == b)
        {
            c.problem(
                format!("project[{i}] ({}).box", p.name),
                format!("no [[box]] is named {b:?}"),
                "add a [[box]] with that name, or remove box from this project",
            );
        }
    }
}

pub(crate) fn warnings(s: &crate::config::Settings) -> Vec<String> {
    s.boxes
        .iter()
        .filter(|b| b.host_keys.is_empty())
        .map(|b| {
            format!(
                "box {}: its known_hosts file revokes every key it has for the box (@revoked), so the gateway refuses the box. Fix: add the box's current key (ssh-keyscan, and check its fingerprint)",
                b.name
            )
        })
        .collect()
}

/// `user@host:port` (the port may be left out: 22) → the user and `host:port`.
fn ssh_address(c: &mut Checker<'_>, key: &str, value: &str) -> Option<(String, String)> {
    let fix = "write ssh = \"user@host:port\" (for example \"dev@gpu1.lan:22\")";
    let Some((user, rest)) = value.split_once('@') else {
        c.problem(key, format!("{value:?} names no user"), fix);
        return None;
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => match p.parse::<u16>() {
            Ok(port) if port > 0 => (h, port),
            _ => {
                c.problem(key, format!("{p:?} is not a port"), fix);
                return None;
            }
        },
        _ => (rest, 22),
    };
    let bad = |s: &str| s.is_empty() || s.chars().any(|ch| ch.is_whitespace() || ch.is_control());
    if bad(user) || bad(host) || host.contains('/') {
        c.problem(key, format!("{value:?} is not user@host:port"), fix);
        return None;
    }
    Some((user.to_string(), format!("{host}:{port}")))
}

/// The gateway's client key: a file only its owner may read, in a format the gateway can use.
fn client_key(c: &mut Checker<'_>, key: &str, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let make = format!("ssh-keygen -t ed25519 -N '' -f {}", path.display());
    match std::fs::metadata(path) {
        Err(e) => {
            c.problem(
                key,
                format!("cannot read {}: {e}", path.display()),
                format!("make a key: {make}"),
            );
            return;
        }
        Ok(m) if m.permissions().mode() & 0o077 != 0 => {
            c.problem(
                key,
                format!(
                    "{} is readable by group or others (mode {:o}); it logs the gateway in to the box",
                    path.display(),
                    m.permissions().mode() & 0o777
                ),
                format!("chmod 600 {}", path.display()),
            );
            return;
        }
        Ok(_) => {}
    }
    if let Err(e) = russh::keys::load_secret_key(path, None) {
        c.problem(
            key,
            format!(
                "{} is not an OpenSSH private key the gateway can use without a passphrase: {e}",
                path.display()
            ),
            format!("make one: {make}"),
        );
    }
}

/// The box's host keys, pinned, and the keys revoked: the `host_key` line, or the box's entries
/// in a `known_hosts` file (`[host]:port` when the port is not 22, hashed names too) but for the
/// keys its `@revoked` lines name. Never trusted on first use.
fn host_keys(c: &mut Checker<'_>, key: &str, b: &RawBox, address: &str) -> Option<(Vec<String>, Vec<String>)> {
    let scan = "set host_key to the box's key line, from the box's /etc/ssh/ssh_host_ed25519_key.pub or `ssh-keyscan -t ed25519 -p <port> <host>` (check its fingerprint)";
    match (&b.host_key, &b.known_hosts) {
        (Some(_), Some(_)) => {
            c.problem(
                format!("{key}.known_hosts"),
                "the box's host key is pinned twice",
                "keep host_key or known_hosts, not both",
            );
            None
        }
        (None, None) => {
            c.problem(format!("{key}.host_key"), "the box's host key is not pinned", scan);
            None
        }
        (Some(text), None) => match super::known_hosts::parse_host_key_setting(text) {
            Ok(keys) => Some((keys.iter().map(key_line).collect(), Vec::new())),
            Err(why) => {
                c.problem(format!("{key}.host_key"), why, scan);
                None
            }
        },
        (None, Some(file)) => from_known_hosts(c, key, file, address),
    }
}

/// The box's entries in the `known_hosts` file `file` but the revoked ones, and the revoked
/// keys, as key lines. Every key of the box revoked leaves it none: it is refused at connection
/// (`check` and `serve` warn), so a revocation takes effect at a reload, where a refused config
/// would have left the running gateway trusting the revoked key.
fn from_known_hosts(c: &mut Checker<'_>, key: &str, file: &str, address: &str) -> Option<(Vec<String>, Vec<String>)> {
    let path = c.path(file);
    let (host, port) = address.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let add = format!(
        "add the box's key: ssh-keyscan -t ed25519 -p {port} {host} >> {} (check its fingerprint), or set host_key",
        path.display()
    );
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            c.problem(
                format!("{key}.known_hosts"),
                format!("cannot read {}: {e}", path.display()),
                add,
            );
            return None;
        }
    };
    // What russh's reader skips or misreads (a revocation, a certificate authority, a negated
    // host) is read first: revoked keys are taken out, the rest refuses the file.
    let revoked = match super::known_hosts::read(&text, &path.display().to_string(), host, port) {
        Ok(revoked) => revoked,
        Err((problem, fix)) => {
            c.problem(format!("{key}.known_hosts"), problem, fix);
            return None;
        }
    };
    let is_revoked = |k: &russh::keys::PublicKey| revoked.iter().any(|r| r.key.key_data() == k.key_data());
    match russh::keys::known_hosts::known_host_keys_path(host, port, &path) {
        Ok(keys) if !keys.is_empty() => Some((
            keys.iter()
                .filter(|(_, k)| !is_revoked(k))
                .map(|(_, k)| key_line(k))
                .collect(),
            revoked.iter().map(|r| key_line(&r.key)).collect(),
        )),
        Ok(_) => {
            let name = if port == 22 {
                host.to_string()
            } else {
                format!("[{host}]:{port}")
            };
            c.problem(
                format!("{key}.known_hosts"),
                format!("{} has no key for {name}", path.display()),
                add,
            );
            None
        }
        Err(e) => {
            c.problem(
                format!("{key}.known_hosts"),
                format!("{} does not read: {e}", path.display()),
                add,
            );
            None
        }
    }
}

/// A public key as one `algorithm base64` line.
fn key_line(k: &russh::keys::PublicKey) -> String {
    k.to_openssh().unwrap_or_default()
}
