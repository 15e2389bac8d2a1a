//! A box for unit tests: russh's SSH server on a loopback port (ephemeral), letting in one key,
//! that can hang where a hostile or broken box would (at the login, on every channel asked
//! for). Each logged-in connection is handed to the test: its server-side handle, to open
//! channels toward the gateway as a hostile box does, and a signal of its end.

use std::sync::Arc;

use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, PublicKey};
use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use tokio::sync::{mpsc, oneshot};

use super::ssh_link::{BoxLink, BoxSpec};

/// Where the test box stops answering.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Hang {
    Never,
    /// Key exchange done, the login never answered.
    AtLogin,
    /// Logged in, no channel the gateway asks for ever confirmed.
    AtChannels,
}

/// A logged-in connection, as the box sees it.
pub(crate) struct Login {
    pub handle: russh::server::Handle,
    /// Resolves (with an error: nothing is ever sent) once the connection has ended, either
    /// side closing it: its sender goes with the box's handler.
    pub ended: oneshot::Receiver<()>,
}

pub(crate) struct TestBox {
    pub address: String,
    /// Its host key, as an OpenSSH line.
    pub host_key: String,
    /// The key it lets in.
    pub client_key: PrivateKey,
    pub logins: mpsc::UnboundedReceiver<Login>,
}

pub(crate) fn ed25519() -> PrivateKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the OS random source is available");
    PrivateKey::from(Ed25519Keypair::from_seed(&seed))
}

impl TestBox {
    pub(crate) async fn start(hang: Hang) -> TestBox {
        let host = ed25519();
        let client_key = ed25519();
        let host_key = host.public_key().to_openssh().unwrap();
        let config = Arc::new(russh::server::Config {
            keys: vec![host],
            ..Default::default()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (tx, logins) = mpsc::unbounded_channel();
        let client = client_key.public_key().clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (ended_tx, ended) = oneshot::channel();
                let side = BoxSide {
                    client: client.clone(),
                    hang,
                    logins: tx.clone(),
                    _ended: ended_tx,
                    ended: Some(ended),
                    held: Vec::new(),
                };
                let config = config.clone();
                tokio::spawn(async move {
                    if let Ok(session) = russh::server::run_stream(config, tcp, side).await {
                        let _ = session.await;
                    }
                });
            }
        });
        TestBox {
            address,
            host_key,
            client_key,
            logins,
        }
    }

    /// The gateway's link to this box.
    pub(crate) fn link(&self, timeout: std::time::Duration) -> BoxLink {
        BoxLink::new(
            BoxSpec {
                name: "gpu1".into(),
                address: self.address.clone(),
                user: "dev".into(),
                key: Arc::new(self.client_key.clone()),
                host_keys: vec![PublicKey::from_openssh(&self.host_key).unwrap()],
                revoked: Vec::new(),
            },
            timeout,
        )
    }
}

struct BoxSide {
    client: PublicKey,
    hang: Hang,
    logins: mpsc::UnboundedSender<Login>,
    /// The end signal: its sender kept here, dropped with the connection; its receiver handed
    /// to the test at login.
    _ended: oneshot::Sender<()>,
    ended: Option<oneshot::Receiver<()>>,
    /// Channels never answered (`Hang::AtChannels`).
    held: Vec<ChannelOpenHandle>,
}

impl BoxSide {
    async fn channel(&mut self, reply: ChannelOpenHandle) -> Result<(), russh::Error> {
        match self.hang {
            Hang::AtChannels => self.held.push(reply),
            _ => reply.accept().await,
        }
        Ok(())
    }
}

impl russh::server::Handler for BoxSide {
    type Error = russh::Error;

    async fn auth_publickey_offered(&mut self, _: &str, _: PublicKeyOffer<'_>) -> Result<Auth, Self::Error> {
        if self.hang == Hang::AtLogin {
            std::future::pending::<()>().await;
        }
        Ok(Auth::Accept)
    }

    async fn auth_publickey(&mut self, _: &str, key: VerifiedPublicKey<'_>) -> Result<Auth, Self::Error> {
        Ok(if key.public_key.key_data() == self.client.key_data() {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn auth_succeeded(&mut self, session: &mut Session) -> Result<(), Self::Error> {
        if let Some(ended) = self.ended.take() {
            let _ = self.logins.send(Login {
                handle: session.handle(),
                ended,
            });
        }
        Ok(())
    }

    async fn channel_open_session(
        &mut self,
        _: Channel<Msg>,
        reply: ChannelOpenHandle,
        _: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channel(reply).await
    }

    async fn exec_request(&mut self, channel: ChannelId, _: &[u8], session: &mut Session) -> Result<(), Self::Error> {
        session.channel_success(channel)?;
        session.close(channel)?;
        Ok(())
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        _: Channel<Msg>,
        _: &str,
        _: u32,
        _: &str,
        _: u32,
        reply: ChannelOpenHandle,
        _: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channel(reply).await
    }
}
