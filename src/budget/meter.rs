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
    /// The growth was copied from another session (a fork's messages), not spent: it counts
    /// toward this session's own budget and nobody's day.
    pub inherited: bool,
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

/// A budget's config key in words a person reads ("this session's budget"), for pages and
/// alerts: a phone shows these, not `budget.session_usd`.
pub(crate) fn words(key: &str) -> &'static str {
    match key {
        "session_usd" => "this session's budget",
        "project_day_usd" => "the project's budget for today",
        _ => "the user's budget for today",
    }
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Said to the one whose prompt is refused: their own budget is "yours".
        let what = match self.budget {
            "user_day_usd" => "your budget for today",
            key => words(key),
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

/// Where a session's spend stands (see [`Meter::standing`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Standing {
    /// The session its spend counts toward (itself, or the parent of its subagent).
    pub root: String,
    pub session: f64,
    pub project_day: f64,
    /// Who prompted the root session through the gateway, and what they spent today.
    pub user: Option<(String, f64)>,
}

#[derive(Default)]
struct State {
    /// Days since the epoch of the day the day totals are for.
    day: u64,
    project_day: HashMap<String, f64>,
    user_day: HashMap<String, f64>,
    /// Each session's own cumulative cost, its parent and (for a root session) who last
    /// prompted it through the gateway (its spend is theirs); each root's total. Bounded.
    sessions: sessions::Sessions,
    /// Spend seen since the gateway started, by project (for `/metrics`).
    project_total: HashMap<String, f64>,
    /// Root sessions already stopped for their budget (stopped once).
    stopped: std::collections::HashSet<(String, String)>,
    /// Alerts sent: a limit's key (`session web ses_1`, `project web`, `user ann`) and level,
    /// with the day for a day's limit (sent once each).
    told: std::collections::HashSet<(String, &'static str)>,
    /// What operators added to a limit from the portal, by the limit's key (a day's for that
    /// day): the limit is the configured one plus this.
    raised: HashMap<String, f64>,
    /// What each project (`kind` project) and user (`user`) spent on the earlier days of the
    /// month of `day`: the month so far is this and today's.
    month_before: HashMap<(&'static str, String), f64>,
    /// Something changed since the last save.
    dirty: bool,
    /// Running turns and the limits near their end they hold.
    turns: turns::Turns,
}

/// Limits raised at once, at most (sessions' and today's).
const MAX_RAISED: usize = 10_000;

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

/// The first day of the month `day` is in.
pub(crate) fn month_start(day: u64) -> u64 {
    let (_, _, d) = civil(day);
    day - (d as u64 - 1)
}

/// `YYYY-MM-DD` of a day since the epoch.
fn date(day: u64) -> String {
    let (y, m, d) = civil(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Year, month, day of a day since the epoch.
fn civil(day: u64) -> (i64, i64, i64) {
    let date = i64::try_from(day)
        .ok()
        .and_then(|d| time::OffsetDateTime::from_unix_timestamp(d.checked_mul(86_400)?).ok())
        .map_or(time::Date::MAX, |t| t.date());
    (
        i64::from(date.year()),
        i64::from(u8::from(date.month())),
        i64::from(date.day()),
    )
}

/// A session's limit's key (its root session's).
pub(crate) fn session_key(project: &str, root: &str) -> String {
    format!("session {project} {root}")
}

/// A project's daily limit's key.
pub(crate) fn project_key(project: &str) -> String {
    format!("project {project}")
}

/// A user's daily limit's key.
pub(crate) fn user_key(user: &str) -> String {
    format!("user {user}")
}

impl State {
    /// What was added to the limit of `key` (made only when anything was raised: a prompt's check
    /// allocates nothing otherwise).
    /// `key`'s limit was raised: the sessions stopped for it may run again, and be alerted of.
    fn raised_anew(&mut self, project: &str, key: &str) {
        self.stopped
            .retain(|(p, root)| p != project || (key.starts_with("session ") && session_key(p, root) != key));
        self.told.retain(|(k, _)| k != key);
    }

    fn raised(&self, key: impl FnOnce() -> String) -> f64 {
        if self.raised.is_empty() {
            return 0.0;
        }
        self.raised.get(&key()).copied().unwrap_or(0.0)
    }

    fn roll(&mut self, day: u64) {
        if self.day != day {
            if month_start(day) == month_start(self.day) {
                for (name, usd) in self.project_day.drain() {
                    *self.month_before.entry(("project", name)).or_default() += usd;
                }
                for (name, usd) in self.user_day.drain() {
                    *self.month_before.entry(("user", name)).or_default() += usd;
                }
            } else {
                self.month_before.clear();
            }
            self.day = day;
            self.project_day.clear();
            self.user_day.clear();
            // A day's alerts and raises are that day's; a session's stay.
            self.told.retain(|(key, _)| key.starts_with("session "));
            self.raised.retain(|key, _| key.starts_with("session "));
            self.forget();
        }
    }

    /// Let the sessions' bound and idle policy forget trees (`sessions.rs`), and what was
    /// remembered of them here.
    fn forget(&mut self) {
        let gone = self.sessions.forget(self.day);
        if gone.is_empty() {
            return;
        }
        self.dirty = true;
        let gone: std::collections::HashSet<(String, String)> = gone.into_iter().collect();
        self.stopped.retain(|k| !gone.contains(k));
        self.told.retain(|(k, _)| {
            let mut words = k.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("session"), Some(p), Some(root)) => !gone.contains(&(p.to_string(), root.to_string())),
                _ => true,
            }
        });
    }

    fn root<'a>(&'a self, project: &str, session: &'a str) -> &'a str {
        self.sessions.root(project, session)
    }

    fn session_total(&self, project: &str, root: &str) -> f64 {
        self.sessions.total(project, root)
    }
}

impl Meter {
    /// A session's cumulative cost as reported. An increase over what was known is today's
    /// spend, the project's and the root session's prompter's.
    pub(crate) fn seen(&self, c: &CostSeen, day: u64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        let day = st.day;
        if let Some(parent) = &c.parent {
            st.sessions.set_parent(&c.project, &c.session, parent, day);
        }
        let known = st.sessions.set_cost(&c.project, &c.session, c.now, day);
        st.dirty = true;
        if st.sessions.len() > sessions::MAX_SESSIONS {
            st.forget();
        }
        if c.inherited {
            return;
        }
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
        if let Some(user) = st.sessions.prompter(&c.project, &root).map(str::to_string) {
            *st.user_day.entry(user).or_default() += delta;
        }
        // OpenCode reports a turn's cost after the session's idle event: its size is learned here.
        let total = st.session_total(&c.project, &root);
        st.turns.cost_after_end(&c.project, &c.session, total);
    }

    /// `user` prompted `session` through the gateway: its spend from now on is theirs.
    pub(crate) fn prompted(&self, project: &str, session: &str, user: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let root = st.root(project, session).to_string();
        let day = st.day;
        let before = st.sessions.set_prompter(project, &root, user, day);
        st.dirty |= before.as_deref() != Some(user);
        if st.sessions.len() > sessions::MAX_SESSIONS {
            st.forget();
        }
    }

    /// What the state database kept: `day`'s totals (`kind` project, user, or `raised`: an
    /// operator's raise of the limit named), the sessions' last-seen costs, and the earlier days
    /// of the month.
    pub(crate) fn restore(
        &self,
        day: u64,
        totals: Vec<(String, String, f64)>,
        sessions: Vec<crate::store::SessionCost>,
        earlier_this_month: Vec<(String, String, f64)>,
    ) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        for (kind, name, usd) in earlier_this_month {
            let kind = match kind.as_str() {
                "project" => "project",
                "user" => "user",
                _ => continue,
            };
            st.month_before.insert((kind, name), usd);
        }
        for (kind, name, usd) in totals {
            match kind.as_str() {
                "project" => st.project_day.insert(name, usd),
                "user" => st.user_day.insert(name, usd),
                "raised" => st.raised.insert(name, usd),
                _ => None,
            };
        }
        st.sessions.restore(sessions, day);
        st.forget();
    }

    /// What to save, when something changed since the last call: the day, its totals (`kind`
    /// project, user, or `raised`: operators' raises by limit key), the sessions that changed
    /// and the sessions forgotten (to delete).
    pub(crate) fn to_save(&self) -> Option<SpendToSave> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !std::mem::take(&mut st.dirty) {
            return None;
        }
        let totals = (st.project_day.iter().map(|(n, v)| ("project", n, v)))
            .chain(st.user_day.iter().map(|(n, v)| ("user", n, v)))
            .chain(st.raised.iter().map(|(n, v)| ("raised", n, v)))
            .map(|(k, n, v)| (k.to_string(), n.clone(), *v))
            .collect();
        let (sessions, forgotten) = st.sessions.take_changes();
        Some(SpendToSave {
            day: st.day,
            totals,
            sessions,
            forgotten,
        })
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
        let plus = |limit: Option<f64>, raised: f64| limit.map(|l| l + raised);
        if let Some(session) = session {
            let root = st.root(project, session).to_string();
            let raised = st.raised(|| session_key(project, &root));
            over(
                "session_usd",
                st.session_total(project, &root),
                plus(budget.session_usd, raised),
                None,
            )?;
        }
        let project_day = st.project_day.get(project).copied().unwrap_or(0.0);
        let raised = st.raised(|| project_key(project));
        over(
            "project_day_usd",
            project_day,
            plus(budget.project_day_usd, raised),
            Some(day + 1),
        )?;
        let user_day = st.user_day.get(user).copied().unwrap_or(0.0);
        let raised = st.raised(|| user_key(user));
        over("user_day_usd", user_day, plus(user_day_usd, raised), Some(day + 1))
    }

    /// What operators added to the limit of `key` (today's, for a day's limit).
    pub(crate) fn raised(&self, key: &str, day: u64) -> f64 {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        st.raised(|| key.to_string())
    }

    /// An operator adds `usd` to the limit of `key`, or (`None`) resets it: the spend so far no
    /// longer counts against it. Its sessions may be stopped and alerted of again.
    /// The limit's raise in all, or `None` when [`MAX_RAISED`] limits are raised already.
    pub(crate) fn raise(&self, project: &str, key: &str, usd: Option<f64>, day: u64) -> Option<f64> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        let add = match usd {
            Some(usd) => usd,
            None => {
                let spent = match key.strip_prefix(&format!("session {project} ")) {
                    Some(root) => st.session_total(project, root),
                    None => st.project_day.get(project).copied().unwrap_or(0.0),
                };
                (spent - st.raised(|| key.to_string())).max(0.0)
            }
        };
        // Bounded: an operator's form may name any session id.
        if st.raised.len() >= MAX_RAISED && !st.raised.contains_key(key) {
            return None;
        }
        *st.raised.entry(key.to_string()).or_default() += add;
        st.dirty = true;
        st.raised_anew(project, key);
        Some(st.raised(|| key.to_string()))
    }

    /// Raises another gateway on the shared store made (`day`'s rows of kind `raised`, and the
    /// sessions'): a limit's raise only grows within its day, so the larger figure is the newer,
    /// and a raise that grew here frees its sessions as [`raise`](Self::raise) does.
    pub(crate) fn merge_raised(&self, day: u64, raised: Vec<(String, f64)>) -> usize {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        let mut grew = 0;
        for (key, usd) in raised {
            let here = st.raised.get(&key).copied().unwrap_or(0.0);
            if usd <= here || (st.raised.len() >= MAX_RAISED && !st.raised.contains_key(&key)) {
                continue;
            }
            st.raised.insert(key.clone(), usd);
            // "project <p>" or "session <p> <root>": the project is the second word.
            if let Some(project) = key.split(' ').nth(1).map(str::to_string) {
                st.raised_anew(&project, &key);
            }
            grew += 1;
        }
        grew
    }

    /// What a project (`kind` project) or a user (`user`) spent on `day` and in its month so far.
    pub(crate) fn spend_of(&self, kind: &'static str, name: &str, day: u64) -> (f64, f64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        let today = match kind {
            "project" => st.project_day.get(name),
            _ => st.user_day.get(name),
        }
        .copied()
        .unwrap_or(0.0);
        let before = st.month_before.get(&(kind, name.to_string())).copied().unwrap_or(0.0);
        (today, before + today)
    }

    /// Spend seen since the gateway started, by project.
    pub(crate) fn project_totals(&self) -> Vec<(String, f64)> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.project_total.iter().map(|(p, v)| (p.clone(), *v)).collect()
    }

    /// Where the spend of `session` stands: its root session's total, its project's today and
    /// the prompter of its root session's today.
    pub(crate) fn standing(&self, project: &str, session: &str, day: u64) -> Standing {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.roll(day);
        let root = st.root(project, session).to_string();
        let user = st.sessions.prompter(project, &root).map(str::to_string);
        Standing {
            session: st.session_total(project, &root),
            project_day: st.project_day.get(project).copied().unwrap_or(0.0),
            user: user.map(|u| {
                let spent = st.user_day.get(&u).copied().unwrap_or(0.0);
                (u, spent)
            }),
            root,
        }
    }

    /// True the first time for `key` at `level` (today, for a day's limit): alert once.
    pub(crate) fn tell_once(&self, key: String, level: &'static str) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.told.insert((key, level))
    }

    /// True the first time for a root session: it is stopped for its budget once (a new prompt
    /// on it is refused anyway).
    pub(crate) fn stop_once(&self, project: &str, root: &str) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.stopped.insert((project.to_string(), root.to_string()))
    }

    /// A session's spend, its subagents' included.
    pub(crate) fn session_spend(&self, project: &str, session: &str) -> f64 {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let root = st.root(project, session).to_string();
        st.session_total(project, &root)
    }
}

/// What [`Meter::to_save`] gives the store.
pub(crate) struct SpendToSave {
    pub day: u64,
    /// `(kind, name, usd)`: project, user, or `raised`.
    pub totals: Vec<(String, String, f64)>,
    /// The sessions that changed since the last save.
    pub sessions: Vec<crate::store::SessionCost>,
    /// `(project, session)` of the sessions forgotten since.
    pub forgotten: Vec<(String, String)>,
}

#[doc(hidden)]
pub mod bench;
mod sessions;
#[cfg(test)]
mod tests;
mod turns;

pub(crate) use turns::{Prompt, Ticket};
