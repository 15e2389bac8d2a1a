//! The HTTP core: serves any byte stream (a TLS stream, an SSH channel) with one hyper stack
//! (HTTP/1.1 and h2, upgrades) and the request pipeline. Connections drain on shutdown and are
//! cut when the drain deadline passes.

pub mod body;
pub mod error;
pub mod forward;
pub mod own_files;
pub mod pipeline;
pub mod request;
pub mod response;

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::gateway::Gateway;

/// How a connection reached the gateway.
#[derive(Debug, Clone)]
pub enum Front {
    /// HTTPS; `bound` is set on a project's own listener.
    Tls { bound: Option<Arc<str>> },
    /// An SSH `direct-tcpip` channel: the SSH login is the identity, the target is the project.
    Ssh { user: Arc<str>, project: Arc<str> },
}

#[derive(Debug)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub front: Front,
}

impl ConnInfo {
    pub fn scheme(&self) -> &'static str {
        match self.front {
            Front::Tls { .. } => "https",
            Front::Ssh { .. } => "http",
        }
    }

    pub fn transport(&self) -> &'static str {
        match self.front {
            Front::Tls { .. } => "tls",
            Front::Ssh { .. } => "ssh",
        }
    }

    pub fn bound_project(&self) -> Option<&str> {
        match &self.front {
            Front::Tls { bound } => bound.as_deref(),
            Front::Ssh { project, .. } => Some(project),
        }
    }
}

/// Serve HTTP on one connection until it closes, the gateway drains it, or the deadline cuts it.
pub async fn serve_connection<I>(gw: Arc<Gateway>, conn: Arc<ConnInfo>, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc_gw = gw.clone();
    let service = service_fn(move |req| pipeline::handle(svc_gw.clone(), conn.clone(), req));
    let connection = gw.http.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        res = connection.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
        _ = gw.shutdown.cancelled() => {}
    }
    // Draining: finish requests in flight, accept no new ones on this connection.
    connection.as_mut().graceful_shutdown();
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = gw.abort.cancelled() => {}
    }
}
