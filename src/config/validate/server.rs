//! `[server]`: the addresses the gateway listens on and names itself by, its folders, and who may
//! call it from where.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use super::checker::Checker;
use crate::config::file::RawServer;
use crate::config::settings::{Cidr, Server};

pub(super) fn server(c: &mut Checker<'_>, s: &RawServer) -> Server {
    let listen = c.socket_addr("server.listen", &s.listen);
    let log_format = match s.log_format.as_deref() {
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
    Server {
        // An unreadable address is a problem already, so settings holding this one are never used.
        listen: listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0))),
        base_domain: base_domain(c, s.base_domain.as_deref()),
        public_url: public_url(c, s.public_url.as_deref(), listen),
        state_dir: match &s.state_dir {
            Some(d) => c.path(d),
            None => default_state_dir(),
        },
        allowed_origins: allowed_origins(c, &s.allowed_origins),
        trusted_proxies: trusted_proxies(c, &s.trusted_proxies),
        log_format,
        users_file: s.users_file.as_deref().map(|f| c.path(f)),
        allow_projects_as_gateway_user: s.allow_projects_as_gateway_user,
        opencode_bin: s
            .opencode_bin
            .as_deref()
            .map(|b| if b.contains('/') { c.path(b) } else { PathBuf::from(b) }),
        http_listen: s
            .http_listen
            .as_deref()
            .and_then(|l| c.socket_addr("server.http_listen", l)),
    }
}

fn base_domain(c: &mut Checker<'_>, raw: Option<&str>) -> Option<String> {
    let d = raw?.trim_matches('.').to_ascii_lowercase();
    if d.is_empty() || !d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-') {
        c.problem(
            "server.base_domain",
            format!("{d:?} is not a domain name"),
            "write base_domain = \"gw.localhost\" (projects are served at <project>.<base_domain>)",
        );
    }
    Some(d)
}

fn public_url(c: &mut Checker<'_>, raw: Option<&str>, listen: Option<SocketAddr>) -> String {
    let public_url = match (raw, listen) {
        (Some(u), _) => u.trim_end_matches('/').to_string(),
        // Listening on every address: the address another device on this network can use (a
        // phone cannot resolve a bare host name; see `lan_address`).
        (None, Some(a)) if a.ip().is_unspecified() => match lan_address() {
            Some(IpAddr::V6(v6)) => format!("https://[{v6}]:{}", a.port()),
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
    public_url
}

/// Each entry of the list at `key` read by `read`; one that does not read is a problem.
fn each<T>(
    c: &mut Checker<'_>,
    key: &str,
    raw: &[String],
    read: impl Fn(&str) -> Option<T>,
    not: &str,
    fix: &str,
) -> Vec<T> {
    let mut out = Vec::new();
    for (i, v) in raw.iter().enumerate() {
        match read(v) {
            Some(t) => out.push(t),
            None => c.problem(format!("{key}[{i}]"), format!("{v:?} is not {not}"), fix),
        }
    }
    out
}

fn allowed_origins(c: &mut Checker<'_>, raw: &[String]) -> Vec<String> {
    let origin = |o: &str| {
        let o = o.trim_end_matches('/');
        (o.starts_with("https://") || o.starts_with("http://")).then(|| o.to_ascii_lowercase())
    };
    let fix = "write an origin such as \"https://phone.example:8443\" (scheme, host, optional port)";
    each(c, "server.allowed_origins", raw, origin, "an origin", fix)
}

fn trusted_proxies(c: &mut Checker<'_>, raw: &[String]) -> Vec<Cidr> {
    let fix = "write a CIDR such as \"10.0.0.0/8\" or a single address";
    each(c, "server.trusted_proxies", raw, Cidr::parse, "an address range", fix)
}

/// The LAN address to print for a gateway listening on every address: a private IPv4 address
/// (RFC 1918: the home or office network) first, then any other IPv4, then IPv6. Read when the
/// config is loaded, so a DHCP change is picked up by the next reload or start.
fn lan_address() -> Option<IpAddr> {
    let all = crate::support::host::lan_addresses();
    let private = |ip: &IpAddr| matches!(ip, IpAddr::V4(v4) if v4.is_private());
    all.iter()
        .find(|ip| private(ip))
        .or_else(|| all.iter().find(|ip| ip.is_ipv4()))
        .or_else(|| all.first())
        .copied()
}

fn default_state_dir() -> PathBuf {
    crate::config::state_home().unwrap_or_else(|| PathBuf::from(".gateway-state"))
}
