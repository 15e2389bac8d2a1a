//! Plan: where and how an admitted request goes (the endpoint, the upstream's own routes, a
//! shared upstream's session scope, the audit record).

use std::sync::Arc;

use super::request::{Canonical, Target};
use super::{Proceeding, own_files};
use crate::config::Role;
use crate::http::audit::Pending;
use crate::http::body::AccessRecord;
use crate::http::error::HttpError;
use crate::policy::plan::AuditKind;

pub(super) struct Planned {
    pub(super) endpoint: Arc<crate::upstream::endpoint::Endpoint>,
    pub(super) audit: Option<Box<Pending>>,
}

/// Where and how it goes: the project's endpoint (started if it must be), the request judged
/// again when the upstream's own route table arrived meanwhile, a shared upstream's session
/// scope, and the audit record the route asks for.
pub(super) async fn plan(
    on: &Proceeding<'_>,
    request: &Canonical,
    target: &mut Target,
    role: Role,
    record: &mut AccessRecord,
) -> Result<Planned, HttpError> {
    let gw = on.here.gw;
    let project = target.project.clone();
    let endpoint = match project.ready_endpoint() {
        Some(e) => e,
        None => {
            // Boxed: waiting for a server to start is rare, and hyper keeps the request's future
            // for an HTTP/1.1 connection's life, sized for its largest branch.
            Box::pin(project.endpoint(gw.limits.spawn_ready_timeout, gw.limits.upstream_connect_timeout)).await?
        }
    };
    judged_again(on, request, target, role, record)?;
    if project.shared_upstream
        && let Some(id) = &target.session
    {
        Box::pin(super::session_scope::check(gw, &project, &endpoint, id)).await?;
    }
    let audit = begin_audit(on, request, target);
    Ok(Planned { endpoint, audit })
}

/// A server whose API document was not known when the request was read has it now (or could
/// not be read): judge the request again with it (a route it added may need more than the
/// table's guess).
fn judged_again(
    on: &Proceeding<'_>,
    request: &Canonical,
    target: &mut Target,
    role: Role,
    record: &mut AccessRecord,
) -> Result<(), HttpError> {
    if !target.upstream_known && target.project.api().is_some() {
        *target = request.resolve_again(on.here.state, target)?;
        let class = super::admit::judged_class(on, target, target.class);
        crate::policy::authz::check_target(role, request.method(), class, target.label(), target.note())?;
        let protected = &on.here.state.settings.protected;
        own_files::check_request(
            protected,
            on.here.client,
            on.principal.name(),
            target,
            request.query_paths(),
        )?;
        record.class = target.class();
    } else if target.unread_default() {
        // Still unread (the server's document could not be read): the conservative class.
        let class = super::admit::judged_class(on, target, target.class);
        crate::policy::authz::check_target(role, request.method(), class, target.label(), target.note())?;
    }
    Ok(())
}

/// The audit record the route asks for, when auditing is on. Decided on the route the request
/// was judged on; nothing allocated for other routes. A session made under a permission policy
/// gets one whether auditing is on or not: its new id, which the policy must answer for, is
/// noted there (`proceed` keeps it; with auditing off the record itself goes nowhere).
fn begin_audit(on: &Proceeding<'_>, request: &Canonical, target: &Target) -> Option<Box<Pending>> {
    let kind = target.route.and_then(|r| r.audit)?;
    let under_policy = kind == AuditKind::SessionCreate && on.principal.asker().policy().is_some();
    if !on.here.gw.audit.enabled() && !under_policy {
        return None;
    }
    Some(Box::new(
        Pending::begin(
            kind,
            on.principal.name(),
            &target.project.name,
            on.here.client,
            &on.who,
            target.session.as_deref(),
            target.label(),
            &target.upstream_path,
            request.content_length,
        )
        .named(on.principal.grant().and_then(|g| g.audit)),
    ))
}
