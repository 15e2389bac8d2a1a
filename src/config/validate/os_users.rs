//! Who a spawned project runs as (hostile round five, item 2). A project's terminals, its agent's
//! shell and its file API act as the OS user its OpenCode server runs as. When that is the
//! gateway's own user, they can read what that user owns (the users file, the state database,
//! the CA and server keys) and talk to the control socket, which trusts its peer by uid: an
//! operator of one project read the CA key, minted a token for another user and added an admin.
//! So with more than one user, a spawned project on this machine must run as a user of its own
//! (`run_as`), unless the config says plainly that every user may act as the gateway's OS user
//! (`[server] allow_projects_as_gateway_user`). One person's desk may run them as itself; `check`
//! says what that means.

use super::Checker;
use crate::config::settings::{Project, ProjectSet, UpstreamKind, User};

/// The OS user this process runs as: its name (when the system knows it) and uid.
pub(crate) fn gateway_os_user() -> (Option<String>, u32) {
    // SAFETY: geteuid has no preconditions; getpwuid returns static storage or NULL, copied at once.
    let uid = unsafe { libc::geteuid() };
    let pw = unsafe { libc::getpwuid(uid) };
    let name = (!pw.is_null()).then(|| {
        // SAFETY: pw is non-null and points to a valid passwd record.
        unsafe { std::ffi::CStr::from_ptr((*pw).pw_name) }
            .to_string_lossy()
            .into_owned()
    });
    (name, uid)
}

/// Whether a local spawned project runs as the gateway's own OS user (no `run_as`, or one naming
/// it); `None` for a project that runs elsewhere (an external server, a box's).
pub(crate) fn runs_as_gateway(p: &Project, gateway: &(Option<String>, u32)) -> Option<bool> {
    if p.upstream != UpstreamKind::Spawned || p.on_box.is_some() {
        return None;
    }
    Some(match &p.run_as {
        None => true,
        Some(user) => gateway.0.as_deref() == Some(user.as_str()) || user == "root" && gateway.1 == 0,
    })
}

pub(super) fn separate(c: &mut Checker<'_>, projects: &[Project], sets: &[ProjectSet], users: &[User], allow: bool) {
    if users.len() < 2 || allow {
        return;
    }
    let gateway = gateway_os_user();
    let who = match &gateway.0 {
        Some(name) => format!("{name}, uid {}", gateway.1),
        None => format!("uid {}", gateway.1),
    };
    let all = projects
        .iter()
        .map(|p| (p, "project"))
        .chain(sets.iter().map(|s| (&s.template, "project set")));
    for (p, kind) in all {
        if runs_as_gateway(p, &gateway) != Some(true) {
            continue;
        }
        c.problem(
            format!("{kind} {}.run_as", p.name),
            format!(
                "it would run as the gateway's own OS user ({who}), which owns the gateway's keys, users file and state database and which the control socket trusts; with {} users, any of them could read those through its terminals or its agent",
                users.len()
            ),
            "give it run_as = \"<an OS user of its own>\" (the gateway then runs as root: docs/package.md), or, if every user may act as the gateway's OS user, set [server] allow_projects_as_gateway_user = true",
        );
    }
}
