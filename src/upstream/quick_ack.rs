//! The TCP connection under a box's SSH connection, acknowledging at once what it receives.
//!
//! OpenSSH's sshd turns Nagle's algorithm off only for interactive sessions (a terminal), not
//! for a connection that only forwards, and it may write one answer as two packets: the second
//! then waits for the first one's acknowledgement, which Linux delays by up to 40 ms. Measured
//! on loopback (bench/boxhop.py, wrk -c1): p99 41 ms without this, the delayed ACK of every
//! few requests. The gateway cannot change sshd; it can acknowledge at once (`TCP_QUICKACK`,
//! which the kernel clears again as it sees fit, so it is set after every read).

use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub(crate) struct QuickAck(pub TcpStream);

impl QuickAck {
    fn ack_now(&self) {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket descriptor we own, and an int option of the right size; a
        // failure only leaves the kernel's default (delayed) acknowledgements.
        unsafe {
            libc::setsockopt(
                self.0.as_raw_fd(),
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
        let polled = Pin::new(&mut this.0).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.ack_now();
        }
        polled
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}
