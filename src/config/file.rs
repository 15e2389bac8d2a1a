//! The configuration file as written: raw serde types, no validation beyond shape.
//!
//! Every table denies unknown keys so a typo is an error, not a silently ignored setting.
//! [`super::validate`] turns this into [`super::Settings`]; nothing else reads these types.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub server: RawServer,
    pub tls: RawTls,
    pub ssh: Option<RawSsh>,
    pub admin: Option<RawAdmin>,
    pub notify: Option<RawNotify>,
    pub audit: Option<RawAudit>,
    pub oidc: Option<RawOidc>,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub project: Vec<RawProject>,
    #[serde(default)]
    pub user: Vec<RawUser>,
    #[serde(default)]
    pub route_role: Vec<RawRouteRole>,
    /// `[[policy]]`: named permission policies a token may carry.
    #[serde(default)]
    pub policy: Vec<RawPolicy>,
    /// `[[trigger]]`: signed webhooks that start a turn (`config/triggers.rs`).
    #[serde(default)]
    pub trigger: Vec<RawTrigger>,
    /// `[[box]]`: other machines whose OpenCode servers the gateway reaches over SSH.
    #[serde(default, rename = "box")]
    pub boxes: Vec<RawBox>,
    /// `[budget]`: spending limits for every project (each may override some).
    pub budget: Option<RawBudget>,
    /// `[push]`: Web Push to the control room's devices.
    pub push: Option<RawPush>,
    /// `[store]`: where the state database is (default: SQLite in `state_dir`).
    pub store: Option<RawStore>,
    /// `[fleet]`: how many sessions may be busy at once, and tasks wait for review (issue 41).
    pub fleet: Option<RawFleet>,
    /// How many of `user` this file itself holds (the rest came from `server.users_file`):
    /// whether this file holds password hashes, for its mode warning.
    #[serde(skip)]
    pub own_users: usize,
}

/// `[fleet]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFleet {
    pub max_busy_per_user: Option<i64>,
    pub max_busy_per_project: Option<i64>,
    pub max_waiting_reviews: Option<i64>,
    /// `"queue"` (default) or `"refuse"`.
    pub over_cap: Option<String>,
    pub queue_wait: Option<String>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    /// `postgres://user:password@host/database?sslmode=require`: a PostgreSQL database replicas share.
    pub url: Option<String>,
}

/// `[push]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPush {
    /// Push endpoints on private or loopback addresses (tests, a push service on the LAN).
    pub allow_private_endpoints: Option<bool>,
}

/// `[budget]`, and a project's `budget = { … }`: US dollars as OpenCode reports its cost.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudget {
    pub session_usd: Option<f64>,
    pub project_day_usd: Option<f64>,
    pub user_day_usd: Option<f64>,
    pub on_exceed: Option<String>,
    pub warn_at: Option<f64>,
    pub same_failure: Option<i64>,
    pub max_busy_minutes: Option<f64>,
    pub on_runaway: Option<String>,
    pub turn_usd: Option<f64>,
}

/// `[[box]]`: a machine reached over SSH (`ssh = "user@host:port"`), its host key pinned.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBox {
    pub name: String,
    pub ssh: String,
    /// The gateway's client key (OpenSSH private key file, 0600).
    pub key: String,
    /// The box's host key as an OpenSSH public key line (`ssh-ed25519 AAAA…`).
    pub host_key: Option<String>,
    pub known_hosts: Option<String>,
    /// The `opencode` to run on the box for `spawn = true` projects (default: `opencode` on the
    /// box user's PATH).
    pub opencode: Option<String>,
}

/// `[[policy]]`: a named permission policy (`config/permissions.rs`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub name: String,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    pub otherwise: Option<String>,
    pub ask_timeout: Option<String>,
}

/// `[[trigger]]`: a signed webhook (or, later, a schedule) that starts a turn.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTrigger {
    pub name: String,
    pub project: String,
    pub github_secret_env: Option<String>,
    pub github_secret_file: Option<String>,
    pub hmac_secret_env: Option<String>,
    pub hmac_secret_file: Option<String>,
    pub schedule: Option<String>,
    /// The schedule's time zone: `UTC` (default) or a fixed offset (`+02:00`).
    pub time_zone: Option<String>,
    pub replay_window: Option<String>,
    #[serde(default)]
    pub events: Vec<String>,
    pub prompt: String,
    pub session: Option<String>,
    pub policy: String,
    pub run_as_user: String,
    /// Bytes (`262144`).
    pub max_body: Option<u64>,
}

/// `[[route_role]]`: the least role for one OpenCode route, instead of the table's or the default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouteRole {
    pub method: String,
    pub path: String,
    pub role: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub listen: String,
    pub base_domain: Option<String>,
    pub public_url: Option<String>,
    pub state_dir: Option<String>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    pub opencode_bin: Option<String>,
    /// A plain-HTTP listener: ACME HTTP-01 answers, everything else a redirect to HTTPS.
    pub http_listen: Option<String>,
    pub log_format: Option<String>,
    /// A second file of `[[user]]` tables (relative to the config), for users made by the gateway
    /// and the CLI, so a config kept in git stays as committed.
    pub users_file: Option<String>,
    /// Spawned projects without `run_as` may run as the gateway's own OS user even with more
    /// than one user (`config/validate/os_users.rs`).
    #[serde(default)]
    pub allow_projects_as_gateway_user: bool,
}

/// The users file: `[[user]]` tables only.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUsers {
    #[serde(default)]
    pub user: Vec<RawUser>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    /// Required unless `acme` is set (then the issued pair lives under `state_dir/acme/`).
    pub cert: Option<String>,
    pub key: Option<String>,
    #[serde(default)]
    pub dev_ca: bool,
    /// More names (DNS names or IP addresses) for the dev certificate, e.g. a LAN address.
    #[serde(default)]
    pub dev_names: Vec<String>,
    pub acme: Option<RawAcme>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAcme {
    pub directory: String,
    pub email: Option<String>,
    /// PEM roots to trust the ACME server with, instead of the system's (a test CA such as pebble).
    pub ca_bundle: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSsh {
    pub listen: String,
    pub host_key: String,
    #[serde(default = "default_true")]
    pub password_auth: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmin {
    pub listen: String,
}

/// `[notify]`: where to announce new pending requests.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNotify {
    pub webhook: Option<String>,
    pub ntfy: Option<String>,
    pub debounce: Option<String>,
}

/// `[audit]`: the audit trail's file and rotation (on unless `enabled = false`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAudit {
    #[serde(default = "default_true")]
    pub enabled: bool,
    pub file: Option<String>,
    pub max_bytes: Option<u64>,
    pub keep: Option<u32>,
}

/// `[oidc]`: single sign-on through an OpenID Provider.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOidc {
    pub issuer: String,
    pub client_id: String,
    pub client_secret_env: Option<String>,
    pub client_secret_file: Option<String>,
    #[serde(rename = "match")]
    pub match_on: Option<String>,
    pub label: Option<String>,
    pub scopes: Option<Vec<String>>,
    /// Origins other than the issuer's that discovery may name for its endpoints.
    pub endpoint_origins: Option<Vec<String>>,
}

pub(crate) use super::limits::RawLimits;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProject {
    pub name: String,
    pub upstream: Option<String>,
    pub upstream_username: Option<String>,
    pub upstream_password_env: Option<String>,
    pub upstream_password_file: Option<String>,
    pub directory: Option<String>,
    /// A set of projects, one per folder matching `<dir>/*` or `<dir>/<prefix>*` (worktrees).
    pub directories: Option<String>,
    #[serde(default)]
    pub spawn: bool,
    pub start: Option<String>,
    /// Whose OpenCode setup a spawned server uses: "user" (the default) or "private".
    pub opencode_config: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub env_file: Option<String>,
    pub run_as: Option<String>,
    pub listen: Option<String>,
    /// The `[[box]]` its server runs on (`upstream` is then as the box sees it).
    #[serde(rename = "box")]
    pub on_box: Option<String>,
    /// This project's own limits, over `[budget]`'s.
    pub budget: Option<RawBudget>,
    /// A set's checkout, where tasks' worktrees are made (issue 41).
    pub repository: Option<String>,
    /// What a task's new worktree gets from the checkout (issue 41).
    pub worktree_files: Option<Vec<String>>,
    /// The acceptance test run when a session goes idle with changes (issue 41).
    pub accept: Option<String>,
    pub accept_timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUser {
    pub name: String,
    pub password_hash: Option<String>,
    /// The identity an OpenID Provider vouches for (an email or a subject, per `oidc.match`).
    pub oidc: Option<String>,
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    #[serde(default)]
    pub projects: RawGrants,
    pub role: Option<String>,
}

/// `projects = ["web", "api"]` (with the user's `role`) or `projects = { web = "operator" }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawGrants {
    List(Vec<String>),
    Map(BTreeMap<String, String>),
}

impl Default for RawGrants {
    fn default() -> Self {
        RawGrants::List(Vec::new())
    }
}

fn default_true() -> bool {
    true
}
