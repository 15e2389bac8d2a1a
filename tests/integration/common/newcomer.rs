//! A newcomer's checkout (issue 38), shared by `newcomer.rs` (loopback) and `newcomer_phone.rs`
//! (a phone in a network namespace of its own): a fresh `git clone` of this repository with the
//! suite's build of the same source where the README's first command runs it
//! (`target/release/opencode-gateway`, what `cargo run --release -- serve` builds), OpenCode on
//! PATH as `npm install -g` puts it, and a home whose global OpenCode config is the only place a
//! provider is set up. Commands are run as printed, through `sh -c`, from the clone's root.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use super::gateway::{BIN, Launched, serve_program};
use super::opencode::opencode_bin;
use super::process::output_within;

/// How the README's first command names the gateway in a checkout.
pub const ME: &str = "target/release/opencode-gateway";

pub struct Newcomer {
    _root: tempfile::TempDir,
    pub clone: PathBuf,
    env: Vec<(String, String)>,
}

impl Newcomer {
    /// A fresh clone with the gateway built where `cargo run --release` puts it, and a home whose
    /// global OpenCode config holds `global`.
    pub fn clone(global: &str) -> Newcomer {
        let root = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let clone = root.path().join("opencode-gateway");
        let out = output_within(
            std::process::Command::new("git")
                .arg("clone")
                .arg("-q")
                .arg(repo)
                .arg(&clone),
            None,
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "git clone: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let built = clone.join(ME);
        std::fs::create_dir_all(built.parent().unwrap()).unwrap();
        if std::fs::hard_link(BIN, &built).is_err() {
            std::fs::copy(BIN, &built).unwrap();
        }
        let home = root.path().join("home");
        super::opencode::write_user_config(&home, global);
        // OpenCode's folder on PATH (as a global npm install puts it), and the system's.
        let npm_bin = opencode_bin().parent().unwrap().to_path_buf();
        let env = vec![
            (
                "PATH".into(),
                format!("{}:/usr/local/bin:/usr/bin:/bin", npm_bin.display()),
            ),
            ("HOME".into(), home.display().to_string()),
            ("TERM".into(), "xterm-256color".into()),
        ];
        Newcomer {
            _root: root,
            clone,
            env,
        }
    }

    /// The clone's `config` (a path from its root) rewritten by `edit`: the one edit a test makes
    /// to a committed config (its fixed ports), which the caller names.
    pub fn edit(&self, config: &str, edit: impl FnOnce(&str) -> String) {
        let path = self.clone.join(config);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, edit(&text)).unwrap();
    }

    pub fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    /// The README's first command on `config` (behind `wrapper`, e.g. `ip netns exec <ns>`, when
    /// not empty), until its banner is printed whole (bounded).
    pub fn serve(&self, config: &Path, wrapper: &[&str]) -> (Launched, String) {
        let mut env = self.env();
        // The test's own XDG folders must not leak in: a newcomer's are under HOME.
        env.extend(["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"].map(|k| (k, "")));
        let run = serve_program(&self.clone.join(ME), &self.clone, config, &env, wrapper);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let out = run.stdout.lock().unwrap().clone();
            if out
                .split_once("shown only this once")
                .is_some_and(|(_, rest)| rest.contains("\n+-"))
            {
                return (run, out);
            }
            assert!(
                Instant::now() < deadline,
                "no whole banner within 90 s\nstdout:\n{out}\nlog:\n{}",
                run.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `line` exactly as printed, through the shell, from the clone's root.
    pub fn sh(&self, line: &str, stdin: Option<&[u8]>, within: Duration) -> Output {
        self.sh_in(&[], line, stdin, within)
    }

    /// [`Newcomer::sh`] behind `wrapper` (e.g. `ip netns exec <ns>`: where the printed address is).
    pub fn sh_in(&self, wrapper: &[&str], line: &str, stdin: Option<&[u8]>, within: Duration) -> Output {
        let mut cmd = match wrapper.split_first() {
            // The wrapper by its full path: the newcomer's PATH need not hold /usr/sbin.
            Some((program, args)) => {
                let mut c = std::process::Command::new(which(program));
                c.args(args).arg("sh");
                c
            }
            None => std::process::Command::new("sh"),
        };
        cmd.arg("-c")
            .arg(line)
            .current_dir(&self.clone)
            .env_clear()
            .envs(self.env());
        let out = output_within(&mut cmd, stdin, within);
        assert!(
            out.status.success(),
            "{line}\nexited {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// `program` found on the test's own PATH (and the sbin folders `ip` lives in).
fn which(program: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} not found"))
}

/// The lines of `printed` that are commands (inside the password's frame too), as printed.
pub fn commands(printed: &str) -> Vec<String> {
    printed
        .lines()
        .map(|l| l.trim().trim_matches('|').trim())
        .filter(|l| {
            let programs = [
                "target/",
                "opencode-gateway ",
                "NODE_EXTRA_CA_CERTS=",
                "opencode ",
                "ssh ",
            ];
            // The heading names the program too, but is not a command.
            programs.iter().any(|p| l.starts_with(p)) && !l.contains(" is serving ")
        })
        .map(String::from)
        .collect()
}

/// The one command of `cmds` containing `part`.
pub fn one<'a>(cmds: &'a [String], part: &str) -> &'a str {
    let found: Vec<&String> = cmds.iter().filter(|c| c.contains(part)).collect();
    assert_eq!(found.len(), 1, "{part:?} in {cmds:#?}");
    found[0]
}
