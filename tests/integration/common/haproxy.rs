//! Debian's HAProxy in TCP mode on loopback, for the load-balancer tests (issue 27).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::process::Guarded;

/// HAProxy listening on `127.0.0.1:<port>`, its config in `dir`; `defaults` and `backend` are
/// the lines added to the `defaults` section and the whole backend `gw` (servers and balance).
/// Stopped when the guard drops. Bounded: it listens within 10 s or the test fails saying so.
pub fn start(dir: &Path, port: u16, defaults: &str, backend: &str) -> Guarded {
    let config = dir.join("haproxy.cfg");
    std::fs::write(
        &config,
        format!(
            "global\n  maxconn 200\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 60s\n  timeout server 60s\n{defaults}\
             frontend fe\n  bind 127.0.0.1:{port}\n  default_backend gw\nbackend gw\n{backend}"
        ),
    )
    .unwrap();
    let child = Guarded::spawn(
        Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        Duration::from_secs(5),
    );
    let until = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "HAProxy did not listen on {port} in 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}
