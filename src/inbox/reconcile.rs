//! Every second: which OpenCode servers run now and which projects each serves, from the projects
//! now (reloads and project-set changes swap them) and the supervisor's statuses. A watcher is
//! started for each running server, restarted when the projects it serves (or its endpoint)
//! change, and stopped when its server stops or its projects go. A spawned server is watched only
//! while the supervisor says it is ready: an on-demand server is never started to be watched.
//! External servers are always watched; their watcher says whether they are reachable.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::model::{Effect, ServerState};
use super::watch::{self, Target};
use super::{Inbox, Served, Server};
use crate::upstream::endpoint::Endpoint;
use crate::upstream::supervise::Status;

const EVERY: Duration = Duration::from_secs(1);

struct Desired {
    endpoint: Arc<Endpoint>,
    targets: Vec<Target>,
    external: bool,
}

struct Watching {
    endpoint: Arc<Endpoint>,
    targets: Vec<Target>,
    stop: CancellationToken,
}

pub(crate) async fn run(inbox: Arc<Inbox>) {
    let mut watching: HashMap<String, Watching> = HashMap::new();
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = inbox.parts.shutdown.cancelled() => break,
        }
        reconcile(&inbox, &mut watching);
    }
    for w in watching.values() {
        w.stop.cancel();
    }
}

/// A project's server as the inbox lists it: `None` for an external one (its watcher says).
type Listed = (String, Option<ServerState>, Option<String>);

fn reconcile(inbox: &Arc<Inbox>, watching: &mut HashMap<String, Watching>) {
    let projects = inbox.parts.projects.all();
    let (desired, servers) = wanted(&projects);
    // Stop watchers whose server is gone or whose projects or endpoint changed.
    watching.retain(|authority, w| {
        let keep = desired
            .get(authority)
            .is_some_and(|d| Arc::ptr_eq(&d.endpoint, &w.endpoint) && d.targets == w.targets);
        if !keep {
            w.stop.cancel();
        }
        keep
    });
    for (authority, d) in desired {
        if let std::collections::hash_map::Entry::Vacant(slot) = watching.entry(authority) {
            let w = start_watching(inbox, slot.key(), d);
            slot.insert(w);
        }
    }
    list_servers(inbox, &projects, servers);
}

/// The watchers the projects now need (one per server address, with the projects it serves) and
/// each project's server state.
fn wanted(projects: &[Served]) -> (HashMap<String, Desired>, Vec<Listed>) {
    let mut desired: HashMap<String, Desired> = HashMap::new();
    let mut servers = Vec::new();
    for p in projects {
        let dir = p.directory.clone();
        let (endpoint, external, target, server) = match &p.server {
            Server::External(e) => (
                Some(e.clone()),
                true,
                Target {
                    project: p.name.to_string(),
                    directory: dir.clone(),
                    only_inside: dir.clone(),
                },
                None,
            ),
            Server::Spawned(status) => {
                let (endpoint, server) = spawned(status);
                // A spawned server has private data: every event it sends is this project's.
                let target = Target {
                    project: p.name.to_string(),
                    directory: dir.clone(),
                    only_inside: None,
                };
                (endpoint, false, target, Some(server))
            }
        };
        servers.push((p.name.to_string(), server, dir));
        if let Some(endpoint) = endpoint {
            let d = desired.entry(endpoint.authority.clone()).or_insert_with(|| Desired {
                endpoint: endpoint.clone(),
                targets: Vec::new(),
                external,
            });
            d.targets.push(target);
        }
    }
    for d in desired.values_mut() {
        d.targets.sort_by(|a, b| a.project.cmp(&b.project));
    }
    (desired, servers)
}

/// A spawned server's address to watch (only while ready) and its state as the inbox shows it.
fn spawned(status: &Status) -> (Option<Arc<Endpoint>>, ServerState) {
    let stopped = |reason: &str| ServerState::Stopped { reason: reason.into() };
    match status {
        Status::Ready(e) => (Some(e.clone()), ServerState::Running),
        Status::Starting => (None, ServerState::Starting),
        Status::Waiting => (None, stopped("starts on the first request")),
        Status::Failed(why) => (
            None,
            ServerState::Failed {
                reason: why.to_string(),
            },
        ),
        Status::NotRunning(why) => (
            None,
            ServerState::NotRunning {
                reason: why.to_string(),
            },
        ),
        Status::Stopped => (None, stopped("stopped")),
    }
}

fn start_watching(inbox: &Arc<Inbox>, authority: &str, d: Desired) -> Watching {
    let stop = inbox.parts.shutdown.child_token();
    tracing::debug!(upstream = %authority, projects = d.targets.len(), "inbox: watching a server");
    tokio::spawn(watch::run(
        inbox.clone(),
        d.endpoint.clone(),
        d.targets.clone(),
        d.external,
        stop.clone(),
    ));
    if d.external {
        // Until its watcher connects: not running yet, unless it was already.
        inbox.update(|m, _| {
            for t in &d.targets {
                if !matches!(
                    m.projects.get(&t.project).map(|p| &p.server),
                    Some(ServerState::Running)
                ) {
                    m.set_server(&t.project, ServerState::Starting, t.directory.clone());
                }
            }
            Effect::changed(true)
        });
    }
    Watching {
        endpoint: d.endpoint,
        targets: d.targets,
        stop,
    }
}

/// The inbox lists exactly the projects there are, each with its server's state.
fn list_servers(inbox: &Inbox, projects: &[Served], servers: Vec<Listed>) {
    inbox.update(|m, _| {
        let names: HashSet<&str> = projects.iter().map(|p| &*p.name).collect();
        let mut changed = m.retain_projects(|name| names.contains(name));
        for (name, server, dir) in servers {
            match server {
                Some(s) => {
                    let running = s == ServerState::Running;
                    changed |= m.set_server(&name, s, dir);
                    if !running {
                        // Its requests died with the process (or were never there).
                        changed |= m.forget_pending(&name);
                    }
                }
                None => {
                    // External: the watcher sets the state; make sure the project is listed.
                    if !m.projects.contains_key(&name) {
                        m.set_server(&name, ServerState::Starting, dir);
                        changed = true;
                    }
                }
            }
        }
        Effect::changed(changed)
    });
}
