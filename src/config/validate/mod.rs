//! The one boundary between the file as written and [`Settings`]: every check happens here, and
//! every problem is reported with its key and a fix, all at once, so one edit fixes the file.

use std::collections::HashSet;
use std::path::Path;

use super::file::{RawAdmin, RawConfig, RawProject, RawSsh};
use super::settings::*;
use super::{ConfigError, ProtectedPaths};

mod accept;
mod audit;
pub(crate) mod boxes;
mod budget;
pub(crate) mod checker;
mod fleet;
pub(crate) mod known_hosts;
pub(crate) mod names;
mod notify;
pub(crate) mod oidc;
pub(crate) mod os_users;
mod policy;
mod project;
mod route_role;
mod server;
mod store;
mod tasks;
mod tls;
mod trigger;
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
    let server = server::server(&mut c, &raw.server);
    let tls = tls::tls(&mut c, &raw.tls, &server.state_dir);
    let ssh = ssh(&mut c, raw.ssh.as_ref());
    let admin = admin(&mut c, raw.admin.as_ref());
    let limits = super::limits::validate(&mut c, &raw.limits);
    let notify = raw.notify.as_ref().and_then(|n| notify::notify(&mut c, n));
    let audit = audit::audit(&mut c, raw.audit.as_ref(), &server.state_dir);
    let oidc = raw.oidc.as_ref().and_then(|o| oidc::oidc(&mut c, o));
    let (budget_defaults, user_day_usd) = budget::defaults(&mut c, raw.budget.as_ref());
    let (projects, project_sets) = projects(&mut c, &raw, &budget_defaults);
    let users = users(&mut c, &raw);
    os_users::separate(
        &mut c,
        &projects,
        &project_sets,
        &users,
        server.allow_projects_as_gateway_user,
    );
    oidc::identities_unique(&mut c, &users, oidc.as_ref());
    let route_roles = route_role::route_roles(&mut c, &raw.route_role);
    let policies = policy::policies(&mut c, &raw.policy);
    let boxes = boxes::boxes(&mut c, &raw.boxes);
    let fleet = fleet::fleet(&mut c, raw.fleet.as_ref());
    boxes::projects_name_known_boxes(&mut c, &raw.project, &raw.boxes);
    c.done(path)?;
    let mut settings = Settings {
        file_secrets: holds_secrets(&raw),
        path: path.to_path_buf(),
        server,
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
        policies,
        triggers: Vec::new(),
        protected: ProtectedPaths::default(),
        boxes,
        user_day_usd,
        fleet,
        push_private_endpoints: raw
            .push
            .as_ref()
            .and_then(|p| p.allow_private_endpoints)
            .unwrap_or(false),
        store_url: None,
    };
    settings.protected = settings.protected_paths();
    let (found, warnings) = crate::config::discover::discover(&settings, &crate::config::discover::BoxListings::new());
    settings.projects.extend(found);
    settings.discovery_warnings = warnings;
    settings.store_url = store::url(&mut c, raw.store.as_ref(), &settings.projects);
    let names: HashSet<String> = settings.projects.iter().map(|p| p.name.clone()).collect();
    let known = trigger::Known {
        projects: &names,
        users: &settings.users,
        policies: &settings.policies,
    };
    settings.triggers = trigger::triggers(&mut c, &raw.trigger, &known);
    // Their secret files are the gateway's own too.
    settings.protected = settings.protected_paths();
    secrets_outside_projects(&mut c, &settings);
    c.done(path)?;
    Ok(settings)
}

fn ssh(c: &mut Checker<'_>, raw: Option<&RawSsh>) -> Option<Ssh> {
    let s = raw?;
    let listen = c.socket_addr("ssh.listen", &s.listen)?;
    Some(Ssh {
        listen,
        host_key: c.path(&s.host_key),
        password_auth: s.password_auth,
    })
}

fn admin(c: &mut Checker<'_>, raw: Option<&RawAdmin>) -> Option<Admin> {
    let listen = c.socket_addr("admin.listen", &raw?.listen)?;
    if !listen.ip().is_loopback() {
        c.problem(
            "admin.listen",
            format!("{listen} is not a loopback address"),
            "the admin endpoints are for this machine only: write listen = \"127.0.0.1:9090\"",
        );
    }
    Some(Admin { listen })
}

/// Every `[[project]]`: a single project, or a set of them (`directories`), each with its budget.
fn projects(c: &mut Checker<'_>, raw: &RawConfig, budget_defaults: &Budget) -> (Vec<Project>, Vec<ProjectSet>) {
    let mut projects = Vec::new();
    let mut project_sets = Vec::new();
    let mut names = HashSet::new();
    for (i, p) in raw.project.iter().enumerate() {
        let key = format!("project[{i}]");
        c.unique(&mut names, &key, &p.name, "give each project its own name");
        tasks::only_on_a_set(c, &key, p);
        let project = project(c, &key, p).map(|mut project| {
            project.budget = budget::project(c, &key, budget_defaults, p.budget.as_ref());
            project
        });
        match (project, p.directories.is_some()) {
            (Some(template), true) => project_sets.extend(project_set(c, &key, p, template)),
            (Some(project), false) => projects.push(project),
            (None, _) => {}
        }
    }
    (projects, project_sets)
}

/// Every `[[user]]`, whose grants may name the projects and project sets above.
fn users(c: &mut Checker<'_>, raw: &RawConfig) -> Vec<User> {
    let (sets, singles): (Vec<&RawProject>, Vec<&RawProject>) =
        raw.project.iter().partition(|p| p.directories.is_some());
    let project_names: HashSet<&str> = singles.iter().map(|p| p.name.as_str()).collect();
    let set_names: Vec<&str> = sets.iter().map(|p| p.name.as_str()).collect();
    let mut users = Vec::new();
    let mut user_names = HashSet::new();
    for (i, u) in raw.user.iter().enumerate() {
        let key = format!("user[{i}]");
        c.unique(&mut user_names, &key, &u.name, "give each user their own name");
        if let Some(user) = user(c, &key, u, &project_names, &set_names, raw.oidc.is_some()) {
            users.push(user);
        }
    }
    users
}

/// Whether the file itself holds secrets (its mode is then checked). This file's own users only:
/// hashes in `users_file` are that file's (its mode is checked apart).
fn holds_secrets(raw: &RawConfig) -> Vec<&'static str> {
    let hashes = raw.user[..raw.own_users.min(raw.user.len())]
        .iter()
        .any(|u| u.password_hash.is_some());
    [
        (hashes, "password hashes"),
        (raw.project.iter().any(|p| !p.env.is_empty()), "a project's env values"),
        (
            raw.store.as_ref().is_some_and(|s| s.url.is_some()),
            "the state database's URL",
        ),
    ]
    .into_iter()
    .filter_map(|(holds, what)| holds.then_some(what))
    .collect()
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
        assert!(s.file_secrets.is_empty());
        assert_eq!(s.users.len(), 1, "the users file's user is read");
        let here = format!("{base}{tls}{users}");
        assert_eq!(
            crate::config::parse_with_users(&here, &path, None)
                .unwrap()
                .file_secrets,
            ["password hashes"]
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
