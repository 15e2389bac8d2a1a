//! The fleet's caps on the road (issue 41, item 5): a user's prompt to a session (a route that
//! asks the model) goes on only while the user and the project are under `[fleet]`'s busy caps.
//! Past one it waits, its session saying why on the board, until a session goes idle (the
//! inbox's change counter wakes it) or `queue_wait` passes; with `over_cap = "refuse"` it is
//! refused at once, 429 with the reason. Nothing of the request is read or sent while it waits.
//! The gateway's own acts are not capped (a guard's stop must never queue).

use std::time::Duration;

use super::request::Target;
use super::{Principal, Proceeding};
use crate::http::error::HttpError;

/// How often a waiting prompt looks again without a change (a session another gateway made
/// idle, a grace that ran out).
const LOOK_AGAIN: Duration = Duration::from_secs(2);

/// Take the session off the board's queue however the wait ends (a client that hangs up too).
struct Waiting<'a> {
    inbox: &'a crate::inbox::Inbox,
    project: &'a str,
    session: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.inbox.fleet_queued(self.project, self.session, None);
    }
}

/// Wait for room for this prompt, or refuse it; then it counts as the user's busy session.
pub(super) async fn wait_for_room(on: &Proceeding<'_>, target: &Target) -> Result<(), HttpError> {
    let Principal::User { user, .. } = on.principal else {
        return Ok(());
    };
    let (Some(session), true) = (target.session.as_deref(), target.route.is_some_and(|r| r.asks_model)) else {
        return Ok(());
    };
    let (inbox, project) = (&on.here.gw.inbox, &*target.project.name);
    let caps = &on.here.state.settings.fleet;
    if caps.max_busy_per_user.is_some() || caps.max_busy_per_project.is_some() {
        let deadline = tokio::time::Instant::now() + caps.queue_wait;
        let mut changes = inbox.changes();
        let mut waiting = None;
        while let Err(why) = inbox.fleet_room(caps, &user.name, project, session) {
            if !caps.queue || tokio::time::Instant::now() >= deadline {
                let waited = if caps.queue { " (waited the queue's time)" } else { "" };
                tracing::info!(project, user = %user.name, why, "a prompt past the fleet's caps refused");
                return Err(HttpError::OverFleetCap(format!("project {project}: {why}{waited}")));
            }
            if waiting.is_none() {
                tracing::info!(project, user = %user.name, session, why, "a prompt waits for room in the fleet's caps");
                // Made once: dropping it (the wait's end, or the client gone) clears the card.
                waiting = Some(Waiting {
                    inbox,
                    project,
                    session,
                });
            }
            inbox.fleet_queued(project, session, Some(&why));
            let wake = tokio::time::timeout(LOOK_AGAIN, changes.changed());
            let _ = tokio::time::timeout_at(deadline, wake).await;
        }
    }
    inbox.fleet_admitted(&user.name, project, session);
    Ok(())
}
