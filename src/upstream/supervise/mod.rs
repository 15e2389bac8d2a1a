//! Projects with `spawn = true`: the gateway runs one `opencode serve` per project, on an explicit
//! free loopback port (never `--port 0`, which grabs 4096 first), with a random password that only
//! the gateway's memory holds, private XDG directories (so no project sees another's sessions), a
//! minimal environment (so no project sees the gateway's other secrets), and `--cors` for the
//! gateway's origins. Ready means the `listening on` line was read and an authenticated health
//! check answered. A server that exits or stops answering is restarted with backoff; on shutdown
//! its whole process group gets SIGTERM, then SIGKILL after a deadline.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use arc_swap::ArcSwapOption;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::config::{Project, Secret, Settings, StartMode};
use crate::metrics::ProjectLabel;
use crate::policy::drift::UpstreamApi;

pub(crate) mod launch;
pub(crate) mod remote;
mod remote_process;

use crate::upstream::endpoint::Endpoint;
use launch::Running;
pub(crate) use launch::health;

const STOP_GRACE: Duration = Duration::from_secs(5);
const HEALTH_EVERY: Duration = Duration::from_secs(10);
const HEALTH_FAILURES_BEFORE_RESTART: u32 = 3;
const STDERR_TAIL: usize = 30;
/// The reason `watch_server` gives when an operator asked for a restart.
const RESTART_ASKED: &str = "a restart was asked for";
/// Environment variables a spawned server inherits from the gateway; everything else is dropped.
const INHERITED_ENV: [&str; 12] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "TERM",
    "TZ",
    "TMPDIR",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
];

/// Where OpenCode finds the user's configuration, credentials, cache and state when they are not
/// under HOME: passed on with `opencode_config = "user"` to a server that runs as the gateway's user.
const USER_SETUP_ENV: [&str; 4] = ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"];

#[derive(Clone, Debug)]
pub enum Status {
    /// `start = "on-demand"` and nobody asked yet.
    Waiting,
    Starting,
    Ready(Arc<Endpoint>),
    /// It ran, then died or stopped answering (why); it is being restarted after a backoff. A
    /// request waits for the restart (bounded by `spawn_ready_timeout`).
    Failed(Arc<str>),
    /// It could not be started (why: OpenCode missing, exiting at once, never ready). The gateway
    /// tries again with backoff, but a request is answered 503 with the reason at once: waiting
    /// would only hide a fault the operator must mend.
    NotRunning(Arc<str>),
    Stopped,
}

/// Everything that decides how a server is started; a reload keeps a running server when this is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnSpec {
    pub project: String,
    /// The box it runs on (`None`: this machine).
    pub on_box: Option<remote::OnBox>,
    pub directory: PathBuf,
    pub env: BTreeMap<String, Secret>,
    pub run_as: Option<String>,
    pub cors: Vec<String>,
    pub start: StartMode,
    pub opencode_config: crate::config::settings::OpencodeConfig,
    pub opencode_bin: Option<PathBuf>,
    pub search_dirs: Vec<PathBuf>,
    pub state_dir: PathBuf,
    pub ready_timeout: Duration,
}

impl SpawnSpec {
    pub(crate) fn new(
        settings: &Settings,
        project: &Project,
        links: &HashMap<String, Arc<crate::upstream::ssh_link::BoxLink>>,
    ) -> Option<SpawnSpec> {
        let directory = project.directory.clone()?;
        let on_box = match &project.on_box {
            None => None,
            Some(name) => Some(remote::OnBox {
                link: links.get(name)?.clone(),
                opencode: settings.boxes.iter().find(|b| &b.name == name)?.opencode.clone(),
            }),
        };
        let config_dir = settings.path.parent().unwrap_or(Path::new(".")).to_path_buf();
        Some(SpawnSpec {
            project: project.name.clone(),
            on_box,
            directory,
            env: project.env.clone(),
            run_as: project.run_as.clone(),
            cors: crate::policy::origin::project_origins(settings, project),
            start: project.start,
            opencode_config: project.opencode_config,
            opencode_bin: settings.server.opencode_bin.clone(),
            search_dirs: vec![
                config_dir.join("../node_modules/.bin"),
                config_dir.join("node_modules/.bin"),
            ],
            state_dir: settings.server.state_dir.join("projects").join(&project.name),
            ready_timeout: settings.limits.spawn_ready_timeout,
        })
    }
}

/// Why a spawned project's server cannot start, when that is known without trying (its OpenCode
/// is not to be found): for the banner and `check`, so they say NOT RUNNING instead of printing
/// attach commands that would only get 503s.
pub(crate) fn cannot_start(settings: &Settings, project: &Project) -> Option<String> {
    // On a box, only starting it says (the box is asked then, not by `check`).
    if !matches!(project.upstream, crate::config::UpstreamKind::Spawned) || project.on_box.is_some() {
        return None;
    }
    launch::find_opencode(&SpawnSpec::new(settings, project, &HashMap::new())?).err()
}

/// The `opencode` a local spawned project's server would run (none for a box's or another kind).
pub(crate) fn local_opencode(settings: &Settings, project: &Project) -> Option<PathBuf> {
    if !matches!(project.upstream, crate::config::UpstreamKind::Spawned) || project.on_box.is_some() {
        return None;
    }
    launch::find_opencode(&SpawnSpec::new(settings, project, &HashMap::new())?).ok()
}

/// Which OpenCode a project's clients talk to, for printed commands: a local spawned server's
/// npm package says (nothing is run); otherwise 1.x's commands.
pub(crate) fn local_dialect(settings: &Settings, project: &Project) -> &'static dyn crate::policy::dialect::Dialect {
    local_opencode(settings, project)
        .and_then(|bin| launch::dialect_of_package(&bin))
        .unwrap_or(&crate::policy::dialect::V1)
}

pub struct Supervised {
    pub spec: SpawnSpec,
    status: watch::Sender<Status>,
    /// Why the last attempt failed, kept while the next one starts, so a waiting request can say why.
    last_failure: Mutex<Option<Arc<str>>>,
    demanded: AtomicBool,
    demand: Notify,
    /// `restart <project>`: stop the running server and start a new one now (an edited
    /// `opencode.json` is read at start).
    restart: Notify,
    /// Who asked for the restart (a user on the portal; none from the control socket), for
    /// the audit record.
    restart_by: Mutex<Option<String>>,
    stop: CancellationToken,
    /// The server's version and API document, read after every start before it is Ready.
    pub api: ArcSwapOption<UpstreamApi>,
    /// The model its server answers with, in words, as the server said when it last became ready.
    pub model: ArcSwapOption<crate::upstream::model_report::ModelSeen>,
    /// `upstream_restarts_total` of this project.
    restarts: Counter,
}

impl Supervised {
    pub(crate) fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Restart the server now, without backoff; an error when there is no running server to restart.
    pub(crate) fn restart(&self) -> Result<(), String> {
        self.restart_by(None)
    }

    /// [`Supervised::restart`], for `user` (recorded in the audit's `server_restarted`).
    pub(crate) fn restart_by(&self, user: Option<&str>) -> Result<(), String> {
        match self.status() {
            Status::Ready(_) => {
                *self.restart_by.lock().unwrap_or_else(|e| e.into_inner()) = user.map(String::from);
                self.restart.notify_one();
                Ok(())
            }
            Status::Waiting => Err("its server has not started yet (it starts on the first request)".into()),
            Status::Starting => Err("its server is starting; try again when it is ready".into()),
            Status::Failed(why) | Status::NotRunning(why) => Err(format!("its server is not running: {why}")),
            Status::Stopped => Err("its server was stopped".into()),
        }
    }

    /// The endpoint of a server that is ready and was already asked for, without waiting.
    pub(crate) fn ready(&self) -> Option<Arc<Endpoint>> {
        if !self.demanded.load(Ordering::Relaxed) {
            return None;
        }
        match &*self.status.borrow() {
            Status::Ready(e) => Some(e.clone()),
            _ => None,
        }
    }

    /// The server's endpoint, starting it if it waits for demand; waits at most `wait`.
    pub(crate) async fn endpoint(&self, wait: Duration) -> Result<Arc<Endpoint>, String> {
        let mut rx = self.status.subscribe();
        if !self.demanded.swap(true, Ordering::SeqCst) {
            self.demand.notify_one();
        }
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            match &*rx.borrow_and_update() {
                Status::Ready(e) => return Ok(e.clone()),
                Status::Stopped => return Err("the project's server was stopped".into()),
                Status::NotRunning(why) => return Err(why.to_string()),
                _ => {}
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return Err("the project's server was stopped".into()) },
                _ = &mut deadline => {
                    let last = self.last_failure.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    return Err(match last {
                        Some(why) => why.to_string(),
                        None => format!("still starting after {} s", wait.as_secs()),
                    });
                }
            }
        }
    }
}

/// The set of running servers, reconciled with the config on start and on every reload.
pub struct Supervisor {
    servers: Mutex<HashMap<String, Arc<Supervised>>>,
    /// How long a connection to a server may take (`limits.upstream_connect_timeout`).
    connect_timeout: Duration,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    restarts: Family<ProjectLabel, Counter>,
    audit: crate::audit::Audit,
}

impl Supervisor {
    pub fn new(
        connect_timeout: Duration,
        shutdown: CancellationToken,
        restarts: Family<ProjectLabel, Counter>,
        audit: crate::audit::Audit,
    ) -> Self {
        Supervisor {
            servers: Mutex::new(HashMap::new()),
            connect_timeout,
            tasks: TaskTracker::new(),
            shutdown,
            restarts,
            audit,
        }
    }

    /// Start servers for new specs, keep unchanged ones, stop the rest. Returns the live set.
    pub(crate) fn reconcile(&self, specs: Vec<SpawnSpec>) -> HashMap<String, Arc<Supervised>> {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::new();
        for spec in specs {
            match servers.remove(&spec.project) {
                Some(running) if running.spec == spec => {
                    next.insert(spec.project.clone(), running);
                }
                previous => {
                    if let Some(old) = previous {
                        tracing::info!(project = %spec.project, "project settings changed: restarting its server");
                        old.stop.cancel();
                    }
                    let s = self.start(spec);
                    next.insert(s.spec.project.clone(), s);
                }
            }
        }
        for (name, removed) in servers.drain() {
            tracing::info!(project = %name, "project removed: stopping its server");
            removed.stop.cancel();
        }
        *servers = next.clone();
        next
    }

    fn start(&self, spec: SpawnSpec) -> Arc<Supervised> {
        let initial = if spec.start == StartMode::OnDemand {
            Status::Waiting
        } else {
            Status::Starting
        };
        let restarts = self
            .restarts
            .get_or_create(&ProjectLabel {
                project: spec.project.as_str().into(),
            })
            .clone();
        let s = Arc::new(Supervised {
            restarts,
            demanded: AtomicBool::new(spec.start == StartMode::Eager),
            spec,
            status: watch::Sender::new(initial),
            last_failure: Mutex::new(None),
            demand: Notify::new(),
            restart: Notify::new(),
            restart_by: Mutex::new(None),
            stop: self.shutdown.child_token(),
            api: ArcSwapOption::empty(),
            model: ArcSwapOption::empty(),
        });
        self.tasks
            .spawn(run(s.clone(), self.connect_timeout, self.audit.clone()));
        s
    }

    /// Stop every server and wait until their processes are gone.
    pub(crate) async fn stop_all(&self) {
        for s in self.servers.lock().unwrap_or_else(|e| e.into_inner()).values() {
            s.stop.cancel();
        }
        self.tasks.close();
        self.tasks.wait().await;
    }
}

async fn run(s: Arc<Supervised>, connect_timeout: Duration, audit: crate::audit::Audit) {
    use crate::audit::Record;
    let project = s.spec.project.clone();
    if !s.demanded.load(Ordering::SeqCst) {
        tokio::select! {
            _ = s.demand.notified() => {}
            _ = s.stop.cancelled() => { s.status.send_replace(Status::Stopped); return; }
        }
    }
    let mut backoff = Duration::from_secs(1);
    loop {
        s.status.send_replace(Status::Starting);
        let started = tokio::time::Instant::now();
        let launched = match &s.spec.on_box {
            None => launch::launch(&s.spec, connect_timeout, &s.stop).await,
            Some(on) => remote::launch(&s.spec, on, connect_timeout, &s.stop).await,
        };
        // Whether this attempt got as far as a ready server (a crash) or not (a failed start).
        let ran = launched.is_ok();
        let why = match launched {
            Ok(mut server) => serve(&s, &mut server, connect_timeout, &audit).await,
            Err(why) => why,
        };
        if why == RESTART_ASKED {
            restarted(&s, &audit);
            backoff = Duration::from_secs(1);
            continue;
        }
        if s.stop.is_cancelled() {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        failed(&s, &audit, ran, why, backoff);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = s.stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
    s.status.send_replace(Status::Stopped);
    remove_tmp(&s.spec);
    tracing::info!(project = %project, "project server stopped");
    audit.record(Record::new("server_stopped").project(&*project));
}

/// A launched server: told, read, served until it fails or is stopped; why it ended.
async fn serve(
    s: &Arc<Supervised>,
    server: &mut Running,
    connect_timeout: Duration,
    audit: &crate::audit::Audit,
) -> String {
    let project = &s.spec.project;
    let on_box = s.spec.on_box.as_ref().map(|b| b.link.name().to_string());
    tracing::info!(project = %project, port = server.port, pid = server.process.id(), r#box = on_box.as_deref(), "project server ready");
    let mut record = crate::audit::Record::new("server_started")
        .project(&**project)
        .field("port", server.port)
        .field("pid", server.process.id());
    if let Some(b) = on_box {
        record = record.field("box", b);
    }
    audit.record(record);
    *s.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
    // Read before Ready, so no request is judged on the table alone once it serves.
    // Logged when it changed (a restart of the same server says nothing new).
    match server.endpoint.read_api(connect_timeout).await {
        Ok(api) => {
            let same = s.api.load().as_deref().is_some_and(|old| old.same_as(&api));
            let api = Arc::new(api);
            s.api.store(Some(api.clone()));
            // After the store: what the log says applies is what `status` shows.
            if !same {
                crate::upstream::api::log(project, &api);
            }
        }
        Err(why) => crate::upstream::api::unreadable(project, &server.endpoint.authority, &why),
    }
    s.status.send_replace(Status::Ready(server.endpoint.clone()));
    // Beside the serving, not before it: asking the model took seconds on a fresh
    // server, which a first request would otherwise wait for.
    tokio::spawn(read_model(s.clone(), server.endpoint.clone(), connect_timeout));
    let why = watch_server(s, server, connect_timeout).await;
    s.status.send_replace(Status::Starting);
    server.process.stop().await;
    remove_tmp(&s.spec);
    why
}

fn restarted(s: &Supervised, audit: &crate::audit::Audit) {
    let project = &s.spec.project;
    tracing::info!(project = %project, "project server restarted on request");
    let mut record = crate::audit::Record::new("server_restarted").project(&**project);
    if let Some(user) = s.restart_by.lock().unwrap_or_else(|e| e.into_inner()).take() {
        record = record.user(user).field("from", "control_room");
    }
    audit.record(record);
}

/// A server that crashed (`ran`) or could not start: logged, counted, audited, shown.
fn failed(s: &Supervised, audit: &crate::audit::Audit, ran: bool, why: String, backoff: Duration) {
    let project = &s.spec.project;
    if ran {
        tracing::warn!(project = %project, reason = %why, retry_in_s = backoff.as_secs(), "project server failed; restarting");
    } else {
        tracing::error!(project = %project, reason = %why, retry_in_s = backoff.as_secs(), "project server NOT RUNNING: it could not be started; its requests get 503 with this reason");
    }
    s.restarts.inc();
    // The fact, not the reason: it may quote the server's own output.
    audit.record(
        crate::audit::Record::new(if ran {
            "server_crashed"
        } else {
            "server_failed_to_start"
        })
        .project(&**project)
        .field("restart_in_s", backoff.as_secs()),
    );
    let why: Arc<str> = why.into();
    *s.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
    s.status.send_replace(if ran {
        Status::Failed(why)
    } else {
        Status::NotRunning(why)
    });
}

/// Ask the ready server which model it answers with: logged (a warning when it will likely fail
/// at the model, with how to mend it) and kept for `status`, the banner and `doctor`.
async fn read_model(s: Arc<Supervised>, endpoint: Arc<Endpoint>, connect_timeout: Duration) {
    use crate::upstream::model_report::{ModelReport, ModelSeen};
    let project = &s.spec.project;
    let seen = ModelSeen::of(ModelReport::read(&endpoint, connect_timeout).await);
    match (&seen, seen.warning()) {
        (ModelSeen::Said { model, .. }, None) => {
            tracing::info!(project = %project, model = %model, "project server's model")
        }
        (ModelSeen::Said { model, .. }, Some(why)) => {
            tracing::warn!(project = %project, model = %model, "project server's model will likely fail: {why}")
        }
        (ModelSeen::Unread(_), Some(why)) => tracing::warn!(project = %project, "{why}"),
        (ModelSeen::Unread(_), None) => {}
    }
    s.model.store(Some(Arc::new(seen)));
}

/// A stopped local server's temporary folder goes with it (a box's is emptied at its next start).
fn remove_tmp(spec: &SpawnSpec) {
    let tmp = spec.state_dir.join("tmp");
    if spec.on_box.is_none()
        && let Err(e) = std::fs::remove_dir_all(&tmp)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(project = %spec.project, folder = %tmp.display(), error = %e, "cannot remove a stopped server's temporary folder");
    }
}

/// Watch a ready server until it exits, fails its health checks, or the gateway stops it.
async fn watch_server(s: &Supervised, server: &mut Running, connect_timeout: Duration) -> String {
    let mut failures = 0;
    let mut tick = tokio::time::interval(HEALTH_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            code = server.process.wait() => {
                let tail = server.stderr_tail();
                return format!("the server exited ({code}); stderr: {}", if tail.is_empty() { "(empty)".into() } else { tail });
            }
            _ = tick.tick() => {
                if health(&server.endpoint, server.dialect, connect_timeout).await.is_ok() {
                    failures = 0;
                } else {
                    failures += 1;
                    if failures >= HEALTH_FAILURES_BEFORE_RESTART {
                        return format!("{failures} health checks failed in a row");
                    }
                }
            }
            _ = s.stop.cancelled() => return "stopping".into(),
            _ = s.restart.notified() => return RESTART_ASKED.into(),
        }
    }
}
