//! A tmux server of a test's own (its own socket, killed when dropped), for OpenCode's TUI
//! (`opencode attach`), which needs a terminal.

use std::path::Path;
use std::time::{Duration, Instant};

pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server named after this process and `tag` (tests running at once each get their own).
    pub fn new(tag: &str) -> Tmux {
        Tmux {
            socket: format!("ocgw-test-{}-{tag}", std::process::id()),
        }
    }

    pub fn run(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The window `tui` running `command` through the shell, in `dir`, with `env` (a fresh
    /// server takes its environment from this first command).
    pub fn start(&self, command: &str, dir: &Path, env: &[(&str, &str)]) {
        let out = std::process::Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(["new-session", "-d", "-s", "tui", "-x", "160", "-y", "45", "-c"])
            .arg(dir)
            .arg(command)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The screen once it shows `needle`, or as it was when `within` ran out.
    pub async fn wait_screen(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.run(&["capture-pane", "-t", "tui", "-p"]);
            if screen.contains(needle) || Instant::now() > deadline {
                return screen;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}
