//! `serve`: first-start set-up (dev certificates, a first user), then run until SIGTERM/SIGINT;
//! SIGHUP reloads.

use std::path::Path;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

use crate::config::{Settings, edit};

pub(crate) async fn serve(
    config: &Path,
    log_format: Option<crate::support::telemetry::LogFormat>,
) -> anyhow::Result<()> {
    // The config says the log format, so it is read first; its errors go to stderr as text.
    let loaded = crate::config::load(config);
    crate::support::telemetry::init(
        log_format
            .or_else(|| loaded.as_ref().ok().map(|s| s.server.log_format))
            .unwrap_or_default(),
    );
    let mut settings = loaded?;
    for w in super::check::permission_warnings(&settings)
        .into_iter()
        .chain(crate::config::validate::boxes::warnings(&settings))
        .chain(crate::reach::phone_warnings(&settings))
        .chain(settings.discovery_warnings.iter().cloned())
    {
        tracing::warn!("{w}");
    }
    if let Some(other) = already_running(config) {
        anyhow::bail!(
            "a gateway is already running on {} ({other}); stop it first (kill -TERM its pid), or ask it with `opencode-gateway status`",
            config.display()
        );
    }
    ensure_dev_certs(&settings)?;
    let first_user = if settings.users.is_empty() {
        let created = create_first_user(config, settings.server.users_file.as_deref())?;
        settings = crate::config::load(config)?;
        Some(created)
    } else {
        None
    };
    // Handlers first: a SIGTERM that arrives the moment "ready" is printed must drain and stop the
    // spawned servers, not kill the process with the default action (a test saw exactly that).
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let running = crate::start(settings.clone()).await?;
    tracing::info!(
        https = %running.https,
        admin = %running.admin.map(|a| a.to_string()).unwrap_or_else(|| "-".into()),
        control = %running.control.display(),
        ssh = %running.ssh.map(|a| a.to_string()).unwrap_or_else(|| "-".into()),
        max_connections = running.gateway.doors.connection_cap,
        projects = settings.projects.len(),
        users = settings.users.len(),
        "gateway ready"
    );
    print_attach(&settings, &running, first_user.as_ref());

    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: draining"); break; }
            _ = int.recv() => { tracing::info!("SIGINT: draining"); break; }
            _ = hup.recv() => { let _ = crate::gateway::reload::reload(&running.gateway, config); }
        }
    }
    running.stop().await;
    tracing::info!("stopped");
    Ok(())
}

/// Another gateway answering on this config's control socket: its pid and HTTPS listener.
fn already_running(config: &Path) -> Option<String> {
    let (code, body) = super::admin_client::request(config, "GET", "/status").ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
    Some(format!(
        "pid {}, serving {}",
        v["pid"].as_u64().map_or_else(|| "?".into(), |p| p.to_string()),
        v["listen"].as_str().unwrap_or("?")
    ))
}

fn ensure_dev_certs(settings: &Settings) -> anyhow::Result<()> {
    if !settings.tls.dev_ca {
        return Ok(());
    }
    let paths = crate::config::protected::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key);
    let (names, refused) = crate::front::devcert::vouchable(&paths, &crate::front::devcert::names_for(settings));
    if !refused.is_empty() {
        tracing::warn!(
            ca = %paths.ca_cert.display(),
            names = %refused.join(", "),
            "the dev CA was made before these names were wanted and cannot vouch for them (its name constraints are fixed); the certificate leaves them out. Fix: remove {} and {} and start again (then trust the new CA)",
            paths.ca_cert.display(),
            paths.ca_key.display()
        );
    }
    if crate::front::devcert::ensure(&paths, &names).context("making the dev certificate")? {
        tracing::info!(ca = %paths.ca_cert.display(), cert = %paths.cert.display(), "made a development CA and server certificate");
    }
    Ok(())
}

/// The first user of a fresh config: a random password, shown once; only its hash is written, to
/// the users file when the config names one (a config kept in git stays as committed), else to
/// the config.
fn create_first_user(config: &Path, users_file: Option<&Path>) -> anyhow::Result<(String, String)> {
    let name = "dev".to_string();
    let password = super::password::random_password();
    let hash = crate::auth::verifier::hash_password(&password);
    let target = users_file.unwrap_or(config);
    let text = match std::fs::read_to_string(target) {
        Ok(t) => t,
        Err(e) if users_file.is_some() && e.kind() == std::io::ErrorKind::NotFound => {
            "# Users made by the gateway and `opencode-gateway user add`: argon2id hashes only.\n".into()
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", target.display())),
    };
    let updated = edit::add_user(&text, &name, &hash, &["*".to_string()], "admin")?;
    edit::write_atomically(target, &updated)?;
    tracing::info!(user = %name, file = %target.display(), "created the first user (only its argon2id hash was written)");
    Ok((name, password))
}

fn print_attach(settings: &Settings, running: &crate::Running, first_user: Option<&(String, String)>) {
    let ssh = running.ssh;
    // The user the commands name: the one just made, else the only one there is.
    let only = (settings.users.len() == 1).then(|| settings.users[0].name.as_str());
    let (user, pw) = match first_user {
        Some((u, p)) => (u.as_str(), p.as_str()),
        None => (only.unwrap_or("<user>"), "<password>"),
    };
    let reach = running.gateway.doors.ports.get().map_or_else(
        || crate::reach::Reach::new(settings, Some(running.https.port())),
        |p| crate::reach::Reach::bound(settings, p),
    );
    let url = reach.base();
    let ca = if settings.tls.dev_ca {
        let ca = crate::config::protected::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key).ca_cert;
        let shown = std::env::current_dir()
            .ok()
            .and_then(|d| ca.strip_prefix(d).ok().map(|p| p.to_path_buf()))
            .unwrap_or(ca);
        format!("NODE_EXTRA_CA_CERTS={} ", shown.display())
    } else {
        String::new()
    };
    // `-c <config>` only where the commands would not find it by themselves.
    let dash_c = if settings.path.ends_with(crate::config::DEFAULT_PATH) {
        String::new()
    } else {
        format!(" -c {}", settings.path.display())
    };
    let mut out = String::new();
    out += &format!("\nopencode-gateway is serving {url}\n");
    out += &trust_the_ca(settings, running, &reach);
    out += &format!(
        "control room (log in with the form): {}/   pair a phone: opencode-gateway pair {user}{dash_c}\n",
        reach.login()
    );
    for p in &settings.projects {
        if let Some(why) = crate::upstream::supervise::cannot_start(settings, p) {
            out += &format!("\nproject {}: NOT RUNNING\n  {why}\n", p.name);
            continue;
        }
        out += &format!("\nproject {}:\n", p.name);
        let at = reach.project(&p.name);
        out += &format!("  {ca}opencode attach {at} -u {user} -p '{pw}'\n");
        out += &format!("  {ca}opencode run --attach {at} -u {user} -p '{pw}' \"hello\"\n");
        if let Some(web) = reach.web_ui(&p.name) {
            out += &format!("  web UI: {web}   (trust the CA in your browser)\n");
        }
        if let Some(ssh) = ssh {
            out += &format!(
                "  {}   then   opencode attach http://127.0.0.1:4096\n",
                crate::reach::ssh_forward(&p.name, user, ssh, Some(reach.host()))
            );
        }
    }
    if let (Some(cfg), Some(addr)) = (&settings.ssh, ssh) {
        out += &format!(
            "\nSSH host key:\n{}",
            crate::front::ssh::host_key::describe(&cfg.host_key, addr)
        );
    }
    let recover = format!("opencode-gateway user passwd {user}{dash_c}   (then: opencode-gateway reload{dash_c})");
    match first_user {
        // Last, framed: the one thing to copy before it scrolls away.
        Some((u, p)) => {
            out += &framed(&[
                format!("Created gateway user {u:?}. Its password, shown only this once:"),
                String::new(),
                format!("    {p}"),
                String::new(),
                "Only its argon2id hash was written. Lost it? Set a new one:".into(),
                format!("    {recover}"),
            ])
        }
        None => out += &format!("\nforgot the password? {recover}\n"),
    }
    // ok: the password printed here is the one just generated for the operator, shown this once.
    print!("{out}");
}

/// Where a phone gets the dev CA (the plain-HTTP listener's `/ca`) and the fingerprint to compare
/// there, when the gateway made its own CA; nothing otherwise.
fn trust_the_ca(settings: &Settings, running: &crate::Running, reach: &crate::reach::Reach) -> String {
    if !settings.tls.dev_ca {
        return String::new();
    }
    let ca = crate::config::protected::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key).ca_cert;
    let Some(der) = std::fs::read_to_string(&ca)
        .ok()
        .and_then(|p| crate::web::ca_page::der_from_pem(&p))
    else {
        return String::new();
    };
    let fp = crate::web::ca_page::fingerprint(&der);
    match running.http {
        Some(http) => format!(
            "trust the dev CA on a phone: http://{}:{}/ca   SHA-256 fingerprint {fp}\n",
            reach.host(),
            http.port()
        ),
        // Loopback only: no phone reaches it (the LAN variant offers the CA on plain HTTP).
        None if settings.server.listen.ip().is_loopback() => String::new(),
        None => format!(
            "dev CA: {} (SHA-256 fingerprint {fp}); set server.http_listen to offer it to phones\n",
            ca.display()
        ),
    }
}

/// Lines in a box drawn with ASCII, wide enough for the longest.
fn framed(lines: &[String]) -> String {
    let width = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let rule = format!("+{}+\n", "-".repeat(width + 2));
    let mut out = format!("\n{rule}");
    for l in lines {
        out += &format!("| {l}{} |\n", " ".repeat(width - l.chars().count()));
    }
    out + &rule
}
