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
    if let Some(why) = nothing_to_serve(&settings) {
        anyhow::bail!("{why}");
    }
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
            "a gateway is already running on {} ({other}); stop it first (kill -TERM its pid), or ask it with `{} status`",
            config.display(),
            crate::support::invocation::me()
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
    // Printed beside serving: it waits for the model of each server started with the gateway.
    let banner = tokio::spawn(super::banner::Banner::new(&settings, &running, first_user).print());

    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: draining"); break; }
            _ = int.recv() => { tracing::info!("SIGINT: draining"); break; }
            _ = hup.recv() => { let _ = crate::gateway::reload::reload(&running.gateway, config); }
        }
    }
    banner.abort();
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
    use crate::front::devcert::Made;
    match crate::front::devcert::ensure(&paths, &names).context("making the dev certificate")? {
        Made::CaAndCertificate => {
            tracing::info!(ca = %paths.ca_cert.display(), cert = %paths.cert.display(), "made a development CA and server certificate (trust the new CA on your devices)")
        }
        Made::Certificate => {
            tracing::info!(ca = %paths.ca_cert.display(), cert = %paths.cert.display(), "issued a new server certificate from the development CA already there (nothing new to trust)")
        }
        Made::Nothing => {}
    }
    Ok(())
}

/// A config with no project and no user (the Debian package's example as shipped) has nothing to
/// serve: starting would only make a first user whose password went to the service's journal.
pub(crate) fn nothing_to_serve(s: &Settings) -> Option<String> {
    (s.projects.is_empty() && s.project_sets.is_empty() && s.users.is_empty()).then(|| {
        format!(
            "{} names no [[project]] and no user: nothing to serve. Fix: `sudo opencode-gateway init --system` writes a real one (or add a [[project]] and `opencode-gateway user add <name>`)",
            s.path.display()
        )
    })
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
