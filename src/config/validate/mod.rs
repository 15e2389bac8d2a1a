//! The one boundary between the file as written and [`Settings`]: every check happens here, and
//! every problem is reported with its key and a fix, all at once, so one edit fixes the file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::file::RawConfig;
use super::settings::*;
use super::{ConfigError, ProtectedPaths};

mod audit;
pub(crate) mod boxes;
mod budget;
pub(crate) mod checker;
pub(crate) mod known_hosts;
pub(crate) mod names;
mod notify;
pub(crate) mod oidc;
mod project;
mod route_role;
mod store;
mod user;

pub(crate) use oidc::acceptable_url as acceptable_oidc_url;
pub(crate) use oidc::endpoint_allowed as oidc_endpoint_allowed;
#[cfg(test)]
pub(crate) use project::split_pattern;
use project::{project, project_set};
use user::user;

pub(crate) use checker::Checker;
pub use checker::lexical_clean;
pub(crate) use checker::parse_duration;
pub(crate) use names::{valid_project_name, valid_user_name};

pub(crate) fn validate(raw: RawConfig, path: &Path) -> Result<Settings, ConfigError> {
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
        // Listening on every address: the address another device on this network can use (a
        // phone cannot resolve a bare host name; see `lan_address`).
        (None, Some(a)) if a.ip().is_unspecified() => match lan_address() {
            Some(std::net::IpAddr::V6(v6)) => format!("https://[{v6}]:{}", a.port()),
            Some(ip) => format!("https://{ip}:{}", a.port()),
            None => format!("https://{}:{}", crate::support::host::host_name(), a.port()),
        },
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
    let log_format = match raw.server.log_format.as_deref() {
        None => Default::default(),
        Some(f) => crate::support::telemetry::LogFormat::parse(f).unwrap_or_else(|| {
            c.problem(
                "server.log_format",
                format!("{f:?} is not a log format"),
                "write log_format = \"text\" (the default, for people) or \"json\" (one JSON object a line, for log shippers)",
            );
            Default::default()
        }),
    };
    let users_file = raw.server.users_file.as_deref().map(|f| c.path(f));
    let opencode_bin = raw
        .server
        .opencode_bin
        .as_deref()
        .map(|b| if b.contains('/') { c.path(b) } else { PathBuf::from(b) });

    let acme = raw.tls.acme.as_ref().map(|a| {
        if !a.directory.starts_with("https://") {
            c.problem(
                "tls.acme.directory",
                format!("{:?} is not an https:// URL", a.directory),
                "write the CA's directory URL, e.g. \"https://acme-v02.api.letsencrypt.org/directory\"",
            );
        }
        if a.email.as_deref().is_some_and(|e| !e.contains('@')) {
            c.problem(
                "tls.acme.email",
                "is not an email address",
                "write the address the CA may send expiry notices to, or leave it out",
            );
        }
        Acme {
            directory: a.directory.clone(),
            email: a.email.clone(),
            ca_bundle: a.ca_bundle.as_deref().map(|p| c.path(p)),
            dir: state_dir.join("acme"),
        }
    });
    if acme.is_some() && raw.tls.dev_ca {
        c.problem(
            "tls.acme",
            "is set together with tls.dev_ca",
            "remove dev_ca: ACME obtains a trusted certificate instead",
        );
    }
    let path_or = |c: &mut Checker, key: &str, v: &Option<String>, file: &str| match (v, &acme) {
        (Some(p), _) => c.path(p),
        (None, Some(a)) => a.dir.join(file),
        (None, None) => {
            c.problem(
                key,
                "is missing",
                "point it at your PEM file, or set tls.dev_ca = true, or set tls.acme",
            );
            PathBuf::new()
        }
    };
    let cert = path_or(&mut c, "tls.cert", &raw.tls.cert, "cert.pem");
    let key = path_or(&mut c, "tls.key", &raw.tls.key, "key.pem");
    let tls = Tls {
        cert,
        key,
        dev_ca: raw.tls.dev_ca,
        dev_names: dev_names(&mut c, &raw.tls.dev_names),
        acme,
    };
    if !tls.dev_ca && tls.acme.is_none() {
        for (key, p) in [("tls.cert", &tls.cert), ("tls.key", &tls.key)] {
            if !p.as_os_str().is_empty() && !p.is_file() {
                c.problem(
                    key,
                    format!("{} does not exist", p.display()),
                    "point it at your PEM file, or set tls.dev_ca = true to have a dev certificate made",
                );
            }
        }
    }
    let http_listen = raw
        .server
        .http_listen
        .as_deref()
        .and_then(|l| c.socket_addr("server.http_listen", l));

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

    let limits = super::limits::validate(&mut c, &raw.limits);
    let notify = raw.notify.as_ref().and_then(|n| notify::notify(&mut c, n));
    let audit = audit::audit(&mut c, raw.audit.as_ref(), &state_dir);
    let oidc = raw.oidc.as_ref().and_then(|o| oidc::oidc(&mut c, o));

    let (budget_defaults, user_day_usd) = budget::defaults(&mut c, raw.budget.as_ref());
    let mut projects = Vec::new();
    let mut project_sets = Vec::new();
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
        let project = project(&mut c, &key, p).map(|mut project| {
            project.budget = budget::project(&mut c, &key, &budget_defaults, p.budget.as_ref());
            project
        });
        match (project, p.directories.is_some()) {
            (Some(template), true) => project_sets.extend(project_set(&mut c, &key, p, template)),
            (Some(project), false) => projects.push(project),
            (None, _) => {}
        }
    }
    let project_names: HashSet<&str> = raw
        .project
        .iter()
        .filter(|p| p.directories.is_none())
        .map(|p| p.name.as_str())
        .collect();
    let set_names: Vec<&str> = raw
        .project
        .iter()
        .filter(|p| p.directories.is_some())
        .map(|p| p.name.as_str())
        .collect();

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
        if let Some(user) = user(&mut c, &key, u, &project_names, &set_names, raw.oidc.is_some()) {
            users.push(user);
        }
    }
    oidc::identities_unique(&mut c, &users, oidc.as_ref());

    let route_roles = route_role::route_roles(&mut c, &raw.route_role);
    let boxes = boxes::boxes(&mut c, &raw.boxes);
    for (i, p) in raw.project.iter().enumerate() {
        if let Some(b) = &p.on_box
            && !raw.boxes.iter().any(|d| &d.name == b)
        {
            c.problem(
                format!("project[{i}] ({}).box", p.name),
                format!("no [[box]] is named {b:?}"),
                "add a [[box]] with that name, or remove box from this project",
            );
        }
    }

    if !c.problems.is_empty() {
        return Err(ConfigError::Invalid {
            file: path.to_path_buf(),
            problems: c.problems,
        });
    }
    // This file's own users only: hashes in `users_file` are that file's (its mode is checked apart).
    let file_holds_secrets = raw.user[..raw.own_users.min(raw.user.len())]
        .iter()
        .any(|u| u.password_hash.is_some())
        || raw.project.iter().any(|p| !p.env.is_empty())
        || raw.store.as_ref().is_some_and(|s| s.url.is_some());
    let mut settings = Settings {
        file_holds_secrets,
        path: path.to_path_buf(),
        server: Server {
            listen: listen.expect("checked above"),
            base_domain,
            public_url,
            state_dir,
            http_listen,
            allowed_origins,
            trusted_proxies,
            opencode_bin,
            log_format,
            users_file,
        },
        tls,
        ssh,
        admin,
        notify,
        audit,
        oidc,
        limits,
        projects,
        project_sets,
        discovery_warnings: Vec::new(),
        users,
        route_roles,
        protected: ProtectedPaths::default(),
        boxes,
        user_day_usd,
        push_private_endpoints: raw
            .push
            .as_ref()
            .and_then(|p| p.allow_private_endpoints)
            .unwrap_or(false),
        store_url: None,
    };
    settings.protected = settings.protected_paths();
    let (found, warnings) = crate::config::discover::discover(&settings);
    settings.projects.extend(found);
    settings.discovery_warnings = warnings;
    settings.store_url = store::url(&mut c, raw.store.as_ref(), &settings.projects);
    secrets_outside_projects(&mut c, &settings);
    if !c.problems.is_empty() {
        return Err(ConfigError::Invalid {
            file: path.to_path_buf(),
            problems: c.problems,
        });
    }
    Ok(settings)
}

/// The LAN address to print for a gateway listening on every address: a private IPv4 address
/// (RFC 1918: the home or office network) first, then any other IPv4, then IPv6. Read when the
/// config is loaded, so a DHCP change is picked up by the next reload or start.
fn lan_address() -> Option<std::net::IpAddr> {
    let all = crate::support::host::lan_addresses();
    let private = |ip: &std::net::IpAddr| matches!(ip, std::net::IpAddr::V4(v4) if v4.is_private());
    all.iter()
        .find(|ip| private(ip))
        .or_else(|| all.iter().find(|ip| ip.is_ipv4()))
        .or_else(|| all.first())
        .copied()
}

/// `tls.dev_names`: each an IP address or a DNS name (a leading `*.` allowed), lower-cased.
fn dev_names(c: &mut Checker<'_>, raw: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    for n in raw {
        let bare = n.trim_start_matches("*.");
        let dns_ok = !bare.is_empty()
            && bare.len() <= 253
            && bare.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if n.parse::<std::net::IpAddr>().is_ok() || dns_ok {
            names.push(n.to_ascii_lowercase());
        } else {
            c.problem(
                "tls.dev_names",
                format!("{n:?} is neither an IP address nor a DNS name"),
                "write addresses such as \"192.168.1.20\" and names such as \"mybox.local\"",
            );
        }
    }
    names
}

fn move_out(key: &str) -> String {
    if key == "config file" {
        "move the config file out of it and start with -c <new path>".into()
    } else if key.starts_with("tls.dev_ca") {
        "point tls.cert and tls.key at another folder (the dev CA is made beside the certificate)".into()
    } else {
        format!("point {key} at a path outside it")
    }
}

/// A project's clients read files in its directory (OpenCode's file API, the web UI, the agent's
/// tools), so no gateway secret may sit inside one, and no project may sit inside a folder the
/// gateway owns. Public files (certificates) are allowed.
fn secrets_outside_projects(c: &mut Checker<'_>, settings: &Settings) {
    for e in settings.protected.entries() {
        if e.key.starts_with("tls.cert") || e.key.ends_with("(CA certificate)") {
            continue;
        }
        for p in &settings.projects {
            let Some(dir) = &p.directory else { continue };
            let inside = e.canonical.starts_with(dir) || e.path.starts_with(dir);
            let holds = e.dir && (dir.starts_with(&e.canonical) || dir.starts_with(&e.path));
            if inside {
                c.problem(
                    e.key.clone(),
                    format!(
                        "{} is inside the directory of project {:?} ({}), so its clients could read it through OpenCode's file API",
                        e.path.display(),
                        p.name,
                        dir.display()
                    ),
                    format!(
                        "keep the gateway's files outside every project: {}, e.g. under ~/.config/opencode-gateway/ (where `opencode-gateway init` puts them), or give project {:?} a directory that holds no gateway file",
                        move_out(&e.key),
                        p.name
                    ),
                );
            } else if holds {
                c.problem(
                    e.key.clone(),
                    format!(
                        "the directory of project {:?} ({}) is inside {}, which holds the gateway's private data",
                        p.name,
                        dir.display(),
                        e.path.display()
                    ),
                    format!(
                        "point {} at a folder of its own (default ~/.local/state/opencode-gateway), or move the project out of it",
                        e.key
                    ),
                );
            }
        }
    }
}

fn default_state_dir() -> PathBuf {
    crate::config::state_home().unwrap_or_else(|| PathBuf::from(".gateway-state"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Password hashes in `users_file` do not make the config itself a file of secrets (its mode
    /// warning said so on the README's first start); hashes in the config do.
    #[test]
    fn only_the_configs_own_hashes_make_it_hold_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        let hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0$8TXNdUqXvl0ddUyKQhHu4uYJtI3VhLhSYfMeD4tt1TA";
        let users =
            format!("[[user]]\nname = \"dev\"\npassword_hash = \"{hash}\"\nprojects = [\"*\"]\nrole = \"admin\"\n");
        let base = "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n";
        let tls = "[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n";
        let elsewhere = format!("{base}users_file = \"users.toml\"\n{tls}");
        let s = crate::config::parse_with_users(&elsewhere, &path, Some(&users)).unwrap();
        assert!(!s.file_holds_secrets);
        assert_eq!(s.users.len(), 1, "the users file's user is read");
        let here = format!("{base}{tls}{users}");
        assert!(
            crate::config::parse_with_users(&here, &path, None)
                .unwrap()
                .file_holds_secrets
        );
    }

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
