//! The SSH listener: the same accept loop and per-address slots as HTTPS, russh for the protocol,
//! a deadline for logging in, keepalives and an idle timeout after it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use russh::server::Config;
use russh::{Disconnect, MethodKind, MethodSet, SshId};
use tokio::net::TcpListener;

use super::handler::Conn;
use crate::config::Ssh;
use crate::gateway::Gateway;

/// A client that has not logged in by then is disconnected.
const LOGIN_DEADLINE: Duration = Duration::from_secs(30);

pub struct SshServer {
    gw: Arc<Gateway>,
    config: Arc<Config>,
    password_auth: bool,
}

impl SshServer {
    pub fn new(gw: Arc<Gateway>, settings: &Ssh) -> anyhow::Result<SshServer> {
        let key = super::host_key::load_or_create(&settings.host_key)?;
        let mut methods = MethodSet::empty();
        methods.push(MethodKind::PublicKey);
        if settings.password_auth {
            methods.push(MethodKind::Password);
        }
        let limits = &gw.limits;
        let config = Config {
            server_id: SshId::Standard("SSH-2.0-opencode-gateway".into()),
            methods,
            // Every rejection takes this long, whatever failed, so timing tells nothing.
            auth_rejection_time: Duration::from_millis(300),
            // OpenSSH first asks with "none" to learn the methods; that need not be slow.
            auth_rejection_time_initial: Some(Duration::ZERO),
            keys: vec![key],
            max_auth_attempts: 6,
            inactivity_timeout: Some(limits.ssh_idle_timeout),
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_max: 3,
            nodelay: true,
            ..Default::default()
        };
        Ok(SshServer {
            gw,
            config: Arc::new(config),
            password_auth: settings.password_auth,
        })
    }

    pub async fn serve(self, listener: TcpListener) {
        let tasks = self.gw.tasks.clone();
        let gw = self.gw.clone();
        crate::listen::accept_loop(self.gw.clone(), listener, "ssh", move |tcp, peer, slot| {
            let gw = gw.clone();
            let config = self.config.clone();
            let password_auth = self.password_auth;
            tasks.spawn(async move {
                let _slot = slot;
                let handler = Conn::new(gw.clone(), peer, password_auth);
                let authenticated = handler.authenticated.clone();
                let started = tokio::time::timeout(gw.limits.tls_handshake_timeout, russh::server::run_stream(config, tcp, handler)).await;
                let Ok(Ok(session)) = started else {
                    tracing::debug!(peer = %peer, "ssh handshake failed or timed out");
                    return;
                };
                gw.metrics.ssh_sessions.fetch_add(1, Ordering::Relaxed);
                let handle = session.handle();
                let login_deadline = tokio::time::sleep(LOGIN_DEADLINE);
                tokio::pin!(session, login_deadline);
                let mut deadline_armed = true;
                loop {
                    tokio::select! {
                        r = &mut session => {
                            if let Err(e) = r {
                                tracing::debug!(peer = %peer, error = %e, "ssh session ended with an error");
                            }
                            break;
                        }
                        _ = &mut login_deadline, if deadline_armed => {
                            deadline_armed = false;
                            if !authenticated.load(Ordering::SeqCst) {
                                tracing::warn!(target: "security", peer = %peer, reason = "login_timeout", "ssh client did not log in in time");
                                let _ = handle.disconnect(Disconnect::ByApplication, "log in sooner".into(), "en".into()).await;
                            }
                        }
                        _ = gw.abort.cancelled() => {
                            let _ = handle.disconnect(Disconnect::ByApplication, "the gateway is shutting down".into(), "en".into()).await;
                            break;
                        }
                    }
                }
                gw.metrics.ssh_sessions.fetch_sub(1, Ordering::Relaxed);
            });
        })
        .await;
    }
}
