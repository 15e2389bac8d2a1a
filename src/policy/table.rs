//! OpenCode's route table, compiled once: each row split into segments, with everything the
//! gateway decides from it (its plan: treatment, metric, body rule, workspace switch,
//! compression, audit; the session parameter; where its role comes from), indexed by its first
//! segment. `authz` matches requests against it; `drift` adds an upstream's own routes to it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::OnceLock;

use super::plan::{self, BodyRule, Treatment};
use super::routes::{ASKS_MODEL, Class, ROUTES};

/// One row of the table, split into segments once, with everything the gateway decides from it.
#[derive(Debug)]
pub struct ApiRoute {
    pub method: &'static str,
    pub pattern: &'static str,
    pub(super) segments: Vec<&'static str>,
    pub class: Class,
    pub treatment: Treatment,
    /// What requests of this route count as in the metrics.
    pub metric: plan::RouteClass,
    pub body: Option<&'static BodyRule>,
    pub workspace_switch: bool,
    /// Its 200 answer may be compressed: it echoes nothing of the request (see `plan`).
    pub compressible: bool,
    /// Its answer carries OpenCode's configuration: its secrets are redacted
    /// (`config_secrets.rs`).
    pub carries_secrets: bool,
    /// What the audit trail records for it, if anything.
    pub audit: Option<plan::AuditKind>,
    /// It makes OpenCode ask the model: the spending budgets judge it.
    pub asks_model: bool,
    /// Which parameter (by order) is a session ID: the one right after a `session` segment.
    pub(super) session_param: Option<usize>,
    /// Where the route's role comes from.
    pub origin: Origin,
}

/// Where a route's least role comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The reviewed table ([`super::routes`]).
    Table,
    /// The upstream's API document lists it and the table does not: a safe default.
    Defaulted,
    /// A `[[route_role]]` entry of the config.
    Configured,
}

impl ApiRoute {
    /// A route known by pattern only (an upstream's document, a config entry), with the plan the
    /// table would give the same (method, pattern).
    pub(super) fn new(method: &'static str, pattern: &'static str, class: Class, origin: Origin) -> ApiRoute {
        let segments: Vec<&'static str> = pattern.split('/').skip(1).collect();
        ApiRoute {
            method,
            pattern,
            class,
            treatment: plan::treatment(method, pattern),
            metric: plan::route_class(method, pattern, plan::treatment(method, pattern)),
            body: plan::body_rule(method, pattern),
            workspace_switch: plan::is_workspace_switch(method, pattern),
            compressible: plan::compressible(method, pattern),
            carries_secrets: super::config_secrets::carries_secrets(method, pattern),
            audit: plan::audit_kind(method, pattern),
            asks_model: asks_model(method, pattern),
            session_param: session_param(&segments),
            segments,
            origin,
        }
    }

    /// Why the role is what it is, for a refusal (empty for table routes).
    pub(crate) fn note(&self) -> &'static str {
        match self.origin {
            Origin::Table => "",
            Origin::Defaulted => {
                " (a route this OpenCode server has and the gateway's table does not: it gets a safe default; an admin can grant it with [[route_role]])"
            }
            Origin::Configured => " (set by a [[route_role]] entry of the gateway's config)",
        }
    }

    pub(crate) fn segments(&self) -> &[&'static str] {
        &self.segments
    }
}

/// The table grouped by its first segment (every pattern starts with a literal one).
/// Keys are the table's own root names, fixed at build: a client can look a name up but never add
/// one, so FNV-1a (several times cheaper than SipHash on short names) is safe.
type Index = HashMap<&'static str, Vec<ApiRoute>, BuildHasherDefault<crate::support::name_map::Fnv1a>>;

pub(crate) fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut map = Index::default();
        for &(method, pattern, class) in ROUTES {
            let route = ApiRoute::new(method, pattern, class, Origin::Table);
            map.entry(route.segments[0]).or_default().push(route);
        }
        map
    })
}

/// Does this route make OpenCode ask the model? The table says for its own routes; a route it
/// does not know (a newer server's, or one a `[[route_role]]` adds) that writes may, so it is
/// judged by the budgets until the table has reviewed it.
fn asks_model(method: &str, pattern: &str) -> bool {
    if ROUTES.iter().any(|(m, p, _)| *m == method && *p == pattern) {
        return ASKS_MODEL.contains(&(method, pattern));
    }
    method != "GET"
}

/// Which parameter (by order) follows a `session` segment: that one names a session.
fn session_param(segments: &[&str]) -> Option<usize> {
    let mut params = 0;
    for (i, s) in segments.iter().enumerate() {
        if *s == "*" {
            if i > 0 && segments[i - 1] == "session" {
                return Some(params);
            }
            params += 1;
        }
    }
    None
}
