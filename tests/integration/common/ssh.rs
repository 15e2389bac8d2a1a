//! The real OpenSSH client against the gateway's SSH front door: keys made with ssh-keygen, a
//! known_hosts file pinned to the gateway's host key, `ssh -N -L` tunnels.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::gateway::Gateway;
use super::process::{Guarded, output_within};

pub struct Key {
    pub private: PathBuf,
    pub public_line: String,
}

pub fn keygen(dir: &Path, name: &str) -> Key {
    let private = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&private)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let public_line = std::fs::read_to_string(private.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string();
    Key { private, public_line }
}

/// A known_hosts file trusting exactly the gateway's host key at its SSH address.
pub fn known_hosts(gw: &Gateway, dir: &Path) -> PathBuf {
    let ssh = gw.ssh.expect("the gateway has an SSH listener");
    let public = std::fs::read_to_string(gw.dir.path().join("certs/ssh_host_ed25519_key.pub")).unwrap();
    let path = dir.join("known_hosts");
    std::fs::write(&path, format!("[127.0.0.1]:{} {}", ssh.port(), public)).unwrap();
    path
}

/// `ssh` with the options every test uses: batch mode, pinned host key, only the given key;
/// `extra` options, then the destination, then `command` (if any).
pub fn ssh(gw: &Gateway, kh: &Path, key: &Path, user: &str, extra: &[&str], command: &[&str]) -> Command {
    let mut cmd = Command::new("ssh");
    cmd.args([
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "ConnectTimeout=10",
    ])
    .arg("-o")
    .arg(format!("UserKnownHostsFile={}", kh.display()))
    .arg("-i")
    .arg(key)
    .args(["-p", &gw.ssh.unwrap().port().to_string()])
    .args(extra)
    .arg(format!("{user}@127.0.0.1"))
    .args(command)
    .stdin(Stdio::null());
    cmd
}

/// Run an `ssh` command to its end (60 s at most, or it is killed and the test fails).
pub fn run(mut cmd: Command) -> Output {
    output_within(&mut cmd, None, Duration::from_secs(60))
}

pub struct Tunnel {
    child: Guarded,
    pub local: SocketAddr,
    pub stderr: Arc<Mutex<String>>,
}

impl Tunnel {
    /// `ssh -N -L <free port>:<target>:80`, up when its local port accepts.
    pub fn open(gw: &Gateway, kh: &Path, key: &Path, user: &str, target: &str) -> Tunnel {
        let port = super::free_port();
        let forward = format!("127.0.0.1:{port}:{target}:80");
        let mut cmd = ssh(
            gw,
            kh,
            key,
            user,
            &[
                "-N",
                "-o",
                "ExitOnForwardFailure=yes",
                "-o",
                "ServerAliveInterval=5",
                "-L",
                &forward,
            ],
            &[],
        );
        let mut child = Guarded::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::piped()), Duration::from_secs(2));
        let stderr = Arc::new(Mutex::new(String::new()));
        super::pump_lines(child.stderr.take().unwrap(), stderr.clone());
        let local: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(local).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("ssh exited ({status}): {}\n{}", stderr.lock().unwrap(), gw.logs());
            }
            assert!(
                Instant::now() < deadline,
                "the tunnel did not come up: {}",
                stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Tunnel { child, local, stderr }
    }

    pub fn close(&mut self) {
        self.child.stop();
    }
}
