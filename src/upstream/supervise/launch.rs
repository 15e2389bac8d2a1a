//! Starting one `opencode serve`: find the executable, pick a port, make its private folders,
//! build its minimal environment, read its "listening on" line, check its health; and stopping
//! its whole process group.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::{INHERITED_ENV, STDERR_TAIL, STOP_GRACE, SpawnSpec, USER_SETUP_ENV};
use crate::config::Secret;
use crate::config::settings::OpencodeConfig;
use crate::policy::dialect::Dialect;
use crate::upstream::endpoint::Endpoint;

pub(super) struct Running {
    pub(super) process: Process,
    pub(super) port: u16,
    pub(super) endpoint: Arc<Endpoint>,
    /// Which OpenCode it is (its health endpoint, its ready line).
    pub(super) dialect: &'static dyn Dialect,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The input of a server that stops when it closes (2.x's `--stdio`), held here: tokio's
    /// `Child::wait` closes a child's stdin first, which would stop it at once.
    _stdin: Option<tokio::process::ChildStdin>,
}

/// A server's process: a child of the gateway, or a process on a box in an SSH channel.
pub(super) enum Process {
    Local(Child),
    Remote(super::remote_process::RemoteProcess),
}

impl Process {
    /// Its process id (on the box, for one there).
    pub(super) fn id(&self) -> u32 {
        match self {
            Process::Local(child) => child.id().unwrap_or(0),
            Process::Remote(remote) => remote.id(),
        }
    }

    /// Until it exits: how it did.
    pub(super) async fn wait(&mut self) -> String {
        match self {
            Process::Local(child) => child
                .wait()
                .await
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string()),
            Process::Remote(remote) => remote.wait().await,
        }
    }

    /// Stop it and everything it started.
    pub(super) async fn stop(&mut self) {
        match self {
            Process::Local(child) => stop_process(child).await,
            Process::Remote(remote) => remote.stop().await,
        }
    }
}

impl Running {
    pub(super) fn remote(
        process: super::remote_process::RemoteProcess,
        port: u16,
        endpoint: Arc<Endpoint>,
        stderr: Arc<Mutex<VecDeque<String>>>,
    ) -> Running {
        Running {
            process: Process::Remote(process),
            port,
            endpoint,
            // A box's OpenCode is started with 1.x's command line (remote.rs).
            dialect: &crate::policy::dialect::V1,
            stderr,
            _stdin: None,
        }
    }

    pub(super) fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join(" | ")
    }
}

/// One line of a server's standard error: logged at debug, kept in its tail.
pub(super) fn stderr_line(project: &str, tail: &Mutex<VecDeque<String>>, line: String) {
    tracing::debug!(target: "opencode", project = %project, "{line}");
    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
    if t.len() == STDERR_TAIL {
        t.pop_front();
    }
    t.push_back(line);
}

/// Start one `opencode serve` and wait until it is ready, or say why it is not.
pub(super) async fn launch(
    spec: &SpawnSpec,
    connect_timeout: Duration,
    stop: &CancellationToken,
) -> Result<Running, String> {
    let bin = find_opencode(spec)?;
    let port = free_port().map_err(|e| format!("no free port: {e}"))?;
    let password = random_password();
    let owner = match &spec.run_as {
        Some(user) => Some(lookup_user(user)?),
        None => None,
    };
    let dirs = prepare_dirs(spec, owner.as_ref().map(|(uid, gid, _)| (*uid, *gid)))?;
    let dialect = dialect_of(&bin, dirs.get("TMPDIR").map(PathBuf::as_path)).await;
    let mut cmd = command(spec, (&bin, dialect), port, &password, owner, &dirs);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let stdin = child.stdin.take();
    let (tail, ready_rx) = read_output(spec, &mut child, port, dialect);
    let endpoint = Arc::new(Endpoint::new(format!("127.0.0.1:{port}"), "opencode", Some(&password)));
    let server = Running {
        process: Process::Local(child),
        port,
        endpoint,
        dialect,
        stderr: tail,
        _stdin: stdin,
    };
    wait_ready(server, ready_rx, (spec.ready_timeout, connect_timeout), stop).await
}

/// Which OpenCode the executable is: its npm package says (`bin/..`'s `package.json`, no process
/// run), else its `--version` (1.18.33 prints `1.18.33`, 2.1.2 `opencode v2.1.2`), run with the
/// server's own temporary folder (Bun unpacks a library there). A version neither names is
/// started as 1.x, with a warning: its own failure, if any, then says why.
pub(crate) async fn dialect_of(bin: &Path, tmp: Option<&Path>) -> &'static dyn Dialect {
    if let Some(d) = dialect_of_package(bin) {
        return d;
    }
    let mut cmd = Command::new(bin);
    cmd.arg("--version")
        .env_clear()
        .envs(
            INHERITED_ENV
                .iter()
                .filter_map(|n| std::env::var_os(n).map(|v| (*n, v))),
        )
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(tmp) = tmp {
        cmd.env("TMPDIR", tmp);
    }
    let out = tokio::time::timeout(Duration::from_secs(20), cmd.output()).await;
    let printed = match &out {
        Ok(Ok(o)) => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => String::new(),
    };
    match crate::policy::dialect::from_version_output(&printed) {
        Some((d, _)) => d,
        None => {
            tracing::warn!(bin = %bin.display(), printed = %printed.trim(), "the OpenCode executable names no 1.x or 2.x version the gateway knows; starting it as 1.x");
            &crate::policy::dialect::V1
        }
    }
}

/// The dialect the executable's npm package names (`<package>/bin/<exe>`), without running it.
pub(crate) fn dialect_of_package(bin: &Path) -> Option<&'static dyn Dialect> {
    let real = bin.canonicalize().ok()?;
    let json = std::fs::read_to_string(real.parent()?.parent()?.join("package.json")).ok()?;
    crate::policy::dialect::from_package_json(&json).map(|(d, _)| d)
}

/// `opencode serve` on `port` with the password, a minimal environment (`INHERITED_ENV`, the
/// spec's, its private folders) and, with `run_as`, that user's ids. A server that stops when
/// its input closes (2.x's `--stdio`) gets a pipe the gateway holds until it stops it.
fn command(
    spec: &SpawnSpec,
    (bin, dialect): (&Path, &'static dyn Dialect),
    port: u16,
    password: &Secret,
    owner: Option<(u32, u32, PathBuf)>,
    dirs: &BTreeMap<&'static str, PathBuf>,
) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(dialect.serve_args(port));
    for origin in &spec.cors {
        cmd.arg("--cors").arg(origin);
    }
    let stdin = if dialect.stops_with_stdin() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    cmd.current_dir(&spec.directory)
        .env_clear()
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    for name in INHERITED_ENV {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    // The gateway's user's own OpenCode setup, where its folders are not the defaults under HOME.
    if spec.opencode_config == OpencodeConfig::User && spec.run_as.is_none() {
        for name in USER_SETUP_ENV {
            if let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty()) {
                cmd.env(name, v);
            }
        }
    }
    for (name, dir) in dirs {
        cmd.env(name, dir);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v.expose());
    }
    cmd.env("OPENCODE_SERVER_USERNAME", "opencode");
    cmd.env("OPENCODE_SERVER_PASSWORD", password.expose());
    if let (Some(user), Some((uid, gid, home))) = (&spec.run_as, owner) {
        cmd.uid(uid)
            .gid(gid)
            .env("HOME", home)
            .env("USER", user)
            .env("LOGNAME", user);
    }
    // SAFETY: prctl is async-signal-safe; it asks the kernel to end the server if the gateway dies,
    // so a crashed gateway leaves no orphan holding the project's port and password.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd
}

/// Standard error's last lines kept (and logged); the ready line looked for on standard output.
fn read_output(
    spec: &SpawnSpec,
    child: &mut Child,
    port: u16,
    dialect: &'static dyn Dialect,
) -> (Arc<Mutex<VecDeque<String>>>, tokio::sync::oneshot::Receiver<()>) {
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let tail_w = tail.clone();
    let project = spec.project.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            stderr_line(&project, &tail_w, line);
        }
    });
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut ready_tx = Some(ready_tx);
        // Keep reading after the ready line so the pipe never fills and blocks the server.
        while let Ok(Some(line)) = lines.next_line().await {
            if dialect.ready_line(&line, port)
                && let Some(tx) = ready_tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    (tail, ready_rx)
}

/// Ready: the server said it listens, and then its health check answered, within
/// `ready_timeout`. Otherwise it is stopped, and the reason carries its last standard error.
/// A stop asked for meanwhile (its project removed, the gateway ending) ends the wait at once:
/// a half-started server must not outlive its project by a whole `ready_timeout`.
pub(super) async fn wait_ready(
    mut server: Running,
    ready_rx: tokio::sync::oneshot::Receiver<()>,
    (ready_timeout, connect_timeout): (Duration, Duration),
    stop: &CancellationToken,
) -> Result<Running, String> {
    let ready = async {
        ready_rx
            .await
            .map_err(|_| "it exited before it was listening".to_string())?;
        // The line comes before the server answers everything; poll health briefly.
        let mut last = String::new();
        for _ in 0..50 {
            match health(&server.endpoint, server.dialect, connect_timeout).await {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("health check failed: {last}"))
    };
    let outcome = tokio::select! {
        r = tokio::time::timeout(ready_timeout, ready) => r.unwrap_or_else(|_| Err(format!("not ready within {} s", ready_timeout.as_secs()))),
        status = server.process.wait() => Err(format!("it exited ({status})")),
        _ = stop.cancelled() => Err("stopped while it started".to_string()),
    };
    match outcome {
        Ok(()) => Ok(server),
        Err(why) => {
            server.process.stop().await;
            // Give the stderr reader a moment to collect the last lines.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let tail = server.stderr_tail();
            Err(if tail.is_empty() {
                why
            } else {
                format!("{why}; stderr: {tail}")
            })
        }
    }
}

/// The dialect's authenticated health endpoint answered 200 with a version of its own (2.x answers
/// any path it does not route, 1.x's health included, with a 200 `index.html` and no auth).
pub(crate) async fn health(
    endpoint: &Endpoint,
    dialect: &'static dyn Dialect,
    connect_timeout: Duration,
) -> Result<(), String> {
    let path = dialect.health_path();
    match tokio::time::timeout(Duration::from_secs(5), endpoint.read_whole(path, connect_timeout)).await {
        Ok(Ok(answer)) if dialect.version_in_health(&answer).is_some() => Ok(()),
        Ok(Ok(_)) => Err(format!("GET {path} named no OpenCode {} version", dialect.family())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// SIGTERM to the server's process group (its shells and tools too), SIGKILL after a grace period.
pub(super) async fn stop_process(child: &mut Child) {
    let Some(pid) = child.id() else { return };
    let pgid = pid as libc::pid_t;
    // SAFETY: signalling a process group we created (process_group(0) made pgid == pid).
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_err() {
        // SAFETY: as above.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = child.wait().await;
    }
    // Anything of the group that outlived the leader goes too.
    // SAFETY: as above; ESRCH (no such group) is fine.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

pub(crate) fn find_opencode(spec: &SpawnSpec) -> Result<PathBuf, String> {
    if let Some(bin) = &spec.opencode_bin {
        if bin.is_absolute() || bin.components().count() > 1 {
            return if bin.is_file() {
                Ok(bin.clone())
            } else {
                Err(format!("server.opencode_bin {} does not exist", bin.display()))
            };
        }
        return which(bin.as_os_str()).ok_or_else(|| format!("server.opencode_bin {} is not on PATH", bin.display()));
    }
    for dir in &spec.search_dirs {
        let candidate = dir.join("opencode");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    which("opencode".as_ref()).ok_or_else(|| {
        format!(
            "opencode was not found (not on PATH, nor in node_modules/.bin beside the config). Fix: install it with `npm install -g opencode-ai@{}` (puts `opencode` on PATH), or set server.opencode_bin = \"/path/to/opencode\"",
            crate::policy::routes::TABLE_VERSION
        )
    })
}

fn which(name: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|c| c.is_file()))
}

fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub(super) fn random_password() -> Secret {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    Secret::new(base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        bytes,
    ))
}

/// The server's private XDG directories under the gateway's state directory:
/// `<state_dir>/projects/<project>/{data,config,cache,state}`, each 0700 and, with `run_as`,
/// the project's folder and its XDG folders belong to that user. `state_dir` and `projects` stay
/// the gateway's: 0700, or 0711 with `run_as` (others may pass through to the folder they own,
/// never list or write; the control socket's folder stays 0700).
fn prepare_dirs(spec: &SpawnSpec, owner: Option<(u32, u32)>) -> Result<BTreeMap<&'static str, PathBuf>, String> {
    use std::os::unix::fs::PermissionsExt;
    let project_dir = &spec.state_dir;
    let projects = project_dir.parent().unwrap_or(project_dir);
    let root = projects.parent().unwrap_or(projects);
    let set_mode = |dir: &Path, mode: u32| {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))
    };
    for dir in [root, projects] {
        make_dir(dir)?;
        // Never readable or writable by others; passable only while a project runs as another user
        // (a project without `run_as` leaves what another one needs).
        let mode = std::fs::metadata(dir).map(|m| m.permissions().mode()).unwrap_or(0o700);
        set_mode(dir, if owner.is_some() { 0o711 } else { mode & 0o711 })?;
    }
    if let Some(user) = &spec.run_as {
        // The user must pass through every folder above its own to reach it.
        for up in root.ancestors().skip(1) {
            let mode = std::fs::metadata(up).map(|m| m.permissions().mode()).unwrap_or(0);
            if mode & 0o001 == 0 {
                return Err(format!(
                    "run_as = {user:?}: the user cannot pass through {} (mode {:o}) to reach its folders under server.state_dir; fix: chmod o+x {0}, or choose a state_dir others can reach",
                    up.display(),
                    mode & 0o7777
                ));
            }
        }
    }
    // Its own, whatever it sees of the user's setup: the session database (so a server lists only
    // its project's sessions: one database per server, where OpenCode keeps every session of the
    // OS user otherwise) and a temporary folder (OpenCode unpacks a native library of 5-14 MB
    // there at each start and never removes it), emptied at each start and removed at the stop.
    let tmp = project_dir.join("tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| format!("cannot empty {}: {e}", tmp.display()))?;
    }
    let db_dir = project_dir.join("data").join("opencode");
    let mut mine = vec![
        project_dir.clone(),
        project_dir.join("data"),
        db_dir.clone(),
        tmp.clone(),
    ];
    let mut dirs = BTreeMap::new();
    dirs.insert("OPENCODE_DB", db_dir.join("opencode.db"));
    dirs.insert("TMPDIR", tmp);
    if spec.opencode_config == OpencodeConfig::Private {
        for (var, sub) in [
            ("XDG_DATA_HOME", "data"),
            ("XDG_CONFIG_HOME", "config"),
            ("XDG_CACHE_HOME", "cache"),
            ("XDG_STATE_HOME", "state"),
        ] {
            let dir = project_dir.join(sub);
            mine.push(dir.clone());
            dirs.insert(var, dir);
        }
    }
    for dir in &mine {
        make_dir(dir)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .map_err(|e| format!("cannot give {} to uid {uid}: {e}", dir.display()))?;
        }
        set_mode(dir, 0o700)?;
    }
    Ok(dirs)
}

fn make_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

pub(crate) fn lookup_user(name: &str) -> Result<(u32, u32, PathBuf), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!("run_as = {name:?} needs the gateway to run as root"));
    }
    let c = std::ffi::CString::new(name).map_err(|_| format!("bad user name {name:?}"))?;
    // SAFETY: getpwnam returns a pointer to static storage or NULL; we copy what we need at once.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(format!("run_as: there is no OS user {name:?}"));
    }
    // SAFETY: pw is non-null and points to a valid passwd record.
    let (uid, gid, home) = unsafe {
        let home = std::ffi::CStr::from_ptr((*pw).pw_dir).to_string_lossy().into_owned();
        ((*pw).pw_uid, (*pw).pw_gid, PathBuf::from(home))
    };
    Ok((uid, gid, home))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn spec(state_dir: PathBuf, run_as: Option<&str>) -> SpawnSpec {
        SpawnSpec {
            project: "p".into(),
            on_box: None,
            directory: "/".into(),
            env: BTreeMap::new(),
            run_as: run_as.map(str::to_string),
            cors: Vec::new(),
            start: crate::config::StartMode::Eager,
            opencode_config: OpencodeConfig::User,
            opencode_bin: None,
            search_dirs: Vec::new(),
            state_dir,
            ready_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn folders_are_private_and_a_run_as_user_must_be_able_to_reach_them() {
        let tmp = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // Without run_as: everything the gateway's, 0700.
        let root = tmp.path().join("state");
        let dirs = prepare_dirs(&spec(root.join("projects/p"), None), None).unwrap();
        // The user's own setup: only the database and the temporary folder are the server's.
        assert_eq!(dirs.keys().copied().collect::<Vec<_>>(), ["OPENCODE_DB", "TMPDIR"]);
        assert_eq!(dirs["OPENCODE_DB"], root.join("projects/p/data/opencode/opencode.db"));
        for d in [
            root.clone(),
            root.join("projects"),
            root.join("projects/p"),
            root.join("projects/p/data"),
            root.join("projects/p/tmp"),
        ] {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        // A new start empties what an earlier one left in its temporary folder.
        std::fs::write(root.join("projects/p/tmp/.left-00000000.so"), b"x").unwrap();
        let mut private = spec(root.join("projects/p"), None);
        private.opencode_config = OpencodeConfig::Private;
        let dirs = prepare_dirs(&private, None).unwrap();
        assert_eq!(std::fs::read_dir(root.join("projects/p/tmp")).unwrap().count(), 0);
        // Private: folders of its own for everything.
        assert_eq!(dirs.len(), 6);
        assert_eq!(dirs["XDG_CONFIG_HOME"], root.join("projects/p/config"));
        // With run_as, a folder above state_dir the user cannot pass through is named, not fixed.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = prepare_dirs(&spec(root.join("projects/p"), Some("someone")), Some((65534, 65534))).unwrap_err();
        assert!(
            err.contains("cannot pass through")
                && err.contains(&tmp.path().display().to_string())
                && err.contains("chmod o+x"),
            "{err}"
        );
        assert_eq!(mode(tmp.path()), 0o700, "the gateway changes no folder it does not own");
    }
}
