//! OpenCode's route table, compiled once: each row split into segments, with everything the
//! gateway decides from it (its plan: treatment, metric, body rule, workspace switch,
//! compression, audit; the session parameter; where its role comes from), indexed by its first
//! segment. `authz` matches requests against it; `drift` adds an upstream's own routes to it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::OnceLock;

use super::plan::{self, BodyRule, Treatment};
use super::routes::{ASKS_MODEL, Class, ROUTES, Route};
use super::routes_v2;

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
    /// It answers for every folder of the server, and the gateway cannot scope it: refused on a
    /// server several projects share.
    pub server_wide: bool,
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
    /// Nobody may use it, for this reason (a reviewed table's refused rows).
    pub refused: Option<&'static str>,
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
    pub(super) fn new(
        method: &'static str,
        pattern: &'static str,
        class: Class,
        origin: Origin,
        table: &Table,
    ) -> ApiRoute {
        let segments: Vec<&'static str> = pattern.split('/').skip(1).collect();
        ApiRoute {
            method,
            pattern,
            class,
            treatment: plan::treatment(method, pattern),
            metric: plan::route_class(method, pattern, plan::treatment(method, pattern)),
            body: plan::body_rule(method, pattern),
            workspace_switch: plan::is_workspace_switch(method, pattern),
            server_wide: plan::is_server_wide(method, pattern),
            compressible: plan::compressible(method, pattern),
            carries_secrets: super::config_secrets::carries_secrets(method, pattern),
            audit: plan::audit_kind(method, pattern),
            asks_model: table.asks_model(method, pattern),
            session_param: session_param(&segments),
            segments,
            origin,
            refused: None,
        }
    }

    /// Why the role is what it is, for a refusal (empty for table routes).
    pub(crate) fn note(&self) -> &'static str {
        if let Some(why) = self.refused {
            return why;
        }
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
pub(crate) type Index = HashMap<&'static str, Vec<ApiRoute>, BuildHasherDefault<crate::support::name_map::Fnv1a>>;

/// One OpenCode version's reviewed route table: its rows, the routes that ask the model, the
/// routes nobody may use (with why), and the web UI's own rows (served as the web UI's files, not
/// matched as API routes). Compiled into an [`Index`] on first use.
pub struct Table {
    /// The OpenCode version the rows were read from.
    pub version: &'static str,
    pub routes: &'static [Route],
    asks_model: &'static [(&'static str, &'static str)],
    pub refused: &'static [(&'static str, &'static str, &'static str)],
    web_ui: &'static [&'static str],
    index: OnceLock<Index>,
}

/// OpenCode 1.18.33's table (`routes.rs`).
pub static V1: Table = Table {
    version: super::routes::TABLE_VERSION,
    routes: ROUTES,
    asks_model: ASKS_MODEL,
    refused: &[],
    web_ui: &[],
    index: OnceLock::new(),
};

/// OpenCode 2.1.2's table (`routes_v2.rs`).
pub static V2: Table = Table {
    version: routes_v2::TABLE_VERSION,
    routes: routes_v2::ROUTES,
    asks_model: routes_v2::ASKS_MODEL,
    refused: routes_v2::REFUSED,
    web_ui: routes_v2::WEB_UI,
    index: OnceLock::new(),
};

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({})", self.version)
    }
}

impl Table {
    pub(crate) fn index(&'static self) -> &'static Index {
        self.index.get_or_init(|| {
            let mut map = Index::default();
            let rows = self.routes.iter().filter(|(_, p, _)| !self.web_ui.contains(p));
            for &(method, pattern, class) in rows {
                let route = ApiRoute::new(method, pattern, class, Origin::Table, self);
                map.entry(route.segments[0]).or_default().push(route);
            }
            for &(method, pattern, why) in self.refused {
                let mut route = ApiRoute::new(method, pattern, Class::Configure, Origin::Table, self);
                route.refused = Some(why);
                map.entry(route.segments[0]).or_default().push(route);
            }
            map
        })
    }

    /// Does the table have this row (refused ones included)?
    pub fn has(&self, method: &str, pattern: &str) -> bool {
        self.routes.iter().any(|(m, p, _)| *m == method && *p == pattern)
            || self.refused.iter().any(|(m, p, _)| *m == method && *p == pattern)
    }

    /// Does this route make OpenCode ask the model? The table says for its own routes; a route it
    /// does not know (a newer server's, or one a `[[route_role]]` adds) that writes may, so it is
    /// judged by the budgets until the table has reviewed it.
    fn asks_model(&self, method: &str, pattern: &str) -> bool {
        if self.has(method, pattern) {
            return self.asks_model.contains(&(method, pattern));
        }
        method != "GET"
    }
}

/// OpenCode 1.18.33's index (the tests' shorthand).
#[cfg(test)]
pub(crate) fn index() -> &'static Index {
    V1.index()
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
