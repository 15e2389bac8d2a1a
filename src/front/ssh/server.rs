//! The SSH listener: the same accept loop and per-address slots as HTTPS, russh for the protocol,
//! one deadline (`ssh_login_timeout`) from accept to login that covers the key exchange too,
//! keepalives and an idle timeout after it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use russh::server::Config;
use russh::{Disconnect, MethodKind, MethodSet, SshId};
use tokio::net::TcpListener;

use super::handler::Conn;
use crate::config::Ssh;
use crate::gateway::Gateway;

/// How long a session whose socket was shut down may take to notice before we stop waiting.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The stream for russh and a duplicate of its descriptor to shut the connection down with.
fn split_off_socket(tcp: tokio::net::TcpStream) -> Option<(tokio::net::TcpStream, std::net::TcpStream)> {
    let std = tcp.into_std().ok()?;
    let dup = std.try_clone().ok()?;
    Some((tokio::net::TcpStream::from_std(std).ok()?, dup))
}

pub(crate) struct SshServer {
    gw: Arc<Gateway>,
    config: Arc<Config>,
    password_auth: bool,
}

impl SshServer {
    pub(crate) fn new(gw: Arc<Gateway>, settings: &Ssh) -> anyhow::Result<SshServer> {
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

    pub(crate) async fn serve(self, listener: TcpListener) {
        let tasks = self.gw.lifecycle.tasks.clone();
        let gw = self.gw.clone();
        // SSH holds its place from accept: its own login timeout bounds a session that never logs in,
        // and the front door must not be shed to make room for HTTPS clients.
        crate::front::listen::accept_loop(self.gw.clone(), listener, "ssh", crate::gateway::connections::Class::Held, move |tcp, peer, slot| {
            let gw = gw.clone();
            let config = self.config.clone();
            let password_auth = self.password_auth;
            tasks.spawn(async move {
                let _slot = slot;
                // A second descriptor for the socket: shutting it down ends the session at any
                // point, even in the middle of the key exchange, where russh cannot yet send a
                // disconnect (a stalled client was otherwise kept until keepalives gave up, ~120 s).
                let Some((tcp, socket)) = split_off_socket(tcp) else {
                    return;
                };
                // One deadline from accept to a successful login: banner, key exchange, auth.
                let deadline = tokio::time::Instant::now() + gw.limits.ssh_login_timeout;
                let handler = Conn::new(gw.clone(), peer, password_auth);
                let authenticated = handler.authenticated.clone();
                let started = tokio::time::timeout_at(deadline, russh::server::run_stream(config, tcp, handler)).await;
                let Ok(Ok(session)) = started else {
                    tracing::debug!(peer = %peer, "ssh handshake failed or timed out");
                    return;
                };
                gw.metrics.ssh_sessions.inc();
                let handle = session.handle();
                let login_deadline = tokio::time::sleep_until(deadline);
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
                                let _ = tokio::time::timeout(Duration::from_millis(100), handle.disconnect(Disconnect::ByApplication, "log in sooner".into(), "en".into())).await;
                                let _ = socket.shutdown(std::net::Shutdown::Both);
                                let _ = tokio::time::timeout(CLOSE_GRACE, &mut session).await;
                                break;
                            }
                        }
                        _ = gw.lifecycle.abort.cancelled() => {
                            let _ = tokio::time::timeout(Duration::from_millis(100), handle.disconnect(Disconnect::ByApplication, "the gateway is shutting down".into(), "en".into())).await;
                            let _ = socket.shutdown(std::net::Shutdown::Both);
                            break;
                        }
                    }
                }
                gw.metrics.ssh_sessions.dec();
            });
        })
        .await;
    }
}
