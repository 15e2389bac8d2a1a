//! The configuration file as written: raw serde types, no validation beyond shape.
//!
//! Every table denies unknown keys so a typo is an error, not a silently ignored setting.
//! [`super::validate`] turns this into [`super::Settings`]; nothing else reads these types.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub server: RawServer,
    pub tls: RawTls,
    pub ssh: Option<RawSsh>,
    pub admin: Option<RawAdmin>,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub project: Vec<RawProject>,
    #[serde(default)]
    pub user: Vec<RawUser>,
    #[serde(default)]
    pub route_role: Vec<RawRouteRole>,
}

/// `[[route_role]]`: the least role for one OpenCode route, instead of the table's or the default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteRole {
    pub method: String,
    pub path: String,
    pub role: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: String,
    pub base_domain: Option<String>,
    pub public_url: Option<String>,
    pub state_dir: Option<String>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    pub opencode_bin: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: String,
    pub key: String,
    #[serde(default)]
    pub dev_ca: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSsh {
    pub listen: String,
    pub host_key: String,
    #[serde(default = "default_true")]
    pub password_auth: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: String,
}

/// Every limit, with its default. Durations are strings such as `"500ms"`, `"10s"`, `"5m"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLimits {
    pub requests_per_second: u32,
    pub burst: u32,
    pub auth_failures_per_minute: u32,
    pub auth_failure_burst: u32,
    pub user_failures_per_minute: u32,
    pub user_failure_burst: u32,
    pub max_connections_per_ip: u32,
    pub max_streams_per_user: u32,
    pub max_ssh_channels_per_connection: u32,
    pub tls_handshake_timeout: String,
    pub request_head_timeout: String,
    pub body_idle_timeout: String,
    pub upstream_connect_timeout: String,
    pub upstream_response_timeout: String,
    pub drain_timeout: String,
    pub auth_cache_ttl: String,
    pub auth_cache_entries: u32,
    pub ssh_idle_timeout: String,
    pub max_head_bytes: u32,
    pub max_headers: u32,
    pub max_uri_bytes: u32,
    pub max_body_bytes: u64,
    pub spawn_ready_timeout: String,
}

impl Default for RawLimits {
    fn default() -> Self {
        Self {
            requests_per_second: 50,
            burst: 200,
            auth_failures_per_minute: 5,
            auth_failure_burst: 10,
            user_failures_per_minute: 30,
            user_failure_burst: 30,
            max_connections_per_ip: 256,
            max_streams_per_user: 64,
            max_ssh_channels_per_connection: 64,
            tls_handshake_timeout: "10s".into(),
            request_head_timeout: "30s".into(),
            body_idle_timeout: "60s".into(),
            upstream_connect_timeout: "5s".into(),
            upstream_response_timeout: "600s".into(),
            drain_timeout: "10s".into(),
            auth_cache_ttl: "1h".into(),
            auth_cache_entries: 10_000,
            ssh_idle_timeout: "1h".into(),
            max_head_bytes: 64 * 1024,
            max_headers: 100,
            max_uri_bytes: 8 * 1024,
            max_body_bytes: 64 * 1024 * 1024,
            spawn_ready_timeout: "30s".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProject {
    pub name: String,
    pub upstream: Option<String>,
    pub upstream_username: Option<String>,
    pub upstream_password_env: Option<String>,
    pub upstream_password_file: Option<String>,
    pub directory: Option<String>,
    #[serde(default)]
    pub spawn: bool,
    pub start: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub env_file: Option<String>,
    pub run_as: Option<String>,
    pub listen: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUser {
    pub name: String,
    pub password_hash: Option<String>,
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    #[serde(default)]
    pub projects: RawGrants,
    pub role: Option<String>,
}

/// `projects = ["web", "api"]` (with the user's `role`) or `projects = { web = "operator" }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawGrants {
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
