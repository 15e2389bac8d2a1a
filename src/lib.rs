//! opencode-gateway: a secure remote-access gateway for OpenCode servers.
//!
//! # Layout
//! Rooms by job, bottom first (a room imports only rooms below it; `scripts/structure.py --up`
//! lists any import that points up, docs/architecture.md says why this order):
//! - `support/`: what knows nothing of the gateway (expiring map, private files, host names and
//!   LAN addresses, DER, form encoding, compression, worker runtimes, memory, logging).
//! - `config/`: the file and its validation into `Settings`. `reach`: where a project is reachable.
//! - `store/` (the state database), `metrics/`, `audit/`.
//! - `policy/`: pure decisions on the canonical request. `ratelimit`: login allowances and slots.
//! - `auth/`: credentials, verification, tokens, browser sessions, handoff tickets, pairing codes.
//! - `upstream/` (OpenCode's side), `notify`, `oidc/` (the provider and SSO flows), `inbox/`.
//! - `gateway/`: the running gateway (state a reload swaps, reload, connection table, certificates).
//! - `http/`: transport, body, errors (the one status table), cookies, rewrite, client address.
//! - `web/`: the gateway's own pages. `pipeline/`: one request, phase by phase.
//! - `front/`: listeners and TLS, dev CA, ACME, SSH, the HTTP connection, admin, control socket.
//! - `cli/`: the commands.
//!
//! # Request flow
//! TCP accept → per-address slot → a worker runtime → TLS handshake (timeout) or SSH channel →
//! hyper (HTTP/1.1, h2, upgrades) → read the request once (canonical path, project, table route)
//! → identify (cache; else join an argon2 run for the same credential, or start one once the
//! login limiter agrees) → authorize (role × route) →
//! origin check → rate limit → pin directory → rewrite → upstream (the endpoint's pool) → stream the
//! response back unbuffered, or splice a WebSocket → one access-log line when the body ends.

pub mod audit;
pub mod auth;
pub mod budget;
pub mod cli;
pub mod config;
pub mod front;
pub mod gateway;
pub mod http;
pub mod inbox;
pub mod metrics;
pub mod notify;
pub mod oidc;
pub mod pipeline;
pub mod policy;
pub mod ratelimit;
pub mod reach;
pub mod store;
pub mod support;
pub mod upstream;
pub mod web;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::gateway::Gateway;

/// A started gateway: its bound addresses (ports may have been 0) and its runtime.
pub struct Running {
    pub https: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// The control socket `status` and `reload` use (`front/control.rs`).
    pub control: std::path::PathBuf,
    pub ssh: Option<SocketAddr>,
    pub project_ports: Vec<(String, SocketAddr)>,
    /// The plain-HTTP listener (`server.http_listen`).
    pub http: Option<SocketAddr>,
    pub gateway: Arc<Gateway>,
}

/// Bind every listener and start serving. Fails before serving anything if a listener or the TLS
/// configuration cannot be set up.
pub async fn start(settings: Settings) -> anyhow::Result<Running> {
    let acme = settings.tls.acme.clone();
    let certs = match &acme {
        Some(a) => front::acme::initial_store(&settings, a)?,
        None => gateway::certs::CertStore::from_files(&settings.tls)?,
    };
    let tls = front::listen::tls::with_store(certs.clone(), acme.is_some())?;
    let config_path = settings.path.clone();
    let https = bind(settings.server.listen, "server.listen").await?;
    let admin = match &settings.admin {
        Some(a) => Some(bind(a.listen, "admin.listen").await?),
        None => None,
    };
    let http = match settings.server.http_listen {
        Some(a) => Some(bind(a, "server.http_listen").await?),
        None => None,
    };
    let ssh = match &settings.ssh {
        Some(s) => Some((bind(s.listen, "ssh.listen").await?, s.clone())),
        None => None,
    };
    let control_path = front::control::socket_path(&settings);
    let control = front::control::bind(&control_path)?;
    let mut project_listeners = Vec::new();
    for p in &settings.projects {
        if let Some(addr) = p.listen {
            project_listeners.push((p.name.clone(), bind(addr, "project.listen").await?));
        }
    }
    let gw = Gateway::new(settings, certs.clone(), tls)?;
    gateway::watch_store(&gw);
    let running = Running {
        https: https.local_addr()?,
        admin: admin.as_ref().map(|l| l.local_addr()).transpose()?,
        control: control_path,
        ssh: ssh.as_ref().map(|(l, _)| l.local_addr()).transpose()?,
        project_ports: project_listeners
            .iter()
            .map(|(n, l)| Ok((n.clone(), l.local_addr()?)))
            .collect::<std::io::Result<_>>()?,
        http: http.as_ref().map(|l| l.local_addr()).transpose()?,
        gateway: gw.clone(),
    };
    running.publish_ports();
    tokio::spawn(front::listen::serve_tls(gw.clone(), https, None));
    for (name, l) in project_listeners {
        tracing::info!(project = %name, listen = %l.local_addr()?, "project listener ready");
        tokio::spawn(front::listen::serve_tls(gw.clone(), l, Some(name.as_str().into())));
    }
    if let Some(l) = admin {
        tokio::spawn(front::admin::serve(gw.clone(), l));
    }
    tokio::spawn(front::control::serve(
        gw.clone(),
        control,
        config_path,
        running.https.port(),
    ));
    tokio::spawn(gateway::reload::watch_project_sets(gw.clone()));
    match acme {
        Some(_) => front::acme::start(&gw),
        None => {
            tokio::spawn(gateway::certs::watch(certs, gw.lifecycle.shutdown.clone()));
        }
    }
    if let Some(l) = http {
        tracing::info!(listen = %l.local_addr()?, "plain HTTP listener ready (ACME HTTP-01, redirects to HTTPS)");
        tokio::spawn(front::acme::http::serve(gw.clone(), l, running.https.port()));
    }
    start_tasks(&gw);
    if let Some((l, ssh_settings)) = ssh {
        let server = front::ssh::server::SshServer::new(gw.clone(), &ssh_settings)?;
        tokio::spawn(server.serve(l));
    }
    Ok(running)
}

/// The gateway's own tasks: the inbox and its guard, which stops sessions on the one road under
/// its own grants (`policy/grants.rs`); scheduled triggers, which fire on it as their user
/// (`front/schedule.rs`); the probes of external upstreams; the janitor.
fn start_tasks(gw: &Arc<Gateway>) {
    let guard_road = pipeline::internal::gateway_road(gw, policy::grants::Holder::Guard, None);
    gateway::inbox::start(gw, guard_road);
    front::schedule::start(gw.clone());
    gateway::turn_ends::listen(gw);
    gw.probe_external_upstreams();
    gateway::janitor::start(gw.clone());
}

async fn bind(addr: SocketAddr, key: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("{key}: cannot listen on {addr} (is another process using it?)"))
}

impl Running {
    /// What was bound, for the handoff's URLs and `status` (`doctor` tells its own ports by it).
    fn publish_ports(&self) {
        let _ = self.gateway.doors.ports.set(reach::BoundPorts {
            main: self.https.port(),
            projects: self
                .project_ports
                .iter()
                .map(|(n, a)| (n.as_str().into(), a.port()))
                .collect(),
            http: self.http.map(|a| a.port()),
        });
        let _ = self.gateway.doors.listening.set(self.listening());
    }

    /// Each bound listener by its config key, as `config::Settings::listeners` names them.
    fn listening(&self) -> Vec<(String, SocketAddr)> {
        let mut all = vec![("server.listen".to_string(), self.https)];
        all.extend(self.http.map(|a| ("server.http_listen".to_string(), a)));
        all.extend(self.admin.map(|a| ("admin.listen".to_string(), a)));
        all.extend(self.ssh.map(|a| ("ssh.listen".to_string(), a)));
        all.extend(
            self.project_ports
                .iter()
                .map(|(n, a)| (format!("project {n} listen"), *a)),
        );
        all
    }

    /// Stop accepting, let requests and streams finish until the drain deadline, cut the rest,
    /// and stop spawned servers.
    pub async fn stop(self) {
        let gw = self.gateway;
        gw.lifecycle.shutdown.cancel();
        gw.lifecycle.tasks.close();
        let drained = tokio::time::timeout(gw.limits.drain_timeout, gw.lifecycle.tasks.wait())
            .await
            .is_ok();
        if !drained {
            tracing::info!(
                deadline_s = gw.limits.drain_timeout.as_secs(),
                "drain deadline reached: closing the remaining connections"
            );
            gw.lifecycle.abort.cancel();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), gw.lifecycle.tasks.wait()).await;
        }
        gw.lifecycle.supervisor.stop_all().await;
        gateway::janitor::save_spend(&gw).await;
        // The last records (terminals closed by the drain, servers stopped) reach the file first.
        let audit = gw.audit.clone();
        let _ = tokio::task::spawn_blocking(move || audit.flush(std::time::Duration::from_secs(2))).await;
        let _ = std::fs::remove_file(&self.control);
    }
}

/// Run until `shutdown` is cancelled, then drain.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let running = start(settings).await?;
    shutdown.cancelled().await;
    running.stop().await;
    Ok(())
}
