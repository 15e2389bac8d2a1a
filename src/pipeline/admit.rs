//! Admit: may this user do this here, now (role, origin, limits, size, the gateway's files,
//! the spending budgets).

use super::request::{Canonical, Target};
use super::{Front, OriginRule, Principal, Proceeding, own_files};
use crate::config::Role;
use crate::config::settings::OnExceed;
use crate::http::body::StreamHold;
use crate::http::error::HttpError;
use crate::metrics::{Refusal, StreamKind};
use crate::policy::csrf;
use crate::policy::grants::Holder;
use crate::policy::plan::Treatment;

pub(super) struct Admitted {
    pub(super) role: Role,
    pub(super) stream_slot: Option<StreamHold>,
    /// A prompt admitted on a budget near its end: handed back once answered.
    pub(super) turn: Option<crate::budget::meter::Ticket>,
}

/// May this user do this here, now? The host an SSH tunnel may name, the role the route needs,
/// the origin rule, the request and stream budgets, the declared size, the gateway's own files,
/// the workspace guard. The checks run in this order: the first refusal is the one answered.
pub(super) fn admit(on: &Proceeding<'_>, request: &Canonical, target: &Target) -> Result<Admitted, HttpError> {
    let user = on.principal.name();
    names_local_host(on, request, user)?;
    let role = role_for(on, request.method(), target)?;
    beyond_a_policy(on, target)?;
    origin_allowed(on, request, target, user)?;
    let treatment = target.treatment();
    switches_only_terminals(request, target, treatment)?;
    take_request_budget(on)?;
    let stream_slot = treatment.long_lived().then(|| stream_hold(on, treatment)).transpose()?;
    within_body_limit(on, request)?;
    let protected = &on.here.state.settings.protected;
    own_files::check_request(protected, on.here.client, user, target, request.query_paths())?;
    stays_in_directory(request, target)?;
    let turn = match target.route.is_some_and(|r| r.asks_model) {
        true => spend_allowed(on, target)?,
        false => None,
    };
    Ok(Admitted {
        role,
        stream_slot,
        turn,
    })
}

/// Through an SSH tunnel the browser talks to a local port: a request naming any other host is
/// not one the tunnel's user made for this gateway (DNS rebinding through the forwarded port).
fn names_local_host(on: &Proceeding<'_>, request: &Canonical, user: &str) -> Result<(), HttpError> {
    if matches!(on.here.conn.front, Front::Ssh { .. })
        && !request
            .host
            .as_deref()
            .is_some_and(crate::policy::origin::is_local_host)
    {
        tracing::warn!(target: "security", peer = %on.here.conn.peer.ip(), user = %user, reason = "foreign_host_over_ssh", "a request through an SSH tunnel named a non-local host");
        return Err(HttpError::Forbidden(
            "through an SSH tunnel, use http://127.0.0.1:<local port> or http://localhost:<local port>".into(),
        ));
    }
    Ok(())
}

/// The origin rule the way in chose: the cookie's (stricter), the credentials', or none here
/// because the gateway's own page checked it.
fn origin_allowed(on: &Proceeding<'_>, request: &Canonical, target: &Target, user: &str) -> Result<(), HttpError> {
    let project = &target.project;
    match on.origin {
        OriginRule::Cookie => {
            // The browser's cookie authenticates this: the stricter rule, and a WebSocket must
            // say the project front's exact origin.
            let own = crate::policy::origin::normalize(&format!("https://{}", request.host.as_deref().unwrap_or("")))
                .unwrap_or_default();
            let trusted = &on.here.state.settings.server.allowed_origins;
            let (method, upgrade) = (request.method(), request.upgrade.is_some());
            csrf::check(method, upgrade, request.browser(), &own, trusted).map_err(|r| {
                tracing::warn!(target: "security", peer = %on.here.client, user = %user, project = %project.name, reason = r.code(), "a cross-origin request with a project host's cookie refused");
                HttpError::Forbidden(r.message().into())
            })
        }
        OriginRule::Credentials => {
            super::origin_rule::check_origin(on.here.state, on.here.conn, request, user, &project.name)
        }
        OriginRule::CheckedByPage => Ok(()),
    }
}

/// Only a terminal connection may switch protocols.
fn switches_only_terminals(request: &Canonical, target: &Target, treatment: Treatment) -> Result<(), HttpError> {
    if request.upgrade.is_some() && treatment != Treatment::TerminalConnect {
        return Err(HttpError::BadRequest(format!(
            "{} {} does not switch protocols; only terminal connections do",
            request.method(),
            target.label()
        )));
    }
    Ok(())
}

/// A user's request budget. The gateway's own acts are no client's traffic: they take none.
fn take_request_budget(on: &Proceeding<'_>) -> Result<(), HttpError> {
    if let Principal::User { user, .. } = on.principal {
        let gw = on.here.gw;
        gw.auth.limiters.request(&user.name).map_err(|d| {
            gw.metrics.refused(Refusal::Requests);
            HttpError::RateLimited {
                retry_after: d.retry_after,
            }
        })?;
    }
    Ok(())
}

/// The declared size, refused before a byte of the body is read.
fn within_body_limit(on: &Proceeding<'_>, request: &Canonical) -> Result<(), HttpError> {
    let max = on.here.gw.limits.max_body_bytes;
    if let Some(len) = request.content_length
        && len > max
    {
        return Err(HttpError::PayloadTooLarge { max });
    }
    Ok(())
}

/// A project pinned to a directory: a workspace switch would take OpenCode out of it; on a server
/// it shares, a route that answers for every folder would show the others'.
fn stays_in_directory(request: &Canonical, target: &Target) -> Result<(), HttpError> {
    let project = &target.project;
    if project.config.directory.is_some() && target.route.is_some_and(|r| r.workspace_switch) {
        return Err(HttpError::Forbidden(format!(
            "{} {} would leave project {}'s directory; workspaces are not available through the gateway",
            request.method(),
            target.label(),
            project.name
        )));
    }
    if project.shared_upstream && target.route.is_some_and(|r| r.server_wide) {
        return Err(HttpError::Forbidden(format!(
            "{} {} answers for every folder of the server project {} shares; the gateway cannot scope it to the project's directory",
            request.method(),
            target.label(),
            project.name
        )));
    }
    Ok(())
}

/// The principal's standing in the project, if it may make this request: a user's role (judged
/// by the route's class, or by their named act's grant on its route); the gateway's grant (its
/// class, only on its routes). The one judgement every request to OpenCode passes.
pub(super) fn role_for(on: &Proceeding<'_>, method: &http::Method, target: &Target) -> Result<Role, HttpError> {
    let project = &target.project.name;
    let role = match on.principal {
        Principal::User { user, .. } => user.grants.role_in(project).ok_or_else(|| HttpError::NotGranted {
            user: user.name.to_string(),
            project: project.to_string(),
        })?,
        Principal::Gateway(grant) => grant.class.least_role(),
    };
    // A path judged before the server's document was read waits for it in the plan, which
    // judges it again (a spawned server reads its document as it starts); refused there if the
    // document cannot be read.
    let class = match target.unread_default() {
        true => Some(crate::policy::authz::Class::Read),
        false => target.class,
    };
    let class = judged_class(on, target, class);
    crate::policy::authz::check_target(role, method, class, target.label(), target.note())?;
    stopped_by_guard(on, target)?;
    Ok(role)
}

/// The class a request is judged by: `class` (its route's) for a request without a grant; under
/// a grant, the grant's class on its routes, held by its kind of principal, and no role may
/// elsewhere.
pub(super) fn judged_class(
    on: &Proceeding<'_>,
    target: &Target,
    class: Option<crate::policy::authz::Class>,
) -> Option<crate::policy::authz::Class> {
    let held = |holder| match on.principal {
        Principal::User { .. } => holder == Holder::Users,
        Principal::Gateway(_) => holder != Holder::Users,
    };
    match on.principal.grant() {
        Some(grant) if held(grant.holder) => crate::policy::grants::class_under(grant, target.route),
        Some(_) => None,
        None => class,
    }
}

/// A token under a permission policy makes no request the policy would never see (a terminal, a
/// shell, a patch) and configures nothing (issue 40).
fn beyond_a_policy(on: &Proceeding<'_>, target: &Target) -> Result<(), HttpError> {
    let Principal::User { user, .. } = on.principal else {
        return Ok(());
    };
    let (Some(policy), Some(route)) = (user.policy.as_deref(), target.route) else {
        return Ok(());
    };
    match crate::policy::permission::beyond_a_policy(route) {
        Some(why) => {
            tracing::warn!(target: "security", user = %user.name, policy, reason = "beyond_a_policy", "{} {} refused to a token under a policy", route.method, route.pattern);
            Err(HttpError::Forbidden(format!(
                "{} {} {why}: not for a token under the gateway's policy {policy}",
                route.method,
                target.label()
            )))
        }
        None => Ok(()),
    }
}

/// A grant for a stopped session only ("Resume") acts only on a session the guard stopped (its
/// flag in the inbox, set once OpenCode answered the guard's abort, and the session idle):
/// refused otherwise, whatever the role. Part of the grant's judgement (`role_for`), so no path
/// judges the grant without it.
fn stopped_by_guard(on: &Proceeding<'_>, target: &Target) -> Result<(), HttpError> {
    let Some(grant) = on.principal.grant().filter(|g| g.only_stopped) else {
        return Ok(());
    };
    let session = target.session.as_deref().unwrap_or_default();
    if on.here.gw.inbox.stopped_by_guard(&target.project.name, session) {
        return Ok(());
    }
    Err(HttpError::Forbidden(format!(
        "{} is only for a session the guard stopped; session {session} of project {} is not stopped",
        grant.name, target.project.name
    )))
}

/// A route that makes OpenCode ask the model (a prompt, a command, a compaction, `/init`, and any
/// write a newer server adds: the table's `asks_model`) may start work only on a budget that is not
/// spent (`[budget]`, the project's `budget`): decided here, on the canonical route, for every
/// spelling and front door. With `on_exceed = "notify"` it goes through, logged. Who prompts a
/// session is remembered: its spend from now on counts toward their daily budget.
fn spend_allowed(on: &Proceeding<'_>, target: &Target) -> Result<Option<crate::budget::meter::Ticket>, HttpError> {
    let (gw, user, project) = (on.here.gw, on.principal.name(), &target.project);
    let budget = &project.config.budget;
    let user_day = on.here.state.settings.user_day_usd;
    if !budget.any() && user_day.is_none() {
        return Ok(None);
    }
    let meter = &gw.meter;
    let session = target.session.as_deref();
    let day = crate::budget::meter::today();
    if let Err(spent) = meter.check(budget, user_day, &project.name, user, session, day) {
        if budget.on_exceed == OnExceed::Abort {
            tracing::warn!(project = %project.name, user = %user, budget = spent.budget, spent = spent.spent, limit = spent.limit, "a prompt on a spent budget refused");
            gw.audit.record(
                crate::audit::Record::new("budget_refused")
                    .user(user)
                    .project(&*project.name)
                    .field("budget", spent.budget),
            );
            return Err(HttpError::Forbidden(format!("project {}: {spent}", project.name)));
        }
        tracing::warn!(project = %project.name, user = %user, budget = spent.budget, spent = spent.spent, limit = spent.limit, "a prompt on a spent budget let through (on_exceed = \"notify\")");
    }
    let Some(session) = session else {
        return Ok(None);
    };
    meter.prompted(&project.name, session, user);
    if budget.on_exceed != OnExceed::Abort {
        return Ok(None);
    }
    let prompt = crate::budget::meter::Prompt {
        budget,
        user_day_usd: user_day,
        project: &project.name,
        user,
        session,
    };
    meter
        .begin_turn(&prompt, day, std::time::Instant::now())
        .map_err(|busy| {
            tracing::info!(project = %project.name, user = %user, budget = busy.budget, spent = busy.spent, limit = busy.limit, reserved = busy.reserved, running = busy.running, "a prompt waits: the running turns leave no room on a budget");
            HttpError::BudgetTurnRunning(format!("project {}: {busy}", project.name))
        })
}

/// A long-lived request's hold: the user's stream slot (an SSH channel already holds one for
/// everything it carries) and its count in the open-streams gauge.
pub(super) fn stream_hold(on: &Proceeding<'_>, treatment: Treatment) -> Result<StreamHold, HttpError> {
    let gw = on.here.gw;
    let slot = match on.principal {
        // An SSH channel holds one for everything it carries.
        _ if matches!(on.here.conn.front, Front::Ssh { .. }) => None,
        Principal::Gateway(_) => None,
        Principal::User { user, .. } => Some(
            gw.doors
                .streams
                .try_acquire(user.name.clone(), gw.limits.max_streams_per_user)
                .ok_or_else(|| {
                    gw.metrics.refused(Refusal::Streams);
                    HttpError::TooManyStreams {
                        max: gw.limits.max_streams_per_user,
                    }
                })?,
        ),
    };
    let kind = if treatment == Treatment::TerminalConnect {
        StreamKind::Terminal
    } else {
        StreamKind::Events
    };
    Ok(StreamHold {
        _slot: slot,
        _gauge: gw.metrics.stream_open(kind),
    })
}
