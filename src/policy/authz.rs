//! Roles × OpenCode routes. A request's canonical path is matched once against OpenCode's route
//! table ([`super::routes`]); the match says the route's class (the least role), how the gateway
//! treats it ([`super::plan`]), which session it names, and the spelling forwarded upstream. Every
//! later decision reads that match, never the path again.
//!
//! Route names match whatever their case (OpenCode's router ignores case); parameters keep
//! theirs. An API route the table does not know is denied. GETs outside the API are the web UI's
//! static files and SPA routes (OpenCode answers any unknown path with `index.html`), which every
//! role may load; a path counts as API when its first segment, in any case, is a table root.

use std::borrow::Cow;

use http::Method;

use super::canonical::{CanonicalPath, PathRefusal, push_segment};
use super::drift::{RouteRoles, UpstreamApi};
pub use super::routes::Class;
use super::table::V1;
pub use super::table::{ApiRoute, Origin};
use crate::config::Role;

/// Why a request may not use a route. Said here; the status and body each gets are decided with
/// every other error's in the one table of `http/error.rs` (`From<Refused> for HttpError`), so
/// the policy knows no HTTP type.
#[derive(Debug)]
pub enum Refused {
    /// The role does not reach the route's class, or no role may use it: the sentence says which.
    Forbidden(String),
    /// The path cannot be read the way OpenCode would read it.
    BadPath(PathRefusal),
}

/// The OpenAPI document itself is not one of its own routes; it is an API root, refused.
const DOC_ROOT: &str = "doc";

/// A request path matched against the table: the one reading every stage uses.
#[derive(Debug)]
pub struct Resolved<'p> {
    /// The table route for this method and path, if there is one.
    pub route: Option<&'static ApiRoute>,
    /// The path is OpenCode's API (a table root in any case, or `/doc`), not the web UI's files.
    pub api: bool,
    /// The least class needed; `None` when nobody may (an API route the table does not know).
    pub class: Option<Class>,
    /// The session the route is about, decoded.
    pub session: Option<&'p str>,
    /// The spelling forwarded upstream: route names as the table writes them, parameters
    /// re-encoded so OpenCode decodes them to what the gateway judged.
    pub upstream_path: String,
    /// The file a file-path route (`/api/fs/read/**`) names, decoded (`/abs` or `rel/ative`).
    pub file: Option<String>,
}

impl Resolved<'_> {
    /// What the access log and errors call this request: the table pattern, or the path.
    pub(crate) fn label(&self) -> &str {
        self.route.map_or(&self.upstream_path, |r| r.pattern)
    }
}

/// Where a pattern matched: the segment index of each parameter, and where a `**` tail starts.
pub(super) struct Match {
    params: [usize; 4],
    tail: Option<usize>,
}

pub(super) fn match_pattern(pattern: &[&str], segs: &[Cow<'_, str>]) -> Option<Match> {
    let mut m = Match {
        params: [0; 4],
        tail: None,
    };
    let mut n_params = 0;
    let mut i = 0;
    for p in pattern {
        if *p == "**" {
            // A file path: the rest, empty segments included (a leading one makes it absolute).
            let rest = segs.get(i..)?;
            if rest.iter().all(|s| s.is_empty()) {
                return None;
            }
            m.tail = Some(i);
            return Some(m);
        }
        while segs.get(i).is_some_and(|s| s.is_empty()) {
            i += 1;
        }
        let s = segs.get(i)?;
        if *p == "*" {
            *m.params.get_mut(n_params)? = i;
            n_params += 1;
        } else if !p.eq_ignore_ascii_case(s) {
            return None;
        }
        i += 1;
    }
    segs[i..].iter().all(|s| s.is_empty()).then_some(m)
}

fn render(pattern: &[&str], segs: &[Cow<'_, str>], m: &Match) -> String {
    let mut out = String::with_capacity(64);
    let mut params = m.params.iter();
    for p in pattern {
        match *p {
            "**" => {
                for s in &segs[m.tail.unwrap_or(segs.len())..] {
                    push_segment(&mut out, s);
                }
            }
            "*" => push_segment(&mut out, &segs[*params.next().unwrap_or(&0)]),
            literal => {
                out.push('/');
                out.push_str(literal);
            }
        }
    }
    out
}

/// The web UI's files: the non-empty segments as written (case kept), re-encoded.
fn render_static(segs: &[Cow<'_, str>]) -> String {
    let mut out = String::with_capacity(32);
    for s in segs.iter().filter(|s| !s.is_empty()) {
        push_segment(&mut out, s);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// The web UI's own files, whatever the server's version: its page (`/`), its bundle
/// (`/assets/…`) and the files at its root (`/favicon-v3.ico`, `/site.webmanifest`).
fn web_ui_file(segs: &[Cow<'_, str>]) -> bool {
    let mut named = segs.iter().filter(|s| !s.is_empty());
    match (named.next(), named.next()) {
        (None, _) => true,
        (Some(first), _) if first.eq_ignore_ascii_case("assets") => true,
        (Some(file), None) => file.contains('.'),
        _ => false,
    }
}

/// The table's routes under a root (given in lower case): the upstream's version's table, or
/// 1.x's until its version is known.
fn root_routes(root: &str, extra: &Extra<'_>) -> Option<&'static Vec<ApiRoute>> {
    extra.upstream.map_or(&V1, |u| u.table()).index().get(root)
}

/// Match the path (the segments an upstream sees, after any `/p/<name>` prefix) against the
/// table only.
pub fn resolve<'p>(method: &Method, segs: &'p [Cow<'p, str>]) -> Resolved<'p> {
    resolve_with(method, segs, Extra::NONE)
}

/// What the table alone does not say: the upstream's own API document (routes it has that the
/// table does not, with their safe default) and the config's `[[route_role]]` entries.
#[derive(Clone, Copy)]
pub struct Extra<'a> {
    pub upstream: Option<&'a UpstreamApi>,
    pub configured: &'a RouteRoles,
}

impl Extra<'static> {
    pub(crate) const NONE: Extra<'static> = Extra {
        upstream: None,
        configured: &RouteRoles::EMPTY,
    };
}

/// Match the path against the table, then the upstream's document, then the config's own
/// routes (first match wins, in that order); a `[[route_role]]` entry naming the matched route
/// replaces its role. The first segment is an API root when any of the three has it.
pub fn resolve_with<'p>(method: &Method, segs: &'p [Cow<'p, str>], extra: Extra<'_>) -> Resolved<'p> {
    // HEAD reads what GET reads; OPTIONS (CORS preflight) reads nothing.
    let m = if method == Method::HEAD { "GET" } else { method.as_str() };
    let first = segs.iter().find(|s| !s.is_empty()).map_or("", |s| s.as_ref());
    let lower = Lower::new(first);
    let root = lower.get();
    // Where the document adds routes to a root, its merged list replaces the table's.
    let doc = extra.upstream.and_then(|u| u.routes(root));
    let table = if doc.is_some() { None } else { root_routes(root, &extra) };
    let api_root = table.is_some()
        || doc.is_some()
        || extra.upstream.is_some_and(|u| u.is_root(root))
        || extra.configured.has_root(root);
    if !api_root {
        return outside_api(method, m, first, segs, extra);
    }
    let table = table.into_iter().flatten();
    let doc = doc.into_iter().flatten().copied();
    let configured = extra.configured.under(root);
    let mut spelled: Option<String> = None;
    for r in table.chain(doc).chain(configured) {
        let Some(found) = match_pattern(&r.segments, segs) else {
            continue;
        };
        if r.method != m {
            // Keep the first spelling in case no route has this method (OPTIONS, or refused).
            spelled.get_or_insert_with(|| render(&r.segments, segs, &found));
            continue;
        }
        let r = extra.configured.replacing(r);
        return Resolved {
            route: Some(r),
            api: true,
            class: r.refused.is_none().then_some(r.class),
            session: r.session_param.map(|i| segs[found.params[i]].as_ref()),
            upstream_path: render(&r.segments, segs, &found),
            file: found.tail.map(|t| segs[t..].join("/")),
        };
    }
    Resolved {
        route: None,
        api: true,
        class: (method == Method::OPTIONS).then_some(Class::Read),
        session: None,
        upstream_path: spelled.unwrap_or_else(|| render_static(segs)),
        file: None,
    }
}

/// A path under no API root: the web UI's, or the API document's own path. Only its reads are
/// judged here (OPTIONS and GET); anything else has no class and is refused.
fn outside_api<'p>(method: &Method, m: &str, first: &str, segs: &'p [Cow<'p, str>], extra: Extra<'_>) -> Resolved<'p> {
    let api = first.eq_ignore_ascii_case(DOC_ROOT);
    let class = if method == Method::OPTIONS {
        Some(Class::Read)
    } else if m == "GET" && !api {
        // A root nobody lists is the web UI's only once the server's own document says what
        // its API is: until then (not read yet, or unreadable) a newer OpenCode's new root
        // would be a viewer's. Only the web UI's own files stay readable meanwhile.
        Some(if extra.upstream.is_some() || web_ui_file(segs) {
            Class::Read
        } else {
            Class::Operate
        })
    } else {
        None
    };
    Resolved {
        route: None,
        api,
        class,
        session: None,
        upstream_path: render_static(segs),
        file: None,
    }
}

/// A root segment in lower case, allocated only when it has an upper-case letter.
struct Lower<'a>(Cow<'a, str>);

impl<'a> Lower<'a> {
    fn new(s: &'a str) -> Self {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            Lower(Cow::Owned(s.to_ascii_lowercase()))
        } else {
            Lower(Cow::Borrowed(s))
        }
    }

    fn get(&self) -> &str {
        &self.0
    }
}

/// May `role` use a route of this class? `label` names the route in the refusal, `note` says
/// where its role comes from when that is not the table.
pub(crate) fn check_target(
    role: Role,
    method: &Method,
    class: Option<Class>,
    label: &str,
    note: &str,
) -> Result<(), Refused> {
    match class {
        Some(class) if role >= class.least_role() => Ok(()),
        Some(class) => Err(Refused::Forbidden(format!(
            "{method} {label} needs the {} role; you are {}{note}",
            class.least_role().as_str(),
            role.as_str()
        ))),
        None => Err(Refused::Forbidden(format!(
            "{method} {label} is not a route the gateway allows{note}"
        ))),
    }
}

/// Parse and check a raw path in one call: for tests and tools.
pub fn check_path(role: Role, method: &Method, raw: &str) -> Result<(), Refused> {
    check_path_with(role, method, raw, Extra::NONE)
}

/// [`check_path`] with an upstream's document and config entries.
pub(crate) fn check_path_with(role: Role, method: &Method, raw: &str, extra: Extra<'_>) -> Result<(), Refused> {
    let path = CanonicalPath::parse(raw).map_err(Refused::BadPath)?;
    let resolved = resolve_with(method, path.segments(), extra);
    let note = resolved.route.map_or("", |r| r.note());
    check_target(role, method, resolved.class, resolved.label(), note)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(method: Method, raw: &str) -> (Option<Class>, String, Option<String>) {
        let path = CanonicalPath::parse(raw).unwrap();
        let r = resolve(&method, path.segments());
        (r.class, r.upstream_path.clone(), r.session.map(str::to_string))
    }

    #[test]
    fn patterns_match_whole_segments() {
        let segs = |raw: &'static str| CanonicalPath::parse(raw).unwrap().segments().to_vec();
        let matches = |pattern: &str, raw: &'static str| {
            let p: Vec<&str> = pattern.split('/').skip(1).collect();
            match_pattern(&p, &segs(raw)).is_some()
        };
        assert!(matches("/session/*", "/session/ses_1"));
        assert!(!matches("/session/*", "/session/ses_1/message"));
        assert!(!matches("/session/*", "/session/"));
        assert!(matches("/api/fs/read/**", "/api/fs/read/a/b"));
        assert!(matches("/api/fs/read/**", "/api/fs/read//tmp/a"));
        assert!(!matches("/api/fs/read/**", "/api/fs/read"));
        assert!(!matches("/api/fs/read/**", "/api/fs/read//"));
        assert!(matches("/session", "/session/"));
        assert!(matches("/session", "//session//"));
        assert!(matches("/global/health", "/GLOBAL/Health"));
    }

    #[test]
    fn roles_climb() {
        let get = Method::GET;
        let post = Method::POST;
        assert!(check_path(Role::Viewer, &get, "/session/ses_1/message").is_ok());
        assert!(check_path(Role::Viewer, &post, "/permission/per_1/reply").is_err());
        assert!(check_path(Role::Approver, &post, "/permission/per_1/reply").is_ok());
        assert!(check_path(Role::Approver, &post, "/session/ses_1/prompt_async").is_err());
        assert!(check_path(Role::Operator, &post, "/session/ses_1/prompt_async").is_ok());
        assert!(check_path(Role::Operator, &get, "/pty/pty_1/connect").is_ok());
        assert!(check_path(Role::Approver, &get, "/pty/pty_1/connect").is_err());
        assert!(check_path(Role::Operator, &Method::PATCH, "/config").is_err());
        assert!(check_path(Role::Admin, &Method::PATCH, "/config").is_ok());
    }

    #[test]
    fn other_spellings_of_a_route_are_that_route() {
        for raw in [
            "/PTY/pty_1/connect",
            "/%70ty/pty_1/connect",
            "/Pty/pty_1/Connect;x",
            "//pty//pty_1/connect/",
        ] {
            assert_eq!(
                resolved(Method::GET, raw),
                (Some(Class::Operate), "/pty/pty_1/connect".into(), None),
                "{raw}"
            );
        }
        assert_eq!(
            resolved(Method::DELETE, "/SESSION/ses%5Fab"),
            (Some(Class::Operate), "/session/ses_ab".into(), Some("ses_ab".into()))
        );
        assert_eq!(
            resolved(Method::GET, "/session/STATUS"),
            (Some(Class::Read), "/session/status".into(), None),
            "a route name wins over a parameter of the same spelling"
        );
        assert_eq!(
            resolved(Method::GET, "/API/fs/READ//tmp/My%20File"),
            (Some(Class::Read), "/api/fs/read//tmp/My%20File".into(), None),
            "a file path keeps its case and its leading slash"
        );
    }

    #[test]
    fn unknown_api_routes_are_denied_and_the_web_ui_loads() {
        assert_eq!(resolved(Method::POST, "/session/ses_1/new-thing").0, None);
        assert_eq!(resolved(Method::GET, "/session/ses_1/new-thing").0, None);
        assert_eq!(resolved(Method::GET, "/").0, Some(Class::Read));
        assert_eq!(
            resolved(Method::GET, "/assets/index-abc.js"),
            (Some(Class::Read), "/assets/index-abc.js".into(), None)
        );
        assert_eq!(resolved(Method::GET, "/favicon-v3.ico").0, Some(Class::Read));
        // An SPA route under a root nobody lists: the web UI's once the server's document is
        // read, an operator's before (a newer server's new root must not be a viewer's).
        let spa = "/L3RtcC9vY3dvcms/session/ses_1";
        assert_eq!(resolved(Method::GET, spa).0, Some(Class::Operate));
        let read = crate::policy::drift::UpstreamApi::from_doc(
            &crate::policy::dialect::V1,
            None,
            &serde_json::json!({ "paths": {} }),
        )
        .unwrap();
        let path = CanonicalPath::parse(spa).unwrap();
        let extra = Extra {
            upstream: Some(&read),
            configured: &RouteRoles::EMPTY,
        };
        assert_eq!(
            resolve_with(&Method::GET, path.segments(), extra).class,
            Some(Class::Read)
        );
        assert_eq!(resolved(Method::POST, "/assets/x").0, None);
        assert_eq!(resolved(Method::GET, "/experimental/new-thing").0, None);
        for doc in ["/doc", "/DOC", "/d%6fc"] {
            assert_eq!(
                resolved(Method::GET, doc).0,
                None,
                "{doc}: the API document is not served"
            );
        }
    }

    #[test]
    fn sessions_are_named_by_the_parameter_after_session() {
        assert_eq!(
            resolved(Method::GET, "/session/ses_a/message").2.as_deref(),
            Some("ses_a")
        );
        assert_eq!(
            resolved(Method::GET, "/api/session/ses_b/event").2.as_deref(),
            Some("ses_b")
        );
        assert_eq!(
            resolved(Method::POST, "/session/ses_c/permissions/per_1").2.as_deref(),
            Some("ses_c")
        );
        assert_eq!(
            resolved(Method::POST, "/experimental/session/ses_d/background")
                .2
                .as_deref(),
            Some("ses_d")
        );
        assert_eq!(resolved(Method::GET, "/session/status").2, None);
        assert_eq!(resolved(Method::GET, "/api/session/active").2, None);
        assert_eq!(resolved(Method::POST, "/permission/per_1/reply").2, None);
    }

    /// Whether an answer may be compressed is read from the resolved route: every spelling
    /// OpenCode's router reads as `/provider` gets the catalog's verdict, and nothing else does.
    #[test]
    fn compression_follows_the_resolved_route_not_the_spelling() {
        let compressible = |method: Method, raw: &str| {
            let path = CanonicalPath::parse(raw).unwrap();
            resolve(&method, path.segments()).route.map(|r| r.compressible)
        };
        for raw in [
            "/provider",
            "/PROVIDER",
            "/%70rovider",
            "/%50ROVIDER",
            "//provider",
            "/provider/",
            "/provider;x",
            "/Config/Providers",
            "/agent",
            "/COMMAND",
        ] {
            assert_eq!(compressible(Method::GET, raw), Some(true), "{raw}");
        }
        for raw in [
            "/provider/auth",
            "/session",
            "/SESSION",
            "/config",
            "/event",
            "/api/provider",
        ] {
            assert_eq!(compressible(Method::GET, raw), Some(false), "{raw}");
        }
        // Not a GET of the catalog: an OAuth authorize under `/provider` echoes its input.
        assert_eq!(
            compressible(Method::POST, "/provider/openai/oauth/authorize"),
            Some(false)
        );
        // The web UI's files have no route (compressed as files, not as API answers).
        assert_eq!(compressible(Method::GET, "/assets/index-abcdef12.js"), None);
    }
}
