//! An OpenCode server of another version than the table's. OpenCode releases often and people
//! upgrade their own `opencode`; an external upstream can be any version. So the gateway reads
//! each upstream's own API document (`GET /doc`) when it becomes ready, and:
//!
//! - every root (first segment) the document lists is an API root for that upstream: a path under
//!   it is never taken for the web UI's files, whatever the table says;
//! - a route the document lists and the table does not gets a safe default: operator for reads
//!   and writes alike, admin when every table route under the same root is admin-only; never
//!   viewer or approver;
//! - `[[route_role]]` entries of the config (compiled here into [`RouteRoles`]) replace the role of
//!   the route with exactly their pattern, table or document, or add a route neither knows.
//!
//! Decisions come from the document, the table and the config only: OpenCode answers any unknown
//! GET with its `index.html`, which proves nothing about a path. Routes made here are matched
//! like table routes (names in any case) and forwarded in their canonical spelling.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use super::dialect::Dialect;
use super::routes::Class;
use super::table::{ApiRoute, Origin, Table};
use crate::config::Role;

use crate::config::{ROUTE_METHODS as METHODS, RouteRoleEntry};

/// Requests carry `&'static ApiRoute`, so routes made at run time live as long as the process.
/// They are interned by what they are: a server restarted or a config reloaded any number of times
/// adds nothing; only routes never seen before do (a few per OpenCode release).
fn intern(method: &str, pattern: &str, class: Class, origin: Origin, table: &'static Table) -> &'static ApiRoute {
    type Key = (String, String, Class, Origin, &'static str);
    static SEEN: OnceLock<Mutex<HashMap<Key, &'static ApiRoute>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let key = (method.to_string(), pattern.to_string(), class, origin, table.version);
    if let Some(r) = seen.get(&key) {
        return r;
    }
    let method: &'static str = METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or_else(|| Box::leak(method.into()));
    let pattern: &'static str = Box::leak(pattern.into());
    let route: &'static ApiRoute = Box::leak(Box::new(ApiRoute::new(method, pattern, class, origin, table)));
    seen.insert(key, route);
    route
}

/// The class a role grants, for `[[route_role]]`.
pub(crate) fn class_for(role: Role) -> Class {
    match role {
        Role::Viewer => Class::Read,
        Role::Approver => Class::Respond,
        Role::Operator => Class::Operate,
        Role::Admin => Class::Configure,
    }
}

/// An OpenAPI path (`/session/{sessionID}/x`) as a table pattern (`/session/*/x`), names in lower
/// case; `None` for a path with no literal first segment. The document writes the file-path
/// wildcard as a last `*`: it is the table's `**` when the table has that route.
pub fn pattern_from_doc(method: &str, path: &str, table: &Table) -> Option<String> {
    let rest = path.strip_prefix('/')?;
    let mut out = String::with_capacity(path.len());
    for (i, seg) in rest.split('/').enumerate() {
        if seg.is_empty() || (i == 0 && (seg == "*" || seg.starts_with('{'))) {
            return None;
        }
        out.push('/');
        if seg.starts_with('{') && seg.ends_with('}') {
            out.push('*');
        } else {
            out.push_str(&seg.to_ascii_lowercase());
        }
    }
    if out.ends_with("/*") {
        let tail = format!("{out}*");
        if table.has(method, &tail) {
            return Some(tail);
        }
    }
    Some(out)
}

/// The order routes of one root are tried in: at the first segment where two patterns differ, a
/// literal before `*` before `**` (so a route with a name there wins over one with a parameter,
/// as in OpenCode's router and the table). Literals compare as strings, which makes this a total
/// order; two patterns that differ in literals never match the same path.
fn specificity(a: &ApiRoute, b: &ApiRoute) -> Ordering {
    let key = |s: &&'static str| -> (u8, &'static str) {
        match *s {
            "**" => (2, ""),
            "*" => (1, ""),
            lit => (0, lit),
        }
    };
    a.segments().iter().map(key).cmp(b.segments().iter().map(key))
}

/// The safe default for a route the table does not know: never viewer or approver.
fn default_class(root: &str, table: &'static Table) -> Class {
    match table.index().get(root) {
        Some(routes) if routes.iter().all(|r| r.class == Class::Configure) => Class::Configure,
        _ => Class::Operate,
    }
}

/// What one upstream's API document adds to its version's table.
#[derive(Debug)]
pub struct UpstreamApi {
    /// Which OpenCode it is: the part that knows its table, endpoints and commands.
    pub dialect: &'static dyn Dialect,
    /// What its health endpoint said.
    pub version: Option<String>,
    /// Every root the document lists (lower case).
    roots: HashSet<String>,
    /// For roots with routes the table does not know: the table's routes and those, in the order
    /// they are tried (a new literal route before a table route with a parameter there).
    merged: HashMap<String, Vec<&'static ApiRoute>>,
    /// The routes that got a default, in document order.
    pub defaulted: Vec<&'static ApiRoute>,
    /// How many routes the document lists.
    pub listed: usize,
}

impl UpstreamApi {
    /// Read an OpenAPI document's `paths`, against the dialect's table.
    pub fn from_doc(
        dialect: &'static dyn Dialect,
        version: Option<String>,
        doc: &serde_json::Value,
    ) -> Result<UpstreamApi, String> {
        let paths = doc
            .get("paths")
            .and_then(|p| p.as_object())
            .ok_or("the API document has no `paths` object")?;
        let table = dialect.table();
        let mut api = UpstreamApi {
            dialect,
            version,
            roots: HashSet::new(),
            merged: HashMap::new(),
            defaulted: Vec::new(),
            listed: 0,
        };
        for (path, ops) in paths {
            for method in METHODS {
                if ops.get(method.to_ascii_lowercase()).is_none() {
                    continue;
                }
                let Some(pattern) = pattern_from_doc(method, path, table) else {
                    continue;
                };
                api.listed += 1;
                let root = pattern[1..].split('/').next().unwrap_or_default().to_string();
                api.roots.insert(root.clone());
                if table.has(method, &pattern)
                    || api.defaulted.iter().any(|r| r.method == method && r.pattern == pattern)
                {
                    continue;
                }
                let route = intern(method, &pattern, default_class(&root, table), Origin::Defaulted, table);
                api.defaulted.push(route);
                api.merged.entry(root).or_default().push(route);
            }
        }
        for (root, routes) in &mut api.merged {
            let mut all: Vec<&'static ApiRoute> = table.index().get(root.as_str()).into_iter().flatten().collect();
            all.append(routes);
            all.sort_by(|a, b| specificity(a, b));
            *routes = all;
        }
        Ok(api)
    }

    /// The routes to try for this root (lower case) instead of the table's, when the document
    /// adds some there.
    pub(crate) fn routes(&self, root: &str) -> Option<&[&'static ApiRoute]> {
        if self.merged.is_empty() {
            return None;
        }
        self.merged.get(root).map(Vec::as_slice)
    }

    /// Does the document list a route under this root (lower case)?
    pub(crate) fn is_root(&self, root: &str) -> bool {
        self.roots.contains(root)
    }

    /// The same version with the same defaulted routes (routes are interned: compared by address).
    pub(crate) fn same_as(&self, other: &UpstreamApi) -> bool {
        std::ptr::addr_eq(self.dialect, other.dialect)
            && self.version == other.version
            && self.defaulted.len() == other.defaulted.len()
            && self
                .defaulted
                .iter()
                .zip(&other.defaulted)
                .all(|(a, b)| std::ptr::eq(*a, *b))
    }

    /// The table this upstream's requests are judged by.
    pub(crate) fn table(&self) -> &'static Table {
        self.dialect.table()
    }

    /// The version, or `unknown`.
    pub(crate) fn version(&self) -> &str {
        self.version.as_deref().unwrap_or("unknown")
    }

    /// Another version than the table's, or routes the table does not know.
    pub(crate) fn drifted(&self) -> bool {
        self.version() != self.table().version || !self.defaulted.is_empty()
    }

    /// One line per defaulted route: `GET /x/* operator (default)` or `… viewer ([[route_role]])`.
    pub(crate) fn defaulted_lines(&self, configured: &RouteRoles) -> Vec<String> {
        self.defaulted
            .iter()
            .map(|r| {
                let c = configured.replacing(r);
                let how = if c.origin == Origin::Configured {
                    "[[route_role]]"
                } else {
                    "default"
                };
                format!("{} {} {} ({how})", r.method, r.pattern, c.class.least_role().as_str())
            })
            .collect()
    }

    /// For the status report.
    pub(crate) fn report(&self, configured: &RouteRoles) -> serde_json::Value {
        serde_json::json!({
            "version": self.version(),
            "family": self.dialect.family(),
            "table_version": self.table().version,
            "routes_listed": self.listed,
            "defaulted_routes": self.defaulted_lines(configured),
        })
    }
}

/// The config's `[[route_role]]` entries, compiled: routes with their configured role.
#[derive(Debug, Clone, Default)]
pub struct RouteRoles {
    routes: Vec<&'static ApiRoute>,
}

impl RouteRoles {
    pub(crate) const EMPTY: RouteRoles = RouteRoles { routes: Vec::new() };

    /// The config's entries, compiled (once per config, by the running state).
    pub(crate) fn compile(entries: &[RouteRoleEntry]) -> RouteRoles {
        RouteRoles::new(entries.iter().map(|e| (e.method.as_str(), e.pattern.as_str(), e.role)))
    }

    /// From validated entries: method upper case, pattern as the table writes it.
    pub fn new<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str, Role)>) -> RouteRoles {
        let mut routes: Vec<&'static ApiRoute> = entries
            .into_iter()
            .map(|(m, p, role)| intern(m, p, class_for(role), Origin::Configured, &super::table::V1))
            .collect();
        routes.sort_by(|a, b| specificity(a, b));
        RouteRoles { routes }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &'static ApiRoute> + '_ {
        self.routes.iter().copied()
    }

    /// Entries under this root (lower case), tried after the table and the document.
    pub(crate) fn under<'s>(&'s self, root: &'s str) -> impl Iterator<Item = &'static ApiRoute> + 's {
        self.routes.iter().copied().filter(move |r| r.segments()[0] == root)
    }

    pub(crate) fn has_root(&self, root: &str) -> bool {
        self.routes.iter().any(|r| r.segments()[0] == root)
    }

    /// The entry for exactly this route, if there is one; else the route itself.
    pub(crate) fn replacing(&self, route: &'static ApiRoute) -> &'static ApiRoute {
        if self.routes.is_empty() {
            return route;
        }
        self.routes
            .iter()
            .find(|c| c.method == route.method && c.pattern == route.pattern)
            .copied()
            .unwrap_or(route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::dialect;
    use crate::policy::routes::{ROUTES, TABLE_VERSION};
    use crate::policy::table::{V1, index};

    #[test]
    fn document_paths_become_table_patterns() {
        assert_eq!(
            pattern_from_doc("GET", "/session/{sessionID}/message", &V1).as_deref(),
            Some("/session/*/message")
        );
        assert_eq!(
            pattern_from_doc("GET", "/api/fs/read/*", &V1).as_deref(),
            Some("/api/fs/read/**")
        );
        assert_eq!(
            pattern_from_doc("POST", "/api/fs/read/*", &V1).as_deref(),
            Some("/api/fs/read/*")
        );
        assert_eq!(pattern_from_doc("GET", "/New/{x}", &V1).as_deref(), Some("/new/*"));
        assert_eq!(pattern_from_doc("GET", "/{x}", &V1), None);
        assert_eq!(pattern_from_doc("GET", "/", &V1), None);
    }

    fn doc(paths: &[(&str, &str)]) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (m, p) in paths {
            let entry = map.entry(p.to_string()).or_insert_with(|| serde_json::json!({}));
            entry[m.to_ascii_lowercase()] = serde_json::json!({});
        }
        serde_json::json!({ "paths": map })
    }

    #[test]
    fn routes_the_table_knows_get_no_default() {
        let all: Vec<(&str, String)> = ROUTES
            .iter()
            .map(|(m, p, _)| (*m, p.replace("**", "*").replace('*', "{id}")))
            .collect();
        let paths: Vec<(&str, &str)> = all.iter().map(|(m, p)| (*m, p.as_str())).collect();
        let api = UpstreamApi::from_doc(&dialect::V1, Some(TABLE_VERSION.into()), &doc(&paths)).unwrap();
        assert!(api.defaulted.is_empty(), "{:?}", api.defaulted);
        assert!(!api.drifted());
        assert_eq!(api.listed, ROUTES.len());
    }

    #[test]
    fn new_routes_default_to_operator_or_admin() {
        let api = UpstreamApi::from_doc(
            &dialect::V1,
            Some("1.99.0".into()),
            &doc(&[
                ("GET", "/newroot/things"),
                ("POST", "/newroot/things"),
                ("GET", "/session/{id}/new-thing"),
                ("GET", "/tui/new-thing"),
                ("GET", "/session/{id}"),
            ]),
        )
        .unwrap();
        let classes: Vec<(&str, &str, Class)> = api.defaulted.iter().map(|r| (r.method, r.pattern, r.class)).collect();
        assert_eq!(
            classes,
            [
                ("GET", "/newroot/things", Class::Operate),
                ("POST", "/newroot/things", Class::Operate),
                ("GET", "/session/*/new-thing", Class::Operate),
                ("GET", "/tui/new-thing", Class::Configure),
            ]
        );
        assert!(api.drifted() && api.is_root("newroot"));
    }

    /// A newer server's write may ask the model (a new prompt or compaction route): the
    /// budgets judge it until the table has reviewed it. Its reads do not.
    #[test]
    fn a_new_write_is_judged_by_the_budgets_and_the_table_says_for_its_own() {
        let api = UpstreamApi::from_doc(
            &dialect::V1,
            Some("1.99.0".into()),
            &doc(&[("GET", "/session/{id}/digest"), ("POST", "/session/{id}/digest")]),
        )
        .unwrap();
        let asks: Vec<(&str, bool)> = api.defaulted.iter().map(|r| (r.method, r.asks_model)).collect();
        assert_eq!(asks, [("GET", false), ("POST", true)]);
        let table = |m: &str, p: &str| {
            index()["session"]
                .iter()
                .find(|r| r.method == m && r.pattern == p)
                .unwrap()
                .asks_model
        };
        assert!(table("POST", "/session/*/summarize") && table("POST", "/session/*/init"));
        assert!(table("POST", "/session/*/message") && table("POST", "/session/*/prompt_async"));
        assert!(!table("POST", "/session/*/fork") && !table("POST", "/session/*/abort"));
        assert!(!table("GET", "/session/*/message"));
    }

    #[test]
    fn a_new_literal_route_is_tried_before_a_table_parameter() {
        let api = UpstreamApi::from_doc(&dialect::V1, None, &doc(&[("GET", "/session/newlist")])).unwrap();
        let order: Vec<&str> = api.routes("session").unwrap().iter().map(|r| r.pattern).collect();
        let new = order.iter().position(|p| *p == "/session/newlist").unwrap();
        let param = order.iter().position(|p| *p == "/session/*").unwrap();
        let status = order.iter().position(|p| *p == "/session/status").unwrap();
        assert!(new < param && status < param, "{order:?}");
    }

    #[test]
    fn the_document_and_the_config_decide_with_the_canonical_rules() {
        use crate::policy::authz::{Extra, resolve_with};
        use crate::policy::canonical::CanonicalPath;
        use http::Method;
        let api = UpstreamApi::from_doc(
            &dialect::V1,
            Some("1.99.0".into()),
            &doc(&[
                ("GET", "/newroot/things"),
                ("GET", "/session/{id}/new-thing"),
                ("GET", "/session/newlist"),
            ]),
        )
        .unwrap();
        let none = RouteRoles::default();
        let granted = RouteRoles::new([("GET", "/newroot/things", Role::Viewer)]);
        let at = |m: Method, raw: &str, configured: &RouteRoles| {
            let path = CanonicalPath::parse(raw).unwrap();
            let extra = Extra {
                upstream: Some(&api),
                configured,
            };
            let r = resolve_with(&m, path.segments(), extra);
            (r.class, r.upstream_path.clone(), r.route.map(|r| r.origin))
        };
        assert_eq!(
            at(Method::GET, "/NewRoot/%74hings;x/", &none),
            (Some(Class::Operate), "/newroot/things".into(), Some(Origin::Defaulted))
        );
        assert_eq!(
            at(Method::POST, "/newroot/things", &none).0,
            None,
            "a method the document does not list"
        );
        assert_eq!(
            at(Method::GET, "/newroot/other", &none).0,
            None,
            "a root of the document is API, not a static file"
        );
        assert_eq!(
            at(Method::GET, "/newroot/things", &granted),
            (Some(Class::Read), "/newroot/things".into(), Some(Origin::Configured))
        );
        assert_eq!(
            at(Method::GET, "/Session/ses_1/NEW-THING", &none).1,
            "/session/ses_1/new-thing"
        );
        assert_eq!(
            at(Method::GET, "/session/NewList", &none).0,
            Some(Class::Operate),
            "not the table's /session/*"
        );
        assert_eq!(at(Method::GET, "/session/ses_1", &none).0, Some(Class::Read));
        assert_eq!(at(Method::GET, "/assets/app.js", &none).0, Some(Class::Read));
    }
}
