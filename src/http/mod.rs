//! HTTP pieces every stage shares and none decides with: a request's audit record, begun by the
//! plan and finished when the body ends (`audit`), the streaming body (`body`), errors and
//! their one status table (`error`), the upstream-bound rewrite of headers and query (`rewrite`),
//! the gateway's cookies (`cookie`), reading what a refused request still sends (`discard`) and
//! the client's address behind trusted proxies (`client_addr`).

pub mod audit;
pub mod body;
pub mod client_addr;
pub mod cookie;
pub mod discard;
pub mod error;
pub mod rewrite;
pub(crate) mod source;
pub mod transport;
pub mod upstream_head;
