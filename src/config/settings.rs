//! Validated configuration. Everything here has been checked: addresses parsed, paths resolved
//! against the config file's folder, hashes parsed, secrets loaded. Code after the config boundary
//! reads these types and never unwraps configuration.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use argon2::PasswordHash;

use super::Secret;
use super::protected::ProtectedPaths;

#[derive(Debug, Clone)]
pub struct Settings {
    /// The file these settings came from (paths in it are relative to its folder).
    pub path: PathBuf,
    /// The secrets that file itself holds (`[[user]]` password hashes, a project's inline `env`,
    /// the store's URL), so it must be readable by its owner only; a file with none (users in
    /// `users_file`, as the committed dev configs and the package's) may be readable like any
    /// source file.
    pub file_secrets: Vec<&'static str>,
    pub server: Server,
    pub tls: Tls,
    pub ssh: Option<Ssh>,
    pub admin: Option<Admin>,
    /// `[notify]`: announce new pending requests.
    pub notify: Option<Notify>,
    /// `[audit]`: `None` when turned off.
    pub audit: Option<AuditConfig>,
    /// `[oidc]`: single sign-on for the browser login.
    pub oidc: Option<Oidc>,
    pub limits: Limits,
    /// Configured projects, then the ones discovered from `project_sets` (`Project::set`).
    pub projects: Vec<Project>,
    /// `[[project]]` tables with `directories`: one project per matching folder.
    pub project_sets: Vec<ProjectSet>,
    /// Folders a set matched but that cannot be projects, and why (shown by `check`, logged).
    pub discovery_warnings: Vec<String>,
    pub users: Vec<User>,
    /// `[[route_role]]` entries, compiled into routes.
    /// `[[route_role]]` entries as validated; the running state compiles them into routes.
    pub route_roles: Vec<RouteRoleEntry>,
    /// `[[policy]]`: named permission policies, by name (reloadable).
    pub policies: Vec<std::sync::Arc<crate::config::permissions::PermissionPolicy>>,
    /// `[[trigger]]`: signed webhooks that start a turn, by name (reloadable).
    pub triggers: Vec<std::sync::Arc<crate::config::triggers::Trigger>>,
    /// The gateway's own files (keys, config, state): no client may read them through a project.
    pub protected: ProtectedPaths,
    /// `[[box]]`: machines reached over SSH.
    pub boxes: Vec<BoxConfig>,
    /// `[budget]`'s limit on one user's spend per UTC day, across projects (the other limits
    /// are each project's, in [`Project::budget`]).
    pub user_day_usd: Option<f64>,
    /// `[fleet]`: the caps on busy sessions and waiting reviews (issue 41, item 5).
    pub fleet: Fleet,
    /// `[push] allow_private_endpoints`: push endpoints may be private or loopback addresses.
    pub push_private_endpoints: bool,
    /// `[store] url`: the state database on PostgreSQL (it may hold a password); `None`: SQLite in
    /// `state_dir`.
    pub store_url: Option<crate::config::Secret>,
}

/// A project's spending limits (`[budget]`, then its own `budget = { … }`), in US dollars as
/// OpenCode reports cost. `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Budget {
    /// One session's total, its subagents' sessions included.
    pub session_usd: Option<f64>,
    /// The project's spend per UTC day.
    pub project_day_usd: Option<f64>,
    pub on_exceed: OnExceed,
    /// The share of a limit at which to warn.
    pub warn_at: f64,
    /// A session that fails the same way this many times in a row is a runaway (`None`: never).
    pub same_failure: Option<u32>,
    /// A session busy this long (milliseconds) without a word from the model is a runaway.
    pub max_busy_ms: Option<u64>,
    /// What a runaway gets: stopped (`abort`) or only reported (`notify`).
    pub on_runaway: OnExceed,
    /// What one turn is reserved at before the project's largest turn is known (USD): a prompt
    /// reserves the larger of the two until its turn ends (`budget/meter/turns.rs`).
    pub turn_usd: Option<f64>,
}

impl Budget {
    pub fn any(&self) -> bool {
        self.session_usd.is_some() || self.project_day_usd.is_some()
    }

    /// Whether the runaway guard watches this project's sessions.
    pub fn watches_runaways(&self) -> bool {
        self.same_failure.is_some() || self.max_busy_ms.is_some()
    }
}

/// What an exhausted budget does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnExceed {
    /// Refuse new prompts (and stop a session that crosses its limit).
    #[default]
    Abort,
    /// Let them through, and say so.
    Notify,
}

/// A machine whose OpenCode servers the gateway reaches over SSH (`[[box]]`), as validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxConfig {
    pub name: String,
    pub user: String,
    /// `host:port` of its SSH server.
    pub address: String,
    /// The gateway's client key: an OpenSSH private key file, owner-only.
    pub key: PathBuf,
    /// The box's host keys, each an OpenSSH public key (`ssh-ed25519 AAAA…`): `host_key`, or the
    /// box's entries in a `known_hosts` file (read at each load). It may present no other.
    pub host_keys: Vec<String>,
    /// Keys the `known_hosts` file's `@revoked` lines name (none with `host_key`): never in
    /// `host_keys`; a box that presents one is refused, saying it is revoked.
    pub revoked_host_keys: Vec<String>,
    /// The `opencode` a spawned project runs on the box: a path, or a name on its PATH.
    pub opencode: String,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    pub base_domain: Option<String>,
    pub public_url: String,
    pub state_dir: PathBuf,
    /// Browser origins allowed besides the gateway's own (for WebSocket upgrades and writes).
    pub allowed_origins: Vec<String>,
    pub trusted_proxies: Vec<Cidr>,
    /// The `opencode` executable for spawned projects; `None` means search PATH and node_modules.
    pub opencode_bin: Option<PathBuf>,
    /// `http_listen`: plain HTTP for ACME HTTP-01 and redirects to HTTPS.
    pub http_listen: Option<SocketAddr>,
    /// How log lines are written (`serve --log-format` overrides it); read at start only.
    pub log_format: crate::support::telemetry::LogFormat,
    /// `users_file`: where users made by the gateway and the CLI are written.
    pub users_file: Option<PathBuf>,
    /// Every user may act as the gateway's own OS user: spawned projects without `run_as` are
    /// allowed with more than one user (said by `check`).
    pub allow_projects_as_gateway_user: bool,
}

#[derive(Debug, Clone)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub dev_ca: bool,
    /// `[tls] dev_names`: names and addresses the dev certificate covers besides the gateway's own.
    pub dev_names: Vec<String>,
    /// `[tls] acme`: obtain and renew `cert`/`key` from an ACME CA (RFC 8555).
    pub acme: Option<Acme>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acme {
    /// The directory URL (https://).
    pub directory: String,
    pub email: Option<String>,
    pub ca_bundle: Option<PathBuf>,
    /// `state_dir/acme`: the account credentials and the issued pair (0700, files 0600).
    pub dir: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Ssh {
    pub listen: SocketAddr,
    pub host_key: PathBuf,
    pub password_auth: bool,
}

#[derive(Debug, Clone)]
pub struct Admin {
    pub listen: SocketAddr,
}

/// `[notify]`, validated: at least one receiver; `http://` only to loopback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// POST JSON `{"project","tool","kind","count","projects","url"}`.
    pub webhook: Option<String>,
    /// An ntfy topic URL: POST text with `Title` and `Click` headers.
    pub ntfy: Option<String>,
    /// Requests arriving within this window after the first go out as one message.
    pub debounce: std::time::Duration,
}

/// `[oidc]`, validated: the issuer is `https://` (or `http://` to loopback), the secret loaded.
#[derive(Debug, Clone)]
pub struct Oidc {
    /// Exactly as the provider writes `iss` (no trailing slash added or removed).
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Secret,
    pub match_on: OidcMatch,
    /// The button's text after "Sign in with ".
    pub label: String,
    /// Always holds `openid`.
    pub scopes: Vec<String>,
    /// Files holding the client secret (`client_secret_file`), for the protected paths.
    pub secret_file: Option<PathBuf>,
    /// Origins (`https://host[:port]`) besides the issuer's that discovery may name for the
    /// authorization, token and key endpoints.
    pub endpoint_origins: Vec<String>,
}

/// Which ID token claim names the person (`[[user]] oidc = …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OidcMatch {
    /// `sub`: the provider's stable subject identifier.
    Subject,
    /// `email`, only with `email_verified = true`.
    Email,
}

pub(crate) use super::limits::Limits;

#[derive(Debug, Clone)]
pub struct Project {
    pub name: String,
    pub upstream: UpstreamKind,
    pub upstream_username: String,
    pub upstream_password: Option<Secret>,
    /// Canonical absolute path: the one directory clients of this project may select.
    pub directory: Option<PathBuf>,
    pub start: StartMode,
    /// Whose OpenCode configuration and credentials a spawned server uses.
    pub opencode_config: OpencodeConfig,
    /// Extra environment for a spawned server (values may be provider keys: never printed).
    pub env: BTreeMap<String, Secret>,
    pub run_as: Option<String>,
    /// A listener of its own (for browsers on LANs without wildcard DNS).
    pub listen: Option<SocketAddr>,
    /// Files holding this project's secrets (`upstream_password_file`, `env_file`), by key.
    pub secret_files: Vec<(String, PathBuf)>,
    /// The set (its `name`) this project was discovered from; `None` for a configured project.
    pub set: Option<String>,
    /// The `[[box]]` its server runs on; `None`: this machine.
    pub on_box: Option<String>,
    /// Its spending limits.
    pub budget: Budget,
    /// Its acceptance test (`accept`, issue 41).
    pub accept: Option<AcceptTest>,
}

/// `accept = "npm test"`: what the gateway runs in a project's folder when a session goes idle
/// with changes, and for how long at most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptTest {
    pub command: String,
    pub timeout: std::time::Duration,
}

/// `directories = "/srv/app/.worktrees/*"`: every folder of `parent` whose name starts with
/// `prefix` is a project named `<name>-<folder>`, with the template's settings.
#[derive(Debug, Clone)]
pub struct ProjectSet {
    pub name: String,
    /// Canonical absolute path of the folder holding the matches.
    pub parent: PathBuf,
    /// What a folder's name must start with (empty for `*`).
    pub prefix: String,
    /// The set's settings; its `directory` is `None` and `name` is the set's name.
    pub template: Project,
    /// Where its tasks' worktrees come from (issue 41).
    pub tasks: TaskSettings,
}

/// A project set's task settings (`config/validate/tasks.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskSettings {
    /// The main checkout `git worktree add` runs in; `None`: the set makes no tasks.
    pub repository: Option<PathBuf>,
    /// Paths relative to the checkout, copied into a new task's worktree.
    pub worktree_files: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamKind {
    /// An OpenCode server the operator runs: `http://<loopback>:<port>`.
    External { authority: String },
    /// The gateway runs `opencode serve` itself.
    Spawned,
}

/// `opencode_config`: what a spawned server sees of OpenCode's own setup. Its session database
/// and temporary folder are its own either way (under the project's state folder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpencodeConfig {
    /// The configuration, providers, agents and `opencode auth login` credentials of the OS user
    /// the server runs as (the gateway's own user, `run_as`'s, or the box's SSH user), as plain
    /// `opencode` in that folder would use them.
    #[default]
    User,
    /// Empty configuration folders of its own (the model comes from `env`, e.g.
    /// `OPENCODE_CONFIG_CONTENT`, or from the project's `opencode.json`).
    Private,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    Eager,
    OnDemand,
}

#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    /// The argon2id hash, parsed at load, and its PHC text (whose digest keys the auth cache).
    pub password_hash: Option<(PasswordHash, String)>,
    pub ssh_keys: Vec<russh::keys::PublicKey>,
    /// `oidc = "alice@example.com"`: the identity single sign-on maps to this user.
    pub oidc: Option<String>,
    pub grants: Grants,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grants {
    /// `projects = ["*"]`: every project, with one role.
    All(Role),
    /// Named projects, each with its role.
    Each(BTreeMap<String, Role>),
}

impl Grants {
    /// The user's role in `project`, or `None` when the project is not granted.
    pub fn role_in(&self, project: &str) -> Option<Role> {
        match self {
            Grants::All(role) => Some(*role),
            Grants::Each(map) => map.get(project).copied().or_else(|| {
                // `app-*`: every project whose name starts with `app-`; the highest role wins.
                map.iter()
                    .filter(|(p, _)| p.strip_suffix('*').is_some_and(|prefix| project.starts_with(prefix)))
                    .map(|(_, r)| *r)
                    .max()
            }),
        }
    }
}

/// Roles in increasing power; each can do everything the ones before it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Viewer,
    Approver,
    Operator,
    Admin,
}

impl Role {
    pub(crate) fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "approver" => Some(Role::Approver),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Approver => "approver",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// An address range such as `10.0.0.0/8` (for `trusted_proxies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub(crate) fn parse(s: &str) -> Option<Cidr> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, p.parse::<u8>().ok()?),
            None => {
                let a = s.parse::<IpAddr>().ok()?;
                (a, if a.is_ipv4() { 32 } else { 128 })
            }
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_matches_its_range_only() {
        let net = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(!net.contains("::1".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("192.168.1.1".parse().unwrap()));
        let one = Cidr::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(Cidr::parse("nonsense").is_none());
    }

    #[test]
    fn grants_name_a_role_per_project() {
        let all = Grants::All(Role::Viewer);
        assert_eq!(all.role_in("x"), Some(Role::Viewer));
        let each = Grants::Each([("web".to_string(), Role::Operator)].into());
        assert_eq!(each.role_in("web"), Some(Role::Operator));
        assert_eq!(each.role_in("api"), None);
        assert!(Role::Admin > Role::Operator && Role::Approver > Role::Viewer);
    }

    #[test]
    fn a_trailing_star_grants_every_project_with_that_prefix() {
        let g = Grants::Each(
            [
                ("app-*".to_string(), Role::Viewer),
                ("app-main".to_string(), Role::Approver),
                ("app-x*".to_string(), Role::Operator),
            ]
            .into(),
        );
        assert_eq!(g.role_in("app-feature"), Some(Role::Viewer));
        assert_eq!(g.role_in("app-main"), Some(Role::Approver), "an exact grant wins");
        assert_eq!(
            g.role_in("app-xy"),
            Some(Role::Operator),
            "the highest matching pattern wins"
        );
        assert_eq!(g.role_in("apple"), None);
        assert_eq!(g.role_in("web"), None);
    }
}

/// Where and how much: `[audit]` validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    pub file: PathBuf,
    /// Rotate before a line would take the file past this size.
    pub max_bytes: u64,
    /// Rotated files kept (`audit.jsonl.1` … `.keep`); 0 keeps none.
    pub keep: u32,
}

/// The methods a route may have (the document's other operations are not routes a client uses).
pub(crate) const ROUTE_METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// One `[[route_role]]` entry, validated: method upper case (one of [`ROUTE_METHODS`]), pattern as
/// the route table writes it (names lower case), the role it grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRoleEntry {
    pub method: String,
    pub pattern: String,
    pub role: Role,
}

impl Settings {
    /// Every listener the config asks for, by its key (`server.listen`, `project <name> listen`,
    /// …): what `doctor` checks and a reload compares (they are bound at start only).
    pub(crate) fn listeners(&self) -> Vec<(String, std::net::SocketAddr)> {
        let s = self;
        let mut all = vec![("server.listen".to_string(), s.server.listen)];
        all.extend(s.server.http_listen.map(|a| ("server.http_listen".to_string(), a)));
        all.extend(s.admin.as_ref().map(|a| ("admin.listen".to_string(), a.listen)));
        all.extend(s.ssh.as_ref().map(|a| ("ssh.listen".to_string(), a.listen)));
        all.extend(
            s.projects
                .iter()
                .filter_map(|p| Some((format!("project {} listen", p.name), p.listen?))),
        );
        all
    }

    /// Every path the gateway keeps private, from settings the config boundary has validated.
    pub(crate) fn protected_paths(&self) -> ProtectedPaths {
        let s = self;
        let mut p = ProtectedPaths::default();
        p.add("config file", &s.path, false);
        if let Some(users) = &s.server.users_file {
            p.add("server.users_file", users, false);
        }
        p.add("tls.key", &s.tls.key, false);
        p.add("tls.cert", &s.tls.cert, false);
        if s.tls.dev_ca {
            let dev = super::protected::DevCertPaths::beside(&s.tls.cert, &s.tls.key);
            p.add("tls.dev_ca (CA key)", &dev.ca_key, false);
            p.add("tls.dev_ca (CA certificate)", &dev.ca_cert, false);
        }
        if let Some(ssh) = &s.ssh {
            p.add("ssh.host_key", &ssh.host_key, false);
        }
        p.add("server.state_dir", &s.server.state_dir, true);
        // Its folder: the rotations and the lock file sit beside it.
        if let Some(audit) = &s.audit
            && !audit.file.starts_with(&s.server.state_dir)
            && let Some(dir) = audit.file.parent()
        {
            p.add("audit.file", dir, true);
        }
        if let Some(file) = s.oidc.as_ref().and_then(|o| o.secret_file.as_ref()) {
            p.add("oidc.client_secret_file", file, false);
        }
        for b in &s.boxes {
            p.add(format!("box ({}).key", b.name), &b.key, false);
        }
        for t in &s.triggers {
            if let Some(file) = &t.secret_file {
                p.add(format!("trigger ({}) secret file", t.name), file, false);
            }
        }
        for project in s.projects.iter().chain(s.project_sets.iter().map(|set| &set.template)) {
            for (key, file) in &project.secret_files {
                p.add(key, file, false);
            }
        }
        p
    }
}

/// `[fleet]`: caps on how much runs at once (issue 41, item 5). `None`: no cap.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub max_busy_per_user: Option<usize>,
    pub max_busy_per_project: Option<usize>,
    pub max_waiting_reviews: Option<usize>,
    /// A prompt past a cap waits (`true`, up to `queue_wait`) or is refused.
    pub queue: bool,
    pub queue_wait: std::time::Duration,
}

impl Default for Fleet {
    fn default() -> Fleet {
        Fleet {
            max_busy_per_user: None,
            max_busy_per_project: None,
            max_waiting_reviews: None,
            queue: true,
            queue_wait: std::time::Duration::from_secs(1800),
        }
    }
}
