//! `[[project]]` tables: upstream or spawn, passwords, directory, environment, listener.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{Checker, valid_project_name};
use crate::config::Secret;
use crate::config::file::RawProject;
use crate::config::settings::*;

pub(super) fn project(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<Project> {
    let key = format!("{key} ({})", p.name);
    c.valid_name(
        &key,
        "project",
        &p.name,
        valid_project_name,
        "use lower-case letters, digits and '-' (it becomes a host name: <project>.<base_domain>)",
    );
    let upstream = upstream_kind(c, &key, p)?;
    on_box_allows(c, &key, p)?;
    let password = upstream_password(c, &key, p);
    if upstream == UpstreamKind::Spawned && password.is_some() {
        c.problem(
            format!("{key}.upstream_password_env"),
            "a spawned server gets a random password from the gateway",
            "remove upstream_password_env and upstream_password_file from this project",
        );
    }
    let directory = directory(c, &key, p);
    let start = start_mode(c, &key, p);
    spawn_only_keys(c, &key, p);
    let env = env(c, &key, p);
    let secret_files = secret_files(c, &key, p);
    let listen = p
        .listen
        .as_deref()
        .and_then(|l| c.socket_addr(&format!("{key}.listen"), l));
    Some(Project {
        name: p.name.clone(),
        upstream,
        upstream_username: p.upstream_username.clone().unwrap_or_else(|| "opencode".into()),
        upstream_password: password,
        directory,
        start,
        opencode_config: opencode_config(c, &key, p.opencode_config.as_deref()),
        env,
        run_as: p.run_as.clone(),
        listen,
        secret_files,
        set: None,
        on_box: p.on_box.clone(),
        // Set by the caller, from `[budget]` and the project's own table.
        budget: Default::default(),
        accept: super::accept::accept(c, &key, p),
    })
}

/// Where the project's server comes from: spawned here, or a loopback address to reach.
fn upstream_kind(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<UpstreamKind> {
    Some(match (&p.upstream, p.spawn) {
        (Some(_), true) => {
            c.problem(
                format!("{key}.upstream"),
                "a project cannot both spawn its server and name an upstream",
                "remove upstream, or set spawn = false",
            );
            return None;
        }
        (None, false) => {
            c.problem(
                format!("{key}.upstream"),
                "the project has no OpenCode server",
                "add upstream = \"http://127.0.0.1:4096\" (a server you run), or spawn = true with a directory",
            );
            return None;
        }
        (None, true) => UpstreamKind::Spawned,
        (Some(u), false) => UpstreamKind::External {
            authority: loopback_authority(c, &format!("{key}.upstream"), u)?,
        },
    })
}

/// What a project on a box cannot have; `None` (a problem told) when it has one.
fn on_box_allows(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<()> {
    if p.on_box.is_none() {
        return Some(());
    }
    let refused = [(
        p.run_as.is_some(),
        "run_as",
        "a server on a box runs as the box's SSH user",
        "remove run_as, and set the user in the box's ssh = \"user@host\" (a box per user)",
    )];
    if let Some((_, field, problem, fix)) = refused.into_iter().find(|(set, ..)| *set) {
        c.problem(format!("{key}.{field}"), problem, fix);
        return None;
    }
    Some(())
}

fn directory(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<std::path::PathBuf> {
    match &p.directory {
        Some(_) if p.directories.is_some() => {
            c.problem(
                format!("{key}.directories"),
                "a project has either one directory or a set of directories",
                "remove directory (a set makes one project per folder matching directories), or remove directories",
            );
            None
        }
        // On a box, the folder is the box's: absolute, and not looked up here.
        Some(d) if p.on_box.is_some() => {
            let path = std::path::Path::new(d);
            if path.is_absolute() {
                Some(crate::config::validate::lexical_clean(path))
            } else {
                c.problem(
                    format!("{key}.directory"),
                    format!("{d:?} is not an absolute path on the box"),
                    "write the folder as the box sees it, from /",
                );
                None
            }
        }
        Some(d) => {
            let path = c.path(d);
            match path.canonicalize() {
                Ok(canon) if canon.is_dir() => Some(canon),
                _ => {
                    c.problem(
                        format!("{key}.directory"),
                        format!("{} is not an existing directory", path.display()),
                        "create it, or point directory at the project's folder",
                    );
                    None
                }
            }
        }
        None => {
            if p.spawn && p.directories.is_none() {
                c.problem(
                    format!("{key}.directory"),
                    "a spawned server needs the folder to run in",
                    "add directory = \"/path/to/the/project\"",
                );
            }
            None
        }
    }
}

fn start_mode(c: &mut Checker<'_>, key: &str, p: &RawProject) -> StartMode {
    match p.start.as_deref() {
        None | Some("eager") => StartMode::Eager,
        Some("on-demand") => StartMode::OnDemand,
        Some(other) => {
            c.problem(
                format!("{key}.start"),
                format!("{other:?} is not a start mode"),
                "write start = \"eager\" or start = \"on-demand\"",
            );
            StartMode::Eager
        }
    }
}

/// Keys that only a server the gateway spawns can use.
fn spawn_only_keys(c: &mut Checker<'_>, key: &str, p: &RawProject) {
    if !p.spawn {
        for (set, k) in [
            (!p.env.is_empty(), "env"),
            (p.env_file.is_some(), "env_file"),
            (p.run_as.is_some(), "run_as"),
            (p.start.is_some(), "start"),
            (p.opencode_config.is_some(), "opencode_config"),
        ] {
            if set {
                c.problem(
                    format!("{key}.{k}"),
                    format!("{k} applies only to a server the gateway spawns"),
                    format!("remove {k}, or set spawn = true"),
                );
            }
        }
    }
}

/// The spawned server's environment: `env_file`'s lines, then `env`'s (which win).
fn env(c: &mut Checker<'_>, key: &str, p: &RawProject) -> BTreeMap<String, Secret> {
    let mut env: BTreeMap<String, Secret> = BTreeMap::new();
    if let Some(f) = &p.env_file {
        let path = c.path(f);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for (n, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let line = line.strip_prefix("export ").unwrap_or(line);
                    match line.split_once('=') {
                        Some((k, v)) => {
                            let v = v.trim().trim_matches('"').trim_matches('\'');
                            env.insert(k.trim().to_string(), Secret::new(v));
                        }
                        None => c.problem(
                            format!("{key}.env_file"),
                            format!("{} line {} is not NAME=value", path.display(), n + 1),
                            "write one NAME=value per line",
                        ),
                    }
                }
            }
            Err(e) => c.problem(
                format!("{key}.env_file"),
                format!("cannot read {}: {e}", path.display()),
                "create the file or remove env_file",
            ),
        }
    }
    for (k, v) in &p.env {
        env.insert(k.clone(), Secret::new(v.clone()));
    }
    // A name a shell could not export: refused here, rather than by the server's start (on a
    // box the names go through `sh`'s `export`).
    for k in env.keys() {
        let mut chars = k.chars();
        let good = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !good {
            c.problem(
                format!("{key}.env"),
                format!("{k:?} is not an environment variable name"),
                "use letters, digits and '_', not starting with a digit",
            );
        }
    }
    env
}

/// The files this project's secrets are read from (their modes are checked apart).
fn secret_files(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Vec<(String, std::path::PathBuf)> {
    let mut secret_files = Vec::new();
    if let Some(f) = &p.upstream_password_file {
        secret_files.push((format!("{key}.upstream_password_file"), c.path(f)));
    }
    if let Some(f) = &p.env_file {
        secret_files.push((format!("{key}.env_file"), c.path(f)));
    }
    secret_files
}

/// A `[[project]]` with `directories`: checks what only a set needs; the template is `project`'s.
pub(super) fn project_set(c: &mut Checker<'_>, key: &str, p: &RawProject, template: Project) -> Option<ProjectSet> {
    let key = format!("{key} ({})", p.name);
    let pattern = p.directories.as_deref()?;
    if !p.spawn {
        c.problem(
            format!("{key}.directories"),
            "a set of directories needs the gateway to spawn one server per folder",
            "add spawn = true (and no upstream)",
        );
    }
    if p.listen.is_some() {
        c.problem(
            format!("{key}.listen"),
            "a set of projects cannot share one listener",
            "remove listen; discovered projects are reached at /p/<name>/ or <name>.<base_domain>",
        );
    }
    let Some((parent, prefix)) = split_pattern(pattern) else {
        c.problem(
            format!("{key}.directories"),
            format!("{pattern:?} is not <folder>/* or <folder>/<prefix>*"),
            "write directories = \"/srv/app/.worktrees/*\" (a * only at the end of the last segment)",
        );
        return None;
    };
    // On a box the folder is the box's: absolute, listed there by the running gateway (which
    // says so when it cannot), never looked up here.
    if p.on_box.is_some() {
        let parent = std::path::Path::new(parent);
        if !parent.is_absolute() {
            c.problem(
                format!("{key}.directories"),
                format!("{pattern:?} is not an absolute path on the box"),
                "write the folder as the box sees it, from / (\"/srv/app/.worktrees/*\")",
            );
            return None;
        }
        let parent = crate::config::validate::lexical_clean(parent);
        return Some(ProjectSet {
            name: p.name.clone(),
            tasks: super::tasks::task_settings_on_box(c, &key, p, &parent),
            parent,
            prefix: prefix.to_string(),
            template,
        });
    }
    let path = c.path(parent);
    let Ok(parent) = path.canonicalize().and_then(|d| {
        if d.is_dir() {
            Ok(d)
        } else {
            Err(std::io::ErrorKind::NotADirectory.into())
        }
    }) else {
        c.problem(
            format!("{key}.directories"),
            format!("{} is not an existing directory", path.display()),
            "create it (git worktree add makes its folders), or point directories at it",
        );
        return None;
    };
    Some(ProjectSet {
        name: p.name.clone(),
        tasks: super::tasks::task_settings(c, &key, p, &parent),
        parent,
        prefix: prefix.to_string(),
        template,
    })
}

/// `/a/b/*` → (`/a/b`, ``), `/a/b/feat-*` → (`/a/b`, `feat-`); a `*` elsewhere is refused.
pub(crate) fn split_pattern(pattern: &str) -> Option<(&str, &str)> {
    let (parent, last) = pattern.rsplit_once('/')?;
    let prefix = last.strip_suffix('*')?;
    if parent.is_empty() || parent.contains(['*', '?', '[']) || prefix.contains(['*', '?', '[']) {
        return None;
    }
    Some((parent, prefix))
}

/// An external upstream must be on this machine: the gateway sends it a password in clear HTTP.
fn loopback_authority(c: &mut Checker<'_>, key: &str, url: &str) -> Option<String> {
    let fix = "write upstream = \"http://127.0.0.1:<port>\" (OpenCode listens on loopback; reach other machines over SSH or TLS yourself)";
    let Some(rest) = url.strip_prefix("http://") else {
        c.problem(key, format!("{url:?} is not an http:// URL"), fix);
        return None;
    };
    let authority = rest.trim_end_matches('/');
    if authority.contains('/') || authority.contains('@') || authority.is_empty() {
        c.problem(key, format!("{url:?} must be a scheme, a host and a port only"), fix);
        return None;
    }
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h.trim_start_matches('[').trim_end_matches(']'),
        _ => {
            c.problem(key, format!("{url:?} has no port"), fix);
            return None;
        }
    };
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        c.problem(key, format!("{host} is not a loopback address"), fix);
        return None;
    }
    Some(authority.to_string())
}

/// The shortest upstream password accepted. The gateway overwrites the password wherever an
/// answer repeats it (`upstream/redact.rs`); a short one also matches ordinary text (one
/// character overwrote every occurrence of it in the web UI's HTML: hostile round five).
const MIN_UPSTREAM_PASSWORD: usize = 12;

fn upstream_password(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<Secret> {
    let secret = read_upstream_password(c, key, p)?;
    let len = secret.expose().chars().count();
    if len < MIN_UPSTREAM_PASSWORD {
        let which = if p.upstream_password_env.is_some() {
            "upstream_password_env"
        } else {
            "upstream_password_file"
        };
        c.problem(
            format!("{key}.{which}"),
            format!(
                "the OpenCode server's password is only {len} character{}: the gateway overwrites it wherever an answer repeats it, and one this short would also match ordinary text",
                if len == 1 { "" } else { "s" }
            ),
            format!("give the server a password of at least {MIN_UPSTREAM_PASSWORD} random characters (openssl rand -base64 18)"),
        );
        return None;
    }
    Some(secret)
}

fn read_upstream_password(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<Secret> {
    match (&p.upstream_password_env, &p.upstream_password_file) {
        (Some(_), Some(_)) => {
            c.problem(
                format!("{key}.upstream_password_env"),
                "both upstream_password_env and upstream_password_file are set",
                "keep one of them",
            );
            None
        }
        (Some(var), None) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Some(Secret::new(v)),
            _ => {
                c.problem(
                    format!("{key}.upstream_password_env"),
                    format!("the environment variable {var} is not set"),
                    format!("export {var}=<the OpenCode server's password> before starting the gateway, or use upstream_password_file"),
                );
                None
            }
        },
        (None, Some(file)) => {
            let path = c.path(file);
            match std::fs::read_to_string(&path) {
                Ok(v) if !v.trim().is_empty() => Some(Secret::new(v.trim_end_matches(['\r', '\n']))),
                Ok(_) => {
                    c.problem(
                        format!("{key}.upstream_password_file"),
                        format!("{} is empty", path.display()),
                        "write the OpenCode server's password into it",
                    );
                    None
                }
                Err(e) => {
                    c.problem(
                        format!("{key}.upstream_password_file"),
                        format!("cannot read {}: {e}", path.display()),
                        "create it (mode 0600) with the OpenCode server's password",
                    );
                    None
                }
            }
        }
        (None, None) => None,
    }
}

/// `opencode_config = "user" | "private"` (absent: "user").
fn opencode_config(c: &mut Checker, key: &str, value: Option<&str>) -> crate::config::settings::OpencodeConfig {
    use crate::config::settings::OpencodeConfig;
    match value {
        None | Some("user") => OpencodeConfig::User,
        Some("private") => OpencodeConfig::Private,
        Some(other) => {
            c.problem(
                format!("{key}.opencode_config"),
                format!("{other:?} is not whose OpenCode setup the server uses"),
                "write opencode_config = \"user\" (the OS user's own configuration and credentials) or \"private\" (folders of its own)",
            );
            OpencodeConfig::User
        }
    }
}
