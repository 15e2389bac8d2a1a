//! `[[policy]]`: a named permission policy, as validated. The gateway answers the permission
//! requests of a session made under a token that carries one (`policy/permission.rs` judges,
//! the inbox acts). Rules are written `"<permission>: <pattern>"`, the permission as OpenCode
//! names it in a request (`bash`, `edit`, `read`, `external_directory`, …) and the pattern as
//! OpenCode's own wildcard (`*` any text, `?` one character; a trailing ` *` also matches
//! nothing: `npm test *` matches `npm test`). Parsing is here (the config room); matching is the
//! policy room's.

use std::time::Duration;

/// Longest rule accepted (a pattern is a command or a path, not a document).
pub const MAX_RULE_BYTES: usize = 1024;

/// One rule: which permission, which patterns of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The permission's name, or a wildcard over names (`*`).
    pub permission: String,
    pub pattern: String,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.permission, self.pattern)
    }
}

/// What a request no rule speaks for gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Otherwise {
    /// Left to a person (the inbox) until `ask_timeout`, then rejected.
    Ask,
    /// Rejected at once.
    Reject,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionPolicy {
    pub name: String,
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
    pub otherwise: Otherwise,
    pub ask_timeout: Duration,
}

/// `"bash: npm test*"` → `bash` and `npm test*`: the permission is the text before the first
/// `:` (letters, digits, `_`, `-`, or `*`), the pattern the rest, trimmed.
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    let too_long = || format!("is longer than {MAX_RULE_BYTES} bytes");
    if text.len() > 2 * MAX_RULE_BYTES {
        return Err(too_long());
    }
    if text.chars().any(char::is_control) {
        return Err("holds a control character".into());
    }
    let Some((permission, pattern)) = text.split_once(':') else {
        return Err("has no `:` between the permission and the pattern".into());
    };
    let permission = permission.trim();
    if permission.is_empty() {
        return Err("names no permission before the `:`".into());
    }
    if !permission
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '*')
    {
        return Err(format!(
            "names the permission {permission:?}, which is not a name like bash, edit, read or external_directory"
        ));
    }
    let pattern = pattern.trim();
    if pattern.is_empty() {
        return Err("has no pattern after the `:`".into());
    }
    // As written back (`<permission>: <pattern>`), so a rule read back is read the same.
    if permission.len() + 2 + pattern.len() > MAX_RULE_BYTES {
        return Err(too_long());
    }
    Ok(Rule {
        permission: permission.to_string(),
        pattern: pattern.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_a_permission_a_colon_and_a_pattern() {
        let r = parse_rule("bash: npm test*").unwrap();
        assert_eq!((r.permission.as_str(), r.pattern.as_str()), ("bash", "npm test*"));
        assert_eq!(r.to_string(), "bash: npm test*");
        // The first colon splits: a pattern may hold colons.
        let r = parse_rule("bash:echo a:b").unwrap();
        assert_eq!(r.pattern, "echo a:b");
        assert_eq!(parse_rule("*: **").unwrap().permission, "*");
        for (bad, why) in [
            ("bash npm test", "no `:`"),
            (": ls", "names no permission"),
            ("bash:  ", "no pattern"),
            ("ba sh: ls", "not a name"),
            ("bash: ls\n", "control character"),
        ] {
            let e = parse_rule(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(parse_rule(&format!("bash: {}", "x".repeat(MAX_RULE_BYTES))).is_err());
    }
}
