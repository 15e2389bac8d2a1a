//! The inbox's parts, from the running gateway: the projects of the current state (read at each
//! look, so reloads and project-set changes apply), how long a connection to a server may take, and the shutdown. And
//! the start of the inbox's tasks and of the notifier that takes its new cards.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use super::Gateway;
use super::state::{ProjectState, State, Upstream};
use crate::inbox::{Parts, Projects, Served, Server};

/// What the inbox needs, for [`crate::inbox::Inbox::new`].
pub(super) fn parts(
    state: &Arc<ArcSwap<State>>,
    connect_timeout: std::time::Duration,
    shutdown: &CancellationToken,
    audit: &crate::audit::Audit,
    meter: &Arc<crate::budget::Meter>,
) -> Parts {
    Parts {
        projects: Arc::new(Current(state.clone())),
        connect_timeout,
        shutdown: shutdown.clone(),
        audit: audit.clone(),
        meter: meter.clone(),
    }
}

/// Start the inbox's watchers, its guard (stopping sessions through `guard_road`) and the
/// notifier; all end with the gateway's shutdown.
pub(crate) fn start(gw: &Arc<Gateway>, guard_road: Box<dyn crate::inbox::Road>) {
    // The sessions under a permission policy, before the watchers seed their requests.
    read_session_policies(gw);
    crate::inbox::start(&gw.inbox, guard_road);
    if let Some(rx) = gw.inbox.notices() {
        // Read when a batch starts: a reload applies to the next message.
        let state = gw.state.clone();
        let config = move || {
            let state = state.load();
            state
                .settings
                .notify
                .clone()
                .map(|n| (n, state.settings.server.public_url.clone()))
        };
        let push = gw.browser.push.clone();
        // Of gateways sharing a store, the one holding its `notifier` lock tells the team.
        let lock = gw.browser.sessions.store().leader("notifier");
        let leads = move || {
            lock.as_ref()
                .is_none_or(|l| l.load(std::sync::atomic::Ordering::SeqCst))
        };
        tokio::spawn(crate::notify::run(
            rx,
            config,
            push,
            leads,
            gw.lifecycle.shutdown.clone(),
        ));
    }
}

/// Read the sessions under a permission policy from the state database into the inbox: at start,
/// and when another gateway on the same database made one (PostgreSQL's notice).
pub(crate) fn read_session_policies(gw: &Gateway) {
    match gw.browser.sessions.store().session_policies() {
        Ok(kept) => {
            for s in &kept {
                gw.inbox.keep_session_policy(&s.session, &s.policy);
            }
            if !kept.is_empty() {
                tracing::info!(
                    sessions = kept.len(),
                    "sessions under a permission policy read from the state database"
                );
            }
        }
        Err(e) => tracing::error!(error = %e, "the sessions under a permission policy could not be read"),
    }
}

/// Who may be pushed what, by the current state: approvers and above of a project get its
/// requests.
pub(crate) struct PushAudience(pub(crate) Arc<ArcSwap<State>>);

impl crate::notify::push::Audience for PushAudience {
    fn may_answer(&self, user: &str, project: &str) -> bool {
        let state = self.0.load();
        let role = state.users.get(user).and_then(|u| u.grants.role_in(project));
        state.projects.contains_key(project)
            && role.is_some_and(|r| r >= crate::policy::authz::Class::Respond.least_role())
    }

    fn allow_private(&self) -> bool {
        self.0.load().settings.push_private_endpoints
    }

    fn subject(&self) -> String {
        self.0.load().settings.server.public_url.clone()
    }
}

/// The projects of whatever state is current.
struct Current(Arc<ArcSwap<State>>);

impl Projects for Current {
    fn all(&self) -> Vec<Served> {
        let state = self.0.load();
        state.projects.values().map(|p| served(p, &state)).collect()
    }

    fn get(&self, name: &str) -> Option<Served> {
        let state = self.0.load();
        state.projects.get(name).map(|p| served(p, &state))
    }

    fn policy(&self, name: &str) -> Option<Arc<crate::config::permissions::PermissionPolicy>> {
        let state = self.0.load();
        state.settings.policies.iter().find(|p| p.name == name).cloned()
    }
}

fn served(p: &ProjectState, state: &State) -> Served {
    Served {
        name: p.name.clone(),
        directory: p.config.directory.as_ref().map(|d| d.display().to_string()),
        server: match &p.upstream {
            Upstream::Fixed(e) => Server::External(e.clone()),
            Upstream::Supervised(s) => Server::Spawned(s.status()),
        },
        budget: p.config.budget,
        user_day_usd: state.settings.user_day_usd,
    }
}
