//! `doctor`: look at a configured gateway the way its clients will, and print each finding as
//! `ok`, `warn` or `fail` with the fix. Exits non-zero when anything failed. It reads files and
//! binds sockets briefly; it changes nothing.

use std::net::ToSocketAddrs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::config::{Settings, UpstreamKind};

use super::doctor_report::Report;

/// A certificate expiring sooner than this is worth a warning.
const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 86_400);

pub(crate) fn doctor(path: &Path) -> anyhow::Result<()> {
    let settings = crate::config::load(path)?;
    let running = super::doctor_running::ask(path);
    let report = run(&settings, running.as_ref());
    print!("{}", report.render());
    if settings.tls.dev_ca {
        print!(
            "{}",
            trust_instructions(&settings, ca_page(&settings, running.as_ref()).as_ref())
        );
    }
    match report.failures() {
        0 => Ok(()),
        n => anyhow::bail!("doctor: {n} check(s) failed (see the fix on each `fail` line)"),
    }
}

/// Every check; `running` is the status of the gateway this config describes, when it runs.
pub(crate) fn run(s: &Settings, running: Option<&serde_json::Value>) -> Report {
    let mut r = Report::default();
    super::doctor_running::gateway(s, &mut r, running);
    certificate(s, &mut r);
    opencode(s, &mut r);
    permissions(s, &mut r);
    super::doctor_running::listeners(s, &mut r, running);
    super::doctor_running::models(s, &mut r, running);
    reachability(s, &mut r);
    base_domain(s, &mut r);
    super::doctor_boxes::boxes(s, &mut r);
    r
}

/// Can another device (a phone on the same Wi-Fi) reach what the gateway prints? Loopback hosts,
/// loopback listeners behind a LAN public URL, `*.localhost` project hosts and a missing CA page
/// all look fine from this machine and fail on the phone.
fn reachability(s: &Settings, r: &mut Report) {
    let reach = crate::reach::Reach::new(s, None);
    let host = reach
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let loopback_name = |h: &str| {
        h == "localhost" || h.ends_with(".localhost") || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    };
    let me = crate::support::invocation::me();
    let lan_fix = format!(
        "for a phone on your network: `{me} serve -c config/gateway.lan.toml` (the dev config) or `{me} init --lan`; or set listen = \"0.0.0.0:8443\" and public_url to this machine's LAN address"
    );
    if loopback_name(&host) {
        r.warn(format!(
            "reach: the public URL {} is this machine only: another device cannot open it, nor the pairing QR code that carries it. Fix: {lan_fix}",
            reach.base()
        ));
    } else if s.server.listen.ip().is_loopback() {
        r.fail(format!(
            "reach: the public URL {} names {host}, but server.listen {} takes connections from this machine only. Fix: listen on 0.0.0.0:{} (or on {host})",
            reach.base(),
            s.server.listen,
            s.server.listen.port()
        ));
    } else if let Ok(ip) = host.parse::<std::net::IpAddr>()
        && std::net::UdpSocket::bind((ip, 0)).is_err()
    {
        r.warn(format!(
            "reach: the public URL's address {ip} is not an address of this machine (its addresses: {:?}). Fix: set public_url to one of them, unless a port forward in front of the gateway owns {ip}",
            crate::support::host::lan_addresses()
        ));
    } else {
        r.ok(format!("reach: other devices use {}", reach.base()));
    }
    let lan = !s.server.listen.ip().is_loopback();
    if lan
        && s.server
            .base_domain
            .as_deref()
            .is_some_and(|d| d == "localhost" || d.ends_with(".localhost"))
    {
        r.warn(format!(
            "reach: base_domain {} is a .localhost name, which every device resolves to itself: a phone cannot open any project host under it. Fix: remove base_domain and give each project a port of its own ([[project]] listen = \"0.0.0.0:8444\"), or use a domain with DNS records for it and its subdomains",
            s.server.base_domain.as_deref().unwrap_or_default()
        ));
    }
    for p in &s.projects {
        if let Some(l) = p.listen
            && lan
            && l.ip().is_loopback()
        {
            r.warn(format!(
                "reach: project {} listen {l} is this machine only while the gateway serves other devices. Fix: listen = \"0.0.0.0:{}\"",
                p.name,
                l.port()
            ));
        }
    }
    if lan && s.tls.dev_ca && s.server.http_listen.is_none() {
        r.warn("reach: a phone must trust the dev CA before it can open the gateway, and nothing offers it the CA. Fix: set server.http_listen = \"0.0.0.0:8080\" (http://<address>:8080/ca serves it with its fingerprint)");
    }
}

fn certificate(s: &Settings, r: &mut Report) {
    let path = &s.tls.cert;
    let chain: Vec<CertificateDer<'static>> = match CertificateDer::pem_file_iter(path)
        .map(|i| i.collect::<Result<Vec<_>, _>>())
    {
        Ok(Ok(c)) if !c.is_empty() => c,
        _ if s.tls.dev_ca || s.tls.acme.is_some() => {
            r.warn(format!(
                "certificate: {} does not exist yet; `serve` makes the dev certificate on first start",
                path.display()
            ));
            return;
        }
        _ => {
            r.fail(format!("certificate: cannot read a PEM certificate from {} (tls.cert). Fix: point tls.cert at your certificate chain", path.display()));
            return;
        }
    };
    if rustls::server::ParsedCertificate::try_from(&chain[0]).is_err() {
        r.fail(format!(
            "certificate: {} cannot be parsed. Fix: write a PEM chain, leaf first",
            path.display()
        ));
        return;
    }
    let missing = crate::gateway::certs::uncovered(&chain[0], &crate::reach::client_names(s));
    if missing.is_empty() {
        r.ok(format!(
            "certificate: covers {}",
            crate::reach::client_names(s).join(", ")
        ));
    } else {
        let fix = if s.tls.dev_ca {
            format!(
                "remove {} and {} and restart: the dev certificate is made for the current names",
                path.display(),
                s.tls.key.display()
            )
        } else {
            "issue a certificate that includes them (a wildcard *.<base_domain> covers the project hosts), or use [tls] acme".to_string()
        };
        for n in missing {
            r.fail(format!(
                "certificate: does not cover {n} (clients using it will refuse the connection). Fix: {fix}"
            ));
        }
    }
    match crate::support::der::validity(&chain[0]) {
        None => r.fail(format!(
            "certificate: the validity period in {} cannot be read",
            path.display()
        )),
        Some((_, until)) => {
            let now = SystemTime::now();
            let human = crate::gateway::certs::human;
            match until.duration_since(now) {
                Err(e) => r.fail(format!(
                    "certificate: expired {} ago. Fix: renew it (or use [tls] acme)",
                    human(e.duration())
                )),
                Ok(left) if left < EXPIRY_WARNING => r.warn(format!(
                    "certificate: expires in {}. Fix: renew it soon (the gateway picks up new files without a restart)",
                    human(left)
                )),
                Ok(left) => r.ok(format!("certificate: expires in {}", human(left))),
            }
        }
    }
}

fn opencode(s: &Settings, r: &mut Report) {
    let here = |p: &&crate::config::Project| p.upstream == UpstreamKind::Spawned && p.on_box.is_none();
    let Some(p) = s.projects.iter().find(here) else {
        r.ok("opencode: no project spawned on this machine, no binary needed here");
        return;
    };
    let Some(spec) = crate::upstream::supervise::SpawnSpec::new(s, p, &Default::default()) else {
        return;
    };
    let bin = match crate::upstream::supervise::launch::find_opencode(&spec) {
        Ok(b) => b,
        Err(why) => {
            r.fail(format!("opencode: {why}"));
            return;
        }
    };
    let out = std::process::Command::new(&bin)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let printed = String::from_utf8_lossy(&o.stdout);
            match crate::policy::dialect::from_version_output(&printed) {
                Some((d, v)) => r.ok(format!("opencode: {} (OpenCode {}, version {v})", bin.display(), d.family())),
                None => r.fail(format!(
                    "opencode: {} printed {:?} for --version, not an OpenCode 1.x or 2.x the gateway knows. Fix: install opencode-ai@{} or @opencode/cli@{}, or set server.opencode_bin",
                    bin.display(),
                    printed.trim(),
                    crate::policy::table::V1.version,
                    crate::policy::table::V2.version
                )),
            }
        }
        Ok(o) => r.fail(format!(
            "opencode: `{} --version` failed ({}). Fix: reinstall it (npm install opencode-ai) or set server.opencode_bin",
            bin.display(),
            o.status
        )),
        Err(e) => r.fail(format!("opencode: cannot run {} ({e}). Fix: make it executable, or set server.opencode_bin", bin.display())),
    }
}

fn permissions(s: &Settings, r: &mut Report) {
    let mut loose = super::check::permission_warnings(s);
    // The ACME account's credentials hold its private key.
    if let Some(acme) = &s.tls.acme {
        use std::os::unix::fs::PermissionsExt;
        let account = acme.dir.join("account.json");
        if let Ok(m) = std::fs::metadata(&account)
            && m.permissions().mode() & 0o077 != 0
        {
            loose.push(format!(
                "{} (the ACME account key) is readable by group or others (mode {:03o}). Fix: chmod 600 {}",
                account.display(),
                m.permissions().mode() & 0o777,
                account.display()
            ));
        }
    }
    if loose.is_empty() {
        r.ok("permissions: the config file and every secret file are readable by their owner only");
    }
    for w in loose {
        r.fail(format!("permissions: {w}"));
    }
}

/// A name resolves "to this machine" when each address it resolves to can be bound here.
fn base_domain(s: &Settings, r: &mut Report) {
    let Some(d) = &s.server.base_domain else {
        r.ok("base_domain: not set (projects are reached by path only)");
        return;
    };
    let probe = s
        .projects
        .first()
        .map_or_else(|| d.clone(), |p| format!("{}.{d}", p.name));
    for name in [d.clone(), probe] {
        match (name.as_str(), 443).to_socket_addrs() {
            // Browsers resolve *.localhost to loopback themselves (RFC 6761); glibc does not.
            Err(e) if name == "localhost" || name.ends_with(".localhost") => r.warn(format!(
                "base_domain: {name} does not resolve here ({e}); browsers resolve .localhost names to loopback themselves, other clients (curl, Node, the opencode CLI) do not. Fix: add `127.0.0.1 {name}` to /etc/hosts on machines whose CLI uses it"
            )),
            Err(e) => r.fail(format!(
                "base_domain: {name} does not resolve ({e}). Fix: add DNS records for {d} and *.{d} pointing at this machine"
            )),
            Ok(addrs) => {
                let addrs: Vec<_> = addrs.map(|a| a.ip()).collect();
                let foreign: Vec<_> = addrs.iter().filter(|ip| std::net::UdpSocket::bind((**ip, 0)).is_err()).collect();
                if foreign.is_empty() {
                    r.ok(format!("base_domain: {name} resolves to this machine ({addrs:?})"));
                } else {
                    r.warn(format!(
                        "base_domain: {name} resolves to {foreign:?}, not an address of this machine. Fix: point it here, unless a proxy or port forward in front of the gateway owns that address"
                    ));
                }
            }
        }
    }
}

/// The dev CA's page for phones (`server.http_listen`'s `/ca`), with the port the running
/// gateway bound when it runs, and the fingerprint the page shows.
fn ca_page(s: &Settings, running: Option<&serde_json::Value>) -> Option<(String, String)> {
    let listen = s.server.http_listen?;
    let port = super::doctor_running::bound(running, "server.http_listen").map_or(listen.port(), |a| a.port());
    let main = super::doctor_running::bound(running, "server.listen").map(|a| a.port());
    let ca = crate::config::protected::DevCertPaths::beside(&s.tls.cert, &s.tls.key).ca_cert;
    let der = crate::web::ca_page::der_from_pem(&std::fs::read_to_string(ca).ok()?)?;
    let host = crate::reach::Reach::new(s, main).host().to_string();
    (port != 0).then(|| {
        (
            format!("http://{host}:{port}/ca"),
            crate::web::ca_page::fingerprint(&der),
        )
    })
}

/// How to make each kind of client trust the dev CA; a phone is sent to the `/ca` page when it
/// is on (it offers the certificate and the iOS profile), else told to copy the file over.
pub(crate) fn trust_instructions(s: &Settings, ca_page: Option<&(String, String)>) -> String {
    let ca = crate::config::protected::DevCertPaths::beside(&s.tls.cert, &s.tls.key).ca_cert;
    let ca = ca.display();
    let phones = match ca_page {
        Some((url, fp)) => format!(
            "\x20 iOS and Android: open {url} on the phone, check that the SHA-256 fingerprint it shows is {fp}, and follow its steps (the certificate for Android, the profile for iOS, then full trust in Settings > General > About > Certificate Trust Settings).\n"
        ),
        None => format!(
            "\x20 iOS: send {ca} to the phone (AirDrop, mail), install the profile in Settings > General > VPN & Device Management, then turn it on in Settings > General > About > Certificate Trust Settings.\n\
             \x20 Android: copy {ca} to the phone, Settings > Security > Encryption & credentials > Install a certificate > CA certificate (Chrome trusts it; apps must opt in to user CAs).\n"
        ),
    };
    format!(
        "\nThe dev CA ({ca}) is in use: each client must trust it.\n\
         \x20 Node, Bun, the opencode CLI: NODE_EXTRA_CA_CERTS={ca} opencode attach ...\n\
         \x20 curl: curl --cacert {ca} ...\n\
         \x20 Firefox: Settings > Privacy & Security > Certificates > View Certificates > Authorities > Import {ca}, tick \"identify websites\".\n\
         \x20 Chrome/Edge on Linux: Settings > Privacy and security > Security > Manage certificates > Authorities > Import; on macOS: open {ca} in Keychain Access and set it to Always Trust; on Windows: certutil -addstore -user Root {ca}\n\
         {phones}\
         \x20 The CA is name-constrained to this gateway's names: it cannot vouch for any other site.\n"
    )
}
