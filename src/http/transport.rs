//! How a request's connection reached the gateway: the transport (TLS on which listener, or an
//! SSH channel), the peer, and the connection's own memory (its last verified password, its place
//! in the connection table). Every phase of the pipeline reads it; only the front sets it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::gateway::Gateway;
use crate::gateway::state::State;

/// Where a request is handled: the gateway, its running state as the request found it, the
/// connection it came on and the client's address (after trusted proxies). The proxy's phases
/// and the gateway's pages (`web::Ctx`) both start from it.
#[derive(Clone, Copy)]
pub(crate) struct Here<'a> {
    pub gw: &'a Arc<Gateway>,
    pub state: &'a State,
    pub conn: &'a ConnInfo,
    pub client: IpAddr,
}

/// How a connection reached the gateway.
#[derive(Debug, Clone)]
pub enum Front {
    /// HTTPS; `bound` is set on a project's own listener.
    Tls { bound: Option<Arc<str>> },
    /// An SSH `direct-tcpip` channel: the SSH login is the identity, the target is the project.
    Ssh { user: Arc<str>, project: Arc<str> },
}

pub struct ConnInfo {
    pub peer: SocketAddr,
    pub front: Front,
    /// The last password credential verified on this connection (`auth/memo.rs`).
    pub auth_memo: crate::auth::memo::AuthMemo,
    /// An HTTPS connection's place in the connection table (`gateway/connections.rs`): promoted by its
    /// first authenticated request, shed (its token cancelled) while it is idle and still
    /// unauthenticated. SSH channels have none: their connection's place is held by the session.
    pub lease: Option<Arc<crate::gateway::connections::Lease>>,
    /// Set when the connection is served by `front::connection::serve_connection`: its task
    /// wakes at least this often (its idle tick) and polls its HTTP/1 requests when it does, so
    /// their upstream deadline may wait to arm its timer (`pipeline/deadline.rs`). `None` for
    /// the gateway's own requests, which no connection polls.
    pub(crate) tick: Option<std::time::Duration>,
}

impl ConnInfo {
    pub fn new(peer: SocketAddr, front: Front) -> ConnInfo {
        ConnInfo {
            peer,
            front,
            auth_memo: Default::default(),
            lease: None,
            tick: None,
        }
    }

    pub(crate) fn with_lease(
        peer: SocketAddr,
        front: Front,
        lease: Arc<crate::gateway::connections::Lease>,
    ) -> ConnInfo {
        ConnInfo {
            lease: Some(lease),
            ..ConnInfo::new(peer, front)
        }
    }

    /// A request on this connection presented a valid credential: the connection leaves the
    /// unauthenticated share. After the first, one relaxed load.
    pub(crate) fn authenticated(&self, gw: &Gateway) {
        if let Some(lease) = &self.lease {
            gw.doors.conn_table.promote(lease);
        }
    }
}

impl ConnInfo {
    pub(crate) fn scheme(&self) -> &'static str {
        match self.front {
            Front::Tls { .. } => "https",
            Front::Ssh { .. } => "http",
        }
    }

    pub(crate) fn transport(&self) -> &'static str {
        match self.front {
            Front::Tls { .. } => "tls",
            Front::Ssh { .. } => "ssh",
        }
    }

    pub(crate) fn bound_project(&self) -> Option<&str> {
        match &self.front {
            Front::Tls { bound } => bound.as_deref(),
            Front::Ssh { project, .. } => Some(project),
        }
    }
}
