//! `[limits]`: every number positive, every duration parsed.

use super::Checker;
use crate::config::file::RawLimits;
use crate::config::settings::Limits;

pub(super) fn limits(c: &mut Checker<'_>, l: &RawLimits) -> Limits {
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
        max_connections: l.max_connections.map(|n| positive(c, "max_connections", n)),
        max_streams_per_user: positive(c, "max_streams_per_user", l.max_streams_per_user),
        max_ssh_channels_per_connection: positive(
            c,
            "max_ssh_channels_per_connection",
            l.max_ssh_channels_per_connection,
        ),
        tls_handshake_timeout: c.duration("limits.tls_handshake_timeout", &l.tls_handshake_timeout),
        request_head_timeout: c.duration("limits.request_head_timeout", &l.request_head_timeout),
        body_idle_timeout: c.duration("limits.body_idle_timeout", &l.body_idle_timeout),
        upstream_connect_timeout: c.duration("limits.upstream_connect_timeout", &l.upstream_connect_timeout),
        upstream_response_timeout: c.duration("limits.upstream_response_timeout", &l.upstream_response_timeout),
        drain_timeout: c.duration("limits.drain_timeout", &l.drain_timeout),
        auth_cache_ttl: c.duration("limits.auth_cache_ttl", &l.auth_cache_ttl),
        auth_cache_entries: positive(c, "auth_cache_entries", l.auth_cache_entries) as usize,
        ssh_idle_timeout: c.duration("limits.ssh_idle_timeout", &l.ssh_idle_timeout),
        ssh_login_timeout: c.duration("limits.ssh_login_timeout", &l.ssh_login_timeout),
        max_head_bytes: positive(c, "max_head_bytes", l.max_head_bytes) as usize,
        max_headers: positive(c, "max_headers", l.max_headers) as usize,
        max_uri_bytes: positive(c, "max_uri_bytes", l.max_uri_bytes) as usize,
        max_body_bytes: l.max_body_bytes.max(1),
        spawn_ready_timeout: c.duration("limits.spawn_ready_timeout", &l.spawn_ready_timeout),
    }
}
