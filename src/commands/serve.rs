//! `serve`: first-start set-up (dev certificates, a first user), then run until SIGTERM/SIGINT;
//! SIGHUP reloads.

use std::path::Path;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

use crate::config::{Settings, edit};

pub async fn serve(config: &Path) -> anyhow::Result<()> {
    crate::telemetry::init();
    let mut settings = crate::config::load(config)?;
    for w in super::check::permission_warnings(&settings)
        .into_iter()
        .chain(settings.discovery_warnings.iter().cloned())
    {
        tracing::warn!("{w}");
    }
    ensure_dev_certs(&settings)?;
    let first_user = if settings.users.is_empty() {
        let created = create_first_user(config)?;
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
        max_connections = running.gateway.connection_cap,
        projects = settings.projects.len(),
        users = settings.users.len(),
        "gateway ready"
    );
    print_attach(&settings, running.https.port(), running.ssh, first_user.as_ref());

    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: draining"); break; }
            _ = int.recv() => { tracing::info!("SIGINT: draining"); break; }
            _ = hup.recv() => { let _ = crate::reload::reload(&running.gateway, config); }
        }
    }
    running.stop().await;
    tracing::info!("stopped");
    Ok(())
}

fn ensure_dev_certs(settings: &Settings) -> anyhow::Result<()> {
    if !settings.tls.dev_ca {
        return Ok(());
    }
    let paths = crate::devcert::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key);
    let projects: Vec<String> = settings.projects.iter().map(|p| p.name.clone()).collect();
    let names = crate::devcert::server_names(settings.server.base_domain.as_deref(), &projects);
    if crate::devcert::ensure(&paths, &names).context("making the dev certificate")? {
        tracing::info!(ca = %paths.ca_cert.display(), cert = %paths.cert.display(), "made a development CA and server certificate");
    }
    Ok(())
}

/// The first user of a fresh config: a random password, shown once; only its hash is written.
fn create_first_user(config: &Path) -> anyhow::Result<(String, String)> {
    let name = "dev".to_string();
    let password = super::password::random_password();
    let hash = crate::auth::verifier::hash_password(&password);
    let text = std::fs::read_to_string(config)?;
    let updated = edit::add_user(&text, &name, &hash, &["*".to_string()], "admin")?;
    edit::write_atomically(config, &updated)?;
    tracing::info!(user = %name, config = %config.display(), "created the first user (its argon2id hash is in the config)");
    Ok((name, password))
}

fn print_attach(
    settings: &Settings,
    port: u16,
    ssh: Option<std::net::SocketAddr>,
    first_user: Option<&(String, String)>,
) {
    let (user, pw) = match first_user {
        Some((u, p)) => (u.as_str(), p.as_str()),
        None => ("<user>", "<password>"),
    };
    let reach = crate::reach::Reach::new(settings, Some(port));
    let url = reach.base();
    let ca = if settings.tls.dev_ca {
        let ca = crate::devcert::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key).ca_cert;
        let shown = std::env::current_dir()
            .ok()
            .and_then(|d| ca.strip_prefix(d).ok().map(|p| p.to_path_buf()))
            .unwrap_or(ca);
        format!("NODE_EXTRA_CA_CERTS={} ", shown.display())
    } else {
        String::new()
    };
    let mut out = String::new();
    if let Some((u, p)) = first_user {
        out += &format!(
            "\nCreated gateway user {u:?} with password: {p}\nThis is the only time it is shown: only its argon2id hash was written to {}.\n",
            settings.path.display()
        );
    }
    out += &format!("\nopencode-gateway is serving {url}\n");
    out += &format!(
        "control room (log in with the form): {}/   pair a phone: opencode-gateway pair {user}\n",
        reach.login()
    );
    for p in &settings.projects {
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
                crate::reach::ssh_forward(&p.name, user, ssh)
            );
        }
    }
    if let (Some(cfg), Some(addr)) = (&settings.ssh, ssh) {
        out += &format!(
            "\nSSH host key:\n{}",
            crate::ssh::host_key::describe(&cfg.host_key, addr)
        );
    }
    // ok: the password printed here is the one just generated for the operator, shown this once.
    print!("{out}");
}
