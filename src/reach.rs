//! Where a project is reachable: the one place that spells the gateway's URL, a project's path
//! and web-UI host, and the SSH forward, for `init`, `serve`, `check` and the spawned servers'
//! allowed origins. The port clients use is the one in `public_url` (a port of 0 becomes the
//! bound port); 443, HTTPS's default, is left out as browsers leave it out of an origin.

use std::net::SocketAddr;

use crate::config::Settings;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reach {
    /// `https://host[:port]`, no trailing slash.
    base: String,
    port: u16,
    base_domain: Option<String>,
    /// Projects served on their own port (port mode, `web/front.rs`), with the bound port.
    own_ports: Vec<(String, u16)>,
    /// This machine's `<host>.local` when the served certificate covers it ([`named_host`]).
    named: Option<String>,
}

impl Reach {
    /// From validated settings; `bound` is the HTTPS port actually bound (when `listen` said 0).
    pub(crate) fn new(settings: &Settings, bound: Option<u16>) -> Reach {
        let mut r = Reach::from_parts(
            &settings.server.public_url,
            settings.server.base_domain.as_deref(),
            bound,
        );
        // Projects' own ports as configured (a port of 0 is known only once bound: `bound`).
        r.own_ports = settings
            .projects
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.listen?.port())))
            .filter(|(_, port)| *port != 0)
            .collect();
        r
    }

    pub(crate) fn from_parts(public_url: &str, base_domain: Option<&str>, bound: Option<u16>) -> Reach {
        let rest = public_url.strip_prefix("https://").unwrap_or(public_url);
        let authority = rest.split('/').next().unwrap_or_default();
        let path = rest[authority.len()..].trim_end_matches('/');
        let (host, port) = split_host_port(authority);
        let port = match (port, bound) {
            (Some(0), Some(b)) => b,
            (Some(p), _) => p,
            (None, _) => 443,
        };
        Reach {
            base: format!("https://{host}{}{path}", port_part(port)),
            port,
            base_domain: base_domain.map(str::to_string),
            own_ports: Vec::new(),
            named: None,
        }
    }

    /// From validated settings and the ports bound at start (main and projects' own).
    pub(crate) fn bound(settings: &Settings, ports: &BoundPorts) -> Reach {
        let mut r = Reach::new(settings, Some(ports.main));
        r.own_ports = ports.projects.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        r
    }

    /// The public URL's host (brackets kept for IPv6).
    pub(crate) fn host(&self) -> &str {
        let authority = self.base.trim_start_matches("https://");
        let authority = authority.split('/').next().unwrap_or(authority);
        split_host_port(authority).0
    }

    /// The HTTPS port clients use.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The gateway's URL (`https://host[:port]`).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The gateway's login host, where the browser login and the control room live:
    /// `https://<base_domain>[:port]`, or the gateway's URL when there is no base domain.
    pub(crate) fn login(&self) -> String {
        match &self.base_domain {
            Some(d) => format!("https://{d}{}", port_part(self.port)),
            None => self.base.clone(),
        }
    }

    /// The login host's origin (`https://<name>[:port]`, no path): the one origin passkey
    /// ceremonies are valid for. It is the configured public address (what browsers use, e.g.
    /// port 443 behind a balancer while the gateway listens on 8443), never a request's `Host`.
    pub(crate) fn login_origin(&self) -> String {
        match &self.base_domain {
            Some(d) => format!("https://{}{}", d.to_ascii_lowercase(), port_part(self.port)),
            None => format!("https://{}{}", self.host().to_ascii_lowercase(), port_part(self.port)),
        }
    }

    /// The same, knowing the gateway's `<host>.local` name ([`named_host`]).
    pub(crate) fn with_named(mut self, named: Option<String>) -> Reach {
        self.named = named.map(|n| n.to_ascii_lowercase());
        self
    }

    /// The one origin passkey ceremonies are valid on (issue 38): the login origin when its host
    /// is a name; else, when the login host is an address (`init --lan`: browsers allow WebAuthn
    /// only on a name), the named host `https://<host>.local[:port]` when the certificate covers
    /// it; else the login origin (an address: passkeys are not offered). Derived from the
    /// configuration and the certificate, never from a request.
    pub(crate) fn passkey_origin(&self) -> String {
        self.named_origin().unwrap_or_else(|| self.login_origin())
    }

    /// The named host's origin, when passkeys live there rather than on the login origin: the
    /// one place a login session at the address is handed off to (`web/handoff_named.rs`).
    pub(crate) fn named_origin(&self) -> Option<String> {
        let login = self.login_origin();
        let host = split_host_port(login.trim_start_matches("https://")).0;
        let address = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok();
        let named = self.named.as_deref().filter(|_| address)?;
        Some(format!("https://{named}{}", port_part(self.port)))
    }

    /// The URL `opencode attach` takes for a project: `<base>/p/<project>`.
    pub(crate) fn project(&self, name: &str) -> String {
        format!("{}/p/{name}", self.base)
    }

    /// The web UI's origin for a project: `https://<project>.<base_domain>[:port]` when there is a
    /// base domain, else the public URL's host on the project's own port when it has one.
    pub(crate) fn web_ui_origin(&self, name: &str) -> Option<String> {
        if let Some(d) = self.base_domain.as_deref() {
            return Some(format!("https://{name}.{d}{}", port_part(self.port)));
        }
        // Port mode: the public URL's host on the project's own port.
        let (_, port) = self.own_ports.iter().find(|(n, _)| n == name)?;
        Some(format!("https://{}{}", self.host(), port_part(*port)))
    }

    /// The web UI's URL for a project (its origin and `/`).
    pub(crate) fn web_ui(&self, name: &str) -> Option<String> {
        self.web_ui_origin(name).map(|o| format!("{o}/"))
    }
}

/// This machine's `<host>.local` (`support::host::local_name`, the name the dev certificate
/// adds for a listener other devices reach) when `covers` says the served certificate covers it.
pub(crate) fn named_host(covers: impl Fn(&str) -> bool) -> Option<String> {
    crate::support::host::local_name().filter(|n| covers(n))
}

/// The SSH forward to a project (then `opencode attach http://127.0.0.1:4096`); a listener on
/// every address is named by `public_host` (the public URL's host, e.g. the LAN address) when
/// given, else by this machine's host name.
pub(crate) fn ssh_forward(name: &str, user: &str, ssh: SocketAddr, public_host: Option<&str>) -> String {
    let host = match (ssh.ip().is_unspecified(), public_host) {
        (true, Some(h)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
        (true, None) => crate::support::host::host_name(),
        (false, _) => ssh.ip().to_string(),
    };
    let port = if ssh.port() == 22 {
        String::new()
    } else {
        format!("-p {} ", ssh.port())
    };
    format!("ssh -N -L 4096:{name}:80 {port}{user}@{host}")
}

fn port_part(port: u16) -> String {
    if port == 443 { String::new() } else { format!(":{port}") }
}

/// `host:port`, `[v6]:port`, `host`, `[v6]` → host as written (brackets kept) and the port.
fn split_host_port(authority: &str) -> (&str, Option<u16>) {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => {
                let port = authority[end + 1..].strip_prefix(':').and_then(|p| p.parse().ok());
                (&authority[..=end], port)
            }
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h, p.parse().ok()),
        _ => (authority, None),
    }
}

/// Every name clients use: the public URL's host, the base domain and each project's host.
pub(crate) fn client_names(s: &Settings) -> Vec<String> {
    let mut names = Vec::new();
    let host = Reach::new(s, None).base().trim_start_matches("https://").to_string();
    let host = host
        .rsplit_once(':')
        .filter(|(_, p)| p.parse::<u16>().is_ok())
        .map_or(host.as_str(), |(h, _)| h);
    names.push(host.trim_start_matches('[').trim_end_matches(']').to_string());
    if let Some(d) = &s.server.base_domain {
        names.push(d.clone());
        names.extend(s.projects.iter().map(|p| format!("{}.{d}", p.name)));
    }
    names.dedup();
    names
}

/// Projects no phone can open (issue 38): a gateway listening on the network without a base
/// domain (`init --lan`'s shape: a phone resolves no wildcard DNS) serves a project's web UI
/// only on a port of its own, as the UI has no base path; `/p/<project>/` serves the API and
/// `opencode attach`, not the UI. The only project is also served at `/`, and a project set's
/// folders come and go, so neither is named.
pub(crate) fn phone_warnings(s: &Settings) -> Vec<String> {
    let listen = s.server.listen;
    let only = s.projects.len() == 1 && s.project_sets.is_empty();
    if s.server.base_domain.is_some() || listen.ip().is_loopback() || only {
        return Vec::new();
    }
    let reach = Reach::new(s, None);
    s.projects
        .iter()
        .filter(|p| p.listen.is_none() && p.set.is_none())
        .map(|p| {
            format!(
                "project {}: no phone can open its web UI: the gateway listens on {listen} without a base_domain, so a project's web UI needs a port of its own ({} reaches its API and `opencode attach` only). Fix: give it a port of its own: listen = \"0.0.0.0:<port>\" in its [[project]] table",
                p.name,
                reach.project(&p.name),
            )
        })
        .collect()
}

/// The HTTPS ports actually bound: the main listener's and each project's own (a configured port
/// of 0 becomes the one the system chose), for the URLs of project web UIs served on their own
/// port and for checking a handoff's target.
#[derive(Debug, Clone, Default)]
pub struct BoundPorts {
    pub main: u16,
    pub projects: Vec<(std::sync::Arc<str>, u16)>,
    /// The plain-HTTP listener's port (`server.http_listen`), for the offline page's probe.
    pub http: Option<u16>,
}

impl BoundPorts {
    /// The project whose own listener is on `port`.
    pub(crate) fn project_on(&self, port: u16) -> Option<&str> {
        self.projects.iter().find(|(_, p)| *p == port).map(|(n, _)| &**n)
    }

    /// The port of `project`'s own listener.
    pub(crate) fn port_of(&self, project: &str) -> Option<u16> {
        self.projects.iter().find(|(n, _)| &**n == project).map(|(_, p)| *p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_omit_443_and_keep_other_ports_hosts_and_ipv6_brackets() {
        let r = Reach::from_parts("https://gw.example.com:443", Some("gw.example.com"), None);
        assert_eq!(r.base(), "https://gw.example.com");
        assert_eq!(r.project("web"), "https://gw.example.com/p/web");
        assert_eq!(r.web_ui("web").as_deref(), Some("https://web.gw.example.com/"));
        let r = Reach::from_parts("https://gw.example.com", Some("gw.example.com"), None);
        assert_eq!(r.web_ui_origin("web").as_deref(), Some("https://web.gw.example.com"));

        let r = Reach::from_parts("https://127.0.0.1:8443", Some("gw.localhost"), None);
        assert_eq!(r.project("demo"), "https://127.0.0.1:8443/p/demo");
        assert_eq!(r.web_ui("demo").as_deref(), Some("https://demo.gw.localhost:8443/"));
        assert_eq!(r.login(), "https://gw.localhost:8443");
        let r = Reach::from_parts("https://127.0.0.1:8443", None, None);
        assert_eq!(r.login(), "https://127.0.0.1:8443");
        assert_eq!(r.web_ui("demo"), None, "no base_domain, no web UI host");

        let r = Reach::from_parts("https://[::1]:8443", Some("gw.localhost"), None);
        assert_eq!(r.project("demo"), "https://[::1]:8443/p/demo");
        assert_eq!(r.web_ui("demo").as_deref(), Some("https://demo.gw.localhost:8443/"));
        let r = Reach::from_parts("https://[2001:db8::1]:443/", None, None);
        assert_eq!(r.base(), "https://[2001:db8::1]");
        let r = Reach::from_parts("https://[2001:db8::1]", None, None);
        assert_eq!(r.project("x"), "https://[2001:db8::1]/p/x");

        // listen = "127.0.0.1:0": the printed port is the one bound.
        let r = Reach::from_parts("https://127.0.0.1:0", Some("gw.localhost"), Some(40123));
        assert_eq!(r.project("demo"), "https://127.0.0.1:40123/p/demo");
        assert_eq!(r.web_ui("demo").as_deref(), Some("https://demo.gw.localhost:40123/"));
        // A gateway behind a path prefix keeps it.
        let r = Reach::from_parts("https://example.com:8443/gw/", None, None);
        assert_eq!(r.project("a"), "https://example.com:8443/gw/p/a");
        assert_eq!(r.login_origin(), "https://example.com:8443", "an origin has no path");
        // Behind a balancer: the public port, not the one listened on.
        let r = Reach::from_parts("https://gw.example.com", Some("gw.example.com"), Some(8443));
        assert_eq!(r.login_origin(), "https://gw.example.com");
        let r = Reach::from_parts("https://127.0.0.1:0", Some("GW.localhost"), Some(40123));
        assert_eq!(r.login_origin(), "https://gw.localhost:40123");
    }

    #[test]
    fn passkeys_live_on_the_login_origin_by_name_else_on_the_named_host() {
        let named = || Some("Devbox.local".to_string());
        // A login origin by name: passkeys there, whatever the machine is called.
        let r = Reach::from_parts("https://gw.example.com:8443", None, None).with_named(named());
        assert_eq!(r.passkey_origin(), "https://gw.example.com:8443");
        assert_eq!(r.named_origin(), None);
        let r = Reach::from_parts("https://127.0.0.1:0", Some("gw.localhost"), Some(40123)).with_named(named());
        assert_eq!(r.passkey_origin(), "https://gw.localhost:40123");
        // By address (LAN mode): the named host on the same port, lower-cased.
        let r = Reach::from_parts("https://192.168.1.20:8443", None, None).with_named(named());
        assert_eq!(r.passkey_origin(), "https://devbox.local:8443");
        assert_eq!(r.named_origin().as_deref(), Some("https://devbox.local:8443"));
        assert_eq!(
            r.login_origin(),
            "https://192.168.1.20:8443",
            "the login stays at the address"
        );
        let r = Reach::from_parts("https://[2001:db8::1]", None, None).with_named(named());
        assert_eq!(r.passkey_origin(), "https://devbox.local");
        // No name the certificate covers: the address, where no passkey is offered.
        let r = Reach::from_parts("https://192.168.1.20:8443", None, None).with_named(None);
        assert_eq!(r.passkey_origin(), "https://192.168.1.20:8443");
        assert_eq!(r.named_origin(), None);
        assert_eq!(named_host(|_| false), None, "a name the certificate does not cover");
    }

    #[test]
    fn ssh_forwards_name_the_port_unless_22() {
        assert_eq!(
            ssh_forward("demo", "dev", "127.0.0.1:2222".parse().unwrap(), None),
            "ssh -N -L 4096:demo:80 -p 2222 dev@127.0.0.1"
        );
        assert_eq!(
            ssh_forward("demo", "dev", "[::1]:22".parse().unwrap(), None),
            "ssh -N -L 4096:demo:80 dev@::1"
        );
        // Every address: the LAN address the public URL names, which a phone or laptop can use.
        assert_eq!(
            ssh_forward("demo", "dev", "0.0.0.0:2222".parse().unwrap(), Some("192.168.1.20")),
            "ssh -N -L 4096:demo:80 -p 2222 dev@192.168.1.20"
        );
    }
}
