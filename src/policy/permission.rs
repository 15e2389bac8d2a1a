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

/// Does this object (a body that makes or changes a session, or a listed session) carry
/// permission rules of its own that allow anything (any action but `deny` and `ask`)? OpenCode
/// then stops asking for what they allow, past any policy.
pub fn allows_of_its_own(v: &serde_json::Value) -> bool {
    v.get("permission").and_then(|p| p.as_array()).is_some_and(|rules| {
        rules
            .iter()
            .any(|r| !matches!(r["action"].as_str(), Some("deny" | "ask")))
    })
}

/// What a permission answer's body says, read the way that approves most: OpenCode's reply
/// routes name the answer `reply` (`/permission/{id}/reply`, 1.18.33's `/api/…/reply`),
/// `response` (`/session/{id}/permissions/{id}`) or `decision` (2.x); a body naming several is
/// judged by the most approving, so no spelling approves past the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer<'a> {
    /// `always`, else `once`, else `reject`: what the audit trail records.
    pub said: Option<&'a str>,
    pub approves: bool,
    pub always: bool,
}

pub fn answer(v: &serde_json::Value) -> Answer<'_> {
    let said: Vec<&str> = ["reply", "response", "decision"]
        .iter()
        .filter_map(|k| v.get(k).and_then(|a| a.as_str()))
        .collect();
    let has = |a: &str| said.contains(&a);
    let most = ["always", "once", "reject"].into_iter().find(|a| has(a));
    Answer {
        said: most,
        approves: has("once") || has("always"),
        always: has("always"),
    }
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

/// The permissions whose patterns are shell commands: 1.18.33's `bash`, 2.x's `shell`.
pub const SHELL_PERMISSIONS: &[&str] = &["bash", "shell"];

/// Does this command nest a substitution in escaped backticks (`` echo `echo \`cmd\`` ``)?
/// OpenCode 1.18.33 and 2.1.2 give the inner command no pattern of its own (it ran, unasked,
/// under an allowed `echo *`); only a rule that names the escape allows it.
pub fn hides_commands(command: &str) -> bool {
    command.contains("\\`")
}

/// Does this command write through the shell's own redirection (`>`, `>>`, `>|`, `&>`, `2>`,
/// `<>`, `>(…)`)? Any `>` the shell would read as an operator: outside single quotes, not
/// escaped, and inside double quotes only within a command substitution. Conservative: a `>` in
/// a here-document's text or in `[[ a > b ]]` counts too (a rule that names it allows it).
pub fn writes_by_redirect(command: &str) -> bool {
    let (mut single, mut double, mut substituted, mut escaped) = (false, false, false, false);
    for c in command.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => {
                double = !double;
                substituted = false;
            }
            // A command substitution inside double quotes: its own redirects are the shell's.
            '$' | '`' if double => substituted = true,
            '>' if !single && (!double || substituted) => return true,
            _ => {}
        }
    }
    false
}

/// An allow rule's match: for a shell command that writes through a redirect, only a rule whose
/// own pattern names a redirect (`bash: make * > build.log`) allows it. OpenCode 1.18.33 asks
/// `bash` alone for `echo x > ../outside/f` (neither `edit` nor `external_directory`), with a
/// pattern `echo *` matches: a rule for a command must not allow a write it does not name.
fn first_allow<'p>(rules: &'p [Rule], permission: &str, pattern: &str) -> Option<&'p Rule> {
    let shell = SHELL_PERMISSIONS.contains(&permission);
    let redirects = shell && writes_by_redirect(pattern);
    let hides = shell && hides_commands(pattern);
    rules
        .iter()
        .filter(|r| !redirects || r.pattern.contains('>'))
        .filter(|r| !hides || hides_commands(&r.pattern))
        .find(|r| wildcard(&r.permission, permission) && wildcard(&r.pattern, pattern))
}

/// The policy's answer to a request for `permission` on `patterns`.
pub fn judge<'p>(policy: &'p PermissionPolicy, permission: &str, patterns: &[String]) -> Verdict<'p> {
    if let Some(rule) = patterns.iter().find_map(|p| first_match(&policy.deny, permission, p)) {
        return Verdict::Deny(rule);
    }
    let allowed: Option<Vec<&Rule>> = patterns
        .iter()
        .map(|p| first_allow(&policy.allow, permission, p))
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
    fn a_redirect_is_allowed_only_by_a_rule_that_names_one() {
        for (command, writes) in [
            ("echo x > ../outside/f", true),
            ("echo x >> f", true),
            ("echo x >| f", true),
            ("echo x &> f", true),
            ("echo x 2>f", true),
            ("cat <> f", true),
            ("echo x>f", true),
            ("echo > >(cat)", true),
            ("echo \"$(echo x > f)\"", true),
            ("echo \"`echo x > f`\"", true),
            ("echo 'a > b'", false),
            ("echo \"a > b\"", false),
            ("echo a\\>b", false),
            ("echo x", false),
            ("cat < in", false),
        ] {
            assert_eq!(writes_by_redirect(command), writes, "{command}");
        }
        let p = policy(&["bash: echo *", "bash: make * > build.log"], &[], Otherwise::Reject);
        assert_eq!(judge(&p, "bash", &pats(&["echo x"])).rule(), "allow: bash: echo *");
        assert_eq!(judge(&p, "bash", &pats(&["echo x > ../outside/f"])), Verdict::Reject);
        assert_eq!(
            judge(&p, "shell", &pats(&["echo x > f"])),
            Verdict::Reject,
            "2.x's name"
        );
        assert_eq!(
            judge(&p, "bash", &pats(&["make all > build.log"])).rule(),
            "allow: bash: make * > build.log"
        );
        // A deny still matches a redirecting command.
        let d = policy(&["bash: *"], &["bash: rm *"], Otherwise::Reject);
        assert_eq!(judge(&d, "bash", &pats(&["rm x > y"])).rule(), "deny: bash: rm *");
        // Nested in escaped backticks: only a rule naming the escape.
        let nested = "echo `echo \\`touch x\\``";
        assert!(hides_commands(nested));
        assert_eq!(judge(&p, "bash", &pats(&[nested])), Verdict::Reject);
        // Not a command: an edit's path with a `>` is only a name.
        let e = policy(&["edit: *"], &[], Otherwise::Reject);
        assert_eq!(judge(&e, "edit", &pats(&["a>b"])).rule(), "allow: edit: *");
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

    #[test]
    fn an_answer_approves_by_any_name_and_only_deny_and_ask_rules_narrow() {
        let approves = |b: &str| {
            let v: serde_json::Value = serde_json::from_str(b).unwrap();
            let a = answer(&v);
            (a.approves, a.always)
        };
        assert_eq!(approves(r#"{"reply":"once"}"#), (true, false));
        assert_eq!(approves(r#"{"response":"always"}"#), (true, true));
        assert_eq!(approves(r#"{"decision":"always"}"#), (true, true), "2.x");
        assert_eq!(approves(r#"{"reply":"reject","response":"once"}"#), (true, false));
        assert_eq!(approves(r#"{"reply":"reject","message":"no"}"#), (false, false));
        assert_eq!(approves(r#"{"reply":"ONCE"}"#), (false, false), "OpenCode refuses it");
        // What `opencode run` 1.18.33 sends, and an allow of its own.
        let json = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
        let run = br#"{"permission":[{"permission":"question","action":"deny","pattern":"*"},{"permission":"plan_enter","action":"ask","pattern":"*"}]}"#;
        assert!(!allows_of_its_own(&json(run)));
        assert!(!allows_of_its_own(&json(b"{}")));
        assert!(allows_of_its_own(&json(
            br#"{"permission":[{"permission":"bash","action":"allow","pattern":"*"}]}"#
        )));
        assert!(allows_of_its_own(&json(
            br#"{"permission":[{"permission":"bash","pattern":"*"}]}"#
        )));
    }
}
