//! The control room's rows: what the pages show of each project, session and pending request,
//! built from the inbox's model for one user.

use base64::Engine;

use super::*;
use crate::inbox::{Card, ProjectView};
use crate::inbox::{CardKind, Resolution, ServerState, SessionStatus};
use crate::policy::authz::Class;

/// Stopped once OpenCode answered the guard's abort; stopping while it is on its way.
fn flag_word(f: &crate::inbox::Flag) -> &'static str {
    match (f.stopped, f.stopping) {
        (true, _) => "stopped",
        (false, true) => "stopping",
        (false, false) => "flagged",
    }
}

fn flag_row(f: &crate::inbox::Flag) -> FlagRow {
    FlagRow {
        says: format!("{}: {}", flag_word(f), f.says),
        detail: f.detail.clone(),
        resumable: f.stopped,
        budget: f.why == crate::inbox::FlagWhy::Budget,
        blocked: None,
    }
}

/// A stopped session's resume would be refused while a budget is spent (`Inbox::resume` checks
/// it as admit does): say which, and take Resume away until an operator raises or resets it.
fn mark_blocked(gw: &crate::gateway::Gateway, state: &State, user: &str, row: &mut ProjectRow) {
    let Some(project) = state.projects.get(&row.name) else {
        return;
    };
    let (budget, day) = (project.config.budget, crate::budget::meter::today());
    // As `Inbox::resume`: only a budget that stops sessions refuses a resume.
    if budget.on_exceed != crate::config::OnExceed::Abort {
        return;
    }
    for s in &mut row.sessions {
        let Some(f) = s.flag.as_mut().filter(|f| f.resumable) else {
            continue;
        };
        let meter = &gw.meter;
        if let Err(e) = meter.check(&budget, state.settings.user_day_usd, &row.name, user, Some(&s.id), day) {
            f.resumable = false;
            f.blocked = Some(Blocked {
                what: format!(
                    "{}, ${:.2}, is spent (${:.4} so far)",
                    crate::budget::meter::words(e.budget),
                    e.limit,
                    e.spent
                ),
                scope: match e.budget {
                    "session_usd" => Some("session"),
                    "project_day_usd" => Some("day"),
                    _ => None,
                },
            });
        }
    }
}

pub(super) fn ago(ms: u64, now: u64) -> String {
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
pub(super) fn project_origin(ctx: &Ctx<'_>, project: &str) -> Option<String> {
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
pub(super) fn session_link(origin: &Option<String>, directory: Option<&str>, id: &str) -> Option<String> {
    web_ui_link(origin, directory, &format!("session/{id}"))
}

/// The project in its web UI: its sessions, at `/<base64url(directory)>/session` (the path
/// OpenCode's web UI itself navigates to for a project); `/` (the web UI's home, which lists only
/// projects opened in that browser before) when the project has no directory.
fn project_link(origin: &Option<String>, directory: Option<&str>) -> Option<String> {
    web_ui_link(origin, directory, "session")
}

/// `tail` under the project's folder in the web UI at `origin`; its home without a directory.
fn web_ui_link(origin: &Option<String>, directory: Option<&str>, tail: &str) -> Option<String> {
    let o = origin.as_ref()?;
    Some(match directory {
        Some(d) => format!(
            "{o}/{}/{tail}",
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

/// Build the room for `user` from the inbox's model: only projects the user has a role in.
pub(crate) fn room(ctx: &Ctx<'_>, user: &str, flash: Option<&'static str>) -> Room {
    let done = flash_key(ctx);
    let state = ctx.state;
    // Only projects served now: one just removed (a task's worktree) leaves the inbox a moment later.
    let views = (ctx.gw.inbox).view(|p| state.projects.contains_key(p) && role_of(state, user, p).is_some());
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
        mark_blocked(ctx.gw, state, user, &mut row);
        row.origin = origin.clone();
        row.spend = spend_line(ctx.gw, state, &v.name);
        projects.push(row);
        for c in &v.pending {
            cards.push(card_row(v, c, &origin, on_box, can_answer, now));
        }
        // One notice per answer: this user's own answers are said once, by the notice at the
        // top of the page after the answer (`?done=…&id=…`), and not again in the list.
        for r in &v.resolved {
            match &r.how {
                Resolution::AnsweredHere { by } if by == user => {
                    if answered.is_none() && done.as_ref().is_some_and(|(_, id)| *id == r.id) {
                        answered = Some(format!(
                            "{}: {}",
                            answered_words(r.kind, r.answer.as_deref()),
                            resolved_what(r)
                        ));
                    }
                }
                _ => notes.push(NoteRow {
                    text: resolved_note(v, r, now),
                }),
            }
        }
    }
    let flash = flash_line(answered, flash);
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

/// Another's answer, or one given outside the gateway, as a line in the list.
fn resolved_note(v: &ProjectView, r: &crate::inbox::Resolved, now: u64) -> String {
    let words = answered_words(r.kind, r.answer.as_deref());
    let what = resolved_what(r);
    match &r.how {
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
    }
}

/// The notice at the top: what this user just answered, then the fixed sentence after it
/// ("Allowed once: ls. The agent goes on.").
fn flash_line(answered: Option<String>, flash: Option<&'static str>) -> Option<String> {
    match (answered, flash) {
        (Some(what), Some(f)) => Some(match f.split_once(": ") {
            Some((_, tail)) => format!("{what}. {}", capitalize(tail)),
            None => what,
        }),
        (None, f) => f.map(String::from),
        (Some(what), None) => Some(what),
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
    let (spent, month) = gw.meter.spend_of("project", project, day);
    if !budget.any() && month == 0.0 {
        return None;
    }
    let raised = gw.meter.raised(&project_key(project), day);
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
    let (spent, month) = gw.meter.spend_of("user", user, crate::budget::meter::today());
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
    let sessions = nested(&v.sessions)
        .into_iter()
        .map(|(s, depth)| SessionRow {
            depth,
            ..session_row(v, s, origin, now)
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
        directory: v.directory.clone(),
        triggers: Vec::new(),
        accept: None,
        task: None,
    }
}

/// The sessions as a tree (issue 41): each root in the order given (most recently active first),
/// the sessions under it right after it, with their depth (a session whose parent is not listed
/// is a root).
fn nested(sessions: &[crate::inbox::Session]) -> Vec<(&crate::inbox::Session, usize)> {
    let listed = |id: &str| sessions.iter().any(|s| s.id == id);
    let mut out = Vec::with_capacity(sessions.len());
    let mut stack: Vec<(&crate::inbox::Session, usize)> = (sessions.iter().rev())
        .filter(|s| s.parent_id.as_deref().is_none_or(|p| !listed(p)))
        .map(|s| (s, 0))
        .collect();
    while let Some((s, depth)) = stack.pop() {
        out.push((s, depth));
        let children = sessions
            .iter()
            .rev()
            .filter(|c| c.parent_id.as_deref() == Some(s.id.as_str()));
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    // Sessions no root leads to (parents naming each other: never from OpenCode) still show.
    let shown: std::collections::HashSet<&str> = out.iter().map(|(s, _)| s.id.as_str()).collect();
    let unreached: Vec<_> = sessions.iter().filter(|s| !shown.contains(s.id.as_str())).collect();
    out.extend(unreached.into_iter().map(|s| (s, 0)));
    out
}

/// A session's line under its project: its state in a word (an error's text below it, as a
/// sentence), its cost so far, and the permission it waits on, if any.
fn session_row(v: &ProjectView, s: &crate::inbox::Session, origin: &Option<String>, now: u64) -> SessionRow {
    let (status_class, status_text, status_reason) = match &s.status {
        SessionStatus::Idle => ("idle", "idle".to_string(), None),
        SessionStatus::Busy => ("busy", "busy".to_string(), None),
        SessionStatus::Retry { attempt, message, .. } => (
            "retry",
            format!("retrying (attempt {attempt})"),
            Some(message.clone()).filter(|m| !m.trim().is_empty()),
        ),
    };
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
        waiting: waiting_on(v, &s.id),
        flag: s.flag.as_ref().map(flag_row),
        depth: 0,
        queued: s.queued.clone(),
        last_words: s.last_words.clone(),
        running: (!matches!(s.status, SessionStatus::Idle) && s.busy_since_ms > 0)
            .then(|| (s.busy_since_ms, ago(s.busy_since_ms, now))),
    }
}

/// The permission request a session waits on, in a line.
fn waiting_on(v: &ProjectView, session: &str) -> Option<WaitingRow> {
    v.pending.iter().find_map(|c| match c {
        Card::Permission(p) if p.request.session_id == session => Some(WaitingRow {
            id: p.request.id.clone(),
            what: match p.request.lines.first() {
                Some(line) => format!("{}: {line}", permission_title(&p.request.tool)),
                None => permission_title(&p.request.tool),
            },
        }),
        _ => None,
    })
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
            questions: q.request.questions.iter().enumerate().map(question_row).collect(),
            ..base(
                &q.request.session_id,
                &q.session_title,
                q.subagent,
                q.request.asked_at_ms,
            )
        },
    }
}

/// One question of a question card, as the form asks it (a free answer allowed unless it says not).
fn question_row((index, item): (usize, &crate::inbox::QuestionItem)) -> QuestionRow {
    QuestionRow {
        index,
        header: item.header.clone(),
        text: item.question.clone(),
        options: item.options.iter().map(|o| o.label.clone()).collect(),
        multiple: item.multiple,
        custom: item.custom.unwrap_or(true),
    }
}

#[cfg(test)]
mod tests {
    use crate::inbox::Session;

    fn session(id: &str, parent: Option<&str>) -> Session {
        Session {
            parent_id: parent.map(str::to_string),
            ..Session::new(id, 0)
        }
    }

    #[test]
    fn children_follow_their_parent_one_deeper_and_orphans_and_cycles_stay_listed_once() {
        let list = [
            session("a", None),
            session("b", None),
            session("a1", Some("a")),
            session("a1x", Some("a1")),
            session("orphan", Some("gone")),
            session("b1", Some("b")),
        ];
        let got: Vec<(&str, usize)> = super::nested(&list).iter().map(|(s, d)| (s.id.as_str(), *d)).collect();
        assert_eq!(
            got,
            [("a", 0), ("a1", 1), ("a1x", 2), ("b", 0), ("b1", 1), ("orphan", 0)]
        );
        // Parents that name each other (never from OpenCode): no loop, each shown once, at the top.
        let cycle = [session("x", Some("y")), session("y", Some("x"))];
        let got: Vec<(&str, usize)> = super::nested(&cycle).iter().map(|(s, d)| (s.id.as_str(), *d)).collect();
        assert_eq!(got, [("x", 0), ("y", 0)]);
    }
}
