//! `check`: validate a config file and print what it would serve.

use std::path::Path;

use crate::config::{Grants, Settings, UpstreamKind};

pub fn check(path: &Path) -> anyhow::Result<()> {
    let settings = crate::config::load(path)?;
    if !settings.tls.dev_ca || (settings.tls.cert.exists() && settings.tls.key.exists()) {
        crate::listen::tls::server_config(&settings.tls)?;
    }
    print!("{}", summary(&settings));
    for w in permission_warnings(&settings) {
        eprintln!("warning: {w}");
    }
    Ok(())
}

/// The config (password hashes) and private keys must be readable by their owner only; a looser
/// mode is worth a warning, not a refusal (the operator may share the machine with no one).
pub fn permission_warnings(s: &Settings) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    for e in s.protected.entries() {
        if e.dir || e.key.starts_with("tls.cert") || e.key.ends_with("(CA certificate)") {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&e.path) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            let holds = if e.key == "config file" {
                "it holds password hashes"
            } else {
                "it is a secret"
            };
            out.push(format!(
                "{} ({}) is readable by group or others (mode {mode:03o}); {holds}. Fix: chmod 600 {}",
                e.path.display(),
                e.key,
                e.path.display()
            ));
        }
    }
    out
}

pub fn summary(s: &Settings) -> String {
    let mut out = format!(
        "{}: OK\n\nlisteners:\n  https  {}  ({})\n",
        s.path.display(),
        s.server.listen,
        s.server.public_url
    );
    if let Some(a) = &s.admin {
        out += &format!("  admin  {}  (loopback: /healthz /metrics)\n", a.listen);
    }
    out += &format!(
        "  control {}  (unix socket, 0600: status, reload)\n",
        crate::control::socket_path(s).display()
    );
    if let Some(ssh) = &s.ssh {
        out += &format!("  ssh    {}  (host key {})\n", ssh.listen, ssh.host_key.display());
        out += &crate::ssh::host_key::describe(&ssh.host_key, ssh.listen);
    }
    let reach = crate::reach::Reach::new(s, None);
    out += "\nprojects:\n";
    for p in &s.projects {
        let upstream = match &p.upstream {
            UpstreamKind::External { authority } => format!(
                "upstream http://{authority}{}",
                if p.upstream_password.is_some() {
                    " (password held by the gateway)"
                } else {
                    " (no password)"
                }
            ),
            UpstreamKind::Spawned => "spawned `opencode serve`".to_string(),
        };
        out += &format!("  {}  {upstream}\n", p.name);
        if let Some(d) = &p.directory {
            out += &format!("      directory {}\n", d.display());
        }
        out += &format!("      routes: {}/", reach.project(&p.name));
        if let Some(web) = reach.web_ui(&p.name) {
            out += &format!("  {web}");
        }
        if let Some(l) = p.listen {
            out += &format!("  port {l}");
        }
        if s.projects.len() == 1 {
            out += &format!("  {}/", reach.base());
        }
        out += "\n";
    }
    out += "\nusers:\n";
    for u in &s.users {
        let grants = match &u.grants {
            Grants::All(role) => format!("all projects as {}", role.as_str()),
            Grants::Each(map) if map.is_empty() => "no projects".to_string(),
            Grants::Each(map) => map
                .iter()
                .map(|(p, r)| format!("{p} as {}", r.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let how = match (u.password_hash.is_some(), u.ssh_keys.len()) {
            (true, 0) => "password".to_string(),
            (false, n) => format!("{n} ssh key(s)"),
            (true, n) => format!("password, {n} ssh key(s)"),
        };
        out += &format!("  {}  {grants}; {how}\n", u.name);
    }
    out += &routes_summary(s);
    out
}

/// The route table's OpenCode version and the config's `[[route_role]]` entries. What a running
/// upstream adds (its version, routes that got a default) is in `status`.
pub fn routes_summary(s: &Settings) -> String {
    let mut out = format!(
        "\nroutes:\n  table of OpenCode {} ({} routes); an upstream of another version: routes it adds get operator (admin under admin-only roots), see `status`\n",
        crate::policy::routes::TABLE_VERSION,
        crate::policy::routes::ROUTES.len()
    );
    for r in s.route_roles.iter() {
        out += &format!(
            "  [[route_role]] {} {} {}\n",
            r.method,
            r.pattern,
            r.class.least_role().as_str()
        );
    }
    out
}
