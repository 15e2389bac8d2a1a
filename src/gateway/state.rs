//! The state a reload replaces, built whole from [`Settings`] and swapped in one step: users,
//! projects, routes and the TLS configuration. Connections in flight keep the snapshot they
//! started with; a config that fails to build changes nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::cache::fingerprint;
use crate::auth::users::{UserState, Users};
use crate::config::{Project, Settings, UpstreamKind};
use crate::policy::drift::UpstreamApi;
use crate::support::name_map::NameMap;
use crate::upstream::box_links::BoxLinks;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::pool::Dial;
use crate::upstream::ssh_link::BoxLink;
use crate::upstream::supervise::{SpawnSpec, Supervised, Supervisor};

pub struct State {
    pub settings: Arc<Settings>,
    pub projects: NameMap<Arc<ProjectState>>,
    pub users: Users,
    /// With exactly one project, it is also served at `/`.
    pub only_project: Option<String>,
    /// The config's `[[route_role]]` entries, compiled.
    pub route_roles: crate::policy::drift::RouteRoles,
    pub tls: Arc<rustls::ServerConfig>,
    /// The SSH link to each `[[box]]`, by name.
    pub(crate) boxes: HashMap<String, Arc<BoxLink>>,
}

pub struct ProjectState {
    pub name: Arc<str>,
    pub config: Project,
    pub upstream: Upstream,
    /// `x-opencode-directory` naming the project's directory, when it has one (pinning).
    pub dir_header: Option<http::HeaderValue>,
    /// Pinned on a server that may also serve other directories: sessions, listings and the
    /// global event stream must be scoped to the project.
    pub shared_upstream: bool,
    pub sessions: crate::policy::scope::SessionDirs,
    /// This project's request counters and upstream latency, resolved once here.
    pub metrics: crate::metrics::ProjectMetrics,
}

pub enum Upstream {
    Fixed(Arc<Endpoint>),
    Supervised(Arc<Supervised>),
}

impl ProjectState {
    /// The upstream's version and API document, when read: one atomic load, no lock.
    pub(crate) fn api(&self) -> arc_swap::Guard<Option<Arc<UpstreamApi>>> {
        match &self.upstream {
            Upstream::Fixed(e) => e.api.load(),
            Upstream::Supervised(s) => s.api.load(),
        }
    }

    /// The endpoint without waiting, when nothing needs to happen first (the common case): an
    /// external server whose API document was read (or tried recently), or a spawned server
    /// that is ready and already asked for. `None`: take [`Self::endpoint`].
    pub(crate) fn ready_endpoint(&self) -> Option<Arc<Endpoint>> {
        match &self.upstream {
            Upstream::Fixed(e) => e.api_settled().then(|| e.clone()),
            Upstream::Supervised(s) => s.ready(),
        }
    }

    /// Where to send this project's requests now, once the server is ready and its API document
    /// is known (or could not be read): a spawned server may need to start first (it reads its
    /// document before it is ready); an external one may still be having its document read.
    pub(crate) async fn endpoint(
        &self,
        wait: Duration,
        connect_timeout: Duration,
    ) -> Result<Arc<Endpoint>, NotStarted> {
        match &self.upstream {
            Upstream::Fixed(e) => {
                e.ensure_api(connect_timeout, &self.name, crate::upstream::api::FETCH_TIMEOUT * 2)
                    .await;
                Ok(e.clone())
            }
            Upstream::Supervised(s) => s.endpoint(wait).await.map_err(|reason| NotStarted {
                project: self.name.to_string(),
                reason,
            }),
        }
    }
}

/// A spawned project's server did not become ready in time: which project and why (the HTTP
/// answer, 503 with the reason, is http/error.rs's).
#[derive(Debug)]
pub(crate) struct NotStarted {
    pub project: String,
    pub reason: String,
}

impl State {
    pub fn build(
        settings: Settings,
        tls: Arc<rustls::ServerConfig>,
        supervisor: &Supervisor,
        links: &BoxLinks,
        metrics: &crate::metrics::Metrics,
    ) -> anyhow::Result<State> {
        let users = users(&settings);
        let boxes = links.reconcile(&settings)?;
        let specs: Vec<SpawnSpec> = settings
            .projects
            .iter()
            .filter(|p| p.upstream == UpstreamKind::Spawned)
            .filter_map(|p| SpawnSpec::new(&settings, p, &boxes))
            .collect();
        let mut spawned = supervisor.reconcile(specs);
        let mut projects = NameMap::default();
        for p in &settings.projects {
            let upstream = match &p.upstream {
                UpstreamKind::External { authority } => Upstream::Fixed(Arc::new(Endpoint::with_dial(
                    authority.clone(),
                    &p.upstream_username,
                    p.upstream_password.as_ref(),
                    dial(p, authority, &boxes)?,
                ))),
                UpstreamKind::Spawned => Upstream::Supervised(
                    spawned
                        .remove(&p.name)
                        .ok_or_else(|| anyhow::anyhow!("project {} has no server to supervise", p.name))?,
                ),
            };
            let name: Arc<str> = p.name.as_str().into();
            projects.insert(
                p.name.clone(),
                Arc::new(ProjectState {
                    metrics: metrics.project(&name),
                    name,
                    dir_header: p.directory.as_deref().map(crate::policy::pin::directory_header),
                    shared_upstream: p.directory.is_some() && matches!(p.upstream, UpstreamKind::External { .. }),
                    sessions: Default::default(),
                    config: p.clone(),
                    upstream,
                }),
            );
        }
        // Not with project sets: `/` would change project as folders come and go.
        let only_project = (settings.projects.len() == 1 && settings.project_sets.is_empty())
            .then(|| settings.projects[0].name.clone());
        let route_roles = crate::policy::drift::RouteRoles::compile(&settings.route_roles);
        Ok(State {
            boxes,
            route_roles,
            settings: Arc::new(settings),
            projects,
            users,
            only_project,
            tls,
        })
    }
}

/// The users as the request path reads them: the parsed hash and its fingerprint.
fn users(settings: &Settings) -> Users {
    let mut users = Users::default();
    for u in &settings.users {
        users.insert(
            u.name.clone(),
            Arc::new(UserState {
                name: u.name.as_str().into(),
                hash: u.password_hash.as_ref().map(|(h, _)| h.clone()),
                fingerprint: u
                    .password_hash
                    .as_ref()
                    .map(|(_, text)| fingerprint(text))
                    .unwrap_or([0; 32]),
                grants: u.grants.clone(),
                ssh_keys: u.ssh_keys.clone(),
                policy: None,
            }),
        );
    }
    users
}

impl State {
    /// Where project `p`'s commands run (a task's git, its acceptance test): on its box, else
    /// here as its `run_as`.
    pub(crate) fn host_of(&self, p: &Project) -> Result<crate::upstream::job::Host, String> {
        match &p.on_box {
            Some(b) => (self.boxes.get(b).cloned())
                .map(crate::upstream::job::Host::Box)
                .ok_or_else(|| format!("no box {b}")),
            None => Ok(crate::upstream::job::Host::Here {
                run_as: p.run_as.clone(),
            }),
        }
    }
}

/// How an external server at `authority` is reached: directly, or through its box's SSH link.
fn dial(p: &Project, authority: &str, boxes: &HashMap<String, Arc<BoxLink>>) -> anyhow::Result<Dial> {
    let Some(b) = &p.on_box else { return Ok(Dial::Tcp) };
    let link = boxes.get(b).ok_or_else(|| anyhow::anyhow!("no box {b}"))?.clone();
    let (host, port) = authority
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_start_matches('[').trim_end_matches(']'), p.parse().ok()?)))
        .ok_or_else(|| anyhow::anyhow!("project {}: upstream {authority} has no port", p.name))?;
    Ok(Dial::Box {
        link,
        host: host.to_string(),
        port,
    })
}
