//! The state a reload replaces, built whole from [`Settings`] and swapped in one step: users,
//! projects, routes and the TLS configuration. Connections in flight keep the snapshot they
//! started with; a config that fails to build changes nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use argon2::PasswordHash;

use crate::auth::cache::fingerprint;
use crate::config::{Grants, Project, Settings, UpstreamKind};
use crate::endpoint::Endpoint;
use crate::http::error::HttpError;
use crate::supervise::{SpawnSpec, Supervised, Supervisor};

pub struct State {
    pub settings: Arc<Settings>,
    pub projects: HashMap<String, Arc<ProjectState>>,
    pub users: HashMap<String, Arc<UserState>>,
    /// With exactly one project, it is also served at `/`.
    pub only_project: Option<String>,
    pub tls: Arc<rustls::ServerConfig>,
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
    pub sessions: crate::scope::SessionDirs,
}

pub enum Upstream {
    Fixed(Arc<Endpoint>),
    Supervised(Arc<Supervised>),
}

pub struct UserState {
    pub name: Arc<str>,
    pub hash: Option<PasswordHash>,
    /// Digest of the PHC text: part of every auth-cache key of this user.
    pub fingerprint: [u8; 32],
    pub grants: Grants,
    pub ssh_keys: Vec<russh::keys::PublicKey>,
}

impl ProjectState {
    /// Where to send this project's requests now; a spawned server may need to start first.
    pub async fn endpoint(&self, wait: Duration) -> Result<Arc<Endpoint>, HttpError> {
        match &self.upstream {
            Upstream::Fixed(e) => Ok(e.clone()),
            Upstream::Supervised(s) => s.endpoint(wait).await.map_err(|reason| HttpError::UpstreamStarting {
                project: self.name.to_string(),
                reason,
            }),
        }
    }
}

impl State {
    pub fn build(settings: Settings, tls: Arc<rustls::ServerConfig>, supervisor: &Supervisor) -> anyhow::Result<State> {
        let mut users = HashMap::new();
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
                }),
            );
        }
        let specs: Vec<SpawnSpec> = settings
            .projects
            .iter()
            .filter(|p| p.upstream == UpstreamKind::Spawned)
            .filter_map(|p| SpawnSpec::new(&settings, p))
            .collect();
        let mut spawned = supervisor.reconcile(specs);
        let mut projects = HashMap::new();
        for p in &settings.projects {
            let upstream = match &p.upstream {
                UpstreamKind::External { authority } => Upstream::Fixed(Arc::new(Endpoint::new(
                    authority.clone(),
                    &p.upstream_username,
                    p.upstream_password.as_ref(),
                ))),
                UpstreamKind::Spawned => Upstream::Supervised(
                    spawned
                        .remove(&p.name)
                        .ok_or_else(|| anyhow::anyhow!("project {} has no server to supervise", p.name))?,
                ),
            };
            projects.insert(
                p.name.clone(),
                Arc::new(ProjectState {
                    name: p.name.as_str().into(),
                    dir_header: p.directory.as_deref().map(crate::pin::directory_header),
                    shared_upstream: p.directory.is_some() && matches!(p.upstream, UpstreamKind::External { .. }),
                    sessions: Default::default(),
                    config: p.clone(),
                    upstream,
                }),
            );
        }
        let only_project = (settings.projects.len() == 1).then(|| settings.projects[0].name.clone());
        Ok(State {
            settings: Arc::new(settings),
            projects,
            users,
            only_project,
            tls,
        })
    }
}
