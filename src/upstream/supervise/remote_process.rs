//! A server the gateway started on a box: the exec channel its script runs in, as a process the
//! supervisor can wait for and stop (`launch::Process::Remote`). Apart from `remote.rs`, which
//! starts it, so that `launch.rs` (which `remote.rs` uses) need not import `remote.rs` back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use russh::ChannelWriteHalf;
use russh::client::Msg;
use tokio::sync::watch;

use super::STOP_GRACE;
use crate::upstream::ssh_link::OpenChannel;

/// A server running in an exec channel on a box.
pub(super) struct RemoteProcess {
    pub(super) writer: ChannelWriteHalf<Msg>,
    /// How it ended, once it did.
    pub(super) ended: watch::Receiver<Option<String>>,
    /// Its process id on the box (0 until the script said it).
    pub(super) pid: Arc<AtomicU32>,
    pub(super) _open: OpenChannel,
}

impl RemoteProcess {
    pub(super) fn id(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// Until it ends: its exit status, or why the channel ended without one.
    pub(super) async fn wait(&mut self) -> String {
        match self.ended.wait_for(Option::is_some).await {
            Ok(ended) => ended.clone().unwrap_or_default(),
            Err(_) => "the channel ended".into(),
        }
    }

    /// End of its input: the script ends the server's group (TERM, KILL after 5 s). If it does
    /// not end in time, the channel is closed, which sshd turns into the same end of input.
    pub(super) async fn stop(&mut self) {
        let _ = self.writer.eof().await;
        let grace = STOP_GRACE + Duration::from_secs(2);
        if tokio::time::timeout(grace, self.wait()).await.is_err() {
            let _ = self.writer.close().await;
        }
    }
}
