//! The gateway's side of a box's SSH connection (russh's client `Handler`), deny by default: the
//! one thing it accepts is the box's pinned host key. Every channel the box opens is refused:
//! the gateway asks for all its channels itself (`direct-tcpip`, `session`) and forwards nothing
//! to a box (no agent, no X11, no remote port), so a channel a box opens is one nobody asked for.
//! russh's client accepts those by default and keeps each until the box closes it: a hostile box
//! opened ~57 000 and the gateway's memory grew by 530 MiB. A box that keeps opening them after
//! the first refusals is disconnected, and not tried again before the backoff allows.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use russh::ChannelOpenFailure;
use russh::client::{self, ChannelOpenHandle, Msg, Session};
use russh::keys::{PublicKey, PublicKeyOrCertificate};

use super::backoff::Backoff;

/// Channels a box may open on one connection, each refused, before the connection is dropped.
/// More than one: a single stray open (a misconfigured box) should not end the servers that
/// run in channels on the connection; a box that goes on is not misconfigured.
pub(super) const MOST_REFUSED: u32 = 8;

/// A host key the box presented that is not pinned, for the error.
pub(super) struct Offered {
    /// Its SHA-256 fingerprint, or "a host certificate".
    pub fingerprint: String,
    /// A `@revoked` line names it.
    pub revoked: bool,
}

pub(super) struct Pinned {
    /// The box's name, in logs and errors.
    pub box_name: String,
    pub expected: Vec<PublicKey>,
    /// Keys revoked (never among `expected`): refused like any other, but named so.
    pub revoked: Vec<PublicKey>,
    /// What the box offered instead, for the error.
    pub offered: Arc<Mutex<Option<Offered>>>,
    /// The link's last error and backoff, told why a connection was dropped from here (the
    /// link learns that its connection ended only when it next uses it).
    pub last_error: Arc<Mutex<Option<String>>>,
    pub backoff: Arc<Mutex<Backoff>>,
    /// Channels the box opened on this connection (each refused).
    pub refused: u32,
}

impl Pinned {
    /// Refuse a channel the box opened; the connection ends (an error from a handler ends
    /// russh's session, closing the socket and everything it held) once the box has opened
    /// `MOST_REFUSED`.
    async fn refuse(&mut self, kind: &str, reply: ChannelOpenHandle) -> Result<(), russh::Error> {
        reply.reject(ChannelOpenFailure::AdministrativelyProhibited).await;
        self.refused = self.refused.saturating_add(1);
        if self.refused == 1 {
            tracing::warn!(target: "security", r#box = %self.box_name, kind, reason = "box_opened_channel",
                "the box opened a channel the gateway never asked for: refused (a compromised or misconfigured box)");
        }
        if self.refused < MOST_REFUSED {
            return Ok(());
        }
        let why = format!(
            "box {}: it opened {} channels the gateway never asked for (the last a {kind} channel); its connection was dropped",
            self.box_name, self.refused
        );
        tracing::error!(target: "security", r#box = %self.box_name, refused = self.refused, reason = "box_opened_channel",
            "the box keeps opening channels the gateway never asked for: connection dropped");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        let jitter = super::backoff::jitter();
        self.backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failed(Instant::now(), jitter);
        Err(russh::Error::ChannelOpenFailure(
            ChannelOpenFailure::AdministrativelyProhibited,
        ))
    }
}

/// russh's handlers for channels the box opens, each the same refusal: `name("kind", the
/// arguments between the channel and the reply)`.
macro_rules! refused_opens {
    ($($name:ident($kind:literal $(, $arg:ty)*);)*) => {$(
        async fn $name(
            &mut self,
            _: russh::Channel<Msg>,
            $(_: $arg,)*
            reply: ChannelOpenHandle,
            _: &mut Session,
        ) -> Result<(), Self::Error> {
            self.refuse($kind, reply).await
        }
    )*};
}

impl client::Handler for Pinned {
    type Error = russh::Error;

    async fn check_server_key(&mut self, offered: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let key = match offered {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            // A host certificate is not a pinned key.
            PublicKeyOrCertificate::Certificate(_) => {
                *self.offered.lock().unwrap_or_else(|e| e.into_inner()) = Some(Offered {
                    fingerprint: "a host certificate".into(),
                    revoked: false,
                });
                return Ok(false);
            }
        };
        let revoked = self.revoked.iter().any(|k| k.key_data() == key.key_data());
        if !revoked && self.expected.iter().any(|k| k.key_data() == key.key_data()) {
            return Ok(true);
        }
        let fingerprint = key.fingerprint(russh::keys::HashAlg::Sha256).to_string();
        *self.offered.lock().unwrap_or_else(|e| e.into_inner()) = Some(Offered { fingerprint, revoked });
        Ok(false)
    }

    // Every kind of channel a box can open: refused and counted (`Pinned::refuse`).
    refused_opens! {
        server_channel_open_session("session");
        server_channel_open_direct_tcpip("direct-tcpip", &str, u32, &str, u32);
        server_channel_open_forwarded_tcpip("forwarded-tcpip", &str, u32, &str, u32);
        server_channel_open_direct_streamlocal("direct-streamlocal", &str);
        server_channel_open_forwarded_streamlocal("forwarded-streamlocal", &str);
        server_channel_open_agent_forward("agent");
        server_channel_open_x11("x11", &str, u32);
        server_channel_open_unknown("unknown");
    }

    /// An unknown type comes to `server_channel_open_unknown`, to be refused and counted like
    /// the others (russh would refuse it itself, uncounted: a flood of them would go on).
    async fn should_accept_unknown_server_channel(&mut self, _: russh::ChannelId, _: &str) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use russh::{ChannelOpenFailure, Error};

    use super::MOST_REFUSED;
    use crate::upstream::test_box::{Hang, Login, TestBox};

    /// Every wait in these tests; none should come near it.
    const BOUND: Duration = Duration::from_secs(10);

    /// The box opens a channel toward the gateway, one of seven kinds by `n`.
    async fn open_from_box(login: &Login, n: u32) -> Result<(), Error> {
        let h = &login.handle;
        let opened = match n % 7 {
            0 => h.channel_open_session().await,
            1 => h.channel_open_x11("127.0.0.1", 6010).await,
            2 => {
                h.channel_open_forwarded_tcpip("127.0.0.1", 8080, "10.0.0.9", 40000)
                    .await
            }
            3 => h.channel_open_agent().await,
            4 => h.channel_open_direct_tcpip("127.0.0.1", 22, "10.0.0.9", 40000).await,
            5 => h.channel_open_forwarded_streamlocal("/tmp/forwarded.sock").await,
            _ => h.channel_open_direct_streamlocal("/tmp/direct.sock").await,
        };
        opened.map(drop)
    }

    /// A box and the gateway's link to it, connected: the box's side of the connection.
    async fn connected(test_box: &mut TestBox, link: &crate::upstream::ssh_link::BoxLink) -> Login {
        let (_stream, _count) = link.open("127.0.0.1", 4096).await.expect("the link connects");
        tokio::time::timeout(BOUND, test_box.logins.recv())
            .await
            .expect("the box saw the login")
            .expect("the box is running")
    }

    fn refused(r: &Result<(), Error>) -> bool {
        matches!(
            r,
            Err(Error::ChannelOpenFailure(
                ChannelOpenFailure::AdministrativelyProhibited
            ))
        )
    }

    /// Each kind of channel a box can open (session, x11, forwarded-tcpip, agent, direct-tcpip,
    /// and the two streamlocal ones) is refused as administratively prohibited, and the
    /// gateway's own channels on the same connection still open.
    #[tokio::test]
    async fn every_kind_of_channel_a_box_opens_is_refused_and_the_link_stays_usable() {
        let mut test_box = TestBox::start(Hang::Never).await;
        let link = test_box.link(BOUND);
        let login = connected(&mut test_box, &link).await;
        for n in 0..MOST_REFUSED - 1 {
            let r = tokio::time::timeout(BOUND, open_from_box(&login, n))
                .await
                .expect("the gateway answers the box's channel");
            assert!(refused(&r), "channel kind {n} opened by the box: {r:?}");
        }
        link.open("127.0.0.1", 4096)
            .await
            .expect("the gateway's own channels still open");
        let report = link.report();
        assert_eq!((report.state, report.connects), ("connected", 1));
        assert_eq!(report.last_error, None);
    }

    /// A box that goes on opening channels (a tester's opened ~57 000) is disconnected at the
    /// `MOST_REFUSED`th, with the reason in the link's status, and is not connected to again
    /// before the backoff's next try.
    #[tokio::test]
    async fn a_box_that_keeps_opening_channels_is_disconnected_with_the_reason() {
        let mut test_box = TestBox::start(Hang::Never).await;
        let link = test_box.link(BOUND);
        let mut login = connected(&mut test_box, &link).await;
        let mut refusals = 0;
        let mut cut_at = None;
        for n in 0..1000 {
            let r = tokio::time::timeout(BOUND, open_from_box(&login, n))
                .await
                .expect("the gateway answers the box's channel, or the connection ends");
            assert!(r.is_err(), "the gateway accepted channel {n} opened by the box");
            if !refused(&r) {
                cut_at = Some(n);
                break;
            }
            refusals += 1;
        }
        assert_eq!(
            cut_at,
            Some(MOST_REFUSED - 1),
            "the connection was not cut after {refusals} refusals"
        );
        tokio::time::timeout(BOUND, &mut login.ended)
            .await
            .expect("the connection ended")
            .unwrap_err();
        let report = link.report();
        assert_eq!(report.state, "not connected");
        let why = report.last_error.unwrap_or_default();
        assert!(
            why.contains("box gpu1: it opened 8 channels the gateway never asked for"),
            "{why}"
        );
        let again = link
            .open("127.0.0.1", 4096)
            .await
            .err()
            .expect("refused until the backoff's next try");
        assert!(again.to_string().contains("unreachable, tried again in"), "{again}");
        assert!(again.to_string().contains("opened 8 channels"), "{again}");
        assert!(
            test_box.logins.try_recv().is_err(),
            "the gateway logged in again at once"
        );
    }
}
