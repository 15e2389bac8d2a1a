//! A real OpenCode 2.x server (npm `@opencode/cli`, pinned) started by a test as an external
//! upstream: `serve --stdio` on an ephemeral port, in a folder of its own, with private folders,
//! its own password and the fake model. One server serves every folder, so a test can put
//! several projects on it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::opencode::{FakeModel, opencode2_bin};
use super::process::Guarded;

pub struct OpenCode2 {
    _child: Guarded,
    /// Held: the server stops when its input closes.
    _stdin: std::process::ChildStdin,
    pub url: String,
    pub password: String,
    /// Folders of the rig: `a/` and `b/` (two projects' folders), the server's own home.
    pub root: PathBuf,
    _dir: tempfile::TempDir,
}

impl OpenCode2 {
    pub fn start(model: &FakeModel) -> OpenCode2 {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for sub in ["a", "b", "home"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let mut bytes = [0u8; 18];
        getrandom::fill(&mut bytes).unwrap();
        let password = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes);
        let home = root.join("home");
        let mut cmd = Command::new(opencode2_bin());
        cmd.args(["serve", "--stdio", "--hostname", "127.0.0.1", "--port", "0"])
            .current_dir(&home)
            .env("OPENCODE_SERVER_PASSWORD", &password)
            .env("OPENCODE_CONFIG_CONTENT", model.config_json())
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("HOME", &home)
            .env("TMPDIR", &home)
            .env("XDG_DATA_HOME", home.join("data"))
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("XDG_STATE_HOME", home.join("state"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = Guarded::group(cmd.spawn().unwrap(), Duration::from_secs(5));
        let stdin = child.stdin.take().unwrap();
        let url = ready_url(child.stdout.take().unwrap());
        OpenCode2 {
            _child: child,
            _stdin: stdin,
            url,
            password,
            root,
            _dir: dir,
        }
    }

    pub fn folder(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// A file holding the server's password, for the gateway's `upstream_password_file`.
    pub fn password_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("upstream.pw");
        crate::common::write_secret(&path, &self.password);
        path
    }
}

/// The `{"url":…}` line `serve --stdio` prints when it listens (60 s at most).
fn ready_url(stdout: std::process::ChildStdout) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        // Keep reading so the pipe never fills.
        for _ in lines {}
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = rx
        .recv_timeout(deadline - Instant::now())
        .expect("opencode2 serve --stdio printed its URL within 60 s");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("not the URL line: {line}"));
    v["url"].as_str().unwrap().trim_end_matches('/').to_string()
}
