//! Project sets on boxes (issue 41: tasks on a box's projects): their folders listed over each
//! box's link, every [`EVERY`] and at once when a task made or removed a worktree, for the
//! sets' watcher (`reload.rs`) to discover from. A listing that fails keeps the last good one
//! (a box that is down for a moment does not make its projects flap) and is logged once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::state::State;
use crate::config::discover::{BoxListing, BoxListings};
use crate::config::settings::ProjectSet;
use crate::upstream::job::{self, Failed, Job, Keep};

/// How often a box set's folder is listed.
const EVERY: Duration = Duration::from_secs(5);
/// How long one listing may take.
const WITHIN: Duration = Duration::from_secs(10);
/// A listing's output, at most (a folder of thousands of worktrees is not a set).
const MAX_LISTING: usize = 256 * 1024;

#[derive(Default)]
pub(crate) struct BoxSets {
    listed: Mutex<BoxListings>,
    /// When each set was last listed (or tried), and what its last failure said.
    tried: Mutex<HashMap<String, (Instant, Option<String>)>>,
    /// A task made or removed a worktree: list at the next tick.
    wanted: AtomicBool,
}

impl BoxSets {
    /// The last good listing of each box set.
    pub(crate) fn snapshot(&self) -> BoxListings {
        self.listed.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// List every box set at the next tick.
    pub(crate) fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// List the box sets of `state` that are due; sets no longer configured are forgotten.
    pub(crate) async fn list_due(&self, state: &State) {
        let sets: Vec<&ProjectSet> = (state.settings.project_sets.iter())
            .filter(|s| s.template.on_box.is_some())
            .collect();
        let names: Vec<&str> = sets.iter().map(|s| s.name.as_str()).collect();
        (self.listed.lock().unwrap_or_else(|e| e.into_inner())).retain(|n, _| names.contains(&n.as_str()));
        let wanted = self.wanted.swap(false, Ordering::Relaxed);
        for set in sets {
            let due = (self.tried.lock().unwrap_or_else(|e| e.into_inner()).get(&set.name))
                .is_none_or(|(at, _)| wanted || at.elapsed() >= EVERY);
            if !due {
                continue;
            }
            let got = list(state, set).await;
            let mut tried = self.tried.lock().unwrap_or_else(|e| e.into_inner());
            let before = tried.insert(set.name.clone(), (Instant::now(), got.as_ref().err().cloned()));
            match got {
                Ok(listing) => {
                    self.listed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(set.name.clone(), listing);
                }
                Err(why) if before.and_then(|(_, w)| w).as_ref() != Some(&why) => {
                    tracing::warn!(set = set.name, reason = %why, "a project set on a box could not be listed; its last listing stays");
                }
                Err(_) => {}
            }
        }
    }
}

/// `set`'s folder, listed on its box.
async fn list(state: &State, set: &ProjectSet) -> Result<BoxListing, String> {
    let host = state.host_of(&set.template)?;
    let args: [&std::ffi::OsStr; 4] = [
        "-c".as_ref(),
        crate::config::discover_box::LIST.as_ref(),
        "sh".as_ref(),
        set.parent.as_os_str(),
    ];
    let job = Job {
        dir: std::path::Path::new("/"),
        program: "sh",
        args: &args,
        env: &[],
        keep: Keep::Head(MAX_LISTING),
        timeout: WITHIN,
    };
    let ran = job::run(&host, &job).await.map_err(|e| match e {
        Failed::TimedOut => format!("listing {} took over {} s", set.parent.display(), WITHIN.as_secs()),
        Failed::Cannot(e) => e,
    })?;
    match (&ran.status, ran.cut) {
        (_, true) => Err(format!(
            "{} lists over {MAX_LISTING} bytes of entries",
            set.parent.display()
        )),
        (Err(how), _) => Err(format!(
            "cannot list {}: {how}: {}",
            set.parent.display(),
            ran.complaint()
        )),
        (Ok(()), false) => crate::config::discover_box::parse(&String::from_utf8_lossy(&ran.out)),
    }
}
