//! Acceptance tests (issue 41, item 3): a project with `accept = "npm test"` has it run in its
//! folder when one of its sessions' turns ends with changes there (uncommitted files, or a `HEAD`
//! other than the one last tested), as the project's OS user (`run_as`, else the gateway's own),
//! with the environment emptied but for `PATH`, `HOME` and `LANG`, within `accept_timeout` (its
//! process group killed past it), keeping the output's last [`TAIL`] bytes. One run per project
//! at a time, [`CONCURRENT`] in all. The outcome is the project's, for the portal (`Board`);
//! each run is audited (`acceptance_test`), and a pass tells the team the task is ready for
//! review (the notifier and Web Push, as the guard's alerts go: never the output).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Gateway;
use super::task_git::Checkout;
use crate::config::settings::AcceptTest;
use crate::inbox::{Alert, AlertKind, TurnEnd};
use crate::upstream::job::{Failed, Keep};

/// Runs at once, in all projects.
const CONCURRENT: usize = 2;
/// Bytes of output kept.
pub(crate) const TAIL: usize = 4096;

/// How a project's last acceptance test went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    pub session: String,
    pub command: String,
    /// When it started (ms since the epoch).
    pub at_ms: u64,
    /// `None` while it runs; `Some(Ok(()))` passed; `Some(Err(why))`: "exit 1", "timed out".
    pub result: Option<Result<(), String>>,
    pub tail: String,
    /// What the folder held when it was tested (`HEAD`, status).
    tested: (String, String),
}

/// Every project's last outcome, and which run now.
pub(crate) struct Board {
    outcomes: Mutex<HashMap<String, Outcome>>,
    running: Mutex<HashSet<String>>,
    slots: Arc<tokio::sync::Semaphore>,
}

impl Default for Board {
    fn default() -> Board {
        Board {
            outcomes: Mutex::default(),
            running: Mutex::default(),
            slots: Arc::new(tokio::sync::Semaphore::new(CONCURRENT)),
        }
    }
}

impl Board {
    /// Project `name`'s last outcome.
    pub(crate) fn of(&self, name: &str) -> Option<Outcome> {
        self.outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The projects whose last test passed, with the session it was for: tasks ready for review.
    pub(crate) fn passed(&self) -> Vec<(String, String)> {
        let outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        (outcomes.iter())
            .filter(|(_, o)| o.result == Some(Ok(())))
            .map(|(p, o)| (p.clone(), o.session.clone()))
            .collect()
    }

    fn set(&self, project: &str, outcome: Outcome) {
        self.outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(project.to_string(), outcome);
    }

    /// Take project `name`'s turn to run: false while it runs.
    fn begin(&self, name: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string())
    }

    fn end(&self, name: &str) {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }
}

/// A session's turn ended: test its project's folder if it has an acceptance test and changed.
pub(crate) fn turn_ended(gw: &Arc<Gateway>, end: &TurnEnd) {
    let state = gw.state();
    let Some(p) = state.projects.get(&end.project) else {
        return;
    };
    let (Some(test), Some(dir)) = (p.config.accept.clone(), p.config.directory.clone()) else {
        return;
    };
    let Ok(host) = state.host_of(&p.config) else {
        return;
    };
    let board = &gw.lifecycle.acceptance;
    if !board.begin(&end.project) {
        return;
    }
    let (gw, end) = (gw.clone(), end.clone());
    tokio::spawn(async move {
        let git = Checkout {
            repo: &dir,
            host: &host,
        };
        // A turn that ends while the test runs is not lost: the folder is looked at again after
        // each run (a few times at most: a folder that keeps changing waits for the next turn).
        for _ in 0..3 {
            let Some(now) = git.state().await else { break };
            let last = gw.lifecycle.acceptance.of(&end.project).map(|o| o.tested);
            if !last.as_ref().map_or(!now.1.is_empty(), |l| *l != now) {
                break;
            }
            run(&gw, &git, &end, &test, now).await;
        }
        gw.lifecycle.acceptance.end(&end.project);
    });
}

async fn run(gw: &Gateway, git: &Checkout<'_>, end: &TurnEnd, test: &AcceptTest, tested: (String, String)) {
    let Ok(_slot) = gw.lifecycle.acceptance.slots.clone().acquire_owned().await else {
        return;
    };
    let mut outcome = Outcome {
        session: end.session.clone(),
        command: test.command.clone(),
        at_ms: crate::inbox::now_ms(),
        result: None,
        tail: String::new(),
        tested,
    };
    gw.lifecycle.acceptance.set(&end.project, outcome.clone());
    gw.inbox.changed_elsewhere();
    let started = Instant::now();
    let (result, tail) = shell(git, test).await;
    outcome.result = Some(result.clone());
    outcome.tail = tail;
    gw.lifecycle.acceptance.set(&end.project, outcome);
    gw.inbox.changed_elsewhere();
    told(gw, end, test, &result, started.elapsed().as_secs());
}

/// Run the command through `sh -c` in the folder (here or on the box): passed or why not, and
/// the output's tail.
async fn shell(git: &Checkout<'_>, test: &AcceptTest) -> (Result<(), String>, String) {
    let script = format!("exec 2>&1; {}", test.command);
    let args: [&std::ffi::OsStr; 2] = ["-c".as_ref(), script.as_ref()];
    match git.job("sh", &args, &[], Keep::Tail(TAIL), test.timeout).await {
        Ok(ran) => (ran.status, String::from_utf8_lossy(&ran.out).into_owned()),
        Err(Failed::TimedOut) => (
            Err(format!("timed out after {} s", test.timeout.as_secs())),
            String::new(),
        ),
        Err(Failed::Cannot(e)) => (Err(e), String::new()),
    }
}

/// Audit the run; a pass tells the team the task is ready for review.
fn told(gw: &Gateway, end: &TurnEnd, test: &AcceptTest, result: &Result<(), String>, secs: u64) {
    gw.audit.record(
        crate::audit::Record::new("acceptance_test")
            .project(end.project.clone())
            .field("session", end.session.clone())
            .field("passed", result.is_ok())
            .field("reason", result.clone().err().unwrap_or_default())
            .field("secs", secs),
    );
    tracing::info!(
        project = end.project,
        session = end.session,
        passed = result.is_ok(),
        secs,
        "an acceptance test ran"
    );
    if result.is_ok() {
        gw.inbox.tell(Alert {
            project: end.project.clone(),
            session: end.session.clone(),
            title: String::new(),
            kind: AlertKind::ReadyForReview,
            reason: format!("its acceptance test passed ({})", test.command),
            stopped: false,
        });
    }
}
