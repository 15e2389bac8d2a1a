//! The one boundary between the file as written and [`Settings`]: every check happens here, and
//! every problem is reported with its key and a fix, all at once, so one edit fixes the file.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use argon2::PasswordHash;

use super::file::{RawConfig, RawGrants, RawLimits, RawProject, RawUser};
use super::settings::*;
use super::{ConfigError, Problem, Secret};

/// Collects problems while converting, so the operator sees all of them in one run.
struct Checker<'a> {
    base: &'a Path,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn problem(&mut self, key: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            message: message.into(),
            fix: fix.into(),
        });
    }

    fn path(&self, value: &str) -> PathBuf {
        let p = Path::new(value);
        if p.is_absolute() {
            lexical_clean(p)
        } else {
            lexical_clean(&self.base.join(p))
        }
    }

    fn socket_addr(&mut self, key: &str, value: &str) -> Option<SocketAddr> {
        match value.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.problem(
                    key,
                    format!("{value:?} is not an address with a port"),
                    format!("write {key} = \"127.0.0.1:8443\" (an IP address and a port; 0 picks a free port)"),
                );
                None
            }
        }
    }

    fn duration(&mut self, key: &str, value: &str) -> Duration {
        match parse_duration(value) {
            Some(d) => d,
            None => {
                self.problem(
                    key,
                    format!("{value:?} is not a duration"),
                    format!("write {key} = \"30s\" (a number with ms, s, m or h)"),
                );
                Duration::from_secs(1)
            }
        }
    }
}

/// `a/b/../c` → `a/c`, without touching the file system (paths may not exist yet).
pub fn lexical_clean(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `"500ms"`, `"10s"`, `"5m"`, `"1h"`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
        _ => None,
    }
}

/// A project name is one DNS label, because it also names a host (`<project>.<base_domain>`).
pub fn valid_project_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

pub fn valid_user_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b))
}

pub fn validate(raw: RawConfig, path: &Path) -> Result<Settings, ConfigError> {
    let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut c = Checker {
        base: &base,
        problems: Vec::new(),
    };

    let listen = c.socket_addr("server.listen", &raw.server.listen);
    let base_domain = raw
        .server
        .base_domain
        .as_deref()
        .map(|d| d.trim_matches('.').to_ascii_lowercase());
    if let Some(d) = &base_domain
        && (d.is_empty() || !d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
    {
        c.problem(
            "server.base_domain",
            format!("{d:?} is not a domain name"),
            "write base_domain = \"gw.localhost\" (projects are served at <project>.<base_domain>)",
        );
    }
    let public_url = match (&raw.server.public_url, listen) {
        (Some(u), _) => u.trim_end_matches('/').to_string(),
        (None, Some(a)) if a.ip().is_unspecified() => {
            format!("https://{}:{}", crate::devcert::host_name(), a.port())
        }
        (None, Some(a)) => format!("https://{a}"),
        (None, None) => String::new(),
    };
    if !public_url.is_empty() && !public_url.starts_with("https://") {
        c.problem(
            "server.public_url",
            format!("{public_url:?} is not an https:// URL"),
            "write public_url = \"https://<host>:<port>\", the address clients use",
        );
    }
    let state_dir = match &raw.server.state_dir {
        Some(d) => c.path(d),
        None => default_state_dir(),
    };
    let mut allowed_origins = Vec::new();
    for (i, o) in raw.server.allowed_origins.iter().enumerate() {
        let o = o.trim_end_matches('/');
        if o.starts_with("https://") || o.starts_with("http://") {
            allowed_origins.push(o.to_ascii_lowercase());
        } else {
            c.problem(
                format!("server.allowed_origins[{i}]"),
                format!("{o:?} is not an origin"),
                "write an origin such as \"https://phone.example:8443\" (scheme, host, optional port)",
            );
        }
    }
    let mut trusted_proxies = Vec::new();
    for (i, p) in raw.server.trusted_proxies.iter().enumerate() {
        match Cidr::parse(p) {
            Some(cidr) => trusted_proxies.push(cidr),
            None => c.problem(
                format!("server.trusted_proxies[{i}]"),
                format!("{p:?} is not an address range"),
                "write a CIDR such as \"10.0.0.0/8\" or a single address",
            ),
        }
    }
    let opencode_bin = raw
        .server
        .opencode_bin
        .as_deref()
        .map(|b| if b.contains('/') { c.path(b) } else { PathBuf::from(b) });

    let tls = Tls {
        cert: c.path(&raw.tls.cert),
        key: c.path(&raw.tls.key),
        dev_ca: raw.tls.dev_ca,
    };
    if !tls.dev_ca {
        for (key, p) in [("tls.cert", &tls.cert), ("tls.key", &tls.key)] {
            if !p.is_file() {
                c.problem(
                    key,
                    format!("{} does not exist", p.display()),
                    "point it at your PEM file, or set tls.dev_ca = true to have a dev certificate made",
                );
            }
        }
    }

    let ssh = raw.ssh.as_ref().and_then(|s| {
        let listen = c.socket_addr("ssh.listen", &s.listen)?;
        Some(Ssh {
            listen,
            host_key: c.path(&s.host_key),
            password_auth: s.password_auth,
        })
    });
    let admin = raw.admin.as_ref().and_then(|a| {
        let listen = c.socket_addr("admin.listen", &a.listen)?;
        if !listen.ip().is_loopback() {
            c.problem(
                "admin.listen",
                format!("{listen} is not a loopback address"),
                "the admin endpoints are for this machine only: write listen = \"127.0.0.1:9090\"",
            );
        }
        Some(Admin { listen })
    });

    let limits = limits(&mut c, &raw.limits);

    let mut projects = Vec::new();
    let mut names = HashSet::new();
    for (i, p) in raw.project.iter().enumerate() {
        let key = format!("project[{i}]");
        if !names.insert(p.name.clone()) {
            c.problem(
                format!("{key}.name"),
                format!("{:?} is used twice", p.name),
                "give each project its own name",
            );
        }
        if let Some(project) = project(&mut c, &key, p) {
            projects.push(project);
        }
    }
    let project_names: HashSet<&str> = raw.project.iter().map(|p| p.name.as_str()).collect();

    let mut users = Vec::new();
    let mut user_names = HashSet::new();
    for (i, u) in raw.user.iter().enumerate() {
        let key = format!("user[{i}]");
        if !user_names.insert(u.name.clone()) {
            c.problem(
                format!("{key}.name"),
                format!("{:?} is used twice", u.name),
                "give each user their own name",
            );
        }
        if let Some(user) = user(&mut c, &key, u, &project_names) {
            users.push(user);
        }
    }

    if !c.problems.is_empty() {
        return Err(ConfigError::Invalid {
            file: path.to_path_buf(),
            problems: c.problems,
        });
    }
    Ok(Settings {
        path: path.to_path_buf(),
        server: Server {
            listen: listen.expect("checked above"),
            base_domain,
            public_url,
            state_dir,
            allowed_origins,
            trusted_proxies,
            opencode_bin,
        },
        tls,
        ssh,
        admin,
        limits,
        projects,
        users,
    })
}

fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join("opencode-gateway");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".local/state/opencode-gateway"),
        None => PathBuf::from(".gateway-state"),
    }
}

fn limits(c: &mut Checker<'_>, l: &RawLimits) -> Limits {
    let positive = |c: &mut Checker<'_>, key: &str, v: u32| {
        if v == 0 {
            c.problem(
                format!("limits.{key}"),
                "0 would refuse everything",
                format!("remove limits.{key} to use the default, or give a positive number"),
            );
        }
        v
    };
    Limits {
        requests_per_second: positive(c, "requests_per_second", l.requests_per_second),
        burst: positive(c, "burst", l.burst),
        auth_failures_per_minute: positive(c, "auth_failures_per_minute", l.auth_failures_per_minute),
        auth_failure_burst: positive(c, "auth_failure_burst", l.auth_failure_burst),
        user_failures_per_minute: positive(c, "user_failures_per_minute", l.user_failures_per_minute),
        user_failure_burst: positive(c, "user_failure_burst", l.user_failure_burst),
        max_connections_per_ip: positive(c, "max_connections_per_ip", l.max_connections_per_ip),
        max_streams_per_user: positive(c, "max_streams_per_user", l.max_streams_per_user),
        max_ssh_channels_per_connection: positive(
            c,
            "max_ssh_channels_per_connection",
            l.max_ssh_channels_per_connection,
        ),
        tls_handshake_timeout: c.duration("limits.tls_handshake_timeout", &l.tls_handshake_timeout),
        request_head_timeout: c.duration("limits.request_head_timeout", &l.request_head_timeout),
        keepalive_timeout: c.duration("limits.keepalive_timeout", &l.keepalive_timeout),
        body_idle_timeout: c.duration("limits.body_idle_timeout", &l.body_idle_timeout),
        upstream_connect_timeout: c.duration("limits.upstream_connect_timeout", &l.upstream_connect_timeout),
        upstream_response_timeout: c.duration("limits.upstream_response_timeout", &l.upstream_response_timeout),
        drain_timeout: c.duration("limits.drain_timeout", &l.drain_timeout),
        auth_cache_ttl: c.duration("limits.auth_cache_ttl", &l.auth_cache_ttl),
        auth_cache_entries: positive(c, "auth_cache_entries", l.auth_cache_entries) as usize,
        ssh_idle_timeout: c.duration("limits.ssh_idle_timeout", &l.ssh_idle_timeout),
        max_head_bytes: positive(c, "max_head_bytes", l.max_head_bytes) as usize,
        max_headers: positive(c, "max_headers", l.max_headers) as usize,
        max_uri_bytes: positive(c, "max_uri_bytes", l.max_uri_bytes) as usize,
        max_body_bytes: l.max_body_bytes.max(1),
        spawn_ready_timeout: c.duration("limits.spawn_ready_timeout", &l.spawn_ready_timeout),
    }
}

fn project(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<Project> {
    let key = format!("{key} ({})", p.name);
    if !valid_project_name(&p.name) {
        c.problem(
            format!("{key}.name"),
            format!("{:?} is not a valid project name", p.name),
            "use lower-case letters, digits and '-' (it becomes a host name: <project>.<base_domain>)",
        );
    }
    let upstream = match (&p.upstream, p.spawn) {
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
    };
    let password = upstream_password(c, &key, p);
    if upstream == UpstreamKind::Spawned && password.is_some() {
        c.problem(
            format!("{key}.upstream_password_env"),
            "a spawned server gets a random password from the gateway",
            "remove upstream_password_env and upstream_password_file from this project",
        );
    }
    let directory = match &p.directory {
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
            if p.spawn {
                c.problem(
                    format!("{key}.directory"),
                    "a spawned server needs the folder to run in",
                    "add directory = \"/path/to/the/project\"",
                );
            }
            None
        }
    };
    let start = match p.start.as_deref() {
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
    };
    if !p.spawn {
        for (set, k) in [
            (!p.env.is_empty(), "env"),
            (p.env_file.is_some(), "env_file"),
            (p.run_as.is_some(), "run_as"),
            (p.start.is_some(), "start"),
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
        env,
        run_as: p.run_as.clone(),
        listen,
    })
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

fn upstream_password(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<Secret> {
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

fn user(c: &mut Checker<'_>, key: &str, u: &RawUser, projects: &HashSet<&str>) -> Option<User> {
    let key = format!("{key} ({})", u.name);
    if !valid_user_name(&u.name) {
        c.problem(
            format!("{key}.name"),
            format!("{:?} is not a valid user name", u.name),
            "use letters, digits and . _ - @ (at most 64)",
        );
    }
    let password_hash = match &u.password_hash {
        Some(h) => match PasswordHash::new(h) {
            Ok(parsed) if parsed.algorithm.as_str() == "argon2id" => Some((parsed, h.clone())),
            Ok(_) => {
                c.problem(
                    format!("{key}.password_hash"),
                    "the hash is not argon2id",
                    "make one with: opencode-gateway hash-password",
                );
                None
            }
            Err(_) => {
                c.problem(
                    format!("{key}.password_hash"),
                    "the hash is not a PHC string ($argon2id$v=19$…)",
                    "make one with: opencode-gateway hash-password",
                );
                None
            }
        },
        None => None,
    };
    if u.password_hash.is_none() && u.ssh_keys.is_empty() {
        c.problem(
            format!("{key}.password_hash"),
            "the user has neither a password nor an SSH key and could never log in",
            "set a password with: opencode-gateway user passwd <name>",
        );
    }
    let role = match u.role.as_deref() {
        None => None,
        Some(r) => match Role::parse(r) {
            Some(role) => Some(role),
            None => {
                c.problem(
                    format!("{key}.role"),
                    format!("{r:?} is not a role"),
                    "write role = \"viewer\", \"approver\", \"operator\" or \"admin\"",
                );
                None
            }
        },
    };
    let grants = match &u.projects {
        RawGrants::List(list) => {
            let role = role.unwrap_or(Role::Viewer);
            if list.iter().any(|p| p == "*") {
                Grants::All(role)
            } else {
                let mut map = BTreeMap::new();
                for p in list {
                    check_project_ref(c, &key, p, projects);
                    map.insert(p.clone(), role);
                }
                Grants::Each(map)
            }
        }
        RawGrants::Map(map) => {
            if u.role.is_some() {
                c.problem(
                    format!("{key}.role"),
                    "role is given per project in projects = { … }",
                    "remove role, or write projects = [\"…\"] with one role",
                );
            }
            let mut out = BTreeMap::new();
            for (p, r) in map {
                check_project_ref(c, &key, p, projects);
                match Role::parse(r) {
                    Some(role) => {
                        out.insert(p.clone(), role);
                    }
                    None => c.problem(
                        format!("{key}.projects.{p}"),
                        format!("{r:?} is not a role"),
                        "write \"viewer\", \"approver\", \"operator\" or \"admin\"",
                    ),
                }
            }
            if out.contains_key("*") {
                let role = out["*"];
                Grants::All(role)
            } else {
                Grants::Each(out)
            }
        }
    };
    let mut ssh_keys = Vec::new();
    for (i, line) in u.ssh_keys.iter().enumerate() {
        match crate::ssh::keys::parse_authorized_key(line) {
            Ok(k) => ssh_keys.push(k),
            Err(e) => c.problem(
                format!("{key}.ssh_keys[{i}]"),
                e,
                "paste the line from the user's ~/.ssh/id_ed25519.pub (type, base64 key, comment)",
            ),
        }
    }
    Some(User {
        name: u.name.clone(),
        password_hash,
        ssh_keys,
        grants,
    })
}

fn check_project_ref(c: &mut Checker<'_>, key: &str, p: &str, projects: &HashSet<&str>) {
    if p != "*" && !projects.contains(p) {
        c.problem(
            format!("{key}.projects"),
            format!("there is no project named {p:?}"),
            "grant a project defined in a [[project]] table, or \"*\" for all",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("s"), None);
        assert_eq!(parse_duration("1d"), None);
    }

    #[test]
    fn project_names_are_dns_labels() {
        assert!(valid_project_name("web-2"));
        assert!(!valid_project_name("Web"));
        assert!(!valid_project_name("a.b"));
        assert!(!valid_project_name("-x"));
        assert!(!valid_project_name(""));
    }
}
