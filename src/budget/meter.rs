//! The meter: spend per session (a session with its subagents' sessions), per project and per
//! user, per UTC day. Fed by [`Meter::seen`] with each session's cumulative cost as OpenCode
//! reports it; what a session had spent when the gateway first saw it counts toward its own
//! budget, not toward today's (it may be from any day).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::config::settings::Budget;

/// A session's cumulative cost, as a server reported it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CostSeen {
    pub project: String,
    pub session: String,
    /// The session that started it (a subagent's), if any.
    pub parent: Option<String>,
    /// What the gateway knew it had spent before (`None`: first seen now).
    pub before: Option<f64>,
    pub now: f64,
}

/// A budget a prompt may not start work on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exhausted {
    /// The config key (`session_usd`, `project_day_usd`, `user_day_usd`).
    pub budget: &'static str,
    pub spent: f64,
    pub limit: f64,
    /// Days since the epoch at which it resets (`None`: a session's budget never does).
    pub resets_day: Option<u64>,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.budget {
            "session_usd" => "this session's budget",
            "project_day_usd" => "the project's budget for today",
            _ => "your budget for today",
        };
        write!(
            f,
            "{what} is spent (budget.{}: ${:.4} of ${:.2}); ",
            self.budget, self.spent, self.limit
        )?;
        match self.resets_day {
            Some(day) => write!(f, "it resets at {} 00:00 UTC", date(day)),
            None => write!(f, "start a new session, or ask an operator to raise it"),
        }
    }
}

#[derive(Default)]
struct State {
    /// Days since the epoch of the day the day totals are for.
    day: u64,
    project_day: HashMap<String, f64>,
    user_day: HashMap<String, f64>,
    /// Each session's own cumulative cost, by project and session.
    own: HashMap<(String, String), f64>,
    /// Each session's parent, when it has one.
    parent: HashMap<(String, String), String>,
    /// Who last prompted each root session through the gateway: its spend is theirs.
    prompter: HashMap<(String, String), String>,
    /// Spend seen since the gateway started, by project (for `/metrics`).
    project_total: HashMap<String, f64>,
    /// Root sessions already stopped for their budget (stopped once).
    stopped: std::collections::HashSet<(String, String)>,
    /// Something changed since the last save.
    dirty: bool,
}

#[derive(Default)]
pub(crate) struct Meter {
    state: Mutex<State>,
}

/// Days since the Unix epoch, UTC.
pub(crate) fn today() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

/// `YYYY-MM-DD` of a day since the epoch (civil from days, H. Hinnant's algorithm).
fn date(day: u64) -> String {
    let z = day as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

impl State {
    fn roll(&mut self, day: u64) {
        if self.day != day {
            self.day = day;
            self.project_day.clear();
            self.user_day.clear();
        }
    }

    /// The session a (sub)session belongs to, following parents (bounded: a loop ends it).
    fn root<'a>(&'a self, project: &str, session: &'a str) -> &'a str {
        let mut at = session;
        for _ in 0..32 {
            match self.parent.get(&(project.to_string(), at.to_string())) {
                Some(p) => at = p,
                None => break,
            }
        }
        at
    }

    /// A root session's spend: its own and every session under it.
    fn session_total(&self, project: &str, root: &str) -> f64 {
        self.own
            .iter()
            .filter(|((p, s), _)| p == project && self.root(p, s) == root)
            .map(|(_, c)| c)
            .sum()
    }
}

impl Meter {
    /// A session's cumulative cost as reported. An increase over what was known is today's
    /// spend, the project's and the root session's prompter's.
    pub(crate) fn seen(&self, c: &CostSeen, day: u64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        let key = (c.project.clone(), c.session.clone());
        if let Some(parent) = &c.parent {
            st.parent.insert(key.clone(), parent.clone());
        }
        let known = st.own.insert(key, c.now);
        st.dirty = true;
        let delta = match c.before.or(known) {
            Some(before) => c.now - before,
            None => 0.0,
        };
        if delta <= 0.0 {
            return;
        }
        *st.project_day.entry(c.project.clone()).or_default() += delta;
        *st.project_total.entry(c.project.clone()).or_default() += delta;
        let root = st.root(&c.project, &c.session).to_string();
        if let Some(user) = st.prompter.get(&(c.project.clone(), root)).cloned() {
            *st.user_day.entry(user).or_default() += delta;
        }
    }

    /// `user` prompted `session` through the gateway: its spend from now on is theirs.
    pub(crate) fn prompted(&self, project: &str, session: &str, user: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let root = st.root(project, session).to_string();
        let before = st.prompter.insert((project.to_string(), root), user.to_string());
        st.dirty |= before.as_deref() != Some(user);
    }

    /// What the state database kept: `day`'s totals and the sessions' last-seen costs.
    pub(crate) fn restore(
        &self,
        day: u64,
        totals: Vec<(String, String, f64)>,
        sessions: Vec<crate::store::SessionCost>,
    ) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        for (kind, name, usd) in totals {
            match kind.as_str() {
                "project" => st.project_day.insert(name, usd),
                _ => st.user_day.insert(name, usd),
            };
        }
        for s in sessions {
            let key = (s.project, s.session);
            if let Some(parent) = s.parent {
                st.parent.insert(key.clone(), parent);
            }
            if let Some(user) = s.prompter {
                st.prompter.insert(key.clone(), user);
            }
            st.own.insert(key, s.usd);
        }
    }

    /// What to save, when something changed since the last call: the day, its totals (`kind`
    /// project or user) and every session's cost.
    #[allow(clippy::type_complexity)]
    pub(crate) fn to_save(&self) -> Option<(u64, Vec<(String, String, f64)>, Vec<crate::store::SessionCost>)> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !std::mem::take(&mut st.dirty) {
            return None;
        }
        let totals = (st.project_day.iter().map(|(n, v)| ("project", n, v)))
            .chain(st.user_day.iter().map(|(n, v)| ("user", n, v)))
            .map(|(k, n, v)| (k.to_string(), n.clone(), *v))
            .collect();
        let sessions = st
            .own
            .iter()
            .map(|((project, session), usd)| crate::store::SessionCost {
                project: project.clone(),
                session: session.clone(),
                parent: st.parent.get(&(project.clone(), session.clone())).cloned(),
                prompter: st.prompter.get(&(project.clone(), session.clone())).cloned(),
                usd: *usd,
            })
            .collect();
        Some((st.day, totals, sessions))
    }

    /// May `user` start work in `session` of `project`? The first spent budget, if any.
    pub(crate) fn check(
        &self,
        budget: &Budget,
        user_day_usd: Option<f64>,
        project: &str,
        user: &str,
        session: Option<&str>,
        day: u64,
    ) -> Result<(), Exhausted> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        let over = |budget: &'static str, spent: f64, limit: Option<f64>, resets_day| match limit {
            Some(limit) if spent >= limit => Err(Exhausted {
                budget,
                spent,
                limit,
                resets_day,
            }),
            _ => Ok(()),
        };
        if let Some(session) = session {
            let root = st.root(project, session).to_string();
            over(
                "session_usd",
                st.session_total(project, &root),
                budget.session_usd,
                None,
            )?;
        }
        let project_day = st.project_day.get(project).copied().unwrap_or(0.0);
        over("project_day_usd", project_day, budget.project_day_usd, Some(day + 1))?;
        let user_day = st.user_day.get(user).copied().unwrap_or(0.0);
        over("user_day_usd", user_day, user_day_usd, Some(day + 1))
    }

    /// What `project` spent on `day` (UTC), as far as the meter saw.
    pub(crate) fn project_day(&self, project: &str, day: u64) -> f64 {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        st.project_day.get(project).copied().unwrap_or(0.0)
    }

    /// Spend seen since the gateway started, by project.
    pub(crate) fn project_totals(&self) -> Vec<(String, f64)> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.project_total.iter().map(|(p, v)| (p.clone(), *v)).collect()
    }

    /// The root session of `session` and its spend, the first time that spend reaches `limit`
    /// (a session is stopped once for its budget; a new prompt on it is refused anyway).
    pub(crate) fn over_session(&self, project: &str, session: &str, limit: f64) -> Option<(String, f64)> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let root = st.root(project, session).to_string();
        let spent = st.session_total(project, &root);
        (spent >= limit && st.stopped.insert((project.to_string(), root.clone()))).then_some((root, spent))
    }

    /// A session's spend, its subagents' included.
    #[cfg(test)]
    pub(crate) fn session_spend(&self, project: &str, session: &str) -> f64 {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let root = st.root(project, session).to_string();
        st.session_total(project, &root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(m: &Meter, session: &str, parent: Option<&str>, before: Option<f64>, now: f64, day: u64) {
        m.seen(
            &CostSeen {
                project: "web".into(),
                session: session.into(),
                parent: parent.map(String::from),
                before,
                now,
            },
            day,
        );
    }

    fn budget(session: Option<f64>, day: Option<f64>) -> Budget {
        Budget {
            session_usd: session,
            project_day_usd: day,
            ..Default::default()
        }
    }

    /// What a session spent before the gateway saw it counts toward the session, not today; a
    /// subagent's spend counts toward its parent's session; the first spent budget is named.
    #[test]
    fn sessions_subagents_projects_and_users_are_metered() {
        let m = Meter::default();
        seen(&m, "s1", None, None, 3.0, 10);
        m.prompted("web", "s1", "ann");
        let b = budget(Some(5.0), Some(1.5));
        assert_eq!(m.check(&b, Some(1.0), "web", "ann", Some("s1"), 10), Ok(()));
        seen(&m, "s1", None, Some(3.0), 3.5, 10);
        seen(&m, "sub", Some("s1"), None, 0.0, 10);
        seen(&m, "sub", Some("s1"), Some(0.0), 1.0, 10);
        assert_eq!(m.session_spend("web", "s1"), 4.5);
        assert_eq!(
            m.session_spend("web", "sub"),
            4.5,
            "a subagent's session is its parent's"
        );
        let e = m.check(&b, Some(10.0), "web", "ann", Some("s1"), 10).unwrap_err();
        assert_eq!((e.budget, e.limit), ("project_day_usd", 1.5));
        assert!((e.spent - 1.5).abs() < 1e-9, "{e:?}");
        assert_eq!(e.resets_day, Some(11));
        let e = m
            .check(&budget(None, None), Some(1.0), "web", "ann", None, 10)
            .unwrap_err();
        assert_eq!(e.budget, "user_day_usd");
        assert_eq!(m.check(&budget(None, None), Some(1.0), "web", "bob", None, 10), Ok(()));
        // A new UTC day: the day totals start again, the session's does not.
        assert_eq!(
            m.check(&budget(None, Some(2.0)), Some(1.0), "web", "ann", None, 11),
            Ok(())
        );
        let e = m
            .check(&budget(Some(4.0), None), None, "web", "ann", Some("sub"), 11)
            .unwrap_err();
        assert_eq!((e.budget, e.resets_day), ("session_usd", None));
        assert!(e.to_string().contains("budget.session_usd: $4.5000 of $4.00"), "{e}");
    }

    #[test]
    fn days_are_dates() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(20_789), "2026-12-02");
        assert_eq!(date(11_016), "2000-02-29");
    }
}
