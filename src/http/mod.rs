//! HTTP pieces every stage shares and none decides with: the streaming body (`body`), errors and
//! their one status table (`error`), the upstream-bound rewrite of headers and query (`rewrite`),
//! response compression (`compress`), reading what a refused request still sends (`discard`) and
//! the client's address behind trusted proxies (`client_addr`).

pub mod body;
pub mod client_addr;
pub mod compress;
pub mod discard;
pub mod error;
pub mod rewrite;
