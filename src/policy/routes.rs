//! OpenCode 1.18.33's API, every route of its `GET /doc`, with the least role that may use it.
//! Data only; `authz` matches requests against it. `*` is one path segment; the one `**` (a file
//! path) is the rest of the path, one segment or more. First match wins, so a literal route comes
//! before a parameter route it would also match (`/session/status` before `/session/*`).
//! Every route is listed on its own: a catch-all would match names in any case, and decisions
//! that depend on a route (workspace switches, bodies, listings) are made on the listed route.

use crate::config::Role;
use Class::*;

/// What a route does, in increasing power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    pub(crate) fn least_role(self) -> Role {
        match self {
            Class::Read => Role::Viewer,
            Class::Respond => Role::Approver,
            Class::Operate => Role::Operator,
            Class::Configure => Role::Admin,
        }
    }
}

pub(crate) const GET: &str = "GET";
pub(crate) const POST: &str = "POST";
pub(crate) const PUT: &str = "PUT";
pub(crate) const PATCH: &str = "PATCH";
pub(crate) const DELETE: &str = "DELETE";

/// (method, path pattern, class).
pub(crate) type Route = (&'static str, &'static str, Class);

/// The version of OpenCode this table was read from: package.json's `opencode-ai` pin (build.rs),
/// the version the tests check the table against.
pub(crate) const TABLE_VERSION: &str = env!("OCGW_OPENCODE_VERSION");

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
    (PATCH, "/project/*", Configure),
    (PATCH, "/api/credential/*", Configure),
    (DELETE, "/api/credential/*", Configure),
    (GET, "/api/integration/*", Configure),
    (POST, "/api/integration/*/connect/key", Configure),
    (POST, "/api/integration/*/connect/oauth", Configure),
    (GET, "/api/integration/attempt/*", Configure),
    (DELETE, "/api/integration/attempt/*", Configure),
    (POST, "/api/integration/attempt/*/complete", Configure),
    (GET, "/experimental/console", Configure),
    (GET, "/experimental/console/orgs", Configure),
    (POST, "/experimental/console/switch", Configure),
    (POST, "/experimental/control-plane/move-session", Configure),
    (POST, "/experimental/project/*/copy", Configure),
    (DELETE, "/experimental/project/*/copy", Configure),
    (POST, "/experimental/project/*/copy/generate-name", Configure),
    (POST, "/experimental/project/*/copy/refresh", Configure),
    (POST, "/experimental/workspace", Configure),
    (DELETE, "/experimental/workspace/*", Configure),
    (POST, "/experimental/workspace/sync-list", Configure),
    (POST, "/experimental/workspace/warp", Configure),
    (POST, "/experimental/worktree", Configure),
    (DELETE, "/experimental/worktree", Configure),
    (POST, "/experimental/worktree/reset", Configure),
    (POST, "/mcp/*/auth", Configure),
    (DELETE, "/mcp/*/auth", Configure),
    (POST, "/mcp/*/auth/authenticate", Configure),
    (POST, "/mcp/*/auth/callback", Configure),
    (POST, "/mcp/*/connect", Configure),
    (POST, "/mcp/*/disconnect", Configure),
    (POST, "/provider/*/oauth/authorize", Configure),
    (POST, "/provider/*/oauth/callback", Configure),
    (POST, "/sync/history", Configure),
    (POST, "/sync/replay", Configure),
    (POST, "/sync/start", Configure),
    (POST, "/sync/steal", Configure),
    (POST, "/tui/append-prompt", Configure),
    (POST, "/tui/clear-prompt", Configure),
    (GET, "/tui/control/next", Configure),
    (POST, "/tui/control/response", Configure),
    (POST, "/tui/execute-command", Configure),
    (POST, "/tui/open-help", Configure),
    (POST, "/tui/open-models", Configure),
    (POST, "/tui/open-sessions", Configure),
    (POST, "/tui/open-themes", Configure),
    (POST, "/tui/publish", Configure),
    (POST, "/tui/select-session", Configure),
    (POST, "/tui/show-toast", Configure),
    (POST, "/tui/submit-prompt", Configure),
];

/// The routes of the table that make OpenCode ask the model: judged by the spending budgets
/// (`pipeline/admit.rs`). Prompts and commands, and also compaction (`summarize`, `compact`),
/// `/init` (it runs a prompt) and the TUI's submit and command routes. Checked against the real
/// server's document (`roles::the_table_matches_the_real_servers_openapi_document`): every route
/// whose body names a model is here or in [`NAMES_A_MODEL_ASKS_NONE`]. A route the table does
/// not know (a newer server's) that writes is judged by the budgets too (`table.rs`).
pub const ASKS_MODEL: &[(&str, &str)] = &[
    (POST, "/session/*/message"),
    (POST, "/session/*/prompt_async"),
    (POST, "/session/*/command"),
    (POST, "/session/*/shell"),
    (POST, "/session/*/init"),
    (POST, "/session/*/summarize"),
    (POST, "/api/session/*/prompt"),
    (POST, "/api/session/*/compact"),
    (POST, "/tui/submit-prompt"),
    (POST, "/tui/execute-command"),
    (POST, "/experimental/project/*/copy/generate-name"),
];

/// Routes whose body names a model but that ask none: they choose one for later work, which is
/// judged when it is asked for.
pub const NAMES_A_MODEL_ASKS_NONE: &[(&str, &str)] = &[
    (POST, "/session"),
    (POST, "/api/session"),
    (POST, "/api/session/*/model"),
    (PATCH, "/config"),
    (PATCH, "/global/config"),
    (PATCH, "/session/*/message/*/part/*"),
];
