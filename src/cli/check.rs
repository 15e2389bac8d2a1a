//! `check`: validate a config file and print what it would serve.

use std::path::Path;

use crate::config::{Grants, Settings, UpstreamKind};

pub(crate) fn check(path: &Path) -> anyhow::Result<()> {
    let settings = crate::config::load(path)?;
    let made_later = settings.tls.dev_ca || settings.tls.acme.is_some();
    if !made_later || (settings.tls.cert.exists() && settings.tls.key.exists()) {
        crate::front::listen::tls::server_config(&settings.tls)?;
    }
    print!("{}", summary(&settings));
    for w in permission_warnings(&settings)
        .into_iter()
        .chain(shared_os_user_warnings(&settings))
        .chain(gateway_user_warnings(&settings))
        .chain(crate::config::validate::boxes::warnings(&settings))
        .chain(crate::reach::phone_warnings(&settings))
        .chain(settings.discovery_warnings.iter().cloned())
    {
        eprintln!("warning: {w}");
    }
    Ok(())
}

/// `check --known-hosts`: the SSH front door's known_hosts line alone, to append as is.
pub(crate) fn known_hosts(path: &Path) -> anyhow::Result<()> {
    let settings = crate::config::load(path)?;
    let Some(ssh) = &settings.ssh else {
        anyhow::bail!("{} has no [ssh] section: there is no SSH front door", path.display());
    };
    let line = crate::front::ssh::host_key::known_hosts_line(&ssh.host_key, ssh.listen).ok_or_else(|| {
        anyhow::anyhow!(
            "no host key at {} yet: it is made on the first `serve`",
            ssh.host_key.display()
        )
    })?;
    println!("{line}");
    Ok(())
}

/// Spawned projects that run as the same OS user (the same `run_as`, or both without it) but are
/// granted to different users: whoever can use one can read and write the other's files and
/// OpenCode state through it (a shell, the bash tool, the file API), whatever the grants say.
pub(crate) fn shared_os_user_warnings(s: &Settings) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut by_os_user: BTreeMap<Option<&str>, Vec<(&str, BTreeSet<&str>)>> = BTreeMap::new();
    for p in &s.projects {
        if p.upstream != UpstreamKind::Spawned {
            continue;
        }
        let granted = s
            .users
            .iter()
            .filter(|u| u.grants.role_in(&p.name).is_some())
            .map(|u| u.name.as_str())
            .collect();
        by_os_user
            .entry(p.run_as.as_deref())
            .or_default()
            .push((p.name.as_str(), granted));
    }
    let mut out = Vec::new();
    for (os_user, projects) in &by_os_user {
        for (i, (a, users_a)) in projects.iter().enumerate() {
            for (b, users_b) in &projects[i + 1..] {
                if users_a == users_b {
                    continue;
                }
                let who = match os_user {
                    Some(u) => format!("OS user {u} (run_as = {u:?})"),
                    None => "the gateway's own OS user (no run_as)".to_string(),
                };
                let list = |set: &BTreeSet<&str>| {
                    if set.is_empty() {
                        "nobody".to_string()
                    } else {
                        set.iter().copied().collect::<Vec<_>>().join(", ")
                    }
                };
                out.push(format!(
                    "projects {a} and {b} both run as {who} but are granted to different users ({a}: {}; {b}: {}); anyone who can use one can read and write the other's files through it. Fix: give each project its own run_as user, or grant both to the same users",
                    list(users_a),
                    list(users_b)
                ));
            }
        }
    }
    out
}

/// Spawned projects that run as the gateway's own OS user, said plainly where the config allows
/// it for several users (`allow_projects_as_gateway_user`): what their users can then read.
pub(crate) fn gateway_user_warnings(s: &Settings) -> Vec<String> {
    use crate::config::validate::os_users::{gateway_os_user, runs_as_gateway};
    let gateway = gateway_os_user();
    let who = gateway.0.clone().unwrap_or_else(|| format!("uid {}", gateway.1));
    let mine: Vec<&str> = s
        .projects
        .iter()
        .chain(s.project_sets.iter().map(|set| &set.template))
        .filter(|p| runs_as_gateway(p, &gateway) == Some(true))
        .map(|p| p.name.as_str())
        .collect();
    // One person on their own machine is the desk setup `init` writes: nothing to warn about
    // (a second user is refused by check, serve and `user add` until run_as or the allow flag).
    if mine.is_empty() || s.users.len() < 2 {
        return Vec::new();
    }
    let why = format!(
        "[server] allow_projects_as_gateway_user lets all {} users do so",
        s.users.len()
    );
    vec![format!(
        "{} run{} as the gateway's own OS user ({who}): {} terminals and agent can read the gateway's keys, users file and state database, and use its control socket ({why})",
        mine.join(", "),
        if mine.len() == 1 { "s" } else { "" },
        if mine.len() == 1 { "its" } else { "their" },
    )]
}

/// The config (password hashes) and private keys must be readable by their owner only; a looser
/// mode is worth a warning, not a refusal (the operator may share the machine with no one).
pub(crate) fn permission_warnings(s: &Settings) -> Vec<String> {
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
        // A config that keeps no secret of its own may be readable like any source file.
        if e.key == "config file" && s.file_secrets.is_empty() {
            continue;
        }
        if mode & 0o077 != 0 {
            // Said as it is: the config's own secrets, by kind (round five: the package's config,
            // whose hashes are in the users file, was said to hold them).
            let holds = match e.key.as_str() {
                "config file" => format!("it holds {}", s.file_secrets.join(" and ")),
                "server.users_file" => "it holds password hashes".to_string(),
                _ => "it is a secret".to_string(),
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

pub(crate) fn summary(s: &Settings) -> String {
    let mut out = listeners(s);
    out += &projects(s);
    out += &sso(s);
    out += &users(s);
    out += &routes_summary(s);
    out
}

/// Where the gateway listens and what it writes.
fn listeners(s: &Settings) -> String {
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
        crate::front::control::socket_path(s).display()
    );
    out += &format!("  state  {}\n", crate::store::describe(s));
    if let Some(n) = &s.notify {
        out += &crate::notify::describe(n);
    }
    out += &match &s.audit {
        Some(a) => format!(
            "  audit  {}  (0600; rotated at {} bytes, {} kept)\n",
            a.file.display(),
            a.max_bytes,
            a.keep
        ),
        None => "  audit  off ([audit] enabled = false)\n".to_string(),
    };
    if let Some(ssh) = &s.ssh {
        out += &format!("  ssh    {}  (host key {})\n", ssh.listen, ssh.host_key.display());
        out += &crate::front::ssh::host_key::describe(&ssh.host_key, ssh.listen);
    }
    out
}

/// Each project (and project set): its server and where it is reached.
fn projects(s: &Settings) -> String {
    let reach = crate::reach::Reach::new(s, None);
    let mut out = "\nprojects:\n".to_string();
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
        if let Some(why) = crate::upstream::supervise::cannot_start(s, p) {
            out += &format!("      NOT RUNNING: {why}\n");
        }
        if let Some(d) = &p.directory {
            out += &format!("      directory {}\n", d.display());
        }
        if let Some(set) = &p.set {
            out += &format!("      discovered by project set {set}\n");
        }
        out += &format!("      routes: {}/", reach.project(&p.name));
        if let Some(web) = reach.web_ui(&p.name) {
            out += &format!("  {web}");
        }
        if let Some(l) = p.listen {
            out += &format!("  port {l}");
        }
        if s.projects.len() == 1 && s.project_sets.is_empty() {
            out += &format!("  {}/", reach.base());
        }
        out += "\n";
    }
    for set in &s.project_sets {
        if let Some(b) = &set.template.on_box {
            out += &format!(
                "  {}-<folder>  project set on box {b}: one server there per folder {}/{}* (listed there by the running gateway)\n",
                set.name,
                set.parent.display(),
                set.prefix,
            );
            continue;
        }
        out += &format!(
            "  {}-<folder>  project set: one spawned server per folder {}/{}* (read every {} s; now {} project(s))\n",
            set.name,
            set.parent.display(),
            set.prefix,
            crate::gateway::reload::DISCOVER_EVERY.as_secs(),
            s.projects
                .iter()
                .filter(|p| p.set.as_deref() == Some(set.name.as_str()))
                .count()
        );
    }
    out
}

fn sso(s: &Settings) -> String {
    let Some(o) = &s.oidc else { return String::new() };
    let on = match o.match_on {
        crate::config::OidcMatch::Email => "verified email",
        crate::config::OidcMatch::Subject => "subject",
    };
    format!(
        "\nsingle sign-on: {} as client {} (users matched by {on}; secret held by the gateway)\n",
        o.issuer, o.client_id
    )
}

/// Each user: what they may reach and how they log in.
fn users(s: &Settings) -> String {
    let mut out = "\nusers:\n".to_string();
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
        let mut how = Vec::new();
        if u.password_hash.is_some() {
            how.push("password".to_string());
        }
        if !u.ssh_keys.is_empty() || how.is_empty() && u.oidc.is_none() {
            how.push(format!("{} ssh key(s)", u.ssh_keys.len()));
        }
        if let Some(id) = &u.oidc {
            how.push(format!("single sign-on as {id}"));
        }
        out += &format!("  {}  {grants}; {}\n", u.name, how.join(", "));
    }
    out
}

/// The route table's OpenCode version and the config's `[[route_role]]` entries. What a running
/// upstream adds (its version, routes that got a default) is in `status`.
pub(crate) fn routes_summary(s: &Settings) -> String {
    let mut out = format!(
        "\nroutes:\n  table of OpenCode {} ({} routes); an upstream of another version: routes it adds get operator (admin under admin-only roots), see `status`\n",
        crate::policy::routes::TABLE_VERSION,
        crate::policy::routes::ROUTES.len()
    );
    for r in crate::policy::drift::RouteRoles::compile(&s.route_roles).iter() {
        out += &format!(
            "  [[route_role]] {} {} {}\n",
            r.method,
            r.pattern,
            r.class.least_role().as_str()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_summary_names_discovered_projects_and_their_set() {
        let root = tempfile::tempdir().unwrap();
        let wt = root.path().join("wt");
        for d in ["one", "two"] {
            std::fs::create_dir_all(wt.join(d)).unwrap();
        }
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"{}\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n\
             [[project]]\nname = \"app\"\ndirectories = \"{}/*\"\nspawn = true\nstart = \"on-demand\"\n",
            root.path().join("state").display(),
            wt.display()
        );
        let s = crate::config::parse(&config, &root.path().join("gateway.toml")).unwrap();
        let summary = super::summary(&s);
        assert!(
            summary.contains("app-one  spawned") && summary.contains("discovered by project set app"),
            "{summary}"
        );
        assert!(summary.contains("app-<folder>  project set"), "{summary}");
    }
}
