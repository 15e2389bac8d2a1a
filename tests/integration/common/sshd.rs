//! A box for the tests of projects on other machines (issue 24): a real OpenSSH server (`sshd`
//! on a loopback port, its own host key, the keys a test authorizes), the gateway's key to it,
//! and the `[[box]]` table that points at it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::process::Guarded;

/// An OpenSSH server on a loopback port that lets in one key (as root: the tests run as root).
pub struct Sshd {
    pub child: Guarded,
    pub port: u16,
    /// Its host key, as an OpenSSH public key line.
    pub host_key: String,
    /// What it logged (DEBUG1: each forwarded channel's target).
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    _dir: tempfile::TempDir,
}

pub fn keygen(path: &Path) {
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

impl Sshd {
    /// Started on a picked port (tried again if another process took it first), returned once
    /// it accepts connections, bounded.
    pub fn start(authorized_key: &str) -> Sshd {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        std::fs::write(d.join("authorized_keys"), authorized_key).unwrap();
        // sshd reads the key file as the user logging in, who may not be root.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(d.join("authorized_keys"), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        for _ in 0..5 {
            let port = crate::common::free_port();
            let config = format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nAllowTcpForwarding local\nPermitOpen 127.0.0.1:*\nAllowAgentForwarding no\nX11Forwarding no\nPermitTTY no\nLogLevel DEBUG1\n",
                d = d.display()
            );
            std::fs::write(d.join("sshd_config"), config).unwrap();
            let mut child = Guarded::spawn(
                std::process::Command::new("/usr/sbin/sshd")
                    .args(["-D", "-e", "-f"])
                    .arg(d.join("sshd_config"))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped()),
                Duration::from_secs(5),
            );
            let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
            crate::common::pump_lines(child.stderr.take().unwrap(), log.clone());
            let listening = |_: &str| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
            if crate::common::process::ready_or_exited(&mut child, &log, Duration::from_secs(20), "sshd", listening) {
                let host_key = std::fs::read_to_string(d.join("host_key.pub"))
                    .unwrap()
                    .trim()
                    .to_string();
                return Sshd {
                    child,
                    port,
                    host_key,
                    log,
                    _dir: dir,
                };
            }
            let log = log.lock().unwrap().clone();
            assert!(log.contains("Address already in use"), "sshd exited:\n{log}");
        }
        panic!("5 picked ports were taken before sshd could bind them");
    }
}

/// The gateway's key to the box, written into `dir` (0600), and its public line.
pub fn client_key(dir: &Path) -> (PathBuf, String) {
    let key = dir.join("box_ed25519");
    keygen(&key);
    let public = std::fs::read_to_string(dir.join("box_ed25519.pub")).unwrap();
    (key, public)
}

pub fn box_table(port: u16, key: &Path, host_key: &str) -> String {
    box_table_as("root", port, key, host_key)
}

/// The box table for logging in as `user`, with the repository's `opencode` to spawn.
pub fn box_table_as(user: &str, port: u16, key: &Path, host_key: &str) -> String {
    format!(
        "[[box]]\nname = \"gpu1\"\nssh = \"{user}@127.0.0.1:{port}\"\nkey = \"{}\"\nhost_key = \"{host_key}\"\nopencode = \"{}\"\n\n",
        key.display(),
        crate::common::opencode::opencode_bin().display()
    )
}

/// A box for a whole test: its sshd, and the gateway's key to it, narrowed to forwarding to the
/// box's loopback (no `command=`: spawning runs a command, and docs/configuration.md says why
/// a forced command would not narrow that).
pub struct TestBox {
    pub sshd: Sshd,
    /// Who the gateway logs in as.
    pub user: String,
    key: PathBuf,
    _keys: tempfile::TempDir,
}

impl TestBox {
    /// Logged in to as root.
    pub fn start() -> TestBox {
        Self::start_as("root")
    }

    fn start_as(user: &str) -> TestBox {
        let keys = tempfile::tempdir().unwrap();
        let (key, public) = client_key(keys.path());
        let sshd = Sshd::start(&format!("restrict,port-forwarding,permitopen=\"127.0.0.1:*\" {public}"));
        TestBox {
            sshd,
            user: user.to_string(),
            key,
            _keys: keys,
        }
    }

    /// Logged in to as its own OS user `name` (made if missing, unlocked for sshd), the way a
    /// box's servers should run: not as root, and not as the gateway's user. A user per test, so
    /// one test's count of what runs on the box never sees another's. `None` when OS users
    /// cannot be made (said loudly: see `os_users`).
    pub fn with_own_user(name: &str) -> Option<(TestBox, super::os_users::OsUser)> {
        let user = super::os_users::ensure(&[name])?.remove(0);
        super::os_users::unlock_for_ssh(&user);
        Some((Self::start_as(&user.name), user))
    }

    /// Its `[[box]]` table, named gpu1.
    pub fn table(&self) -> String {
        box_table_as(&self.user, self.sshd.port, &self.key, &self.sshd.host_key)
    }

    /// `config` with its project `name` moved onto this box, and the box's table.
    pub fn put_on(&self, config: &str, name: &str) -> String {
        let project = format!("name = \"{name}\"\n");
        assert!(config.contains(&project), "no project {name} in:\n{config}");
        config
            .replacen(&project, &format!("{project}box = \"gpu1\"\n"), 1)
            .replacen("[[project]]", &format!("{}[[project]]", self.table()), 1)
    }
}
