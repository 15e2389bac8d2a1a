//! Shared test fixtures: the gateway binary, a TLS client and request helpers (`client`), an
//! in-process fake upstream, the real OpenCode server with a fake model, SSH clients, the stacks
//! tests start (`stack`), gateway-spawned projects (`supervised`) and the guard and deadline every
//! child process of a test runs under (`process`). Helpers more than one test
//! file uses live here, not in a test file.

#![allow(dead_code)]

pub mod audit;
pub mod browser;
pub mod client;
pub mod dev_config;
pub mod fake_upstream;
pub mod gateway;
pub mod haproxy;
pub mod lan_phone;
pub mod login;
pub mod netns;
pub mod newcomer;
pub mod opencode;
pub mod opencode2;
pub mod os_users;
pub mod pg_config;
#[path = "../../support/postgres_cluster.rs"]
pub mod postgres;
pub mod process;
pub mod push_service;
pub mod qr;
/// The one way a test skips itself (it fails instead under CI): `support/skip.rs`.
pub use postgres::skip;
pub mod ssh;
pub mod sshd;
pub mod stack;
pub mod supervised;
pub mod tmux;
pub mod webhook;

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex};

/// Copy a child's output into a shared string, line by line, on a thread.
pub fn pump_lines(stream: impl Read + Send + 'static, sink: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let mut r = BufReader::new(stream);
        let mut line = String::new();
        while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            sink.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
}

/// Write a 0600 file (passwords for `upstream_password_file`).
pub fn write_secret(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A loopback port nothing listens on right now, for a program that must be told its port
/// before it binds (sshd, pebble, OpenCode): another process may take it first, so callers that
/// can retry on "Address already in use" do.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The first line of `text` starting with `prefix` (a `doctor` finding), or fail showing `text`.
pub fn line_starting(text: &str, prefix: &str) -> String {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{text}"))
        .to_string()
}
