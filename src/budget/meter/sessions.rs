//! The sessions the meter knows (issue 43, target 6): each one's own cumulative cost, its parent
//! and its prompter, and each root session's total kept as the costs come. A budget check and a
//! cost event then cost the same with 10 000 known sessions as with 10 (both used to walk every
//! session), and a save writes only the sessions that changed.
//!
//! **Forgetting.** Memory is bounded: past [`MAX_SESSIONS`] known sessions, the least recently
//! active trees (a root session and every session under it, forgotten together so a root's
//! total never loses a child that still counts) go until [`KEEP_AFTER_EVICTION`] remain, and at
//! each new day trees idle for [`IDLE_DAYS`] days go. A forgotten session is deleted from the
//! state database at the next save. What that costs: OpenCode reports each session's cumulative
//! cost, so a forgotten session that works again is counted again in full for its session budget
//! (its spend while forgotten counts toward the day's totals as before); its prompter, its "stopped
//! once" and its alerts sent are forgotten (its spend counts toward nobody's user budget until it
//! is prompted through the gateway again).

use std::collections::{HashMap, HashSet};

/// Known sessions, at most (each about 200 bytes with its keys).
pub(super) const MAX_SESSIONS: usize = 20_000;
/// What is left after the least recently active trees went.
pub(super) const KEEP_AFTER_EVICTION: usize = MAX_SESSIONS / 2;
/// A tree idle this many days is forgotten.
pub(super) const IDLE_DAYS: u64 = 30;

/// `(project, session)`.
pub(super) type Key = (String, String);

struct Known {
    own: f64,
    parent: Option<String>,
    prompter: Option<String>,
}

/// A root session's tree: the spend of every session in it, and when it last moved.
#[derive(Default, Clone, Copy)]
struct Tree {
    total: f64,
    /// A counter of events (recency), and the day of the last.
    tick: u64,
    day: u64,
}

#[derive(Default)]
pub(super) struct Sessions {
    known: HashMap<Key, Known>,
    trees: HashMap<Key, Tree>,
    /// Changed since the last save; forgotten since (to delete from the store).
    changed: HashSet<Key>,
    forgotten: Vec<Key>,
    tick: u64,
}

impl Sessions {
    /// The session `session` belongs to, following parents (bounded: a loop ends it).
    pub(super) fn root<'a>(&'a self, project: &str, session: &'a str) -> &'a str {
        let mut at = session;
        for _ in 0..32 {
            match self.known.get(&key(project, at)).and_then(|k| k.parent.as_deref()) {
                Some(p) => at = p,
                None => break,
            }
        }
        at
    }

    /// Does the chain of parents from `from` (itself included) pass `session`?
    fn leads_to(&self, project: &str, from: &str, session: &str) -> bool {
        let mut at = from;
        for _ in 0..32 {
            if at == session {
                return true;
            }
            match self.known.get(&key(project, at)).and_then(|k| k.parent.as_deref()) {
                Some(p) => at = p,
                None => return false,
            }
        }
        true
    }

    /// A root session's spend: its own and every session's under it.
    pub(super) fn total(&self, project: &str, root: &str) -> f64 {
        self.trees.get(&key(project, root)).map_or(0.0, |t| t.total)
    }

    pub(super) fn prompter(&self, project: &str, root: &str) -> Option<&str> {
        self.known.get(&key(project, root)).and_then(|k| k.prompter.as_deref())
    }

    pub(super) fn len(&self) -> usize {
        self.known.len()
    }

    fn known_mut(&mut self, k: &Key) -> &mut Known {
        self.known.entry(k.clone()).or_insert(Known {
            own: 0.0,
            parent: None,
            prompter: None,
        })
    }

    /// `session`'s parent is `parent`: its tree joins the parent's. A link that would make a
    /// loop is not made.
    pub(super) fn set_parent(&mut self, project: &str, session: &str, parent: &str, day: u64) {
        let k = key(project, session);
        if self.known.get(&k).and_then(|s| s.parent.as_deref()) == Some(parent)
            || self.leads_to(project, parent, session)
        {
            return;
        }
        let was_root = self.known.get(&k).is_none_or(|s| s.parent.is_none());
        self.known_mut(&k).parent = Some(parent.to_string());
        self.changed.insert(k.clone());
        if was_root {
            let moved = self.trees.remove(&k).unwrap_or_default();
            let root = self.root(project, parent).to_string();
            let t = self.touch(project, &root, day);
            t.total += moved.total;
        } else {
            // Moved from one parent to another: OpenCode never does this; recount the project.
            self.recount(project);
        }
    }

    /// `session`'s cumulative cost is `now`: the cost known before, if any.
    pub(super) fn set_cost(&mut self, project: &str, session: &str, now: f64, day: u64) -> Option<f64> {
        let k = key(project, session);
        let before = self.known.get(&k).map(|s| s.own);
        self.known_mut(&k).own = now;
        self.changed.insert(k);
        let root = self.root(project, session).to_string();
        self.touch(project, &root, day).total += now - before.unwrap_or(0.0);
        before
    }

    /// `user` prompted root session `root`: the previous prompter.
    pub(super) fn set_prompter(&mut self, project: &str, root: &str, user: &str, day: u64) -> Option<String> {
        let k = key(project, root);
        let before = self.known_mut(&k).prompter.replace(user.to_string());
        if before.as_deref() != Some(user) {
            self.changed.insert(k);
        }
        self.touch(project, root, day);
        before
    }

    /// The tree of `root`, marked as just active.
    fn touch(&mut self, project: &str, root: &str, day: u64) -> &mut Tree {
        self.tick += 1;
        let t = self.trees.entry(key(project, root)).or_default();
        (t.tick, t.day) = (self.tick, day);
        t
    }

    /// Every tree of `project` counted again from its sessions.
    fn recount(&mut self, project: &str) {
        let mut totals: HashMap<Key, f64> = HashMap::new();
        for ((p, s), known) in self.known.iter().filter(|((p, _), _)| p == project) {
            *totals.entry(key(p, self.root(p, s))).or_default() += known.own;
        }
        for (_, t) in self.trees.iter_mut().filter(|((p, _), _)| p == project) {
            t.total = 0.0;
        }
        for (k, total) in totals {
            self.trees.entry(k).or_default().total = total;
        }
    }

    /// Forget what the policy says (module docs): the roots forgotten.
    pub(super) fn forget(&mut self, today: u64) -> Vec<Key> {
        let idle: Vec<Key> = (self.trees.iter())
            .filter(|(_, t)| today.saturating_sub(t.day) >= IDLE_DAYS)
            .map(|(k, _)| k.clone())
            .collect();
        let mut gone: HashSet<Key> = idle.into_iter().collect();
        if self.known.len() > MAX_SESSIONS {
            let mut by_age: Vec<(u64, Key)> = self.trees.iter().map(|(k, t)| (t.tick, k.clone())).collect();
            by_age.sort_unstable();
            let sizes = self.tree_sizes();
            let mut left = self.known.len();
            for (_, root) in by_age {
                if left <= KEEP_AFTER_EVICTION {
                    break;
                }
                left = left.saturating_sub(sizes.get(&root).copied().unwrap_or(0));
                gone.insert(root);
            }
        }
        if gone.is_empty() {
            return Vec::new();
        }
        let members: Vec<Key> = (self.known.keys())
            .filter(|(p, s)| gone.contains(&key(p, self.root(p, s))))
            .cloned()
            .collect();
        for k in members {
            self.known.remove(&k);
            self.changed.remove(&k);
            self.forgotten.push(k);
        }
        self.trees.retain(|k, _| !gone.contains(k));
        // Rebuilt at their size: the memory goes back, and so do the removed entries' marks,
        // which otherwise lengthen every later lookup of a session not known (measured: a cost
        // event 40 µs instead of 1 µs after evictions at 100 000 sessions, `benches/meter.rs`).
        self.known.shrink_to_fit();
        self.trees.shrink_to_fit();
        gone.into_iter().collect()
    }

    fn tree_sizes(&self) -> HashMap<Key, usize> {
        let mut sizes = HashMap::new();
        for (p, s) in self.known.keys() {
            *sizes.entry(key(p, self.root(p, s))).or_default() += 1;
        }
        sizes
    }

    /// What changed since the last call (cost, parent, prompter), and what was forgotten.
    pub(super) fn take_changes(&mut self) -> (Vec<crate::store::SessionCost>, Vec<Key>) {
        let changed = std::mem::take(&mut self.changed);
        let saved = (changed.into_iter())
            .filter_map(|k| {
                let s = self.known.get(&k)?;
                Some(crate::store::SessionCost {
                    parent: s.parent.clone(),
                    prompter: s.prompter.clone(),
                    usd: s.own,
                    project: k.0,
                    session: k.1,
                })
            })
            .collect();
        (saved, std::mem::take(&mut self.forgotten))
    }

    /// What the state database kept, known again as it was (not changed: already saved).
    pub(super) fn restore(&mut self, sessions: Vec<crate::store::SessionCost>, day: u64) {
        let projects: HashSet<String> = sessions.iter().map(|s| s.project.clone()).collect();
        for s in sessions {
            let k = (s.project, s.session);
            self.known.insert(
                k,
                Known {
                    own: s.usd,
                    parent: s.parent,
                    prompter: s.prompter,
                },
            );
        }
        for p in &projects {
            self.recount(p);
        }
        // Restored trees are as recent as the restart: the idle clock starts again.
        for t in self.trees.values_mut() {
            t.day = t.day.max(day);
        }
    }
}

fn key(project: &str, session: &str) -> Key {
    (project.to_string(), session.to_string())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Each root's total as the old meter counted it: every known session, walked.
    fn walked(s: &Sessions, project: &str, root: &str) -> f64 {
        (s.known.iter())
            .filter(|((p, sess), _)| p == project && s.root(p, sess) == root)
            .map(|(_, k)| k.own)
            .sum()
    }

    proptest! {
        /// Whatever the order of costs and links (a child before its parent, a child's child, a
        /// link that would loop, a move to another parent), each root's kept total is the sum
        /// walked over its sessions.
        #[test]
        fn kept_totals_are_the_walked_sums(events in proptest::collection::vec((0u8..8, 0u8..9, 0u32..100), 1..60)) {
            let mut s = Sessions::default();
            for (session, parent, cost) in events {
                let name = format!("s{session}");
                if parent < 8 {
                    s.set_parent("web", &name, &format!("s{parent}"), 1);
                } else {
                    s.set_cost("web", &name, f64::from(cost), 1);
                }
            }
            for n in 0..8 {
                let root = format!("s{n}");
                let r = s.root("web", &root).to_string();
                prop_assert!((s.total("web", &r) - walked(&s, "web", &r)).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn past_the_bound_the_least_recently_active_trees_go_whole() {
        let mut s = Sessions::default();
        // The oldest tree: a root and its child; then many single sessions; the first tree's
        // child stays as recent as its root's last event.
        s.set_cost("web", "old", 1.0, 1);
        s.set_parent("web", "old-child", "old", 1);
        s.set_cost("web", "old-child", 2.0, 1);
        s.set_cost("web", "kept", 1.0, 1);
        for n in 0..MAX_SESSIONS {
            s.set_cost("web", &format!("s{n}"), 0.5, 1);
        }
        s.set_cost("web", "kept", 1.5, 1);
        s.take_changes();
        assert!(s.len() > MAX_SESSIONS);
        let gone = s.forget(1);
        assert!(s.len() <= KEEP_AFTER_EVICTION, "{}", s.len());
        assert!(gone.contains(&key("web", "old")));
        assert_eq!(s.total("web", "old"), 0.0);
        assert!(
            !s.known.contains_key(&key("web", "old-child")),
            "the child goes with its root"
        );
        assert_eq!(s.total("web", "kept"), 1.5, "an active tree stays");
        let (_, forgotten) = s.take_changes();
        assert!(forgotten.contains(&key("web", "old")) && forgotten.contains(&key("web", "old-child")));
        assert_eq!(forgotten.len(), MAX_SESSIONS + 3 - s.len());
    }

    #[test]
    fn idle_trees_go_after_their_days_and_a_restore_starts_the_clock_again() {
        let mut s = Sessions::default();
        s.set_cost("web", "idle", 1.0, 100);
        s.set_cost("web", "busy", 1.0, 100);
        s.set_cost("web", "busy", 2.0, 100 + IDLE_DAYS);
        assert!(s.forget(100 + IDLE_DAYS - 1).is_empty());
        assert_eq!(s.forget(100 + IDLE_DAYS), vec![key("web", "idle")]);
        assert_eq!(s.total("web", "busy"), 2.0);
        let mut again = Sessions::default();
        let saved = crate::store::SessionCost {
            project: "web".into(),
            session: "old".into(),
            parent: None,
            prompter: Some("ann".into()),
            usd: 3.0,
        };
        again.restore(vec![saved], 500);
        assert!(again.forget(500).is_empty(), "restored today");
        assert_eq!(
            (again.total("web", "old"), again.prompter("web", "old")),
            (3.0, Some("ann"))
        );
        assert!(
            again.take_changes().0.is_empty(),
            "what was restored is not saved again"
        );
    }
}
