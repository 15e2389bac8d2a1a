//! The control room: `/` (every project the user may see, its server, its sessions) and `/inbox`
//! (every pending permission request and question, answerable by approvers), both rendered on
//! the server from the inbox's model (one upstream subscription per OpenCode server, however many
//! phones watch), and refreshed live by the page's own event stream (`/_gw/events`). Without
//! script the pages still render and the forms still work.

use std::sync::Arc;

use askama::Template;
use http::{Response, StatusCode};

use super::{Ctx, form, page};
use crate::auth::sessions::Live;
use crate::config::Role;
use crate::gateway::state::State;
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

pub(crate) struct SessionRow {
    pub id: String,
    pub title: String,
    pub status_class: &'static str,
    pub status_text: String,
    /// Why it retries (OpenCode's error text), as a sentence below the badge.
    pub status_reason: Option<String>,
    pub ago: String,
    /// `ago`'s moment (ms since the epoch), for the page's script to count on.
    pub since_ms: u64,
    pub usage: Option<String>,
    pub link: Option<String>,
    pub subagent: bool,
    pub busy: bool,
    /// The session's oldest waiting permission request, for the portal's "Approve".
    pub waiting: Option<WaitingRow>,
    /// What the gateway's guard said of it ("stopped: retried the same failure twice").
    pub flag: Option<FlagRow>,
    /// How deep under a root session it is (0: a root), for the page's nesting.
    pub depth: usize,
    /// Why its prompt waits for room in the fleet's caps, while it does.
    pub queued: Option<String>,
    /// The agent's last words in it, one line.
    pub last_words: Option<String>,
    /// While it runs: since when (ms since the epoch) and how long, for "running for 3 min".
    pub running: Option<(u64, String)>,
}

pub(crate) struct FlagRow {
    /// "stopped: …", or "flagged: …" when the guard only reports.
    pub says: String,
    /// The failure's first line, or the budget's figures.
    pub detail: String,
    /// The guard stopped it and nothing refuses a resume now: an approver may resume it
    /// ("continue").
    pub resumable: bool,
    /// It was stopped for its budget: an operator may reset the session's budget.
    pub budget: bool,
    /// A budget still spent, which would refuse the resume: the primary action is then an
    /// operator's raise or reset, and others are told why there is none.
    pub blocked: Option<Blocked>,
}

/// A spent budget in front of a stopped session.
pub(crate) struct Blocked {
    /// "this session's budget, $0.03, is spent ($0.0315 so far)".
    pub what: String,
    /// The budget form's scope that raises it (`session`, `day`); none for a user's daily budget,
    /// which only the day's end or the config changes.
    pub scope: Option<&'static str>,
}

pub(crate) struct WaitingRow {
    pub id: String,
    pub what: String,
}

pub(crate) struct ProjectRow {
    pub name: String,
    /// What it spent today, and its daily budget (shown when it has budgets or spent anything).
    pub spend: Option<String>,
    /// The `[[box]]` its server runs on (none: this machine).
    pub on_box: Option<String>,
    pub state_class: &'static str,
    pub state_text: String,
    /// Why the server is not serving, shown as a sentence beside the badge (never inside it).
    pub state_reason: Option<String>,
    pub pending: usize,
    pub sessions: Vec<SessionRow>,
    /// The project's sessions in its web UI (`/<base64url(directory)>/session`).
    pub web_ui: Option<String>,
    pub can_answer: bool,
    /// The user's role lets them create a session there (`POST /session`).
    pub can_create: bool,
    /// An operator (or admin) there, and the gateway runs its server.
    pub can_restart: bool,
    /// The user may raise or reset the project's budgets (operators, on a project with one).
    pub can_raise: bool,
    /// Its web UI's origin, as this browser reaches it.
    pub origin: Option<String>,
    /// The folder its server knows it by (for links to its sessions in the web UI).
    pub directory: Option<String>,
    /// Its `[[trigger]]`s with their last runs (the portal only: `trigger_rows.rs`).
    pub triggers: Vec<trigger_rows::TriggerRow>,
    /// Its acceptance test's last run (`accept_rows.rs`).
    pub accept: Option<accept_rows::AcceptRow>,
    /// A task's changes and its review's link (the portal only: `task_rows.rs`).
    pub task: Option<task_rows::TaskRow>,
}

pub(crate) struct QuestionRow {
    pub index: usize,
    pub header: String,
    pub text: String,
    pub options: Vec<String>,
    pub multiple: bool,
    pub custom: bool,
}

pub(crate) struct CardRow {
    pub project: String,
    /// The `[[box]]` the project's server runs on (none: this machine).
    pub on_box: Option<String>,
    pub id: String,
    pub permission: bool,
    pub session_title: String,
    pub subagent: bool,
    pub tool: String,
    pub lines: Vec<String>,
    pub truncated: bool,
    pub patterns: Vec<String>,
    pub always: Vec<String>,
    pub waited: String,
    /// When it was asked (ms since the epoch), for the page's script to count on.
    pub asked_ms: u64,
    pub link: Option<String>,
    pub can_answer: bool,
    pub questions: Vec<QuestionRow>,
}

pub(crate) struct NoteRow {
    pub text: String,
}

/// What both pages show, for one user.
pub(crate) struct Room {
    pub projects: Vec<ProjectRow>,
    pub cards: Vec<CardRow>,
    pub notes: Vec<NoteRow>,
    pub pending: usize,
    /// A message after an action: what was answered (from the inbox's own record of it), or a
    /// fixed sentence; never text a client sent.
    pub flash: Option<String>,
    pub viewer_only: bool,
    /// What the user spent today and this month (shown when they spent anything or have a
    /// daily limit).
    pub my_spend: Option<String>,
}

#[derive(Template)]
#[template(path = "portal.html")]
struct PortalPage<'a> {
    r: &'a Room,
    /// The gateway's VAPID public key, for "Notify me on this device" (none: push is unavailable).
    push_key: Option<String>,
    /// The user's passkeys, and whether one can be added here (the login origin, by name).
    passkeys: Vec<super::passkey_form::PasskeyRow>,
    passkeys_here: bool,
    /// Elsewhere: the passkey origin (`Ctx::passkey_origin`) and the link there, when it has a
    /// name (the named host's goes through its handoff: no second login).
    passkeys_at: Option<(String, String)>,
    /// The project sets the user may start a task in (`web/task_form.rs`).
    task_sets: Vec<String>,
    /// The agents and models a new task may name (a running server's lists).
    task_choices: task_rows::Choices,
}

#[derive(Template)]
#[template(path = "portal_content.html")]
struct PortalContent<'a> {
    r: &'a Room,
}

#[derive(Template)]
#[template(path = "inbox.html")]
struct InboxPage<'a> {
    r: &'a Room,
}

#[derive(Template)]
#[template(path = "inbox_content.html")]
struct InboxContent<'a> {
    r: &'a Room,
}

fn role_of(state: &State, user: &str, project: &str) -> Option<Role> {
    state.users.get(user)?.grants.role_in(project)
}

/// The login session, or a redirect to the form (then back to `here`).
async fn require_login(ctx: &Ctx<'_>, here: &str) -> Result<Result<Arc<Live>, Response<ProxyBody>>, HttpError> {
    match ctx.login_session().await? {
        Some(l) => Ok(Ok(l)),
        None => Ok(Err(page::redirect(&format!("/login?next={}", form::encode(here))))),
    }
}

/// `?done=…&id=…`: the action, and the request it answered.
fn flash_key(ctx: &Ctx<'_>) -> Option<(String, String)> {
    let q = ctx.parts.uri.query().unwrap_or("");
    let done = crate::policy::query::get(q, "done")?;
    Some((
        done.into_owned(),
        crate::policy::query::get(q, "id").unwrap_or_default().into_owned(),
    ))
}

fn flash_of(ctx: &Ctx<'_>) -> Option<&'static str> {
    let q = ctx.parts.uri.query().unwrap_or("");
    match crate::policy::query::get(q, "done").as_deref() {
        Some("answered") => Some("Answered."),
        Some("once") => Some("Allowed once: the agent goes on."),
        Some("always") => Some("Allowed, and remembered: the agent will not ask for these patterns again."),
        Some("reject") => Some("Rejected: the agent was told no."),
        Some("answer") => Some("Answered: the agent has your reply."),
        Some("dismiss") => Some("Dismissed: the agent was told you declined."),
        Some("paired") => {
            Some("This device is paired: it stays logged in here until it is revoked (opencode-gateway devices).")
        }
        Some("elsewhere") => Some("That request was already answered elsewhere."),
        Some("aborted") => Some("The session was told to stop."),
        Some("resumed") => Some("The session was told to continue."),
        Some("raised") => Some("The budget was raised."),
        Some("asked") => Some("Your changes were asked for: the agent has the prompt."),
        Some("removed") => Some("The task's worktree is removed; its branch is kept."),
        Some("task_created") => Some("The task's branch, worktree and session are made, and its prompt sent."),
        Some("trigger_paused") => {
            Some("The trigger is paused: no delivery or schedule starts a run until it is resumed.")
        }
        Some("trigger_resumed") => Some("The trigger is resumed: its next delivery or due time starts a run."),
        Some("passkey_added") => Some("Passkey added: sign in with it next time."),
        Some("passkey_removed") => Some("Passkey revoked: it signs no one in from now on."),
        Some("reset") => Some("The budget was reset: what was spent so far no longer counts against it."),
        Some("gone") => Some("That session had already stopped."),
        Some("created") => Some("A new session was created."),
        Some("restarting") => Some("Restarting the project's server: its sessions stop; it is back in a few seconds."),
        _ => None,
    }
}

fn fragment(ctx: &Ctx<'_>) -> bool {
    ctx.parts
        .uri
        .query()
        .is_some_and(|q| crate::policy::query::get(q, "fragment").is_some())
}

pub(crate) async fn portal(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let live = match require_login(ctx, "/").await? {
        Ok(l) => l,
        Err(redirect) => return Ok(redirect),
    };
    let mut r = room(ctx, &live.user, flash_of(ctx));
    trigger_rows::add(ctx, &live.user, &mut r).await;
    task_rows::add(ctx, &mut r).await;
    accept_rows::add(ctx.gw, &mut r);
    if fragment(ctx) {
        page::html(StatusCode::OK, &PortalContent { r: &r })
    } else {
        // "New session" answers with a redirect to the project's web UI (and, without its cookie
        // there yet, the handoff's round trip), which `form-action` also governs: exactly the
        // origins of the projects the user may create a session in.
        let mut targets = String::new();
        for o in r
            .projects
            .iter()
            .filter(|p| p.can_create)
            .filter_map(|p| p.origin.as_deref())
        {
            if !targets.split(' ').any(|t| t == o) {
                targets.push(' ');
                targets.push_str(o);
            }
        }
        let push_key = ctx.gw.browser.push.vapid().ok().map(|v| v.public_key());
        let passkeys = super::passkey_form::rows_of(ctx, &live.user).await?;
        let passkeys_here = super::passkey_form::offered(ctx);
        let passkeys_at = (!passkeys_here).then(|| super::passkey_form::elsewhere(ctx)).flatten();
        let task_sets = task_rows::sets_for(ctx, &live.user);
        let portal = PortalPage {
            r: &r,
            push_key,
            passkeys,
            passkeys_here,
            passkeys_at,
            task_choices: task_rows::choices(ctx, &live, &task_sets).await,
            task_sets,
        };
        page::html_with(StatusCode::OK, &portal, &targets)
    }
}

pub(crate) async fn inbox(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let live = match require_login(ctx, "/inbox").await? {
        Ok(l) => l,
        Err(redirect) => return Ok(redirect),
    };
    let r = room(ctx, &live.user, flash_of(ctx));
    if fragment(ctx) {
        page::html(StatusCode::OK, &InboxContent { r: &r })
    } else {
        page::html(StatusCode::OK, &InboxPage { r: &r })
    }
}

mod accept_rows;
mod act;
mod events;
mod rows;
mod task_rows;
#[cfg(test)]
mod tests;
mod trigger_rows;

pub(crate) use act::{act, new_session, restart};
pub(crate) use act::{on_behalf, portal_form_fields, user_of};
pub(crate) use events::events;
use rows::room;
pub(crate) use task_rows::said as changes_said;
