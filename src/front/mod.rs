//! The front doors: listeners and TLS (`listen`), the dev CA (`devcert`), ACME (`acme`), the SSH
//! server (`ssh`), the HTTP connection every byte stream is served on (`connection`), the loopback
//! admin listener (`admin`) and the control socket (`control`).

pub mod acme;
pub mod admin;
pub mod connection;
pub mod control;
mod control_tasks;
mod control_triggers;
pub mod devcert;
pub mod listen;
pub mod proxy_header;
pub(crate) mod schedule;
pub mod ssh;
mod watchers;
