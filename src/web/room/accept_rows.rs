//! A project's acceptance test on the portal (issue 41, item 3): the command, how its last run
//! went (running, passed, failed with why) and when, and its output's tail, folded.

use super::rows::ago;

pub(crate) struct AcceptRow {
    pub command: String,
    /// `running`, `passed` or `failed`.
    pub state: &'static str,
    /// The badge's class and words.
    pub class: &'static str,
    pub says: String,
    pub ago: String,
    pub since_ms: u64,
    pub tail: String,
}

/// Fill each project row of `room` with its last acceptance test (the portal only).
pub(super) fn add(gw: &crate::gateway::Gateway, room: &mut super::Room) {
    let now = crate::inbox::now_ms();
    for p in &mut room.projects {
        p.accept = row(gw, &p.name, now);
    }
}

/// Project `name`'s last acceptance test, if one ran.
fn row(gw: &crate::gateway::Gateway, name: &str, now: u64) -> Option<AcceptRow> {
    let o = gw.lifecycle.acceptance.of(name)?;
    let (state, class, says) = match &o.result {
        None => ("running", "busy", "test running".to_string()),
        Some(Ok(())) => ("passed", "running", "test passed: ready for review".to_string()),
        Some(Err(why)) => ("failed", "failed", format!("test failed ({why})")),
    };
    Some(AcceptRow {
        state,
        command: o.command,
        class,
        says,
        ago: ago(o.at_ms, now),
        since_ms: o.at_ms,
        tail: o.tail,
    })
}
