//! Roles × OpenCode routes → allow or deny. Every route of OpenCode's API (its `GET /doc`) is in
//! [`ROUTES`] with the least role that may use it; an API route the table does not know is denied.
//! GETs outside the API are the web UI's static files and SPA routes (OpenCode answers any unknown
//! path with `index.html`), which every role may load.

use std::collections::HashMap;
use std::sync::OnceLock;

use http::Method;

use crate::config::Role;
use crate::http::error::HttpError;

/// What a route does, in increasing power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Look: GETs of sessions, messages, files, status, event streams.
    Read,
    /// Answer the agent: permission and question replies, abort.
    Respond,
    /// Drive the agent: prompts, sessions, terminals, shell commands.
    Operate,
    /// Change the server: config, provider auth, MCP, TUI control, instance lifecycle.
    Configure,
}

impl Class {
    pub fn least_role(self) -> Role {
        match self {
            Class::Read => Role::Viewer,
            Class::Respond => Role::Approver,
            Class::Operate => Role::Operator,
            Class::Configure => Role::Admin,
        }
    }
}

use Class::*;

const GET: &str = "GET";
const POST: &str = "POST";
const PUT: &str = "PUT";
const PATCH: &str = "PATCH";
const DELETE: &str = "DELETE";
const ANY: &str = "*";

/// (method, path pattern, class). `*` is one path segment, `**` one or more. First match wins.
pub const ROUTES: &[Route] = &[
    // Terminals are shells whatever the method: even reading one lets you type into it.
    (GET, "/pty/*/connect", Operate),
    (GET, "/api/pty/*/connect", Operate),
    (POST, "/pty/*/connect-token", Operate),
    (POST, "/api/pty/*/connect-token", Operate),
    (GET, "/pty", Read),
    (GET, "/pty/shells", Read),
    (GET, "/pty/*", Read),
    (POST, "/pty", Operate),
    (PUT, "/pty/*", Operate),
    (DELETE, "/pty/*", Operate),
    (GET, "/api/pty", Read),
    (GET, "/api/pty/*", Read),
    (POST, "/api/pty", Operate),
    (PUT, "/api/pty/*", Operate),
    (DELETE, "/api/pty/*", Operate),
    // Answering the agent.
    (POST, "/permission/*/reply", Respond),
    (POST, "/question/*/reply", Respond),
    (POST, "/question/*/reject", Respond),
    (POST, "/session/*/permissions/*", Respond),
    (POST, "/session/*/abort", Respond),
    (POST, "/api/session/*/permission/*/reply", Respond),
    (POST, "/api/session/*/question/*/reply", Respond),
    (POST, "/api/session/*/question/*/reject", Respond),
    (POST, "/api/session/*/interrupt", Respond),
    // Sessions (v1).
    (GET, "/session", Read),
    (GET, "/session/status", Read),
    (GET, "/session/*", Read),
    (GET, "/session/*/children", Read),
    (GET, "/session/*/diff", Read),
    (GET, "/session/*/message", Read),
    (GET, "/session/*/message/*", Read),
    (GET, "/session/*/todo", Read),
    (POST, "/session", Operate),
    (PATCH, "/session/*", Operate),
    (DELETE, "/session/*", Operate),
    (POST, "/session/*/command", Operate),
    (POST, "/session/*/fork", Operate),
    (POST, "/session/*/init", Operate),
    (POST, "/session/*/message", Operate),
    (POST, "/session/*/prompt_async", Operate),
    (POST, "/session/*/revert", Operate),
    (POST, "/session/*/unrevert", Operate),
    (POST, "/session/*/shell", Operate),
    (POST, "/session/*/summarize", Operate),
    (POST, "/session/*/share", Operate),
    (DELETE, "/session/*/share", Operate),
    (DELETE, "/session/*/message/*", Operate),
    (DELETE, "/session/*/message/*/part/*", Operate),
    (PATCH, "/session/*/message/*/part/*", Operate),
    // Sessions (v2).
    (GET, "/api/session", Read),
    (GET, "/api/session/active", Read),
    (GET, "/api/session/*", Read),
    (GET, "/api/session/*/context", Read),
    (GET, "/api/session/*/event", Read),
    (GET, "/api/session/*/history", Read),
    (GET, "/api/session/*/message", Read),
    (GET, "/api/session/*/message/*", Read),
    (GET, "/api/session/*/permission", Read),
    (GET, "/api/session/*/permission/*", Read),
    (GET, "/api/session/*/question", Read),
    (POST, "/api/session", Operate),
    (POST, "/api/session/*/agent", Operate),
    (POST, "/api/session/*/compact", Operate),
    (POST, "/api/session/*/model", Operate),
    (POST, "/api/session/*/prompt", Operate),
    (POST, "/api/session/*/permission", Operate),
    (POST, "/api/session/*/revert/clear", Operate),
    (POST, "/api/session/*/revert/commit", Operate),
    (POST, "/api/session/*/revert/stage", Operate),
    (POST, "/api/session/*/wait", Operate),
    (DELETE, "/api/permission/saved/*", Operate),
    (POST, "/experimental/session/*/background", Operate),
    (POST, "/vcs/apply", Operate),
    (POST, "/project/git/init", Operate),
    // Reading the project.
    (GET, "/agent", Read),
    (GET, "/command", Read),
    (GET, "/config", Read),
    (GET, "/config/providers", Read),
    (GET, "/event", Read),
    (GET, "/file", Read),
    (GET, "/file/content", Read),
    (GET, "/file/status", Read),
    (GET, "/find", Read),
    (GET, "/find/file", Read),
    (GET, "/find/symbol", Read),
    (GET, "/formatter", Read),
    (GET, "/global/config", Read),
    (GET, "/global/event", Read),
    (GET, "/global/health", Read),
    (GET, "/lsp", Read),
    (GET, "/mcp", Read),
    (GET, "/path", Read),
    (GET, "/permission", Read),
    (GET, "/project", Read),
    (GET, "/project/current", Read),
    (GET, "/project/*/directories", Read),
    (GET, "/provider", Read),
    (GET, "/provider/auth", Read),
    (GET, "/question", Read),
    (GET, "/skill", Read),
    (GET, "/vcs", Read),
    (GET, "/vcs/diff", Read),
    (GET, "/vcs/diff/raw", Read),
    (GET, "/vcs/status", Read),
    (GET, "/experimental/capabilities", Read),
    (GET, "/experimental/resource", Read),
    (GET, "/experimental/session", Read),
    (GET, "/experimental/tool", Read),
    (GET, "/experimental/tool/ids", Read),
    (GET, "/experimental/workspace", Read),
    (GET, "/experimental/workspace/adapter", Read),
    (GET, "/experimental/workspace/status", Read),
    (GET, "/experimental/worktree", Read),
    (GET, "/api/agent", Read),
    (GET, "/api/command", Read),
    (GET, "/api/event", Read),
    (GET, "/api/fs/find", Read),
    (GET, "/api/fs/list", Read),
    (GET, "/api/fs/read/**", Read),
    (GET, "/api/health", Read),
    (GET, "/api/location", Read),
    (GET, "/api/model", Read),
    (GET, "/api/permission/request", Read),
    (GET, "/api/permission/saved", Read),
    (GET, "/api/provider", Read),
    (GET, "/api/provider/*", Read),
    (GET, "/api/question/request", Read),
    (GET, "/api/reference", Read),
    (GET, "/api/skill", Read),
    // Which integrations exist and whether they are connected (the TUI asks at start); their
    // credentials and connections stay admin-only below.
    (GET, "/api/integration", Read),
    // Client-side log lines: harmless, and every client sends them.
    (POST, "/log", Read),
    // Changing the server.
    (PATCH, "/config", Configure),
    (PATCH, "/global/config", Configure),
    (POST, "/global/dispose", Configure),
    (POST, "/global/upgrade", Configure),
    (POST, "/instance/dispose", Configure),
    (PUT, "/auth/*", Configure),
    (DELETE, "/auth/*", Configure),
    (POST, "/mcp", Configure),
    (ANY, "/mcp/**", Configure),
    (ANY, "/provider/*/oauth/**", Configure),
    (PATCH, "/project/*", Configure),
    (ANY, "/api/credential/**", Configure),
    (ANY, "/api/integration", Configure),
    (ANY, "/api/integration/**", Configure),
    (ANY, "/experimental/**", Configure),
    (ANY, "/tui/**", Configure),
    (ANY, "/sync/**", Configure),
];

/// `ROUTES` grouped by the first path segment (every pattern starts with a literal one), built
/// once, so a request is matched against the few routes of its own root, not all of them. The
/// roots are also what makes a path an API route: an unknown route under one is refused.
/// Patterns are split into segments once here, and a request's path once per request, so matching
/// a route is a comparison of slices (splitting the path again for every candidate route was a
/// measurable share of a request's cost).
type Route = (&'static str, &'static str, Class);

struct CompiledRoute {
    method: &'static str,
    segments: Vec<&'static str>,
    class: Class,
}

fn index() -> &'static HashMap<&'static str, Vec<CompiledRoute>> {
    static INDEX: OnceLock<HashMap<&'static str, Vec<CompiledRoute>>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut map: HashMap<&'static str, Vec<_>> = HashMap::new();
        for &(method, pattern, class) in ROUTES {
            map.entry(first_segment(pattern)).or_default().push(CompiledRoute {
                method,
                segments: pattern.split('/').skip(1).collect(),
                class,
            });
        }
        map
    })
}

/// The segments of a request path after the leading `/` (a trailing `/` ignored). Paths longer
/// than any route are marked as such rather than collected.
struct PathSegments<'a> {
    segments: [&'a str; PathSegments::MAX],
    len: usize,
    longer: bool,
}

impl<'a> PathSegments<'a> {
    const MAX: usize = 12;

    fn new(path: &'a str) -> Self {
        let mut out = PathSegments {
            segments: [""; Self::MAX],
            len: 0,
            longer: false,
        };
        for s in path.trim_end_matches('/').split('/').skip(1) {
            if out.len == Self::MAX {
                out.longer = true;
                break;
            }
            out.segments[out.len] = s;
            out.len += 1;
        }
        out
    }

    /// Does a pattern's segments (`*` one segment, a final `**` one or more) match this path?
    fn matched_by(&self, pattern: &[&str]) -> bool {
        for (i, p) in pattern.iter().enumerate() {
            if *p == "**" {
                return i < self.len && !self.segments[i].is_empty();
            }
            if i >= self.len {
                return false;
            }
            let s = self.segments[i];
            if s.is_empty() || (*p != "*" && *p != s) {
                return false;
            }
        }
        pattern.len() == self.len && !self.longer
    }
}

fn first_segment(path: &str) -> &str {
    path.trim_start_matches('/').split('/').next().unwrap_or("")
}

/// The OpenAPI document itself is not one of its own routes; it stays an (unknown, refused) API root.
const DOC_ROOT: &str = "doc";

#[cfg(test)]
fn matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').skip(1).collect();
    PathSegments::new(path).matched_by(&pattern)
}

/// The class of a request, or `None` for an API route the gateway does not know.
pub fn classify(method: &Method, path: &str) -> Option<Class> {
    // HEAD reads what GET reads; OPTIONS (CORS preflight) reads nothing.
    let m = if method == Method::HEAD { "GET" } else { method.as_str() };
    if method == Method::OPTIONS {
        return Some(Read);
    }
    let first = first_segment(path);
    match index().get(first) {
        Some(routes) => {
            let segments = PathSegments::new(path);
            routes
                .iter()
                .find(|r| (r.method == ANY || r.method == m) && segments.matched_by(&r.segments))
                .map(|r| r.class)
        }
        // Outside the API: the web UI's files and SPA routes, which OpenCode answers with index.html.
        None if m == "GET" && first != DOC_ROOT => Some(Read),
        None => None,
    }
}

pub fn check(role: Role, method: &Method, path: &str) -> Result<(), HttpError> {
    match classify(method, path) {
        Some(class) if role >= class.least_role() => Ok(()),
        Some(class) => Err(HttpError::Forbidden(format!(
            "{method} {path} needs the {} role; you are {}",
            class.least_role().as_str(),
            role.as_str()
        ))),
        None => Err(HttpError::Forbidden(format!(
            "{method} {path} is not a route the gateway allows"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_segments() {
        assert!(matches("/session/*", "/session/ses_1"));
        assert!(!matches("/session/*", "/session/ses_1/message"));
        assert!(!matches("/session/*", "/session/"));
        assert!(matches("/api/fs/read/**", "/api/fs/read/a/b"));
        assert!(!matches("/api/fs/read/**", "/api/fs/read"));
        assert!(matches("/session", "/session/"));
    }

    #[test]
    fn roles_climb() {
        let get = Method::GET;
        let post = Method::POST;
        assert!(check(Role::Viewer, &get, "/session/ses_1/message").is_ok());
        assert!(check(Role::Viewer, &post, "/permission/per_1/reply").is_err());
        assert!(check(Role::Approver, &post, "/permission/per_1/reply").is_ok());
        assert!(check(Role::Approver, &post, "/session/ses_1/prompt_async").is_err());
        assert!(check(Role::Operator, &post, "/session/ses_1/prompt_async").is_ok());
        assert!(check(Role::Operator, &get, "/pty/pty_1/connect").is_ok());
        assert!(check(Role::Approver, &get, "/pty/pty_1/connect").is_err());
        assert!(check(Role::Operator, &Method::PATCH, "/config").is_err());
        assert!(check(Role::Admin, &Method::PATCH, "/config").is_ok());
    }

    #[test]
    fn unknown_api_routes_are_denied_and_the_web_ui_loads() {
        assert_eq!(classify(&Method::POST, "/session/ses_1/new-thing"), None);
        assert_eq!(classify(&Method::GET, "/session/ses_1/new-thing"), None);
        assert_eq!(classify(&Method::GET, "/"), Some(Read));
        assert_eq!(classify(&Method::GET, "/assets/index-abc.js"), Some(Read));
        assert_eq!(classify(&Method::GET, "/L3RtcC9vY3dvcms/session/ses_1"), Some(Read));
        assert_eq!(classify(&Method::POST, "/assets/x"), None);
        assert_eq!(
            classify(&Method::GET, "/doc"),
            None,
            "the API document is not served through the gateway"
        );
    }
}
