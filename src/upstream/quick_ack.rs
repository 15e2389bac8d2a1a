//! The TCP connection under a box's SSH connection, acknowledging at once what it receives.
//!
//! OpenSSH's sshd turns Nagle's algorithm off only for interactive sessions (a terminal), not
//! for a connection that only forwards, and it may write one answer as two packets: the second
//! then waits for the first one's acknowledgement, which Linux delays by up to 40 ms. Measured
//! on loopback (bench/boxhop.py, wrk -c1): p99 41 ms without this, the delayed ACK of every
//! few requests. The gateway cannot change sshd; it can acknowledge at once (`TCP_QUICKACK`,
//! which the kernel clears again as it sees fit, so it is set after every read). It also notes
//! that the box said anything at all, so a handshake that timed out can say which step hung.

use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub(crate) struct QuickAck {
    tcp: TcpStream,
    /// Set at the first byte read from the box.
    heard: Arc<AtomicBool>,
}

impl QuickAck {
    /// `tcp`, and a flag set once the box has sent a byte.
    pub(crate) fn new(tcp: TcpStream) -> (QuickAck, Arc<AtomicBool>) {
        let heard = Arc::new(AtomicBool::new(false));
        (
            QuickAck {
                tcp,
                heard: heard.clone(),
            },
            heard,
        )
    }

    fn ack_now(&self) {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket descriptor we own, and an int option of the right size; a
        // failure only leaves the kernel's default (delayed) acknowledgements.
        unsafe {
            libc::setsockopt(
                self.tcp.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.ack_now();
            this.heard.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}
