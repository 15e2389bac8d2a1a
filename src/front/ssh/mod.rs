//! The SSH front door: `ssh -N -L 4096:<project>:80 -p 2222 user@host`, then
//! `opencode attach http://127.0.0.1:4096`. Key (or gateway password) login; `direct-tcpip` to
//! granted projects only, served by the same HTTP pipeline as HTTPS; everything else refused.

pub mod handler;
pub mod host_key;
pub mod server;
