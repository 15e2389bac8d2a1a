//! A permission policy's judgement of one OpenCode permission request (issue 40). Pure.
//!
//! What OpenCode 1.18.33 sends (`permission.asked`, the same object as `GET /permission`;
//! docs/permission-policies.md): a `permission` name (`bash`, `edit`, `read`,
//! `external_directory`, `task`, …) and `patterns`, one or more strings. A bash command is split by
//! OpenCode into one pattern per simple command (`npm test && ls /etc | head -1` →
//! `["npm test", "ls /etc", "head -1"]`); an edit's pattern is the file's path relative to the
//! worktree (`src/a.txt`); `external_directory`'s the folder with `/*` (`/etc/*`).
//!
//! The rule: **a deny wins, and every pattern must be allowed.** A request is denied when any
//! of its patterns matches a deny rule (of its permission), whatever the allow rules say and
//! in whatever order they are written; it is allowed only when every pattern matches an allow
//! rule; anything else (a pattern no rule speaks for, or no pattern at all) gets the policy's
//! `otherwise`. So adding an allow rule can only turn "otherwise" into "allow", adding a deny
//! rule can only take an answer away, and a compound command cannot smuggle a denied part in
//! behind an allowed one. OpenCode's own configuration lets the last matching rule win; a
//! gateway policy is a boundary, so the order of its lines does not matter.
//!
//! Patterns and permission names match as OpenCode's wildcard does (`util/wildcard.ts`): `*`
//! any text (across `/` and lines: `**` is the same as `*`), `?` one character, everything else
//! itself, the whole string; a pattern ending in ` *` also matches without that part
//! (`npm test *` matches `npm test`).

use super::routes::{Class, GET, PATCH, POST};
use super::table::ApiRoute;
use crate::config::permissions::{Otherwise, PermissionPolicy, Rule};

/// The routes whose body may set a session's own permission rules (`"permission": [...]`, seen
/// in 1.18.33's document): making a session, and changing one. A rule of a session's own that
/// allows would make OpenCode stop asking, past any policy.
const SETS_SESSION_RULES: &[(&str, &str)] = &[(POST, "/session"), (POST, "/api/session"), (PATCH, "/session/*")];

/// What runs a command or writes files without OpenCode asking: a terminal (made, connected,
/// its ticket), a session's shell, a patch applied to the working tree.
const UNASKED: &[(&str, &str)] = &[
    (POST, "/pty"),
    (POST, "/api/pty"),
    (GET, "/pty/*/connect"),
    (GET, "/api/pty/*/connect"),
    (POST, "/pty/*/connect-token"),
    (POST, "/api/pty/*/connect-token"),
    (POST, "/session/*/shell"),
    (POST, "/vcs/apply"),
];

/// Why a principal under a policy may not make a request on `route`, if it may not: a route
/// that acts without OpenCode asking (the policy would never see it), or one that configures
/// the server (its permission rules among the rest).
pub(crate) fn beyond_a_policy(route: &ApiRoute) -> Option<&'static str> {
    if route.class == Class::Configure {
        return Some("configures the server");
    }
    UNASKED
        .iter()
        .any(|(m, p)| *m == route.method && *p == route.pattern)
        .then_some("runs without OpenCode asking permission")
}

/// Does `route`'s body set a session's own permission rules?
pub(crate) fn sets_session_rules(route: &ApiRoute) -> bool {
    SETS_SESSION_RULES
        .iter()
        .any(|(m, p)| *m == route.method && *p == route.pattern)
}

/// A policy's answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'p> {
    /// Every pattern is allowed: answered "once" at once (never "always": that would approve
    /// later requests the gateway never sees).
    Allow(&'p Rule),
    /// A pattern matches a deny rule: rejected at once, with the rule in the message.
    Deny(&'p Rule),
    /// No rule decides, and the policy says `otherwise = "ask"`: a person, until the timeout.
    Ask,
    /// No rule decides, and the policy says `otherwise = "reject"`.
    Reject,
}

impl Verdict<'_> {
    /// The rule that decided, as the audit trail and the agent read it (`deny: git push*`), or
    /// what decided without a rule.
    pub fn rule(&self) -> String {
        match self {
            Verdict::Allow(r) => format!("allow: {r}"),
            Verdict::Deny(r) => format!("deny: {r}"),
            Verdict::Ask => "otherwise: ask".into(),
            Verdict::Reject => "otherwise: reject".into(),
        }
    }
}

/// Does `text` match OpenCode's wildcard `pattern`?
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // "ls *" also matches "ls".
    if let Some(head) = pattern.strip_suffix(" *")
        && glob(&head.chars().collect::<Vec<_>>(), &t)
    {
        return true;
    }
    glob(&p, &t)
}

/// `*` any run of characters, `?` one, the rest literally; the whole text. Linear with one
/// backtrack point (the last star), so a hostile pattern costs O(len(p) × len(t)) at worst.
fn glob(p: &[char], t: &[char]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn first_match<'p>(rules: &'p [Rule], permission: &str, pattern: &str) -> Option<&'p Rule> {
    rules
        .iter()
        .find(|r| wildcard(&r.permission, permission) && wildcard(&r.pattern, pattern))
}

/// The policy's answer to a request for `permission` on `patterns`.
pub fn judge<'p>(policy: &'p PermissionPolicy, permission: &str, patterns: &[String]) -> Verdict<'p> {
    if let Some(rule) = patterns.iter().find_map(|p| first_match(&policy.deny, permission, p)) {
        return Verdict::Deny(rule);
    }
    let allowed: Option<Vec<&Rule>> = patterns
        .iter()
        .map(|p| first_match(&policy.allow, permission, p))
        .collect();
    match allowed.and_then(|rules| rules.first().copied()) {
        Some(rule) => Verdict::Allow(rule),
        None => match policy.otherwise {
            Otherwise::Ask => Verdict::Ask,
            Otherwise::Reject => Verdict::Reject,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::permissions::parse_rule;

    pub(crate) fn policy(allow: &[&str], deny: &[&str], otherwise: Otherwise) -> PermissionPolicy {
        PermissionPolicy {
            name: "ci".into(),
            allow: allow.iter().map(|r| parse_rule(r).unwrap()).collect(),
            deny: deny.iter().map(|r| parse_rule(r).unwrap()).collect(),
            otherwise,
            ask_timeout: std::time::Duration::from_secs(60),
        }
    }

    fn pats(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_routes_that_set_a_sessions_rules_are_in_the_table() {
        use crate::policy::authz::{Extra, resolve_with};
        use crate::policy::canonical::CanonicalPath;
        for (m, p) in UNASKED {
            let raw = p.replace('*', "pty_1");
            let path = CanonicalPath::parse(&raw).unwrap();
            let method = http::Method::from_bytes(m.as_bytes()).unwrap();
            let route = resolve_with(&method, path.segments(), Extra::NONE).route.unwrap();
            assert!(beyond_a_policy(route).is_some(), "{m} {p}");
        }
        let config = CanonicalPath::parse("/config").unwrap();
        let patch = resolve_with(&http::Method::PATCH, config.segments(), Extra::NONE)
            .route
            .unwrap();
        assert_eq!(beyond_a_policy(patch), Some("configures the server"));
        let prompt = CanonicalPath::parse("/session/ses_1/prompt_async").unwrap();
        let post = resolve_with(&http::Method::POST, prompt.segments(), Extra::NONE)
            .route
            .unwrap();
        assert_eq!(beyond_a_policy(post), None, "a prompt is what the token is for");
        for (m, p) in SETS_SESSION_RULES {
            let raw = p.replace('*', "ses_1");
            let path = CanonicalPath::parse(&raw).unwrap();
            let method = http::Method::from_bytes(m.as_bytes()).unwrap();
            let route = resolve_with(&method, path.segments(), Extra::NONE).route.unwrap();
            assert!(sets_session_rules(route), "{m} {p}");
        }
    }

    #[test]
    fn the_wildcard_is_opencodes() {
        for (pattern, text, m) in [
            ("npm test*", "npm test", true),
            ("npm test*", "npm test --watch", true),
            ("npm test*", "npm tes", false),
            ("npm test *", "npm test", true),
            ("npm test *", "npm testing", false),
            ("git push*", "git push origin main", true),
            ("git push*", "git status", false),
            ("src/**", "src/a/b.rs", true),
            ("src/**", "tests/a.rs", false),
            ("**", "", true),
            ("/etc/*", "/etc/*", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("ls", "ls -la", false),
            ("echo *", "echo a\nb", true),
            ("*.rs", "src/x.rs", true),
            ("a.c", "abc", false),
        ] {
            assert_eq!(wildcard(pattern, text), m, "{pattern:?} ~ {text:?}");
        }
    }

    /// The requests seen from OpenCode 1.18.33 (docs/permission-policies.md), under the issue's
    /// example policy.
    #[test]
    fn the_issues_policy_on_what_opencode_really_sends() {
        let ci = policy(
            &["bash: npm test*", "bash: git status*", "edit: src/**", "read: **"],
            &["bash: git push*", "bash: curl *", "external_directory: **"],
            Otherwise::Ask,
        );
        let v = judge(&ci, "bash", &pats(&["npm test"]));
        assert_eq!(v.rule(), "allow: bash: npm test*");
        let v = judge(&ci, "bash", &pats(&["git push origin main"]));
        assert_eq!(v.rule(), "deny: bash: git push*");
        // A compound command: every part must be allowed; a denied part denies it all.
        assert_eq!(
            judge(&ci, "bash", &pats(&["npm test", "ls /etc", "head -1"])),
            Verdict::Ask
        );
        assert_eq!(
            judge(&ci, "bash", &pats(&["npm test", "curl evil.example"])).rule(),
            "deny: bash: curl *"
        );
        assert_eq!(
            judge(&ci, "bash", &pats(&["npm test", "git status -s"])).rule(),
            "allow: bash: npm test*"
        );
        assert_eq!(judge(&ci, "edit", &pats(&["src/a.txt"])).rule(), "allow: edit: src/**");
        assert_eq!(judge(&ci, "edit", &pats(&["Cargo.toml"])), Verdict::Ask);
        assert_eq!(
            judge(&ci, "external_directory", &pats(&["/etc/*"])).rule(),
            "deny: external_directory: **"
        );
        // A rule for bash says nothing of edit; no pattern at all is no allowance.
        assert_eq!(judge(&ci, "webfetch", &pats(&["https://x"])), Verdict::Ask);
        assert_eq!(judge(&ci, "bash", &[]), Verdict::Ask);
        let strict = policy(&["bash: npm test*"], &[], Otherwise::Reject);
        assert_eq!(judge(&strict, "bash", &pats(&["make"])), Verdict::Reject);
        // A wildcard permission name.
        let any = policy(&[], &["*: /secret*"], Otherwise::Ask);
        assert_eq!(judge(&any, "read", &pats(&["/secret/x"])).rule(), "deny: *: /secret*");
    }
}
