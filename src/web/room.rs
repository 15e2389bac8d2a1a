//! The control room: `/` (every project the user may see, its server, its sessions) and `/inbox`
//! (every pending permission request and question, answerable by approvers), both rendered on
//! the server from the inbox's model (one upstream subscription per OpenCode server, however many
//! phones watch), and refreshed live by the page's own event stream (`/_gw/events`). Without
//! script the pages still render and the forms still work.

use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use hyper::body::Incoming;

use super::{Ctx, form, page};
use crate::audit::{Via, Who};
use crate::auth::sessions::Live;
use crate::config::Role;
use crate::gateway::state::State;
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;
use crate::inbox::{By, Road};
use crate::inbox::{Card, ProjectView};
use crate::inbox::{CardKind, Resolution, ServerState, SessionStatus};
use crate::inbox::{InboxError, Outcome, Reply};
use crate::policy::authz::Class;

/// How often an idle live stream says it is alive (and re-checks its login).
const KEEPALIVE: Duration = Duration::from_secs(15);

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
}

pub(crate) struct FlagRow {
    /// "stopped: …", or "flagged: …" when the guard only reports.
    pub says: String,
    /// The failure's first line, or the budget's figures.
    pub detail: String,
    /// The guard stopped it: an approver may resume it ("continue").
    pub resumable: bool,
    /// It was stopped for its budget: an operator may reset the session's budget.
    pub budget: bool,
}

fn flag_row(f: &crate::inbox::Flag) -> FlagRow {
    FlagRow {
        says: format!("{}: {}", if f.stopped { "stopped" } else { "flagged" }, f.says),
        detail: f.detail.clone(),
        resumable: f.stopped,
        budget: f.why == crate::inbox::FlagWhy::Budget,
    }
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

fn ago(ms: u64, now: u64) -> String {
    let s = now.saturating_sub(ms) / 1000;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

/// A project's web UI origin as this browser reaches it: `https://<project>.<base_domain>[:port]`
/// on the port this request came to, else the project's own port on the host name this request
/// used (port mode, `web/front.rs`: a phone on a LAN needs no other name).
fn project_origin(ctx: &Ctx<'_>, project: &str) -> Option<String> {
    let host = ctx.host.unwrap_or("");
    let bare = crate::policy::route::strip_port(host);
    if let Some(d) = ctx.state.settings.server.base_domain.as_deref() {
        return Some(format!("https://{project}.{d}{}", &host[bare.len()..]));
    }
    let port = ctx.gw.doors.ports.get()?.port_of(project)?;
    Some(format!(
        "https://{bare}{}",
        if port == 443 { String::new() } else { format!(":{port}") }
    ))
}

/// The web UI's address for a session: `/<base64url(directory)>/session/<id>`.
fn session_link(origin: &Option<String>, directory: Option<&str>, id: &str) -> Option<String> {
    let o = origin.as_ref()?;
    Some(match directory {
        Some(d) => format!(
            "{o}/{}/session/{id}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d)
        ),
        None => format!("{o}/"),
    })
}

/// The project in its web UI: its sessions, at `/<base64url(directory)>/session` (the path
/// OpenCode's web UI itself navigates to for a project); `/` (the web UI's home, which lists only
/// projects opened in that browser before) when the project has no directory.
fn project_link(origin: &Option<String>, directory: Option<&str>) -> Option<String> {
    let o = origin.as_ref()?;
    Some(match directory {
        Some(d) => format!(
            "{o}/{}/session",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d)
        ),
        None => format!("{o}/"),
    })
}

/// What `role` may do to the project in `row` from the portal: create a session, restart its
/// server, raise its budget (operators, on a project with one).
fn allow(row: &mut ProjectRow, state: &State, role: Option<Role>) {
    let Some(role) = role else { return };
    row.can_create = may_create_session(state, role, &row.name);
    row.can_restart = may_restart(state, role, &row.name);
    row.can_raise = role >= Role::Operator && state.projects.get(&row.name).is_some_and(|p| p.config.budget.any());
}

/// May `role` create a session in `project`, by the rule a proxied `POST /session` meets (the
/// table, the upstream's document, `[[route_role]]`)?
fn may_create_session(state: &State, role: Role, project: &str) -> bool {
    let Some(p) = state.projects.get(project) else {
        return false;
    };
    let api = p.api();
    let extra = crate::policy::authz::Extra {
        upstream: api.as_deref(),
        configured: &state.route_roles,
    };
    crate::policy::authz::check_path_with(role, &http::Method::POST, "/session", extra).is_ok()
}

/// Restarting a server: an operator's (or admin's) action, on a server the gateway runs.
fn may_restart(state: &State, role: Role, project: &str) -> bool {
    role >= Class::Operate.least_role()
        && state
            .projects
            .get(project)
            .is_some_and(|p| matches!(p.upstream, crate::gateway::state::Upstream::Supervised(_)))
}

/// "Allowed once", "Always allowed", "Rejected", …: how a request was answered.
fn answered_words(kind: CardKind, answer: Option<&str>) -> &'static str {
    match (kind, answer) {
        (CardKind::Permission, Some("once")) => "Allowed once",
        (CardKind::Permission, Some("always")) => "Always allowed",
        (CardKind::Permission, Some("reject")) => "Rejected",
        (CardKind::Question, Some("reject")) => "Declined",
        _ => "Answered",
    }
}

/// What was asked, in a line: the command's first line (cut), or the request's title.
fn resolved_what(r: &crate::inbox::Resolved) -> String {
    let detail = r.detail.trim();
    if detail.is_empty() {
        return match r.kind {
            CardKind::Permission => permission_title(&r.tool),
            CardKind::Question => "a question".into(),
        };
    }
    let mut cut: String = detail.chars().take(80).collect();
    if cut.len() < detail.len() {
        cut.push('…');
    }
    cut
}

fn role_of(state: &State, user: &str, project: &str) -> Option<Role> {
    state.users.get(user)?.grants.role_in(project)
}

/// Build the room for `user` from the inbox's model: only projects the user has a role in.
pub(crate) fn room(ctx: &Ctx<'_>, user: &str, flash: Option<&'static str>) -> Room {
    let done = flash_key(ctx);
    let state = ctx.state;
    let views = ctx.gw.inbox.view(|p| role_of(state, user, p).is_some());
    let now = crate::inbox::now_ms();
    let mut projects = Vec::new();
    let mut cards = Vec::new();
    let mut notes = Vec::new();
    let mut viewer_only = true;
    let mut answered: Option<String> = None;
    for v in &views {
        let role = role_of(state, user, &v.name);
        let can_answer = role.is_some_and(|r| r >= Class::Respond.least_role());
        viewer_only &= !can_answer;
        let origin = project_origin(ctx, &v.name);
        let on_box = state.projects.get(&v.name).and_then(|p| p.config.on_box.as_deref());
        let mut row = project_row(v, &origin, on_box, can_answer, now);
        allow(&mut row, state, role);
        row.origin = origin.clone();
        row.spend = spend_line(ctx.gw, state, &v.name);
        projects.push(row);
        for c in &v.pending {
            cards.push(card_row(v, c, &origin, on_box, can_answer, now));
        }
        // One notice per answer: this user's own answers are said once, by the notice at the
        // top of the page after the answer (`?done=…&id=…`), and not again in the list.
        for r in &v.resolved {
            let words = answered_words(r.kind, r.answer.as_deref());
            let what = resolved_what(r);
            let text = match &r.how {
                Resolution::AnsweredHere { by } if by == user => {
                    if let Some((_, id)) = &done
                        && *id == r.id
                        && answered.is_none()
                    {
                        answered = Some(format!("{words}: {what}"));
                    }
                    continue;
                }
                Resolution::AnsweredHere { by } => {
                    format!(
                        "{words} by {by}: {what} (in {}, {} ago)",
                        v.name,
                        ago(r.resolved_at_ms, now)
                    )
                }
                Resolution::Elsewhere => format!(
                    "{what} (in {}): answered elsewhere{} ({} ago)",
                    v.name,
                    match r.answer.as_deref() {
                        Some(_) => format!(", {}", words.to_lowercase()),
                        None => String::new(),
                    },
                    ago(r.resolved_at_ms, now)
                ),
            };
            notes.push(NoteRow { text });
        }
    }
    // The fixed sentence after what was answered ("Allowed once: ls. The agent goes on.").
    let flash = match (answered, flash) {
        (Some(what), Some(f)) => Some(match f.split_once(": ") {
            Some((_, tail)) => format!("{what}. {}", capitalize(tail)),
            None => what,
        }),
        (None, f) => f.map(String::from),
        (Some(what), None) => Some(what),
    };
    cards.sort_by(|a, b| b.waited.len().cmp(&a.waited.len()).then(a.waited.cmp(&b.waited)));
    Room {
        pending: cards.len(),
        projects,
        cards,
        notes,
        flash,
        viewer_only: viewer_only && !views.is_empty(),
        my_spend: my_spend_line(ctx.gw, state, user),
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// "Spent today: $0.0420 of $40.00 (UTC)": the project's spend today as the meter saw it, and
/// its daily budget; nothing for a project with no budget that spent nothing.
fn spend_line(gw: &crate::gateway::Gateway, state: &State, project: &str) -> Option<String> {
    use crate::budget::meter::{project_key, today};
    let budget = state.projects.get(project)?.config.budget;
    let day = today();
    let (spent, month) = gw.inbox.meter.spend_of("project", project, day);
    if !budget.any() && month == 0.0 {
        return None;
    }
    let raised = gw.inbox.meter.raised(&project_key(project), day);
    Some(match budget.project_day_usd {
        Some(limit) if raised > 0.0 => format!(
            "Spent today: ${spent:.4} of ${:.2} (raised by ${raised:.2}; UTC day) · this month: ${month:.4}",
            limit + raised
        ),
        Some(limit) => format!("Spent today: ${spent:.4} of ${limit:.2} (UTC day) · this month: ${month:.4}"),
        None => format!("Spent today: ${spent:.4} (UTC day) · this month: ${month:.4}"),
    })
}

/// "You spent today: $0.0210 of $25.00 (UTC day) · this month: $1.2000", when the user spent
/// anything this month or has a daily limit.
fn my_spend_line(gw: &crate::gateway::Gateway, state: &State, user: &str) -> Option<String> {
    let limit = state.settings.user_day_usd;
    let (spent, month) = gw.inbox.meter.spend_of("user", user, crate::budget::meter::today());
    if limit.is_none() && month == 0.0 {
        return None;
    }
    Some(match limit {
        Some(l) => format!("You spent today: ${spent:.4} of ${l:.2} (UTC day) · this month: ${month:.4}"),
        None => format!("You spent today: ${spent:.4} (UTC day) · this month: ${month:.4}"),
    })
}

/// A session's cost and tokens so far, as OpenCode reported them (none before its first answer).
fn usage(s: &crate::inbox::Session) -> Option<String> {
    match (&s.cost, &s.tokens) {
        (None, None) => None,
        (cost, tokens) => Some(format!(
            "{}{}",
            cost.map_or(String::new(), |c| format!("${c:.4}")),
            tokens.as_ref().map_or(String::new(), |t| format!(
                " · {} in / {} out tokens",
                t.input, t.output
            ))
        )),
    }
}

fn project_row(
    v: &ProjectView,
    origin: &Option<String>,
    on_box: Option<&str>,
    can_answer: bool,
    now: u64,
) -> ProjectRow {
    let (state_class, state_text, state_reason) = match &v.server {
        ServerState::Running => ("running", "running".to_string(), None),
        ServerState::Starting => ("busy", "starting".to_string(), None),
        ServerState::Stopped { reason } => ("idle", format!("stopped ({reason})"), None),
        ServerState::Failed { reason } => ("failed", "restarting".to_string(), Some(reason.clone())),
        ServerState::NotRunning { reason } => ("failed", "NOT RUNNING".to_string(), Some(reason.clone())),
    };
    let sessions = v
        .sessions
        .iter()
        .map(|s| {
            // The badge says the state in a word; an error's text goes below it, as a sentence.
            let (status_class, status_text, status_reason) = match &s.status {
                SessionStatus::Idle => ("idle", "idle".to_string(), None),
                SessionStatus::Busy => ("busy", "busy".to_string(), None),
                SessionStatus::Retry { attempt, message, .. } => (
                    "retry",
                    format!("retrying (attempt {attempt})"),
                    Some(message.clone()).filter(|m| !m.trim().is_empty()),
                ),
            };
            let waiting = v.pending.iter().find_map(|c| match c {
                Card::Permission(p) if p.request.session_id == s.id => Some(WaitingRow {
                    id: p.request.id.clone(),
                    what: match p.request.lines.first() {
                        Some(line) => format!("{}: {line}", permission_title(&p.request.tool)),
                        None => permission_title(&p.request.tool),
                    },
                }),
                _ => None,
            });
            SessionRow {
                id: s.id.clone(),
                title: if s.title.is_empty() {
                    s.id.clone()
                } else {
                    s.title.clone()
                },
                status_class,
                status_text,
                status_reason,
                ago: ago(s.last_activity_ms, now),
                since_ms: s.last_activity_ms,
                usage: usage(s),
                link: session_link(origin, v.directory.as_deref(), &s.id),
                subagent: s.parent_id.is_some(),
                busy: !matches!(s.status, SessionStatus::Idle),
                waiting,
                flag: s.flag.as_ref().map(flag_row),
            }
        })
        .collect();
    ProjectRow {
        spend: None,
        name: v.name.clone(),
        on_box: on_box.map(String::from),
        state_class,
        state_text,
        state_reason,
        pending: v.pending.len(),
        sessions,
        web_ui: project_link(origin, v.directory.as_deref()),
        can_answer,
        can_create: false,
        can_restart: false,
        can_raise: false,
        origin: None,
    }
}

/// What a permission request asks, in words a person reads on a phone, with OpenCode's own name
/// for it after (`Run a command (bash)`). The kinds are OpenCode 1.18.33's permission settings;
/// one it adds later is shown by its name, made readable (`new_thing` → "New thing").
pub(crate) fn permission_title(kind: &str) -> String {
    let words = match kind {
        "bash" => "Run a command",
        "edit" | "write" | "patch" | "multiedit" => "Change files",
        "read" => "Read a file",
        "glob" | "grep" | "list" | "codesearch" => "Search the project",
        "webfetch" => "Fetch a web page",
        "websearch" => "Search the web",
        "external_directory" => "Work outside the project's folder",
        "task" => "Start a subagent",
        "todowrite" | "todoread" => "Use the to-do list",
        "doom_loop" => "Repeat the same step again",
        "lsp" => "Ask the language server",
        "skill" => "Use a skill",
        other => {
            let mut s: String = other.replace(['_', '-'], " ");
            if let Some(first) = s.get(..1) {
                s.replace_range(..1, &first.to_ascii_uppercase());
            }
            return s;
        }
    };
    format!("{words} ({kind})")
}

fn card_row(
    v: &ProjectView,
    c: &Card,
    origin: &Option<String>,
    on_box: Option<&str>,
    can_answer: bool,
    now: u64,
) -> CardRow {
    let base = |session_id: &str, title: &Option<String>, subagent: bool, asked: u64| CardRow {
        project: v.name.clone(),
        on_box: on_box.map(String::from),
        id: c.id().to_string(),
        permission: true,
        session_title: title.clone().unwrap_or_else(|| session_id.to_string()),
        subagent,
        tool: String::new(),
        lines: Vec::new(),
        truncated: false,
        patterns: Vec::new(),
        always: Vec::new(),
        waited: ago(asked, now),
        asked_ms: asked,
        link: session_link(origin, v.directory.as_deref(), session_id),
        can_answer,
        questions: Vec::new(),
    };
    match c {
        Card::Permission(p) => CardRow {
            tool: permission_title(&p.request.tool),
            lines: p.request.lines.clone(),
            truncated: p.request.truncated,
            patterns: p.request.patterns.clone(),
            always: p.request.always.clone(),
            ..base(
                &p.request.session_id,
                &p.session_title,
                p.subagent,
                p.request.asked_at_ms,
            )
        },
        Card::Question(q) => CardRow {
            permission: false,
            tool: "question".into(),
            questions: q
                .request
                .questions
                .iter()
                .enumerate()
                .map(|(index, item)| QuestionRow {
                    index,
                    header: item.header.clone(),
                    text: item.question.clone(),
                    options: item.options.iter().map(|o| o.label.clone()).collect(),
                    multiple: item.multiple,
                    custom: item.custom.unwrap_or(true),
                })
                .collect(),
            ..base(
                &q.request.session_id,
                &q.session_title,
                q.subagent,
                q.request.asked_at_ms,
            )
        },
    }
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
    let r = room(ctx, &live.user, flash_of(ctx));
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
        let portal = PortalPage {
            r: &r,
            push_key,
            passkeys,
            passkeys_here,
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

/// `POST /_gw/act`: answer a permission request or a question, or abort a session. Only what
/// the inbox shows for that project can be acted on, and only by an approver (or above) there.
pub(crate) async fn act(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let project = f.get("project").map_or("", String::as_str);
    let id = f.get("id").map_or("", String::as_str);
    let action = f.get("do").map_or("", String::as_str);
    let back = if f.get("from").is_some_and(|v| v == "portal") {
        "/"
    } else {
        "/inbox"
    };
    // A project the user has no role in is as absent as one that does not exist. Whether their
    // role may answer is the proxy's to say (the answer goes through it as theirs).
    if role_of(ctx.state, &live.user, project).is_none() {
        return Err(HttpError::NotFound(format!(
            "no pending request {id} in a project of yours"
        )));
    }
    let on = on_behalf(ctx, &live)?;
    let by = &By::User(&*on);
    let view = ctx.gw.inbox.view(|p| p == project);
    let Some(v) = view.first() else {
        return Ok(page::redirect(&format!("{back}?done=elsewhere")));
    };
    let inbox = &ctx.gw.inbox;
    let outcome = match action {
        "once" | "always" | "reject" => {
            if !v
                .pending
                .iter()
                .any(|c| matches!(c, Card::Permission(_)) && c.id() == id)
            {
                return Ok(page::redirect(&format!("{back}?done=elsewhere")));
            }
            let reply = Reply::parse(action).expect("matched above");
            let message = f.get("message").cloned().filter(|m| !m.trim().is_empty());
            inbox.reply_permission(project, id, reply, message, by).await
        }
        "answer" | "dismiss" => {
            let Some(Card::Question(q)) = v
                .pending
                .iter()
                .find(|c| matches!(c, Card::Question(_)) && c.id() == id)
            else {
                return Ok(page::redirect(&format!("{back}?done=elsewhere")));
            };
            if action == "dismiss" {
                inbox.reject_question(project, id, by).await
            } else {
                let answers = chosen_answers(&f, q.request.questions.len());
                inbox.reply_question(project, id, answers, by).await
            }
        }
        "resume" => return resume(ctx, &live, project, id, back).await,
        "abort" => {
            if !v.sessions.iter().any(|s| s.id == id) {
                return Ok(page::redirect(&format!("{back}?done=gone")));
            }
            let r = inbox.abort_session(by, project, id).await;
            tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, session = id, "session aborted from the control room");
            return match r {
                Ok(Outcome::Done) => Ok(page::redirect(&format!("{back}?done=aborted"))),
                Ok(Outcome::AlreadyAnswered) => Ok(page::redirect(&format!("{back}?done=gone"))),
                Err(e) => Err(inbox_error(project, e)),
            };
        }
        _ => return Err(HttpError::BadRequest("unknown action".into())),
    };
    // The request audit recorded the answer (`from: control_room`) as the proxy sent it.
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, device = live.device.as_deref().unwrap_or("-"), project, request = id, answer = action, "answered from the control room");
    match outcome {
        // The notice says what was answered (allowed once, always, rejected, replied).
        Ok(Outcome::Done) => Ok(page::redirect(&format!("{back}?done={action}&id={}", form::encode(id)))),
        Ok(Outcome::AlreadyAnswered) => Ok(page::redirect(&format!("{back}?done=elsewhere"))),
        Err(e) => Err(inbox_error(project, e)),
    }
}

/// "Resume" on a session the guard stopped: approvers and up (the role that answers the agent's
/// requests); the gateway sends the one fixed "continue" (`Inbox::resume`).
async fn resume(
    ctx: &Ctx<'_>,
    live: &Live,
    project: &str,
    id: &str,
    back: &str,
) -> Result<Response<ProxyBody>, HttpError> {
    if role_of(ctx.state, &live.user, project).is_none_or(|r| r < Role::Approver) {
        return Err(HttpError::Forbidden(format!(
            "resuming a stopped session of {project} needs the approver role or above"
        )));
    }
    let r = ctx.gw.inbox.resume(project, id, &live.user).await;
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, session = id, ok = r.is_ok(), "stopped session resumed from the control room");
    match r {
        Ok(Outcome::Done) => Ok(page::redirect(&format!("{back}?done=resumed"))),
        Ok(Outcome::AlreadyAnswered) => Ok(page::redirect(&format!("{back}?done=gone"))),
        Err(e) => Err(inbox_error(project, e)),
    }
}

/// For each of a question card's `n` questions, the labels ticked (`q<i>`) and the user's own
/// text (`q<i>-own`), in order.
fn chosen_answers(f: &form::Form, n: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|i| {
            let mut chosen: Vec<String> = f.all(&format!("q{i}")).map(String::from).collect();
            if let Some(text) = f.get(&format!("q{i}-own")).filter(|t| !t.trim().is_empty()) {
                chosen.push(text.trim().to_string());
            }
            chosen
        })
        .collect()
}

/// The login behind a state-changing portal form, and its `project` field: cross-origin
/// requests refused first, then no login, then (as absent) a project the user has no role in.
async fn portal_form(ctx: &Ctx<'_>, body: Incoming) -> Result<(Arc<Live>, String, Role), HttpError> {
    let (live, _, project, role) = portal_form_fields(ctx, body).await?;
    Ok((live, project, role))
}

/// [`portal_form`], with the form's other fields.
pub(super) async fn portal_form_fields(
    ctx: &Ctx<'_>,
    body: Incoming,
) -> Result<(Arc<Live>, form::Form, String, Role), HttpError> {
    ctx.check_csrf()?;
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let project = f.get("project").cloned().unwrap_or_default();
    let Some(role) = role_of(ctx.state, &live.user, &project) else {
        return Err(HttpError::NotFound(format!("no project {project:?} of yours")));
    };
    Ok((live, f, project, role))
}

/// The user behind a login session, as the proxy knows them, for a request made on their behalf:
/// the road through the proxy's own phases as them.
fn on_behalf<'a>(ctx: &'a Ctx<'_>, live: &Live) -> Result<Box<dyn Road + 'a>, HttpError> {
    let user = ctx
        .state
        .users
        .get(&*live.user)
        .cloned()
        .ok_or(HttpError::Unauthenticated)?;
    let who = Who {
        via: via_of(live),
        id: live.device.clone(),
    };
    Ok((ctx.on_behalf)(ctx.gw, user, who, ctx.client, "control_room"))
}

fn via_of(live: &Live) -> Via {
    if live.device.is_some() {
        Via::Device
    } else {
        Via::Cookie
    }
}

/// `POST /_gw/new`: create a session in the project (upstream, the way the inbox answers: the
/// gateway's own credential, the project's directory), then open it in the project's web UI.
/// Needs the role a proxied `POST /session` needs.
pub(crate) async fn new_session(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let (live, project, _) = portal_form(ctx, body).await?;
    // The role a `POST /session` needs is the proxy's to check: the create goes through it as
    // this user, and the request audit records it (`session_create`, `from: control_room`).
    let on = on_behalf(ctx, &live)?;
    let created = ctx.gw.inbox.create_session(&By::User(&*on), &project).await;
    let id = created.map_err(|e| inbox_error(&project, e))?;
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, session = id, "session created from the control room");
    let origin = project_origin(ctx, &project);
    let directory = ctx
        .state
        .projects
        .get(&project)
        .and_then(|p| p.config.directory.as_ref().map(|d| d.display().to_string()));
    Ok(match session_link(&origin, directory.as_deref(), &id) {
        Some(link) => page::redirect(&link),
        None => page::redirect("/?done=created"),
    })
}

/// `POST /_gw/restart`: what `opencode-gateway restart <project>` does (the control socket's
/// `POST /restart`), for an operator (or admin) of the project; audited as `server_restarted`
/// with the user when the new server is up.
pub(crate) async fn restart(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let (live, project, role) = portal_form(ctx, body).await?;
    if role < Class::Operate.least_role() {
        tracing::warn!(target: "security", peer = %ctx.client, user = %live.user, project, role = role.as_str(), "a restart from a role that may not restart refused");
        return Err(HttpError::Forbidden(format!(
            "restarting project {project}'s server needs the operator role; {} has {}",
            live.user,
            role.as_str()
        )));
    }
    let Some(crate::gateway::state::Upstream::Supervised(s)) = ctx.state.projects.get(&project).map(|p| &p.upstream)
    else {
        return Err(HttpError::BadRequest(format!(
            "project {project} is an OpenCode server the gateway does not run; restart it where it runs"
        )));
    };
    s.restart_by(Some(&live.user))
        .map_err(|reason| HttpError::UpstreamStarting {
            project: project.clone(),
            reason,
        })?;
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, "server restart asked from the control room");
    Ok(page::redirect("/?done=restarting"))
}

/// An inbox failure as the status a person can act on.
fn inbox_error(project: &str, e: InboxError) -> HttpError {
    match e {
        // The proxy's own refusal, as it answers a client.
        InboxError::Refused(r) => match r.error.downcast::<HttpError>() {
            Ok(e) => *e,
            // Not reached: the pipeline's road refuses with its own error.
            Err(e) => HttpError::Forbidden(e.to_string()),
        },
        InboxError::BadId(_) => HttpError::BadRequest(e.to_string()),
        InboxError::UnknownProject(p) => HttpError::UnknownProject(p),
        InboxError::NotRunning(reason) => HttpError::UpstreamStarting {
            project: project.to_string(),
            reason,
        },
        InboxError::Upstream { .. } | InboxError::Unreachable(_) => HttpError::UpstreamUnavailable {
            project: project.to_string(),
            reason: e.to_string(),
        },
    }
}

/// `GET /_gw/events`: an event stream that says `change` whenever what this user sees changed
/// (computed per user, so a change in another project is not even hinted at). Holds one of the
/// user's stream slots; ends when the login ends (checked at each keep-alive) or the gateway stops.
pub(crate) async fn events(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let Some(live) = ctx.login_session().await? else {
        return Err(HttpError::Unauthenticated);
    };
    let slot = ctx
        .gw
        .doors
        .streams
        .try_acquire(live.user.clone(), ctx.gw.limits.max_streams_per_user)
        .ok_or_else(|| {
            ctx.gw.metrics.refused(crate::metrics::Refusal::Streams);
            HttpError::TooManyStreams {
                max: ctx.gw.limits.max_streams_per_user,
            }
        })?;
    let cookie = crate::http::cookie::find(&ctx.parts.headers)
        .unwrap_or_default()
        .to_string();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let gw = ctx.gw.clone();
    let client = ctx.client;
    let user = live.user.clone();
    tokio::spawn(async move {
        let mut changes = gw.inbox.changes();
        let digest = |gw: &crate::gateway::Gateway| {
            let state = gw.state();
            let views = gw.inbox.view(|p| role_of(&state, &user, p).is_some());
            serde_json::to_string(&views).unwrap_or_default()
        };
        let mut last = digest(&gw);
        if tx.send(Bytes::from_static(b": connected\n\n")).await.is_err() {
            return;
        }
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        loop {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() { return; }
                    let now = digest(&gw);
                    if now != last {
                        last = now;
                        if tx.send(Bytes::from_static(b"event: change\ndata: {}\n\n")).await.is_err() { return; }
                    }
                }
                _ = tick.tick() => {
                    if !matches!(gw.browser.sessions.check(&cookie, client).await, Ok(Some(_))) { return; }
                    if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() { return; }
                }
                _ = tx.closed() => return,
                _ = gw.lifecycle.shutdown.cancelled() => return,
            }
        }
    });
    let mut r = Response::new(ProxyBody::channel(rx).holding(Some(crate::http::body::StreamHold {
        _slot: Some(slot),
        _gauge: ctx.gw.metrics.stream_open(crate::metrics::StreamKind::Events),
    })));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use askama::Template;

    use super::*;

    /// A project on a box says so on the portal and on its inbox cards; one on this machine
    /// says nothing of boxes.
    #[test]
    fn the_pages_name_the_box_a_project_runs_on() {
        let project = |name: &str, on_box: Option<&str>| ProjectRow {
            name: name.into(),
            spend: None,
            on_box: on_box.map(String::from),
            state_class: "running",
            state_text: "running".into(),
            state_reason: None,
            pending: 1,
            sessions: Vec::new(),
            web_ui: None,
            can_answer: true,
            can_create: false,
            can_restart: false,
            can_raise: false,
            origin: None,
        };
        let card = |name: &str, on_box: Option<&str>| CardRow {
            project: name.into(),
            on_box: on_box.map(String::from),
            id: format!("per_{name}"),
            permission: true,
            session_title: "a session".into(),
            subagent: false,
            tool: "bash".into(),
            lines: vec!["ls".into()],
            truncated: false,
            patterns: Vec::new(),
            always: Vec::new(),
            waited: "5 s".into(),
            asked_ms: 0,
            link: None,
            can_answer: true,
            questions: Vec::new(),
        };
        let room = Room {
            projects: vec![project("train", Some("gpu1")), project("web", None)],
            cards: vec![card("train", Some("gpu1")), card("web", None)],
            notes: Vec::new(),
            pending: 2,
            flash: None,
            viewer_only: false,
            my_spend: None,
        };
        let portal = PortalContent { r: &room }.render().unwrap();
        assert_eq!(portal.matches("on gpu1").count(), 1, "{portal}");
        // A session the guard stopped: the flag, the failure's first line, "Resume" for those
        // who may answer; "Reset this session's budget" and "Budget…" for operators only.
        let mut room = room;
        room.my_spend = Some("You spent today: $0.0210 (UTC day) · this month: $1.2000".into());
        let flagged = |budget: bool| SessionRow {
            id: "ses_1".into(),
            title: "Fix the login".into(),
            status_class: "idle",
            status_text: "idle".into(),
            status_reason: None,
            ago: "5 s".into(),
            since_ms: 0,
            usage: Some("$0.0315 · 3000 in / 1500 out tokens".into()),
            link: None,
            subagent: false,
            busy: false,
            waiting: None,
            flag: Some(FlagRow {
                says: "stopped: retried the same failure twice".into(),
                detail: "exit 1: cat: x: No such file or directory".into(),
                resumable: true,
                budget,
            }),
        };
        room.projects[1].sessions = vec![flagged(true)];
        room.projects[1].spend = Some("Spent today: $0.0315 of $40.00 (UTC day) · this month: $0.0315".into());
        let as_approver = PortalContent { r: &room }.render().unwrap();
        for says in [
            "You spent today: $0.0210",
            "stopped: retried the same failure twice",
            "exit 1: cat: x: No such file",
            "value=\"resume\"",
        ] {
            assert!(as_approver.contains(says), "{says}: {as_approver}");
        }
        assert!(
            !as_approver.contains("/_gw/budget"),
            "no budget controls without the operator role"
        );
        room.projects[1].can_raise = true;
        let as_operator = PortalContent { r: &room }.render().unwrap();
        assert!(as_operator.contains("Reset this session's budget"), "{as_operator}");
        assert!(as_operator.contains("Raise today's budget by $"), "{as_operator}");
        room.projects[1].can_answer = false;
        let as_viewer_like = PortalContent { r: &room }.render().unwrap();
        assert!(!as_viewer_like.contains("value=\"resume\""), "{as_viewer_like}");
        let inbox = InboxContent { r: &room }.render().unwrap();
        assert!(inbox.contains("in train on gpu1"), "{inbox}");
        assert!(inbox.contains("in web</span>"), "{inbox}");
    }

    #[test]
    fn permission_kinds_read_as_words() {
        assert_eq!(super::permission_title("bash"), "Run a command (bash)");
        assert_eq!(
            super::permission_title("external_directory"),
            "Work outside the project's folder (external_directory)"
        );
        assert_eq!(super::permission_title("new_thing"), "New thing");
        assert_eq!(super::permission_title(""), "");
    }
}
