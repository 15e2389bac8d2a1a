//! Starting one `opencode serve` on a box (issue 24): in an `exec` channel on the box's one SSH
//! connection, with nothing installed there. The command is a constant POSIX `sh` script
//! ([`SCRIPT`]); everything that varies (folder, port, project, the `opencode` to run, CORS
//! origins, the environment with the server's password) reaches it on the channel's standard
//! input, base64 per line, so nothing from the config is ever parsed as shell code and no secret
//! is on a command line the box's other users could read in `ps`.
//!
//! The script starts the server in its own session and process group, then waits for either
//! end: the server exits (its status closes the channel, and the supervisor restarts it), or its
//! standard input ends (the gateway stopped it, or the SSH connection is gone: the gateway
//! crashed, the network fell) and it ends the server's whole group, TERM then KILL. So no server
//! outlives its gateway on the box, whichever way the gateway goes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use russh::{ChannelMsg, ChannelReadHalf};
use tokio::sync::{oneshot, watch};

use super::SpawnSpec;
use super::launch::{Running, random_password, stderr_line, wait_ready};
use super::remote_process::RemoteProcess;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::pool::Dial;
use crate::upstream::ssh_link::BoxLink;

/// Where a spawned project's server runs when it is on a box.
#[derive(Clone)]
pub struct OnBox {
    pub(crate) link: Arc<BoxLink>,
    /// The `opencode` to run there (`[[box]] opencode`).
    pub opencode: String,
}

/// The same box link (a reload keeps the link of an unchanged box) and the same `opencode`: a
/// server running there is kept.
impl PartialEq for OnBox {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.link, &other.link) && self.opencode == other.opencode
    }
}

impl Eq for OnBox {}

impl std::fmt::Debug for OnBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "box {} ({})", self.link.name(), self.opencode)
    }
}

/// What the box runs, through its user's login shell: `/bin/sh` with the script, so the user's
/// shell only has to read one single-quoted word (the script has no `'` and no `\`, so this
/// holds in sh, bash, zsh and fish alike).
pub(in crate::upstream) const SCRIPT: &str = r#"set -u
unset SSH_CONNECTION SSH_CLIENT SSH_TTY SSH_ORIGINAL_COMMAND SSH_AUTH_SOCK MAIL
dir= port= project= bin= setup=user
set --
while IFS= read -r line && [ -n "$line" ]; do
  v=$(printf %s "${line#*=}" | base64 -d) || exit 70
  case ${line%%=*} in
    dir) dir=$v ;;
    port) port=$v ;;
    project) project=$v ;;
    bin) bin=$v ;;
    setup) setup=$v ;;
    cors) set -- "$@" --cors "$v" ;;
    env) export "$v" || exit 70 ;;
  esac
done
if [ -z "$dir" ] || [ -z "$port" ] || [ -z "$project" ] || [ -z "$bin" ]; then
  echo "opencode-gateway: the launch request was cut short" >&2; exit 70
fi
command -v "$bin" >/dev/null 2>&1 || { echo "opencode-gateway: $bin is not found on the box (PATH=$PATH); set opencode in its [[box]] table" >&2; exit 127; }
cd "$dir" 2>/dev/null || { echo "opencode-gateway: cannot enter $dir on the box" >&2; exit 66; }
real=$(pwd -P)
[ "$real" = "$dir" ] || { echo "opencode-gateway: $dir is $real on the box (a link); set directory to $real" >&2; exit 65; }
state=$HOME/.local/state/opencode-gateway/projects/$project
mask=$(umask); umask 077
rm -rf "$state/tmp"
mkdir -p "$state/data/opencode" "$state/tmp" || exit 73
if [ "$setup" = private ]; then
  mkdir -p "$state/config" "$state/cache" "$state/state" || exit 73
  export XDG_DATA_HOME="$state/data" XDG_CONFIG_HOME="$state/config" XDG_CACHE_HOME="$state/cache" XDG_STATE_HOME="$state/state"
fi
umask "$mask"
export OPENCODE_DB="${OPENCODE_DB:-$state/data/opencode/opencode.db}" TMPDIR="$state/tmp"
exec 3<&0
setsid "$bin" serve --hostname 127.0.0.1 --port "$port" "$@" </dev/null &
pid=$!
echo "opencode-gateway: pid $pid"
{ cat >/dev/null; kill -TERM -$pid; sleep 5; kill -KILL -$pid; } <&3 >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait $pid
code=$?
kill $watcher 2>/dev/null
kill -KILL -$pid 2>/dev/null
rm -rf "$state/tmp"
exit $code
"#;

/// The exec request's command.
pub(super) fn command() -> String {
    crate::upstream::box_exec::sh_word(SCRIPT)
}

/// The script's standard input: `name=base64(value)` lines, then an empty line.
pub(super) fn launch_lines(spec: &SpawnSpec, opencode: &str, port: u16, password: &crate::config::Secret) -> String {
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let mut out = String::new();
    let mut line = |name: &str, value: &str| {
        out.push_str(name);
        out.push('=');
        out.push_str(&b64(value));
        out.push('\n');
    };
    line("dir", &spec.directory.to_string_lossy());
    line("port", &port.to_string());
    line("project", &spec.project);
    line("bin", opencode);
    line(
        "setup",
        match spec.opencode_config {
            crate::config::settings::OpencodeConfig::User => "user",
            crate::config::settings::OpencodeConfig::Private => "private",
        },
    );
    for origin in &spec.cors {
        line("cors", origin);
    }
    for (k, v) in &spec.env {
        line("env", &format!("{k}={}", v.expose()));
    }
    line("env", "OPENCODE_SERVER_USERNAME=opencode");
    line("env", &format!("OPENCODE_SERVER_PASSWORD={}", password.expose()));
    out.push('\n');
    out
}

/// A random port for the server on the box, which the gateway cannot probe: one that is taken
/// makes the server exit, and the next start (after the backoff) draws another.
fn random_port() -> u16 {
    let mut b = [0u8; 2];
    getrandom::fill(&mut b).expect("the OS random source is available");
    20_000 + u16::from_le_bytes(b) % 40_000
}

/// Start one `opencode serve` on the box and wait until it is ready, or say why it is not.
pub(super) async fn launch(
    spec: &SpawnSpec,
    on: &OnBox,
    connect_timeout: Duration,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<Running, String> {
    let port = random_port();
    let password = random_password();
    let (channel, open) = on.link.exec(&command()).await.map_err(|e| e.to_string())?;
    let (reader, writer) = channel.split();
    writer
        .data_bytes(launch_lines(spec, &on.opencode, port, &password).into_bytes())
        .await
        .map_err(|e| format!("box {}: cannot send the launch request: {e}", on.link.name()))?;
    let stderr = Arc::new(Mutex::new(VecDeque::new()));
    let pid = Arc::new(AtomicU32::new(0));
    let (ready_tx, ready_rx) = oneshot::channel();
    let (ended_tx, ended) = watch::channel(None);
    tokio::spawn(read_channel(
        reader,
        Output {
            project: spec.project.clone(),
            expect: format!("listening on http://127.0.0.1:{port}"),
            ready: Some(ready_tx),
            stderr: stderr.clone(),
            pid: pid.clone(),
            ended: ended_tx,
        },
    ));
    let dial = Dial::Box {
        link: on.link.clone(),
        host: "127.0.0.1".into(),
        port,
    };
    let endpoint = Arc::new(Endpoint::with_dial(
        format!("127.0.0.1:{port}"),
        "opencode",
        Some(&password),
        dial,
    ));
    let server = Running::remote(
        RemoteProcess {
            writer,
            ended,
            pid,
            _open: open,
        },
        port,
        endpoint,
        stderr,
    );
    wait_ready(server, ready_rx, (spec.ready_timeout, connect_timeout), stop).await
}

/// What the reader of a server's channel keeps and tells.
struct Output {
    project: String,
    /// The line that says the server listens.
    expect: String,
    ready: Option<oneshot::Sender<()>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    pid: Arc<AtomicU32>,
    ended: watch::Sender<Option<String>>,
}

impl Output {
    fn stdout_line(&mut self, line: &str) {
        if let Some(pid) = line.strip_prefix("opencode-gateway: pid ") {
            self.pid.store(pid.trim().parse().unwrap_or(0), Ordering::Relaxed);
        } else if line.contains(&self.expect)
            && let Some(tx) = self.ready.take()
        {
            let _ = tx.send(());
        }
    }
}

/// Read the channel to its end: standard output for the pid and the ready line, standard error
/// into the tail, and the exit status as the process's end.
async fn read_channel(mut reader: ChannelReadHalf, mut out: Output) {
    let (mut stdout, mut stderr) = (Lines::default(), Lines::default());
    let mut how = None;
    loop {
        // After the exit status, what is left of its output is read for a moment more: a
        // tool's daemon may hold the channel open long after.
        let msg = match how {
            None => reader.wait().await,
            Some(_) => tokio::time::timeout(Duration::from_secs(1), reader.wait())
                .await
                .ok()
                .flatten(),
        };
        let Some(msg) = msg else { break };
        match msg {
            ChannelMsg::Data { data } => {
                for line in stdout.push(&data) {
                    out.stdout_line(&line);
                }
            }
            ChannelMsg::ExtendedData { data, ext: 1 } => {
                for line in stderr.push(&data) {
                    stderr_line(&out.project, &out.stderr, line);
                }
            }
            ChannelMsg::ExitStatus { exit_status } => how = Some(format!("exit status: {exit_status}")),
            ChannelMsg::ExitSignal { signal_name, .. } => how = Some(format!("signal: {signal_name:?}")),
            ChannelMsg::Close => break,
            _ => {}
        }
    }
    let how = how.unwrap_or_else(|| "the box's SSH connection ended".into());
    out.ended.send_replace(Some(how));
}

/// Bytes split into lines (a line is at most 64 KiB; a longer one is cut there).
#[derive(Default)]
struct Lines(Vec<u8>);

impl Lines {
    fn push(&mut self, data: &[u8]) -> Vec<String> {
        const LONGEST: usize = 64 * 1024;
        let mut lines = Vec::new();
        for &b in data {
            if b == b'\n' || self.0.len() == LONGEST {
                lines.push(String::from_utf8_lossy(&self.0).into_owned());
                self.0.clear();
                if b == b'\n' {
                    continue;
                }
            }
            self.0.push(b);
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in `opencode` that writes what it was given, starts a child in its group, says
    /// it listens, and waits.
    const FAKE: &str = "#!/bin/sh\necho \"$@\" > \"$OUT/args\"\nenv > \"$OUT/env\"\npwd > \"$OUT/cwd\"\nsleep 300 &\necho $! > \"$OUT/child\"\necho \"fake listening on http://127.0.0.1:$5\"\nwait\n";

    fn spec(dir: &std::path::Path, env: &[(&str, &str)]) -> SpawnSpec {
        SpawnSpec {
            project: "p".into(),
            on_box: None,
            directory: dir.to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), crate::config::Secret::new(v.to_string())))
                .collect(),
            run_as: None,
            cors: vec!["https://gw.example:8443".into()],
            start: crate::config::StartMode::Eager,
            opencode_config: crate::config::settings::OpencodeConfig::User,
            opencode_bin: None,
            search_dirs: Vec::new(),
            state_dir: dir.to_path_buf(),
            ready_timeout: Duration::from_secs(5),
        }
    }

    /// The script run by this machine's `/bin/sh` as sshd would run it, fed `input`; its input
    /// stays open, as the gateway keeps the channel's, until the test drops it.
    async fn run(home: &std::path::Path, input: &str) -> tokio::process::Child {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(command())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home)
            .env("SSH_CONNECTION", "127.0.0.1 1 127.0.0.1 22")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        child
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    }

    /// The script as the box runs it: the server gets its folder, port, origins, password and
    /// environment (read as data: quotes and `$(…)` stay as they are), private XDG folders and
    /// none of the SSH session's variables; the end of its input ends the server and its child.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_script_starts_the_server_as_asked_and_ends_it_when_its_input_ends() {
        use std::os::unix::fs::PermissionsExt;
        use tokio::io::AsyncBufReadExt;
        let tmp = tempfile::tempdir().unwrap();
        let (home, work, out) = (tmp.path().join("home"), tmp.path().join("work"), tmp.path().join("out"));
        for d in [&home, &work, &out] {
            std::fs::create_dir_all(d).unwrap();
        }
        let fake = tmp.path().join("opencode");
        std::fs::write(&fake, FAKE).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let trick = format!("$(touch {}/pwned) \"a b\" 'c' `id`", out.display());
        let out_s = out.display().to_string();
        let spec = spec(&work, &[("OUT", &out_s), ("TRICK", &trick)]);
        let password = crate::config::Secret::new("s3cret pass=word");
        let mut child = run(
            &home,
            &launch_lines(&spec, &fake.display().to_string(), 4321, &password),
        )
        .await;
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut pid = 0;
        let ready = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(line) = stdout.next_line().await.unwrap() {
                if let Some(p) = line.strip_prefix("opencode-gateway: pid ") {
                    pid = p.parse().unwrap();
                }
                if line.contains("listening on http://127.0.0.1:4321") {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(ready, Ok(true), "no ready line");
        assert!(pid > 0 && alive(pid));
        let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
        assert_eq!(
            read("args").trim(),
            "serve --hostname 127.0.0.1 --port 4321 --cors https://gw.example:8443"
        );
        assert_eq!(read("cwd").trim(), work.display().to_string());
        let env = read("env");
        assert!(env.contains("OPENCODE_SERVER_PASSWORD=s3cret pass=word\n"), "{env}");
        assert!(env.contains("OPENCODE_SERVER_USERNAME=opencode\n"), "{env}");
        assert!(env.contains(&format!("TRICK={trick}\n")), "{env}");
        assert!(!out.join("pwned").exists(), "a value was run as shell code");
        assert!(!env.contains("SSH_CONNECTION"), "{env}");
        // The box user's own setup (no XDG folders made for it); its own database and TMPDIR.
        let state = home.join(".local/state/opencode-gateway/projects/p");
        assert!(!env.contains("XDG_DATA_HOME="), "{env}");
        let db = state.join("data/opencode/opencode.db");
        assert!(env.contains(&format!("OPENCODE_DB={}\n", db.display())), "{env}");
        assert!(
            env.contains(&format!("TMPDIR={}\n", state.join("tmp").display())),
            "{env}"
        );
        assert_eq!(std::fs::metadata(&state).unwrap().permissions().mode() & 0o777, 0o700);
        let grandchild: u32 = read("child").trim().parse().unwrap();
        assert!(alive(grandchild));

        // The end of its input (the gateway stopped it, or its SSH connection is gone).
        drop(child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
        assert!(status.is_ok(), "the script did not end when its input did");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(pid) || alive(grandchild) {
            assert!(
                std::time::Instant::now() < deadline,
                "the server or its child outlived its input"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            !state.join("tmp").exists(),
            "the stopped server's temporary folder is left"
        );
    }

    /// A folder that is a link on the box, and an `opencode` the box does not have: refused,
    /// each with its reason on standard error, and nothing started.
    #[tokio::test]
    async fn the_script_refuses_a_linked_folder_and_a_missing_opencode() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // The script's exit status and standard error, for a launch in `dir` running `opencode`.
        let refused = |dir: std::path::PathBuf, opencode: &'static str| {
            let home = tmp.path().to_path_buf();
            async move {
                let password = crate::config::Secret::new("x");
                let child = run(&home, &launch_lines(&spec(&dir, &[]), opencode, 4321, &password)).await;
                let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
                    .await
                    .unwrap()
                    .unwrap();
                (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
            }
        };
        let (code, err) = refused(link.clone(), "/bin/true").await;
        assert_eq!(code, Some(65), "{err}");
        assert!(err.contains(&format!("set directory to {}", real.display())), "{err}");
        let (code, err) = refused(real.clone(), "no-such-opencode").await;
        assert_eq!(code, Some(127), "{err}");
        assert!(err.contains("no-such-opencode is not found on the box"), "{err}");
    }

    #[test]
    fn lines_are_split_and_kept_across_reads() {
        let mut l = Lines::default();
        assert_eq!(l.push(b"opencode-gateway: pi"), Vec::<String>::new());
        assert_eq!(l.push(b"d 42\nlistening"), vec!["opencode-gateway: pid 42"]);
        assert_eq!(l.push(b" on x\n"), vec!["listening on x"]);
    }
}
