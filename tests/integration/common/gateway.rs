//! The gateway under test: the real binary, started on a config written to a temporary folder,
//! listening on ephemeral ports it reports in its "gateway ready" log line. Its stderr is kept
//! so tests can assert on (and against) what it logs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::process::Guarded;

pub const BIN: &str = env!("CARGO_BIN_EXE_opencode-gateway");

/// A user in a test config: name, password, projects (TOML value) and role.
pub struct TestUser<'a> {
    pub name: &'a str,
    pub password: &'a str,
    pub projects: &'a str,
    pub role: &'a str,
}

/// Hashes cost ~25 ms each; tests reuse them per password.
pub fn hash(password: &str) -> String {
    static CACHE: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap();
    if let Some((_, h)) = cache.iter().find(|(p, _)| p == password) {
        return h.clone();
    }
    let h = opencode_gateway::auth::verifier::hash_password(password);
    cache.push((password.to_string(), h.clone()));
    h
}

pub fn users_toml(users: &[TestUser<'_>]) -> String {
    users
        .iter()
        .map(|u| {
            format!(
                "[[user]]\nname = \"{}\"\npassword_hash = \"{}\"\nprojects = {}\nrole = \"{}\"\n\n",
                u.name,
                hash(u.password),
                u.projects,
                u.role
            )
        })
        .collect()
}

/// `[server]`, `[tls]` (dev CA in the folder) and `[admin]` on ephemeral ports, plus `extra`.
pub fn base_config(extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nbase_domain = \"gw.localhost\"\nstate_dir = \"state\"\n\n[tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n{extra}"
    )
}

pub struct Gateway {
    child: Option<Guarded>,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    pub ssh: Option<SocketAddr>,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub stdout: Arc<Mutex<String>>,
    log: Arc<Mutex<String>>,
    env: Vec<(String, String)>,
    wrapper: Vec<String>,
}

/// A `serve` that logged "gateway ready": the process (stopped with SIGTERM, then reaped, when
/// dropped), the addresses of its ready line, and its stdout and log as they grow.
pub struct Launched {
    pub child: Guarded,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    pub ssh: Option<SocketAddr>,
    pub stdout: Arc<Mutex<String>>,
    pub log: Arc<Mutex<String>>,
}

/// `serve -c <config>` in `dir` with `env`, for a test that lays out its own folders (the
/// committed dev config, `init`'s layout) rather than [`Gateway::start`]'s one folder.
pub fn serve_in(dir: &Path, config: &Path, env: &[(&str, &str)]) -> Launched {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    launch(Path::new(BIN), dir, config, &env, &[])
}

/// `<program> serve -c <config>` in `dir` with `env`: the gateway as built somewhere else than
/// the suite's own path (a fresh clone's `target/release/`), behind `wrapper` (e.g. `ip netns
/// exec <namespace>`) when it is not empty.
pub fn serve_program(program: &Path, dir: &Path, config: &Path, env: &[(&str, &str)], wrapper: &[&str]) -> Launched {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let wrapper: Vec<String> = wrapper.iter().map(|w| w.to_string()).collect();
    launch(program, dir, config, &env, &wrapper)
}

/// Run `<program> serve` on `config` in `dir` (behind `wrapper`, e.g. `ip netns exec <ns>`, when not
/// empty; it must exec the gateway) and wait (bounded) for its "gateway ready" line.
fn launch(program: &Path, dir: &Path, config: &Path, env: &[(String, String)], wrapper: &[String]) -> Launched {
    let mut cmd = match wrapper.split_first() {
        Some((first, args)) => {
            let mut c = Command::new(first);
            c.args(args).arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.arg("serve").arg("-c").arg(config).current_dir(dir);
    cmd.env("RUST_LOG", "info,opencode=debug");
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Stopped (SIGTERM, so the OpenCode servers it spawned stop too) if the start-up check fails.
    let mut child = Guarded::spawn(
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null()),
        Duration::from_secs(15),
    );
    let log = Arc::new(Mutex::new(String::new()));
    let stdout = Arc::new(Mutex::new(String::new()));
    pump(child.stderr.take().unwrap(), log.clone());
    pump(child.stdout.take().unwrap(), stdout.clone());
    // Bounded: a first start makes certificates and may start OpenCode servers first.
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        if let Some(line) = log.lock().unwrap().lines().find(|l| l.contains("gateway ready")) {
            break line.to_string();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the gateway exited ({status}) before it was ready:\n{}",
                log.lock().unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the gateway was not ready in 60 s:\n{}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The text line says `https=127.0.0.1:…`; with log_format = "json" it is one JSON object.
    let json: Option<serde_json::Value> = serde_json::from_str(&ready).ok();
    let field = |name: &str| -> Option<SocketAddr> {
        match &json {
            Some(j) => j.get(name)?.as_str()?.parse().ok(),
            None => ready
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok()),
        }
    };
    Launched {
        https: field("https").expect("https address in the ready line"),
        admin: field("admin").expect("admin address in the ready line"),
        ssh: field("ssh"),
        child,
        stdout,
        log,
    }
}

fn pump(stream: impl Read + Send + 'static, sink: Arc<Mutex<String>>) {
    super::pump_lines(stream, sink)
}

impl Gateway {
    /// Start the gateway on `config` (written to gateway.toml in a new temporary folder).
    pub fn start(config: &str) -> Gateway {
        Self::start_with(config, &[], |_| {})
    }

    /// Like [`Gateway::start`], with environment variables and a chance to add files first.
    pub fn start_with(config: &str, env: &[(&str, &str)], prepare: impl FnOnce(&Path)) -> Gateway {
        Self::start_wrapped(config, env, &[], prepare)
    }

    /// Start the gateway on a config that must name a port before the gateway binds it (pebble's
    /// HTTP-01 port is written into pebble's config): another process may take the port between
    /// the pick and the bind, so a start refused with "Address already in use" is tried again on
    /// another port, at most 5 times. Returns the gateway and the port it got.
    pub fn start_on_a_picked_port(config: impl Fn(u16) -> String, prepare: impl Fn(&Path)) -> (Gateway, u16) {
        for _ in 0..5 {
            let port = super::free_port();
            let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Self::start_with(&config(port), &[], &prepare)
            }));
            match started {
                Ok(gw) => return (gw, port),
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    if !message.contains("Address already in use") {
                        std::panic::resume_unwind(panic);
                    }
                }
            }
        }
        panic!("5 picked ports were taken before the gateway could bind them");
    }

    /// Like [`Gateway::start_with`], the gateway run by `wrapper` (a command that execs its
    /// arguments, e.g. `ip netns exec <namespace>`), on restarts too.
    pub fn start_wrapped(config: &str, env: &[(&str, &str)], wrapper: &[&str], prepare: impl FnOnce(&Path)) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, config).unwrap();
        prepare(dir.path());
        // A home of its own (`<dir>/home`, unless the test names one): the OpenCode servers it
        // spawns use their user's setup (issue 38), which must be the test's, never the real one
        // of whoever runs the suite. The XDG variables would point past it: they are emptied,
        // which OpenCode takes as unset.
        let home = dir.path().join("home").display().to_string();
        let own = [("HOME", home.as_str())]
            .into_iter()
            .chain(["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"].map(|x| (x, "")))
            .filter(|(k, _)| !env.iter().any(|(n, _)| n == k));
        let env: Vec<(String, String)> = own
            .chain(env.iter().copied())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let wrapper: Vec<String> = wrapper.iter().map(|w| w.to_string()).collect();
        let run = launch(Path::new(BIN), dir.path(), &path, &env, &wrapper);
        Gateway {
            https: run.https,
            admin: run.admin,
            ssh: run.ssh,
            child: Some(run.child),
            config: path,
            dir,
            stdout: run.stdout,
            log: run.log,
            env,
            wrapper,
        }
    }

    /// Stop the gateway if it runs (SIGTERM, bounded wait) and start it again on the same folder (config,
    /// certificates and state): new ports, new log.
    pub fn restart(&mut self) {
        // Only a process that still runs is signalled (a reaped pid may belong to another).
        if let Ok(None) = self.child.as_mut().unwrap().try_wait() {
            self.signal(libc::SIGTERM);
            assert!(
                self.wait_exit(Duration::from_secs(20)).is_some(),
                "the gateway did not stop within 20 s:\n{}",
                self.logs()
            );
        }
        let run = launch(Path::new(BIN), self.dir.path(), &self.config, &self.env, &self.wrapper);
        self.https = run.https;
        self.admin = run.admin;
        self.ssh = run.ssh;
        self.child = Some(run.child);
        self.stdout = run.stdout;
        self.log = run.log;
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("certs/ca.crt")
    }

    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Wait (bounded) until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.logs().contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    /// A plain HTTP request to the admin listener (`Host` is its own loopback address).
    pub fn admin(&self, method: &str, path: &str) -> (u16, String) {
        let s = TcpStream::connect(self.admin).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        http_exchange(s, method, path, &self.admin.to_string())
    }

    /// `opencode-gateway <args> -c <this gateway's config>`, run in its folder: whether it
    /// succeeded, and what it printed (stdout, then stderr). Bounded: a command that hangs (on a
    /// state database that does not answer, say) fails the test with what it printed.
    pub fn cli(&self, args: &[&str]) -> (bool, String) {
        self.cli_in(args, &[])
    }

    /// [`cli`](Self::cli) with the environment the gateway was started with (a config that names
    /// secrets by environment variable loads only with them).
    pub fn cli_with_env(&self, args: &[&str]) -> (bool, String) {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.cli_in(args, &env)
    }

    fn cli_in(&self, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
        let out = crate::common::process::bounded(
            std::process::Command::new(BIN)
                .args(args)
                .arg("-c")
                .arg(&self.config)
                .envs(env.iter().copied())
                .current_dir(self.dir.path()),
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// The control socket `status` and `reload` use.
    pub fn control_socket(&self) -> PathBuf {
        self.dir.path().join("state/control/gateway.sock")
    }

    /// A plain HTTP request over the control socket.
    pub fn control(&self, method: &str, path: &str) -> (u16, String) {
        let s = std::os::unix::net::UnixStream::connect(self.control_socket()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        http_exchange(s, method, path, "localhost")
    }

    /// The sum of a metric's series: `requests_total` (all of them), or those whose labels start
    /// as given: `requests_total{project="web"`, `logins_total{method="password",outcome="failure"}`.
    pub fn metric(&self, selector: &str) -> u64 {
        let (_, body) = self.admin("GET", "/metrics");
        metric_in(&body, selector).unwrap_or_else(|| panic!("metric {selector} missing:\n{body}"))
    }

    /// A condition that holds once an event stream more than now is open through the gateway
    /// (`streams_open{kind="events"}`), read from the admin listener (for
    /// [`crate::common::opencode::FakeModel::answer_when`]).
    pub fn events_opened_after_now(&self) -> impl Fn() -> bool + Send + Sync + 'static {
        const OPEN: &str = "streams_open{kind=\"events\"}";
        let before = self.metric(OPEN);
        let admin = self.admin;
        move || {
            let Ok(s) = TcpStream::connect(admin) else {
                return false;
            };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let (_, body) = http_exchange(s, "GET", "/metrics", &admin.to_string());
            metric_in(&body, OPEN).is_some_and(|open| open > before)
        }
    }

    pub fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid, sig) };
    }

    /// Wait (bounded) for the process to exit; its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().unwrap();
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Rewrite the config file (for reload tests).
    pub fn write_config(&self, config: &str) {
        std::fs::write(&self.config, config).unwrap();
    }
}

/// One request with `Connection: close`; the status and the body.
pub fn http_exchange(s: impl Read + Write, method: &str, path: &str, host: &str) -> (u16, String) {
    http_exchange_json(s, method, path, host, "")
}

/// One HTTP/1.1 exchange with a JSON body (empty: none); the status and the body.
pub fn http_exchange_json(mut s: impl Read + Write, method: &str, path: &str, host: &str, body: &str) -> (u16, String) {
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    (
        code,
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    )
}

/// The operator most tests log in as.
pub const ALICE: TestUser<'static> = TestUser {
    name: "alice",
    password: "alice-password-1",
    projects: "[\"*\"]",
    role: "operator",
};

/// A `[[project]]` for an OpenCode server at `url` whose password is in the file `pw` beside the
/// config (which [`Gateway::start_behind`] writes).
pub fn external_project(name: &str, url: &str) -> String {
    format!("[[project]]\nname = \"{name}\"\nupstream = \"{url}\"\nupstream_password_file = \"pw\"\n\n")
}

impl Gateway {
    /// Start on `config`, with `upstream_password` in the file `pw` (0600) beside it.
    pub fn start_behind(config: &str, upstream_password: &str) -> Gateway {
        let pw = upstream_password.to_string();
        Self::start_with(config, &[], move |d| super::write_secret(&d.join("pw"), &pw))
    }
}

/// See [`Gateway::metric`]; `None` when no series matches.
pub fn metric_in(body: &str, selector: &str) -> Option<u64> {
    let want = format!("opencode_gateway_{selector}");
    let mut found = None;
    for l in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        let hit = if want.contains('{') {
            series.starts_with(&want)
        } else {
            series == want || series.strip_prefix(&want).is_some_and(|r| r.starts_with('{'))
        };
        if hit {
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("{l}"));
            *found.get_or_insert(0) += v as u64;
        }
    }
    found
}
