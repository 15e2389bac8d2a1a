//! Keep-alive HTTP/1.1 connections to one OpenCode server, for the request hot path.
//!
//! Each [`Endpoint`](crate::upstream::endpoint::Endpoint) owns one pool, so a checkout is a lock on a short
//! vector: no pool key to hash, no per-request task to watch a connection come back, nothing shared
//! between upstreams. A connection is lent with its response ([`Lease`]) and comes back when the
//! response body has been read to its end; a response dropped early takes its connection with it,
//! and hyper closes it. (hyper-util's general-purpose pool did all of this too, at about a tenth of
//! the gateway's instructions per request: see docs/performance.md.)
//!
//! The pool also keeps the direct road's connections between requests (`kept`; `direct.rs`
//! writes and reads them itself, for requests without a body): one pool and one dial per server,
//! two ways of driving a connection.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::upstream::{BoxError, POOL_IDLE as IDLE_FOR, UpstreamBody};

/// Idle connections kept per upstream; more are closed when they come back.
const MAX_IDLE: usize = 256;

/// How long a connection whose answer ended stays its last principal's: within it, only the same
/// principal's next request may take it. HTTP/1.1 answers carry no request id, so an upstream
/// that sends something unasked after an answer (a second answer 150 ms later, hostile round
/// five, item 9) would have it read as the next request's answer; on a server several users
/// share, that hands one user's answer to another. After the grace, a connection that is still
/// quiet (checked as it is taken: `quiet`, or hyper's own connection task, which closes a
/// connection that receives bytes while idle) may serve anyone.
pub(crate) const REUSE_GRACE: Duration = Duration::from_secs(1);

/// Whose request a connection last answered: a digest of the principal's name (a user's, or the
/// gateway's own), compared for equality only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner(u64);

impl Owner {
    /// The gateway's own requests (health checks, the API document, the inbox's watch).
    pub(crate) const GATEWAY: Owner = Owner(0);

    /// The principal named `name` (FNV-1a: a few nanoseconds for a user name).
    pub(crate) fn of(name: &str) -> Owner {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Owner(h | 1)
    }

    /// May a connection this owner gave back at `since` serve `asker` at `now`?
    fn lends_to(self, asker: Owner, since: Instant, now: Instant) -> bool {
        self == asker || now.duration_since(since) >= REUSE_GRACE
    }
}

struct Idle {
    sender: SendRequest<UpstreamBody>,
    since: Instant,
    owner: Owner,
}

/// A connection of the direct road (`direct.rs`) between requests: no task drives it.
struct Kept {
    io: Io,
    since: Instant,
    owner: Owner,
}

/// How a pool reaches its server: a TCP connection to its address, or a `direct-tcpip` channel
/// on a box's SSH connection to the address as the box sees it. The connection that comes back
/// is driven the same way either way: one road, two transports.
#[derive(Clone)]
pub(crate) enum Dial {
    Tcp,
    Box {
        link: Arc<crate::upstream::ssh_link::BoxLink>,
        host: String,
        port: u16,
    },
}

/// A connection to the server, by either transport. The channel is boxed: every upstream
/// connection's IO is as large as its largest variant, and a channel's stream is larger than a
/// socket.
pub(crate) enum Io {
    Tcp(TcpStream),
    Channel(Box<Channel>),
}

/// A box's channel, counted open (per box) until dropped.
pub(crate) struct Channel {
    stream: russh::ChannelStream<russh::client::Msg>,
    _open: crate::upstream::ssh_link::OpenChannel,
}

impl tokio::io::AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Channel(c) => Pin::new(&mut c.stream).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Channel(c) => Pin::new(&mut c.stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Channel(c) => Pin::new(&mut c.stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Channel(c) => Pin::new(&mut c.stream).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Channel(c) => Pin::new(&mut c.stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Tcp(s) => s.is_write_vectored(),
            Io::Channel(c) => c.stream.is_write_vectored(),
        }
    }
}

pub struct Pool {
    /// The server's address as the gateway (TCP) or the box (SSH) reaches it.
    authority: String,
    dial: Dial,
    /// One idle list per worker runtime (and one, first, for everything else): a connection's
    /// task runs on the runtime that opened it, so it is lent only to requests on that runtime.
    /// Most recently returned last: checkouts take the warmest connection.
    idle: Vec<Mutex<Vec<Idle>>>,
    /// The direct road's connections between requests, by worker as `idle`.
    kept: Vec<Mutex<Vec<Kept>>>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}

/// A connection lent with a response; [`Lease::release`] gives it back once the response is read.
pub struct Lease {
    pool: Arc<Pool>,
    sender: SendRequest<UpstreamBody>,
    worker: usize,
    owner: Owner,
}

impl Lease {
    pub(crate) fn release(self) {
        let mut idle = self.pool.idle[self.worker].lock().unwrap_or_else(|e| e.into_inner());
        // Oldest first: drop what has idled too long, then make room.
        let now = Instant::now();
        let stale = idle.iter().take_while(|c| now - c.since >= IDLE_FOR).count();
        idle.drain(..stale);
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push(Idle {
            sender: self.sender,
            since: now,
            owner: self.owner,
        });
    }
}

/// An answer's body that gives its connection back to the pool when it ends: the gateway's own
/// requests (health checks, the API document, the inbox's subscription and lists, session
/// lookups) take the same pooled connections as proxied ones. Dropped before its end, it takes
/// the connection with it, and hyper closes it.
pub(crate) struct Leased {
    body: Incoming,
    lease: Option<Lease>,
}

impl Leased {
    pub(crate) fn new(body: Incoming, lease: Lease) -> Self {
        let mut leased = Leased {
            body,
            lease: Some(lease),
        };
        leased.release_if_ended();
        leased
    }

    fn release_if_ended(&mut self) {
        if self.body.is_end_stream()
            && let Some(lease) = self.lease.take()
        {
            lease.release();
        }
    }
}

impl Body for Leased {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => {
                if let Some(lease) = self.lease.take() {
                    lease.release();
                }
            }
            // An error: the connection goes with the lease.
            Poll::Ready(Some(Err(_))) => drop(self.lease.take()),
            Poll::Ready(Some(Ok(_))) => self.release_if_ended(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Whether a kept connection has nothing to read, without waiting: its last answer was read to
/// its end, so data now is out of step and an end means the server closed it. (On a socket whose
/// readiness is stale this is one `recv` that finds nothing.)
fn quiet(io: &mut Io) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    let mut buf = tokio::io::ReadBuf::uninit(&mut byte);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    matches!(
        tokio::io::AsyncRead::poll_read(Pin::new(io), &mut cx, &mut buf),
        Poll::Pending
    )
}

impl Pool {
    #[cfg(test)]
    pub(crate) fn new(authority: String) -> Arc<Self> {
        Self::with_dial(authority, Dial::Tcp)
    }

    /// A pool whose connections are made by `dial` (a box's channels) to `authority`.
    pub(crate) fn with_dial(authority: String, dial: Dial) -> Arc<Self> {
        let lists = crate::support::workers::count() + 1;
        Arc::new(Pool {
            authority,
            dial,
            idle: (0..lists).map(|_| Mutex::new(Vec::new())).collect(),
            kept: (0..lists).map(|_| Mutex::new(Vec::new())).collect(),
        })
    }

    pub(crate) fn dial(&self) -> &Dial {
        &self.dial
    }

    /// The idle lists of the worker this runs on.
    pub(crate) fn worker(&self) -> usize {
        crate::support::workers::current() % self.idle.len()
    }

    /// The direct road's most recently kept connection on `worker` that `owner` may take (its
    /// own, or one past [`REUSE_GRACE`]), that has not idled too long and has nothing to read. No
    /// task watches a kept connection, so anything that arrived on it since its answer ended (the
    /// server's close, or bytes no request asked for) is found here, and the connection is closed
    /// rather than have those bytes read as the next answer.
    pub(crate) fn take_kept(&self, worker: usize, owner: Owner) -> Option<Io> {
        loop {
            let mut io = {
                let mut kept = self.kept[worker].lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                if kept.last().is_some_and(|c| now - c.since >= IDLE_FOR) {
                    // The newest has idled too long: so have all the others.
                    kept.clear();
                    return None;
                }
                let at = kept.iter().rposition(|c| c.owner.lends_to(owner, c.since, now))?;
                kept.remove(at).io
            };
            if quiet(&mut io) {
                return Some(io);
            }
        }
    }

    /// A direct road's connection whose answer to `owner` was read to its end, kept for the next
    /// request.
    pub(crate) fn give_back(&self, worker: usize, io: Io, owner: Owner) {
        let mut kept = self.kept[worker].lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let stale = kept.iter().take_while(|c| now - c.since >= IDLE_FOR).count();
        kept.drain(..stale);
        if kept.len() >= MAX_IDLE {
            kept.remove(0);
        }
        kept.push(Kept { io, since: now, owner });
    }

    /// The warmest idle connection `owner` may take (see [`REUSE_GRACE`]).
    fn checkout(&self, list: usize, owner: Owner) -> Option<SendRequest<UpstreamBody>> {
        let mut idle = self.idle[list].lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        idle.retain(|c| !c.sender.is_closed() && now - c.since < IDLE_FOR);
        let at = idle.iter().rposition(|c| c.owner.lends_to(owner, c.since, now))?;
        Some(idle.remove(at).sender)
    }

    /// A new connection to the server, by the pool's transport.
    pub(crate) async fn dial_io(&self, timeout: Duration) -> Result<Io, BoxError> {
        let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out");
        Ok(match &self.dial {
            Dial::Tcp => {
                let tcp = tokio::time::timeout(timeout, TcpStream::connect(&self.authority))
                    .await
                    .map_err(|_| timed_out())??;
                tcp.set_nodelay(true)?;
                Io::Tcp(tcp)
            }
            Dial::Box { link, host, port } => {
                // Boxed: opening a channel (and maybe the SSH connection) is a large future, and
                // it would otherwise size every request's future, which hyper keeps for the
                // connection's life (idle streams measured 8 KiB more each, docs/performance.md).
                let opening = Box::pin(link.open(host, *port));
                let (stream, open) = tokio::time::timeout(timeout, opening)
                    .await
                    .map_err(|_| format!("box {}: no channel to {host}:{port} in time", link.name()))??;
                Io::Channel(Box::new(Channel { stream, _open: open }))
            }
        })
    }

    async fn connect(&self, timeout: Duration) -> Result<SendRequest<UpstreamBody>, BoxError> {
        let io = self.dial_io(timeout).await?;
        let (sender, conn) = http1::Builder::new().handshake(TokioIo::new(io)).await?;
        // The connection is driven by its own task; upgrades (terminal WebSockets) hand the
        // socket over when the response is a 101.
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Send `req` on an idle connection, or a new one. A request that a pooled connection could
    /// not take (the server had just closed it) is sent again on another, as it never left.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut req: Request<UpstreamBody>,
        owner: Owner,
        connect_timeout: Duration,
    ) -> Result<(Response<Incoming>, Lease), BoxError> {
        let worker = self.worker();
        loop {
            let (mut sender, pooled) = match self.checkout(worker, owner) {
                Some(s) => (s, true),
                // Boxed: a new connection is rare once the pool is warm, and the request's future
                // (which hyper keeps for an HTTP/1.1 client connection's life) would otherwise be
                // sized for the connect and the handshake.
                None => (Box::pin(self.connect(connect_timeout)).await?, false),
            };
            // A pooled connection came back as its last body ended; its task may not have
            // marked it ready yet.
            if let Err(e) = sender.ready().await {
                if pooled {
                    continue;
                }
                return Err(e.into());
            }
            match sender.try_send_request(req).await {
                Ok(response) => {
                    return Ok((
                        response,
                        Lease {
                            pool: self.clone(),
                            sender,
                            worker,
                            owner,
                        },
                    ));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if pooled => req = unsent,
                    _ => return Err(e.into_error().into()),
                },
            }
        }
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle.iter().map(|l| l.lock().unwrap().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A server that answers every request on a connection with "ok", counting the connections.
    async fn server() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use crate::upstream::test_server::{Act, serve};
        serve(|_| vec![Act::Write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")]).await
    }

    fn get(authority: &str) -> Request<UpstreamBody> {
        Request::get("/global/health")
            .header("host", authority)
            .body(UpstreamBody::Empty)
            .unwrap()
    }

    /// Read the answer to its end and give the connection back.
    /// A health check through `pool`, answered within a second.
    async fn health(pool: &Arc<Pool>, addr: &str) -> (Response<Incoming>, Lease) {
        pool.send(get(addr), Owner::GATEWAY, Duration::from_secs(1))
            .await
            .unwrap()
    }

    async fn finish(resp: Response<Incoming>, lease: Lease) {
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "ok");
        lease.release();
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_body_was_read() {
        let (addr, accepted) = server().await;
        let pool = Pool::new(addr.clone());
        for _ in 0..5 {
            let (resp, lease) = health(&pool, &addr).await;
            finish(resp, lease).await;
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(pool.idle_count(), 1);
    }

    #[tokio::test]
    async fn concurrent_requests_get_their_own_connections() {
        let (addr, accepted) = server().await;
        let pool = Pool::new(addr.clone());
        let (a, lease_a) = health(&pool, &addr).await;
        let (b, lease_b) = health(&pool, &addr).await;
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
        finish(a, lease_a).await;
        finish(b, lease_b).await;
        assert_eq!(pool.idle_count(), 2);
    }

    #[tokio::test]
    async fn a_dropped_lease_is_not_reused_and_a_closed_server_is_an_error() {
        let (addr, accepted) = server().await;
        let pool = Pool::new(addr.clone());
        let (_resp, lease) = health(&pool, &addr).await;
        drop(lease);
        let (resp, lease) = health(&pool, &addr).await;
        finish(resp, lease).await;
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);

        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = closed.local_addr().unwrap().to_string();
        drop(closed);
        let err = Pool::new(gone.clone())
            .send(get(&gone), Owner::GATEWAY, Duration::from_secs(1))
            .await
            .err()
            .expect("nothing listens there");
        assert_eq!(crate::upstream::describe(&*err), "connection refused");
    }

    /// The gateway's own requests (`Endpoint::send`) take the same connections: a `Leased` body
    /// read to its end gives its connection back, one dropped before its end does not.
    #[tokio::test]
    async fn a_leased_body_gives_its_connection_back_when_it_ends() {
        let (addr, accepted) = server().await;
        let pool = Pool::new(addr.clone());
        for _ in 0..3 {
            let (resp, lease) = health(&pool, &addr).await;
            let body = Leased::new(resp.into_body(), lease);
            assert_eq!(body.collect().await.unwrap().to_bytes(), "ok");
        }
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one connection for all three"
        );
        assert_eq!(pool.idle_count(), 1);
        let (resp, lease) = health(&pool, &addr).await;
        drop(Leased::new(resp.into_body(), lease));
        assert_eq!(
            pool.idle_count(),
            0,
            "a body dropped before its end takes its connection"
        );
    }
}
