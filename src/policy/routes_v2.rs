//! OpenCode 2.1.2's API (npm `@opencode/cli`), every operation of its `GET /openapi.json`, with
//! the least role that may use it: the 2.x part's route table, beside 1.18.33's (`routes.rs`).
//! Data only. `*` is one path segment; the one `**` (a file path) is the rest of the path. A
//! literal route comes before a parameter route it would also match.
//!
//! How the classes were chosen, where the name alone does not say (2.x serves every folder from
//! one server, so a route that reaches past the project is an admin's):
//! - Terminals are shells whatever the method: the persistent PTYs (`/api/experimental/
//!   persistent-pty/*`) even to read, as 1.x's `connect`; a session's terminal list and its last
//!   output are reads, as 1.x's `GET /pty/*`.
//! - Answering the agent (an approver): permission replies, form replies and cancels, interrupt.
//! - An admin's: credentials and integrations (the team's model keys), MCP servers, plugins and
//!   their RPCs (`/api/rpc/*/*` runs whatever a plugin does), the server-wide configuration and
//!   its reload, `/api/debug/location` (every folder the server has loaded), a project's settings,
//!   editing a saved "always" rule (it could widen one; removing one only narrows, an
//!   operator's), moving a session to another folder, shutting every persistent PTY down.
//! - `POST /api/session/*/view` marks a session seen: a viewer's.
//! - Never, for anyone ([`REFUSED`]): V2's own pairing (`POST /api/pair` mints a code that
//!   `/auth/connect/*` turns into a 30-day token derived from the server's password, revocable only
//!   by changing it): the gateway's pairing and logins are the door.

use super::routes::{Class::*, DELETE, GET, PATCH, POST, PUT, Route};

/// The version of OpenCode 2 this table was read from: package.json's `@opencode/cli` pin
/// (build.rs), the version the tests check the table against.
pub(crate) const TABLE_VERSION: &str = env!("OCGW_OPENCODE2_VERSION");

pub const ROUTES: &[Route] = &[
    (GET, "/api/agent/*", Read),
    (GET, "/api/agent", Read),
    (GET, "/api/command", Read),
    (GET, "/api/config/shell", Read),
    (GET, "/api/config", Read),
    (POST, "/api/credential/*/activate", Configure),
    (DELETE, "/api/credential/*", Configure),
    (PATCH, "/api/credential/*", Configure),
    (GET, "/api/credential", Configure),
    (POST, "/api/credential", Configure),
    (DELETE, "/api/debug/location", Configure),
    (GET, "/api/debug/location", Configure),
    (GET, "/api/event", Read),
    (PATCH, "/api/experimental/config", Configure),
    (POST, "/api/experimental/fs/write", Operate),
    (POST, "/api/experimental/generate", Operate),
    (POST, "/api/experimental/integration/wellknown", Configure),
    (POST, "/api/experimental/mcp/*/connect", Configure),
    (POST, "/api/experimental/mcp/*/disconnect", Configure),
    (DELETE, "/api/experimental/mcp/*", Configure),
    (PUT, "/api/experimental/mcp/*", Configure),
    (GET, "/api/experimental/migration/v1", Read),
    (POST, "/api/experimental/persistent-pty/handoff", Operate),
    (POST, "/api/experimental/persistent-pty/shutdown", Configure),
    (GET, "/api/experimental/persistent-pty/*/connect", Operate),
    (POST, "/api/experimental/persistent-pty/*/connect-token", Operate),
    (GET, "/api/experimental/persistent-pty/*/snapshot", Operate),
    (DELETE, "/api/experimental/persistent-pty/*", Operate),
    (GET, "/api/experimental/persistent-pty/*", Operate),
    (PUT, "/api/experimental/persistent-pty/*", Operate),
    (POST, "/api/experimental/session/import", Operate),
    (GET, "/api/experimental/session/stats", Read),
    (GET, "/api/experimental/session/*/export", Read),
    (DELETE, "/api/experimental/session/*/instructions/entries/*", Operate),
    (PUT, "/api/experimental/session/*/instructions/entries/*", Operate),
    (GET, "/api/experimental/session/*/instructions/entries", Read),
    (GET, "/api/experimental/session/*/log", Read),
    (POST, "/api/experimental/session/*/skill", Operate),
    (GET, "/api/experimental/session/*/terminal/read", Read),
    (GET, "/api/experimental/session/*/terminal", Read),
    (POST, "/api/experimental/session/*/terminal", Operate),
    (POST, "/api/experimental/session/*/wait", Operate),
    (POST, "/api/experimental/voice/session", Operate),
    (GET, "/api/form", Read),
    (GET, "/api/fs/find", Read),
    (GET, "/api/fs/list", Read),
    (GET, "/api/fs/read/**", Read),
    (GET, "/api/info", Read),
    (DELETE, "/api/integration/*/connect/command/*", Configure),
    (GET, "/api/integration/*/connect/command/*", Configure),
    (POST, "/api/integration/*/connect/command", Configure),
    (POST, "/api/integration/*/connect/external", Configure),
    (POST, "/api/integration/*/connect/key", Configure),
    (POST, "/api/integration/*/connect/oauth/*/complete", Configure),
    (DELETE, "/api/integration/*/connect/oauth/*", Configure),
    (GET, "/api/integration/*/connect/oauth/*", Configure),
    (POST, "/api/integration/*/connect/oauth", Configure),
    (GET, "/api/integration/*", Configure),
    (GET, "/api/integration", Read),
    (POST, "/api/location/reload", Configure),
    (GET, "/api/location", Read),
    (GET, "/api/mcp/resource", Read),
    (GET, "/api/mcp", Read),
    (GET, "/api/model/default", Read),
    (GET, "/api/model", Read),
    (GET, "/api/permission/request", Read),
    (DELETE, "/api/permission/saved/*", Operate),
    (PATCH, "/api/permission/saved/*", Configure),
    (GET, "/api/permission/saved", Read),
    (POST, "/api/plugin/check", Configure),
    (POST, "/api/plugin/update", Configure),
    (GET, "/api/plugin", Read),
    (PATCH, "/api/project/*", Configure),
    (GET, "/api/project", Read),
    (GET, "/api/provider/*", Read),
    (GET, "/api/provider", Read),
    (GET, "/api/pty/*/connect", Operate),
    (POST, "/api/pty/*/connect-token", Operate),
    (DELETE, "/api/pty/*", Operate),
    (GET, "/api/pty/*", Read),
    (PUT, "/api/pty/*", Operate),
    (GET, "/api/pty", Read),
    (POST, "/api/pty", Operate),
    (GET, "/api/reference", Read),
    (POST, "/api/rpc/*/*", Configure),
    (GET, "/api/session/active", Read),
    (POST, "/api/session/*/agent", Operate),
    (POST, "/api/session/*/background", Operate),
    (POST, "/api/session/*/command", Operate),
    (POST, "/api/session/*/compact", Operate),
    (GET, "/api/session/*/context", Read),
    (GET, "/api/session/*/diff", Read),
    (PUT, "/api/session/*/environment", Operate),
    (POST, "/api/session/*/fork", Operate),
    (POST, "/api/session/*/form/*/reply", Respond),
    (DELETE, "/api/session/*/form/*", Respond),
    (GET, "/api/session/*/form/*", Read),
    (GET, "/api/session/*/form", Read),
    (POST, "/api/session/*/form", Operate),
    (POST, "/api/session/*/generate", Operate),
    (DELETE, "/api/session/*/inbox/*", Operate),
    (PATCH, "/api/session/*/inbox/*", Operate),
    (GET, "/api/session/*/inbox", Read),
    (POST, "/api/session/*/interrupt", Respond),
    (GET, "/api/session/*/message/*", Read),
    (GET, "/api/session/*/message", Read),
    (POST, "/api/session/*/model", Operate),
    (POST, "/api/session/*/move", Configure),
    (POST, "/api/session/*/permission/*/reply", Respond),
    (GET, "/api/session/*/permission/*", Read),
    (GET, "/api/session/*/permission", Read),
    (POST, "/api/session/*/permission", Operate),
    (POST, "/api/session/*/prompt", Operate),
    (POST, "/api/session/*/revert/commit", Operate),
    (POST, "/api/session/*/revert/stage", Operate),
    (DELETE, "/api/session/*/revert", Operate),
    (POST, "/api/session/*/shell", Operate),
    (POST, "/api/session/*/synthetic", Operate),
    (POST, "/api/session/*/view", Read),
    (DELETE, "/api/session/*", Operate),
    (GET, "/api/session/*", Read),
    (PATCH, "/api/session/*", Operate),
    (GET, "/api/session", Read),
    (POST, "/api/session", Operate),
    (GET, "/api/shell/*/output", Read),
    (DELETE, "/api/shell/*", Operate),
    (GET, "/api/shell/*", Read),
    (GET, "/api/shell", Read),
    (POST, "/api/shell", Operate),
    (GET, "/api/skill", Read),
    (GET, "/api/vcs/base", Read),
    (GET, "/api/vcs/branch", Read),
    (GET, "/api/vcs/diff", Read),
    (POST, "/api/vcs/init", Operate),
    (GET, "/api/vcs/status", Read),
    (GET, "/api/vcs", Read),
    (GET, "/api/websearch/provider", Read),
    (POST, "/api/websearch", Operate),
    (POST, "/api/worktree/refresh", Operate),
    (DELETE, "/api/worktree", Operate),
    (GET, "/api/worktree", Read),
    (POST, "/api/worktree", Operate),
    // The web UI: `index.html` at `/` (and, without auth, for any path the server does not
    // route) and its files.
    (GET, "/", Read),
    (GET, "/_assets/**", Read),
    (GET, "/assets/**", Read),
    (GET, "/icons/**", Read),
    // The API document itself (not one of its operations): what the drift check reads.
    (GET, "/openapi.json", Read),
];

/// Operations refused for everyone, with why.
pub const REFUSED: &[(&str, &str, &str)] = &[
    (
        POST,
        "/api/pair",
        ": OpenCode's own pairing code is refused: pair a device with the gateway (`opencode-gateway pair`)",
    ),
    (
        GET,
        "/auth/connect/*",
        ": OpenCode's own pairing code is refused: pair a device with the gateway (`opencode-gateway pair`)",
    ),
];

/// The operations that make OpenCode 2.x ask the model (or a paid service on its behalf): judged
/// by the spending budgets. From the document's summaries: a prompt, a command, a shell turn,
/// compaction, text generated from a session or without one, a synthetic message (the agent then
/// answers it), a skill turned on in a session, a voice session and a web search. `fork` and
/// `background` are left out: from their summaries the first copies a session and the second moves
/// running tools to the background (a reading of the document, to be checked against the real
/// server's cost events).
pub const ASKS_MODEL: &[(&str, &str)] = &[
    (POST, "/api/session/*/prompt"),
    (POST, "/api/session/*/command"),
    (POST, "/api/session/*/shell"),
    (POST, "/api/session/*/compact"),
    (POST, "/api/session/*/generate"),
    (POST, "/api/session/*/synthetic"),
    (POST, "/api/experimental/session/*/skill"),
    (POST, "/api/experimental/generate"),
    (POST, "/api/experimental/voice/session"),
    (POST, "/api/websearch"),
];

/// Rows of [`ROUTES`] that are not operations of the API document.
pub const NOT_IN_DOCUMENT: &[&str] = &["/", "/_assets/**", "/assets/**", "/icons/**", "/openapi.json"];

/// Rows of [`ROUTES`] that are the web UI's own files: served as those (every role may load
/// them), not matched as API routes.
pub const WEB_UI: &[&str] = &["/", "/_assets/**", "/assets/**", "/icons/**"];

#[cfg(test)]
mod tests;
