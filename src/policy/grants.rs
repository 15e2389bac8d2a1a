//! The named acts that are not a client's own request: a grant of the route table's, each narrow
//! (a few of the table's routes, a class, what the audit trail calls it) and held by one kind of
//! principal. Data and one judgement, no I/O: the pipeline judges every request to OpenCode, a
//! user's or the gateway's, through [`class_under`] and `authz::check_target`.
//!
//! - A user's named act (the control room's "Resume") is judged by its grant's class, not its
//!   route's, and only on its route: an approver may send the one fixed continuation to a
//!   session the guard stopped, not write prompts.
//! - The gateway acts only under a grant (its guard stops a session; its control socket answers
//!   the agent): no role, only the routes its grants name.

use super::routes::{Class, POST};
use super::table::ApiRoute;

/// Who may act under a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// A user, with at least the grant's class's role in the project.
    Users,
    /// The gateway's budget and runaway guard.
    Guard,
    /// The control socket: the gateway's own OS user (`front/control.rs`).
    ControlSocket,
}

impl Holder {
    /// The name the gateway's own principals act under (in logs, the audit trail, the inbox).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Holder::Users => "user",
            Holder::Guard => "guard",
            Holder::ControlSocket => "control",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub name: &'static str,
    pub holder: Holder,
    /// The table routes (method, pattern) it covers.
    pub routes: &'static [(&'static str, &'static str)],
    /// The class it is judged by (for users: the least role, `Class::least_role`).
    pub class: Class,
    /// What the request's audit record is called (instead of the route's own event).
    pub audit: Option<&'static str>,
    /// Only for a session the guard stopped (its flag says so).
    pub only_stopped: bool,
    /// The body it sends, whatever the caller asked.
    pub body: Option<&'static str>,
}

/// An approver's word on a session the guard stopped: the one fixed continuation.
pub(crate) static RESUME: Grant = Grant {
    name: "resume",
    holder: Holder::Users,
    routes: &[(POST, "/session/*/prompt_async")],
    class: Class::Respond,
    audit: Some("session_resumed"),
    only_stopped: true,
    body: Some(r#"{"parts":[{"type":"text","text":"continue"}]}"#),
};

/// The guard stopping a session, for the reason its audit record names.
const fn guard_stop(name: &'static str, audit: &'static str) -> Grant {
    Grant {
        name,
        holder: Holder::Guard,
        routes: &[(POST, "/session/*/abort")],
        class: Class::Respond,
        audit: Some(audit),
        only_stopped: false,
        body: None,
    }
}

/// The guard stops a session whose spend grew on a spent budget.
pub(crate) static BUDGET_STOP: Grant = guard_stop("budget_stop", "budget_abort");

/// The guard stops a session that runs away (the same failure again, or silent too long).
pub(crate) static RUNAWAY_STOP: Grant = guard_stop("runaway_stop", "runaway");

/// A permission policy's answer (issue 40): the gateway answers a policy session's permission
/// request itself, once or reject, audited as `policy_answer` with the policy and its rule.
pub(crate) static POLICY_ANSWER: Grant = Grant {
    name: "policy_answer",
    holder: Holder::Guard,
    routes: &[(POST, "/permission/*/reply")],
    class: Class::Respond,
    audit: Some("policy_answer"),
    only_stopped: false,
    body: None,
};

/// The control socket answers the agent's requests and aborts sessions.
pub(crate) static CONTROL_ANSWER: Grant = Grant {
    name: "control_answer",
    holder: Holder::ControlSocket,
    routes: &[
        (POST, "/permission/*/reply"),
        (POST, "/question/*/reply"),
        (POST, "/question/*/reject"),
        (POST, "/session/*/abort"),
    ],
    class: Class::Respond,
    audit: None,
    only_stopped: false,
    body: None,
};

/// Every grant (for the table's tests).
#[cfg(test)]
pub(crate) static GRANTS: [&Grant; 5] = [&RESUME, &BUDGET_STOP, &RUNAWAY_STOP, &POLICY_ANSWER, &CONTROL_ANSWER];

impl Grant {
    fn covers(&self, route: &ApiRoute) -> bool {
        self.routes
            .iter()
            .any(|(m, p)| *m == route.method && *p == route.pattern)
    }
}

/// The class a request made under `grant` is judged by: the grant's on one of its routes;
/// `None` (no role may) on any other route, or for a route the table does not know.
pub(crate) fn class_under(grant: &Grant, route: Option<&ApiRoute>) -> Option<Class> {
    route.filter(|r| grant.covers(r)).map(|_| grant.class)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::authz::{Extra, resolve_with};
    use crate::policy::canonical::CanonicalPath;

    fn route(method: &str, raw: &str) -> Option<&'static ApiRoute> {
        let m = http::Method::from_bytes(method.as_bytes()).unwrap();
        let path = CanonicalPath::parse(raw).unwrap();
        resolve_with(&m, path.segments(), Extra::NONE).route
    }

    #[test]
    fn each_grant_names_routes_of_the_table_and_no_more() {
        for g in GRANTS {
            for (m, p) in g.routes {
                let raw = p.replace('*', "x1");
                let r = route(m, &raw).unwrap_or_else(|| panic!("{} names {m} {p}, not in the table", g.name));
                assert_eq!(class_under(g, Some(r)), Some(g.class), "{}", g.name);
            }
        }
        // Resume is no prompt: another prompt route, a message, a shell, are not under it.
        for (m, raw) in [
            ("POST", "/session/x1/message"),
            ("POST", "/session/x1/command"),
            ("POST", "/session/x1/shell"),
            ("POST", "/session/x1/abort"),
            ("DELETE", "/session/x1"),
        ] {
            assert_eq!(class_under(&RESUME, route(m, raw)), None, "{m} {raw}");
        }
        // The guard only stops; the control socket only answers and stops.
        assert_eq!(
            class_under(&RUNAWAY_STOP, route("POST", "/session/x1/prompt_async")),
            None
        );
        assert_eq!(
            class_under(&CONTROL_ANSWER, route("POST", "/session/x1/prompt_async")),
            None
        );
        assert_eq!(class_under(&CONTROL_ANSWER, route("POST", "/tui/submit-prompt")), None);
        assert_eq!(class_under(&CONTROL_ANSWER, None), None);
        // A policy only answers permission requests: no abort, no prompt, no question.
        for (m, raw) in [
            ("POST", "/session/x1/abort"),
            ("POST", "/session/x1/prompt_async"),
            ("POST", "/question/x1/reply"),
            ("POST", "/session/x1/permissions/x2"),
        ] {
            assert_eq!(class_under(&POLICY_ANSWER, route(m, raw)), None, "{m} {raw}");
        }
    }

    #[test]
    fn resume_is_an_approvers_act_and_sends_only_continue() {
        assert_eq!(RESUME.class.least_role(), crate::config::Role::Approver);
        let body: serde_json::Value = serde_json::from_str(RESUME.body.unwrap()).unwrap();
        assert_eq!(body["parts"][0]["text"], "continue");
        assert!(RESUME.only_stopped);
    }
}
