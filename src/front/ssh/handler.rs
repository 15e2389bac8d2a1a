//! One SSH connection (russh `Handler`): key login (and the gateway password, through the same
//! limiter and argon2 path as HTTPS), then `direct-tcpip` channels to granted projects, each
//! served by the gateway's own HTTP pipeline with the SSH user as the identity. Every other
//! request is refused with a reason the client shows, and logged with why.

use crate::metrics::LoginMethod;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelOpenFailure, MethodKind, MethodSet};

use crate::config::Secret;
use crate::gateway::Gateway;
use crate::http::transport::{ConnInfo, Front};

/// RFC 4254: SSH_OPEN_ADMINISTRATIVELY_PROHIBITED.
const PROHIBITED: u32 = 1;

pub(crate) struct Conn {
    gw: Arc<Gateway>,
    peer: SocketAddr,
    password_auth: bool,
    user: Option<Arc<str>>,
    pub authenticated: Arc<AtomicBool>,
    channels: Arc<AtomicUsize>,
    /// A key refusal of this connection is in the audit trail already: a client offers every key
    /// its agent holds, so one line per connection (the security log has each).
    key_refusal_audited: bool,
}

/// Counts a connection's open channels; the count drops when the channel's task ends.
struct ChannelCount(Arc<AtomicUsize>);

impl Drop for ChannelCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn refuse(reason: impl Into<String>) -> ChannelOpenFailure {
    ChannelOpenFailure::Other {
        code: PROHIBITED,
        reason: reason.into(),
    }
}

impl Conn {
    pub(crate) fn new(gw: Arc<Gateway>, peer: SocketAddr, password_auth: bool) -> Self {
        Conn {
            gw,
            peer,
            password_auth,
            user: None,
            authenticated: Arc::new(AtomicBool::new(false)),
            channels: Arc::new(AtomicUsize::new(0)),
            key_refusal_audited: false,
        }
    }

    fn methods(&self) -> MethodSet {
        let mut m = MethodSet::empty();
        m.push(MethodKind::PublicKey);
        if self.password_auth {
            m.push(MethodKind::Password);
        }
        m
    }

    fn reject(&self) -> Auth {
        Auth::Reject {
            proceed_with_methods: Some(self.methods()),
            partial_success: false,
        }
    }

    /// Is this key one of `user`'s? Logs why not, and audits the connection's first refusal.
    fn key_allowed(&mut self, user: &str, key: &russh::keys::PublicKey) -> bool {
        let state = self.gw.state();
        let fingerprint = key.fingerprint(russh::keys::HashAlg::Sha256);
        let (known, reason) = match state.users.get(user) {
            None => (false, "unknown_user"),
            Some(u) if u.ssh_keys.iter().any(|k| k.key_data() == key.key_data()) => return true,
            Some(_) => (true, "key_not_authorized"),
        };
        if known {
            tracing::warn!(target: "security", peer = %self.peer, user, reason, fingerprint = %fingerprint, "ssh key not accepted for this user");
        } else {
            tracing::warn!(target: "security", peer = %self.peer, user = "<unknown>", reason, "ssh login refused: no such user");
        }
        if !self.key_refusal_audited {
            self.key_refusal_audited = true;
            // An unknown name may be anything typed: never written down.
            let mut r = crate::audit::Record::new("login_failed")
                .address(self.peer.ip())
                .via(crate::audit::Via::Ssh, None)
                .field("method", "ssh")
                .field("credential", "publickey")
                .field("reason", reason)
                .field("fingerprint", fingerprint.to_string());
            if known {
                r = r.user(user);
            }
            self.gw.audit.record(r);
        }
        false
    }

    fn logged_in(&mut self, user: &str, how: &'static str) {
        tracing::info!(target: "security", peer = %self.peer, user, method = how, "ssh login");
        self.gw.audit.record(
            crate::audit::Record::new("login")
                .user(user)
                .address(self.peer.ip())
                .via(crate::audit::Via::Ssh, None)
                .field("method", "ssh")
                .field("credential", how),
        );
        self.user = Some(user.into());
        self.authenticated.store(true, Ordering::SeqCst);
    }

    fn refused(&self, what: &'static str, reason: &'static str) {
        tracing::warn!(target: "security", peer = %self.peer, user = self.user.as_deref().unwrap_or("-"), reason, "ssh {what} refused");
    }

    /// Which project a `direct-tcpip` target names, if this user may reach it.
    fn check_target(&self, host: &str) -> Result<(Arc<str>, Arc<str>), ChannelOpenFailure> {
        let user = self.user.clone().ok_or_else(|| refuse("not logged in"))?;
        let state = self.gw.state();
        let Some(u) = state.users.get(&*user) else {
            self.refused("forward", "user_removed");
            return Err(refuse(format!("user {user} no longer exists")));
        };
        let Some(project) = state.projects.get(host) else {
            self.refused("forward", "unknown_target");
            return Err(refuse(format!(
                "{host} is not a project of this gateway; forward to a project name, e.g. ssh -N -L 4096:<project>:80"
            )));
        };
        if u.grants.role_in(host).is_none() {
            self.refused("forward", "target_not_granted");
            return Err(refuse(format!("user {user} has no access to project {host}")));
        }
        Ok((user, project.name.clone()))
    }
}

impl russh::server::Handler for Conn {
    type Error = russh::Error;

    async fn auth_none(&mut self, _user: &str) -> Result<Auth, Self::Error> {
        Ok(self.reject())
    }

    async fn auth_publickey_offered(&mut self, user: &str, offer: PublicKeyOffer<'_>) -> Result<Auth, Self::Error> {
        Ok(if self.key_allowed(user, offer.public_key) {
            Auth::Accept
        } else {
            self.reject()
        })
    }

    async fn auth_publickey(&mut self, user: &str, key: VerifiedPublicKey<'_>) -> Result<Auth, Self::Error> {
        if !self.key_allowed(user, key.public_key) {
            self.gw.metrics.login(LoginMethod::SshKey, false);
            return Ok(self.reject());
        }
        self.gw.metrics.login(LoginMethod::SshKey, true);
        self.logged_in(user, "publickey");
        Ok(Auth::Accept)
    }

    async fn auth_password(&mut self, user: &str, password: &str) -> Result<Auth, Self::Error> {
        if !self.password_auth {
            return Ok(self.reject());
        }
        let state = self.gw.state();
        let check = crate::auth::Check {
            auth: &self.gw.auth,
            metrics: &self.gw.metrics,
            audit: &self.gw.audit,
            users: &state.users,
        };
        match crate::auth::password(&check, self.peer.ip(), user, &Secret::new(password), "ssh").await {
            Ok(u) => {
                self.logged_in(&u.name.clone(), "password");
                Ok(Auth::Accept)
            }
            // The HTTPS path already logged why (limit or wrong password).
            Err(_) => Ok(self.reject()),
        }
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.refused("session (shell, exec, sftp)", "session_refused");
        reply
            .reject(refuse(
                "opencode-gateway has no shell; it only forwards to projects: ssh -N -L 4096:<project>:80",
            ))
            .await;
        Ok(())
    }

    async fn channel_open_x11(
        &mut self,
        _c: Channel<Msg>,
        _a: &str,
        _p: u32,
        reply: ChannelOpenHandle,
        _s: &mut Session,
    ) -> Result<(), Self::Error> {
        self.refused("X11 forwarding", "x11_refused");
        reply.reject(refuse("X11 forwarding is not offered")).await;
        Ok(())
    }

    async fn channel_open_direct_streamlocal(
        &mut self,
        _c: Channel<Msg>,
        _path: &str,
        reply: ChannelOpenHandle,
        _s: &mut Session,
    ) -> Result<(), Self::Error> {
        self.refused("unix socket forwarding", "streamlocal_refused");
        reply.reject(refuse("only forwards to projects are offered")).await;
        Ok(())
    }

    async fn tcpip_forward(
        &mut self,
        _address: &str,
        _port: &mut u32,
        _session: &mut Session,
    ) -> Result<bool, Self::Error> {
        self.refused("remote forward (-R)", "remote_forward_refused");
        Ok(false)
    }

    async fn streamlocal_forward(&mut self, _path: &str, _session: &mut Session) -> Result<bool, Self::Error> {
        self.refused("remote unix socket forward", "remote_forward_refused");
        Ok(false)
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        _port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        let (user, project) = match self.check_target(host_to_connect) {
            Ok(t) => t,
            Err(why) => {
                reply.reject(why).await;
                return Ok(());
            }
        };
        let limits = &self.gw.limits;
        if self.channels.fetch_add(1, Ordering::SeqCst) >= limits.max_ssh_channels_per_connection as usize {
            self.channels.fetch_sub(1, Ordering::SeqCst);
            self.refused("forward", "channel_limit");
            reply.reject(ChannelOpenFailure::ResourceShortage).await;
            return Ok(());
        }
        let count = ChannelCount(self.channels.clone());
        let Some(slot) = self
            .gw
            .doors
            .streams
            .try_acquire(user.clone(), limits.max_streams_per_user)
        else {
            self.refused("forward", "stream_limit");
            reply.reject(ChannelOpenFailure::ResourceShortage).await;
            return Ok(());
        };
        reply.accept().await;
        let conn = ConnInfo::new(self.peer, Front::Ssh { user, project });
        let gw = self.gw.clone();
        self.gw.lifecycle.tasks.spawn(async move {
            let _count = count;
            let _slot = slot;
            crate::front::connection::serve_connection(gw, conn, channel.into_stream(), None).await;
        });
        Ok(())
    }
}
