//! `[limits]`, defined once. Each limit is one line below: its name, its kind and its default. The
//! macro makes the raw serde table ([`RawLimits`], `deny_unknown_fields`, the defaults), the
//! validated [`Limits`] the gateway reads, and the check between them (numbers positive,
//! durations parsed), so a limit cannot have a default in one place and another elsewhere.
//! `config/gateway.example.toml` documents them; a test holds it to these defaults.

use std::time::Duration;

use serde::Deserialize;

use super::validate::checker::Checker;

/// Kinds: `count` (u32, positive), `size` (u32 in the file, usize in use, positive), `bytes`
/// (u64, at least 1), `duration` ("500ms", "10s", "5m", "1h"), `optional_count` (absent or positive),
/// `percent` (1 to 100).
macro_rules! define_limits {
    ($( $(#[doc = $doc:literal])* $name:ident : $kind:ident = $default:expr ; )*) => {
        /// Every limit as written, each with its default.
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub(crate) struct RawLimits {
            $( $(#[doc = $doc])* pub $name: raw_type!($kind), )*
        }

        impl Default for RawLimits {
            fn default() -> Self {
                Self { $( $name: raw_default!($kind, $default), )* }
            }
        }

        /// Every limit, checked.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Limits {
            $( $(#[doc = $doc])* pub $name: settings_type!($kind), )*
        }

        pub(super) fn validate(c: &mut Checker<'_>, l: &RawLimits) -> Limits {
            Limits { $( $name: check!($kind, c, stringify!($name), &l.$name), )* }
        }
    };
}

macro_rules! raw_type {
    (count) => { u32 };
    (size) => { u32 };
    (bytes) => { u64 };
    (duration) => { String };
    (optional_count) => { Option<u32> };
    (percent) => { u32 };
}

macro_rules! settings_type {
    (count) => { u32 };
    (size) => { usize };
    (bytes) => { u64 };
    (duration) => { Duration };
    (optional_count) => { Option<u32> };
    (percent) => { u32 };
}

macro_rules! raw_default {
    (duration, $d:expr) => {
        String::from($d)
    };
    ($kind:ident, $d:expr) => {
        $d
    };
}

macro_rules! check {
    (count, $c:expr, $key:expr, $v:expr) => {
        positive($c, $key, *$v)
    };
    (size, $c:expr, $key:expr, $v:expr) => {
        positive($c, $key, *$v) as usize
    };
    (bytes, $c:expr, $key:expr, $v:expr) => {
        (*$v).max(1)
    };
    (duration, $c:expr, $key:expr, $v:expr) => {
        $c.duration(&format!("limits.{}", $key), $v)
    };
    (optional_count, $c:expr, $key:expr, $v:expr) => {
        $v.map(|n| positive($c, $key, n))
    };
    (percent, $c:expr, $key:expr, $v:expr) => {
        percent($c, $key, *$v)
    };
}

fn positive(c: &mut Checker<'_>, key: &str, v: u32) -> u32 {
    if v == 0 {
        c.problem(
            format!("limits.{key}"),
            "0 would refuse everything",
            format!("remove limits.{key} to use the default, or give a positive number"),
        );
    }
    v
}

fn percent(c: &mut Checker<'_>, key: &str, v: u32) -> u32 {
    if !(1..=100).contains(&v) {
        c.problem(
            format!("limits.{key}"),
            format!("{v} is not a percentage from 1 to 100"),
            format!("give limits.{key} a whole number from 1 to 100, or remove it to use the default"),
        );
    }
    v
}

define_limits! {
    /// Per user, after authentication.
    requests_per_second: count = 50;
    burst: count = 200;
    /// Login attempts (argon2 runs) per client address, checked before any argon2 work.
    auth_failures_per_minute: count = 5;
    auth_failure_burst: count = 10;
    /// Per user name, from addresses that never logged in as it.
    user_failures_per_minute: count = 30;
    user_failure_burst: count = 30;
    max_connections_per_ip: count = 256;
    /// All HTTPS and SSH connections; absent means half the open-file limit (`listen::connection_cap`).
    max_connections: optional_count = None;
    /// The percentage of `max_connections` that HTTPS connections which have not yet presented a
    /// valid credential may hold (1 to 100); past it, or at the cap, the oldest idle one is shed.
    unauthenticated_connection_share: percent = 50;
    /// Concurrent SSE streams, terminals and SSH channels per user.
    max_streams_per_user: count = 64;
    max_ssh_channels_per_connection: count = 64;
    tls_handshake_timeout: duration = "10s";
    /// A request head must arrive within this; a connection with no request for this long closes.
    request_head_timeout: duration = "30s";
    body_idle_timeout: duration = "60s";
    upstream_connect_timeout: duration = "5s";
    /// To the response head (not applied to event streams).
    upstream_response_timeout: duration = "600s";
    drain_timeout: duration = "10s";
    auth_cache_ttl: duration = "1h";
    auth_cache_entries: size = 10_000;
    ssh_idle_timeout: duration = "1h";
    /// From accept to a successful login: banner, key exchange and authentication together.
    ssh_login_timeout: duration = "30s";
    /// Request line and headers.
    max_head_bytes: size = 64 * 1024;
    max_headers: size = 100;
    max_uri_bytes: size = 8 * 1024;
    max_body_bytes: bytes = 64 * 1024 * 1024;
    /// Webhook deliveries' bodies held at once while they arrive, unsigned yet: in all, and per
    /// client address (a delivery past either is refused before its body is read).
    hook_body_bytes: bytes = 32 * 1024 * 1024;
    hook_body_bytes_per_ip: bytes = 8 * 1024 * 1024;
    /// A webhook delivery's whole body must arrive within this.
    hook_body_timeout: duration = "30s";
    /// A request waiting for a spawned server to start.
    spawn_ready_timeout: duration = "30s";
    /// How long a project host's single-use login handoff ticket lasts (a browser follows it at once).
    handoff_ttl: duration = "60s";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example config documents every limit with its default: parsing its `[limits]` gives
    /// exactly the defaults, and it names every key.
    #[test]
    fn the_example_config_shows_every_default() {
        let example =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.example.toml")).unwrap();
        let table = example
            .split("\n[limits]\n")
            .nth(1)
            .unwrap()
            .split("\n[")
            .next()
            .unwrap();
        let raw: RawLimits = toml::from_str(table).unwrap();
        let defaults = RawLimits::default();
        assert_eq!(format!("{raw:?}"), format!("{defaults:?}"));
        let documented: String = format!("{defaults:?}");
        for key in documented
            .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .filter(|k| k.contains('_'))
        {
            assert!(
                table.contains(key),
                "limits.{key} is not in config/gateway.example.toml"
            );
        }
    }

    #[test]
    fn a_share_that_is_not_a_percentage_is_refused_with_the_key_and_the_fix() {
        let config = |share: u32| {
            format!(
                "[server]\nlisten=\"127.0.0.1:0\"\n[tls]\ncert=\"c\"\nkey=\"k\"\ndev_ca=true\n[limits]\nunauthenticated_connection_share={share}\n"
            )
        };
        let path = std::path::Path::new("/tmp/x.toml");
        for bad in [0, 101] {
            let e = crate::config::parse(&config(bad), path).unwrap_err().to_string();
            assert!(e.contains("limits.unauthenticated_connection_share"), "{e}");
            assert!(e.contains(&format!("{bad} is not a percentage from 1 to 100")), "{e}");
            assert!(e.contains("a whole number from 1 to 100"), "{e}");
        }
        let ok = crate::config::parse(&config(100), path).unwrap();
        assert_eq!(ok.limits.unauthenticated_connection_share, 100);
    }
}
