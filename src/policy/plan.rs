//! What the gateway does with a route beyond its role, keyed by the table's own (method, pattern)
//! and attached to each route once when the table is built. The pipeline never matches a path
//! string again: it reads these from the resolved route.

use super::routes::{DELETE, GET, POST, PUT};

/// How a route's request and response are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Treatment {
    /// Forward and stream the response back as it comes.
    #[default]
    Plain,
    /// A server-sent event stream: long-lived, no response timeout, counted per user.
    EventStream,
    /// The event stream of every directory the server serves (`/global/event`, the
    /// `directory` envelope): filtered on a shared upstream.
    GlobalEvents,
    /// The v2 bus of every directory (`/api/event`, `location.directory`): filtered likewise.
    FolderEvents,
    /// `GET /project`: projects of every directory; scoped on a shared upstream.
    ProjectListing,
    /// A JSON array of sessions, each with its `directory`; scoped on a shared upstream.
    SessionList,
    /// A v2 page of sessions (`{"data":[{…,"location":{"directory"}}]}`); scoped likewise.
    SessionPage,
    /// 2.x's running sessions of every folder (`{"data":{"<session id>":{…}}}`); scoped by each
    /// session's folder on a shared upstream.
    ActiveSessions,
    /// `POST …/connect-token`: the ticket in the answer is remembered for the asking user.
    TicketIssue,
    /// `GET …/connect`: the only routes that upgrade (a terminal WebSocket), and the only ones
    /// a relayed ticket may open.
    TerminalConnect,
}

impl Treatment {
    pub(crate) fn long_lived(self) -> bool {
        matches!(
            self,
            Treatment::EventStream | Treatment::GlobalEvents | Treatment::FolderEvents | Treatment::TerminalConnect
        )
    }
}

const TREATMENTS: &[(&str, &str, Treatment)] = &[
    (GET, "/event", Treatment::EventStream),
    (GET, "/api/event", Treatment::FolderEvents),
    (GET, "/api/session/*/event", Treatment::EventStream),
    (GET, "/global/event", Treatment::GlobalEvents),
    (GET, "/project", Treatment::ProjectListing),
    (GET, "/session", Treatment::SessionList),
    (GET, "/experimental/session", Treatment::SessionList),
    (GET, "/api/session", Treatment::SessionPage),
    (GET, "/api/session/active", Treatment::ActiveSessions),
    (GET, "/api/project", Treatment::ProjectListing),
    (POST, "/pty/*/connect-token", Treatment::TicketIssue),
    (POST, "/api/pty/*/connect-token", Treatment::TicketIssue),
    (GET, "/pty/*/connect", Treatment::TerminalConnect),
    (GET, "/api/pty/*/connect", Treatment::TerminalConnect),
];

/// What a request counts as in the metrics: the metrics' own enum, decided here per route.
pub(crate) use crate::metrics::RouteClass;

/// What the audit trail records for a route (see `crate::audit`): decided here, once, on the
/// canonical route the request was judged on, never by matching paths in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditKind {
    SessionCreate,
    SessionDelete,
    /// A session told to stop what it is doing.
    SessionAbort,
    /// A prompt, a message or a command for the agent: its size is recorded, never its text.
    Prompt,
    /// An answer to a permission request (the body's once/always/reject is recorded).
    PermissionAnswer,
    /// An answer to a question: replied or rejected (the answers themselves are the user's text).
    QuestionAnswer(&'static str),
    /// A shell command run in a session: that it ran and its size, never the command.
    Shell,
    /// Files of the project written through the API.
    FileWrite,
    /// A terminal WebSocket: opened, and closed with its duration.
    Terminal,
}

impl AuditKind {
    pub(crate) fn event(self) -> &'static str {
        match self {
            AuditKind::SessionCreate => "session_create",
            AuditKind::SessionDelete => "session_delete",
            AuditKind::SessionAbort => "session_abort",
            AuditKind::Prompt => "prompt",
            AuditKind::PermissionAnswer => "permission_answer",
            AuditKind::QuestionAnswer(_) => "question_answer",
            AuditKind::Shell => "shell",
            AuditKind::FileWrite => "file_write",
            AuditKind::Terminal => "terminal_open",
        }
    }
}

/// Sending work to the agent (the v1 and v2 spellings).
const PROMPTS: &[(&str, &str)] = &[
    (POST, "/session/*/message"),
    (POST, "/session/*/prompt_async"),
    (POST, "/session/*/command"),
    (POST, "/session/*/shell"),
    (POST, "/api/session/*/prompt"),
    (POST, "/api/session/*/command"),
    (POST, "/api/session/*/shell"),
];

pub(crate) fn route_class(method: &str, pattern: &str, treatment: Treatment) -> RouteClass {
    let under = |prefix: &str| {
        pattern
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if matches!(treatment, Treatment::EventStream | Treatment::GlobalEvents) {
        RouteClass::Events
    } else if PROMPTS.contains(&(method, pattern)) {
        RouteClass::Prompt
    } else if under("/pty") || under("/api/pty") {
        RouteClass::Terminal
    } else if under("/file") || under("/find") || under("/api/fs") {
        RouteClass::Files
    } else {
        RouteClass::Other
    }
}

const AUDITS: &[(&str, &str, AuditKind)] = &[
    (POST, "/session", AuditKind::SessionCreate),
    (POST, "/api/session", AuditKind::SessionCreate),
    (DELETE, "/session/*", AuditKind::SessionDelete),
    (POST, "/session/*/abort", AuditKind::SessionAbort),
    (POST, "/session/*/prompt_async", AuditKind::Prompt),
    (POST, "/session/*/message", AuditKind::Prompt),
    (POST, "/session/*/command", AuditKind::Prompt),
    (POST, "/api/session/*/prompt", AuditKind::Prompt),
    (POST, "/permission/*/reply", AuditKind::PermissionAnswer),
    (POST, "/session/*/permissions/*", AuditKind::PermissionAnswer),
    (POST, "/api/session/*/permission/*/reply", AuditKind::PermissionAnswer),
    (POST, "/question/*/reply", AuditKind::QuestionAnswer("reply")),
    (POST, "/question/*/reject", AuditKind::QuestionAnswer("reject")),
    (
        POST,
        "/api/session/*/question/*/reply",
        AuditKind::QuestionAnswer("reply"),
    ),
    (
        POST,
        "/api/session/*/question/*/reject",
        AuditKind::QuestionAnswer("reject"),
    ),
    (POST, "/session/*/shell", AuditKind::Shell),
    // OpenCode 1.18.33 has no route that writes a named file (`/api/fs` only reads); applying a
    // patch to the working tree is its one file write.
    (POST, "/vcs/apply", AuditKind::FileWrite),
    (GET, "/pty/*/connect", AuditKind::Terminal),
    (GET, "/api/pty/*/connect", AuditKind::Terminal),
    // OpenCode 2.x's own: a session deleted or interrupted, a command or shell turn, an answered
    // or cancelled form (its questions), a command run in the folder, a file written.
    (DELETE, "/api/session/*", AuditKind::SessionDelete),
    (POST, "/api/session/*/interrupt", AuditKind::SessionAbort),
    (POST, "/api/session/*/command", AuditKind::Prompt),
    (POST, "/api/session/*/shell", AuditKind::Shell),
    (POST, "/api/session/*/form/*/reply", AuditKind::QuestionAnswer("reply")),
    (DELETE, "/api/session/*/form/*", AuditKind::QuestionAnswer("reject")),
    (POST, "/api/shell", AuditKind::Shell),
    (POST, "/api/experimental/fs/write", AuditKind::FileWrite),
];

pub(crate) fn audit_kind(method: &str, pattern: &str) -> Option<AuditKind> {
    AUDITS
        .iter()
        .find(|(m, p, _)| *m == method && *p == pattern)
        .map(|(_, _, k)| *k)
}

/// The last parameter of `pattern` as `path` spells it (a permission's or question's id): the
/// path was rendered from the pattern, segment for segment.
pub(crate) fn last_param<'p>(pattern: &str, path: &'p str) -> Option<&'p str> {
    let i = pattern.split('/').enumerate().filter(|(_, s)| *s == "*").last()?.0;
    path.split('/').nth(i)
}

/// What a route's JSON body may say about directories and sessions.
#[derive(Debug)]
pub struct BodyRule {
    /// Dotted paths of fields that, when present, must name a directory inside the project.
    pub inside: &'static [&'static str],
    /// Fields that may not be present at all (workspace selection).
    pub forbidden: &'static [&'static str],
    /// Fields that name a session, which must belong to the project (shared upstreams).
    pub sessions: &'static [&'static str],
    /// A field the gateway sets to the project's directory when the body leaves it out: the
    /// route reads its folder only from the body (2.x's `POST /api/session` ignores the query and
    /// the header, and makes the session in the server's own folder).
    pub placed: Option<&'static str>,
}

const fn rule(inside: &'static [&'static str], forbidden: &'static [&'static str]) -> BodyRule {
    BodyRule {
        inside,
        forbidden,
        sessions: &[],
        placed: None,
    }
}

const BODY_RULES: &[(&str, &str, BodyRule)] = &[
    (POST, "/pty", rule(&["cwd"], &[])),
    (POST, "/api/pty", rule(&["cwd"], &[])),
    (
        POST,
        "/api/session",
        BodyRule {
            placed: Some("location.directory"),
            ..rule(&["location.directory"], &["location.workspaceID", "location.workspace"])
        },
    ),
    (POST, "/session", rule(&["directory"], &["workspaceID"])),
    (
        POST,
        "/experimental/control-plane/move-session",
        BodyRule {
            sessions: &["sessionID"],
            ..rule(&["destination.directory"], &[])
        },
    ),
    (POST, "/experimental/project/*/copy", rule(&["directory"], &[])),
    (DELETE, "/experimental/project/*/copy", rule(&["directory"], &[])),
    (DELETE, "/experimental/worktree", rule(&["directory"], &[])),
    (POST, "/experimental/worktree/reset", rule(&["directory"], &[])),
    (POST, "/sync/replay", rule(&["directory"], &[])),
    (POST, "/mcp", rule(&["config.cwd"], &[])),
    // OpenCode 2.x: a shell, a terminal, a session moved or imported, a worktree: each names
    // its folder in the body.
    (POST, "/api/shell", rule(&["cwd"], &[])),
    (POST, "/api/experimental/session/*/terminal", rule(&["cwd"], &[])),
    (POST, "/api/session/*/move", rule(&["directory"], &[])),
    (
        POST,
        "/api/experimental/session/import",
        rule(
            &["location.directory", "info.location.directory"],
            &[
                "location.workspaceID",
                "location.workspace",
                "info.location.workspaceID",
                "info.location.workspace",
            ],
        ),
    ),
    (POST, "/api/worktree", rule(&["directory"], &[])),
    (DELETE, "/api/worktree", rule(&["directory"], &[])),
];

/// Routes that create or switch workspaces and worktrees: not available in a pinned project.
const WORKSPACE_SWITCHES: &[(&str, &str)] = &[
    (POST, "/experimental/workspace"),
    (DELETE, "/experimental/workspace/*"),
    (POST, "/experimental/workspace/sync-list"),
    (POST, "/experimental/workspace/warp"),
    (POST, "/experimental/worktree"),
    (POST, "/sync/history"),
    (POST, "/sync/start"),
    (POST, "/sync/steal"),
];

/// OpenCode 2.x routes that answer for every folder of the server and name no folder the gateway
/// could pin or filter by: statistics over every project, saved rules and worktrees of any project
/// id, the persistent terminals of the whole server, the folders it has loaded. On a server
/// several projects share they are refused (`pipeline/admit.rs`); on a project's own server they
/// are what the project has.
const SERVER_WIDE: &[(&str, &str)] = &[
    (GET, "/api/experimental/session/stats"),
    (GET, "/api/permission/saved"),
    (GET, "/api/worktree"),
    (POST, "/api/worktree/refresh"),
    (GET, "/api/debug/location"),
    (DELETE, "/api/debug/location"),
    (POST, "/api/experimental/persistent-pty/handoff"),
    (POST, "/api/experimental/persistent-pty/shutdown"),
    (GET, "/api/experimental/persistent-pty/*"),
    (PUT, "/api/experimental/persistent-pty/*"),
    (DELETE, "/api/experimental/persistent-pty/*"),
    (GET, "/api/experimental/persistent-pty/*/connect"),
    (POST, "/api/experimental/persistent-pty/*/connect-token"),
    (GET, "/api/experimental/persistent-pty/*/snapshot"),
];

pub(crate) fn is_server_wide(method: &str, pattern: &str) -> bool {
    SERVER_WIDE.contains(&(method, pattern))
}

/// API answers that may be compressed (issue 14): catalog and configuration data whose 200
/// answer echoes nothing of the request (no query value, path parameter or body; the handlers in
/// OpenCode 1.18.33 take no argument), so an attacker cannot put chosen text in the compression
/// window next to a secret, which BREACH needs. `/provider` alone is 6.45 MB of JSON, asked
/// four times per web UI load. Every other API answer stays identity.
const COMPRESSIBLE: &[(&str, &str)] = &[
    (GET, "/provider"),
    (GET, "/config/providers"),
    (GET, "/agent"),
    (GET, "/command"),
    (GET, "/experimental/tool/ids"),
];

pub(crate) fn compressible(method: &str, pattern: &str) -> bool {
    COMPRESSIBLE.contains(&(method, pattern))
}

pub(crate) fn treatment(method: &str, pattern: &str) -> Treatment {
    TREATMENTS
        .iter()
        .find(|(m, p, _)| *m == method && *p == pattern)
        .map_or(Treatment::Plain, |(_, _, t)| *t)
}

pub fn body_rule(method: &str, pattern: &str) -> Option<&'static BodyRule> {
    BODY_RULES
        .iter()
        .find(|(m, p, _)| *m == method && *p == pattern)
        .map(|(_, _, r)| r)
}

pub(crate) fn is_workspace_switch(method: &str, pattern: &str) -> bool {
    WORKSPACE_SWITCHES.contains(&(method, pattern))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::table::{V1, V2};

    /// A treatment, rule or switch for a route neither version's table has would never apply.
    #[test]
    fn every_special_route_is_a_route_of_the_table() {
        let known = |m: &str, p: &str| V1.has(m, p) || V2.has(m, p);
        for (m, p, _) in TREATMENTS {
            assert!(known(m, p), "treatment for unknown {m} {p}");
        }
        for (m, p, _) in BODY_RULES {
            assert!(known(m, p), "body rule for unknown {m} {p}");
        }
        for (m, p, _) in AUDITS {
            assert!(known(m, p), "audit kind for unknown {m} {p}");
        }
        for (m, p) in WORKSPACE_SWITCHES {
            assert!(known(m, p), "workspace switch for unknown {m} {p}");
        }
        for (m, p) in SERVER_WIDE {
            assert!(known(m, p), "server-wide route unknown {m} {p}");
        }
        for (m, p) in PROMPTS {
            assert!(known(m, p), "prompt class for unknown {m} {p}");
        }
        for (m, p) in COMPRESSIBLE {
            assert!(known(m, p), "compression for unknown {m} {p}");
        }
        use crate::policy::routes::{ASKS_MODEL, NAMES_A_MODEL_ASKS_NONE};
        for (m, p) in ASKS_MODEL.iter().chain(NAMES_A_MODEL_ASKS_NONE) {
            assert!(known(m, p), "model use for unknown {m} {p}");
        }
        for (m, p) in PROMPTS {
            assert!(
                ASKS_MODEL.contains(&(m, p)) || crate::policy::routes_v2::ASKS_MODEL.contains(&(m, p)),
                "a prompt the budgets do not judge: {m} {p}"
            );
        }
    }

    /// Compressed API answers are plain GETs: never a stream, a listing the gateway rewrites,
    /// a ticket or an upgrade.
    #[test]
    fn only_plain_catalog_gets_are_compressible() {
        for (m, p) in COMPRESSIBLE {
            assert_eq!(*m, GET, "{p}");
            assert_eq!(treatment(m, p), Treatment::Plain, "{p}");
            assert!(!p.contains('*'), "{p}: a path parameter could be echoed");
        }
        assert!(compressible(GET, "/provider"));
        assert!(!compressible(GET, "/session"));
        assert!(!compressible(GET, "/event"));
        assert!(!compressible(GET, "/provider/auth"));
        assert!(!compressible(GET, "/config"));
    }

    #[test]
    fn routes_fall_in_the_metric_class_of_what_they_do() {
        let class = |m: &str, p: &str| route_class(m, p, treatment(m, p));
        assert_eq!(class(POST, "/session/*/prompt_async"), RouteClass::Prompt);
        assert_eq!(class(POST, "/api/session/*/prompt"), RouteClass::Prompt);
        assert_eq!(class(GET, "/event"), RouteClass::Events);
        assert_eq!(class(GET, "/global/event"), RouteClass::Events);
        assert_eq!(class(GET, "/api/session/*/event"), RouteClass::Events);
        assert_eq!(class(GET, "/pty/*/connect"), RouteClass::Terminal);
        assert_eq!(class(POST, "/api/pty"), RouteClass::Terminal);
        assert_eq!(class(GET, "/file/content"), RouteClass::Files);
        assert_eq!(class(GET, "/api/fs/read/**"), RouteClass::Files);
        assert_eq!(class(GET, "/find/file"), RouteClass::Files);
        // A prefix is a whole segment: `/filex` or `/ptyx` would not be files or terminals.
        assert_eq!(class(GET, "/filex"), RouteClass::Other);
        assert_eq!(class(GET, "/session"), RouteClass::Other);
    }

    #[test]
    fn answers_name_their_request_by_the_last_parameter() {
        assert_eq!(
            last_param("/permission/*/reply", "/permission/per_1/reply"),
            Some("per_1")
        );
        assert_eq!(
            last_param("/session/*/permissions/*", "/session/ses_1/permissions/per_2"),
            Some("per_2")
        );
        assert_eq!(last_param("/session", "/session"), None);
    }

    #[test]
    fn only_terminals_and_event_streams_live_long() {
        assert!(treatment(GET, "/pty/*/connect").long_lived());
        assert!(treatment(GET, "/global/event").long_lived());
        assert!(treatment(GET, "/api/event").long_lived());
        assert!(!treatment(POST, "/pty/*/connect-token").long_lived());
        assert!(!treatment(GET, "/session").long_lived());
    }
}
