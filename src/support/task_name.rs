//! A task's names from its title (issue 41): the slug that is at once its branch, its worktree's
//! folder and (after the set's name) its project's name, and the checks on a base branch's name.
//! Both refuse rather than repair anything a shell, git or a path could read as more than a
//! name: the slug is only `[a-z0-9]` runs joined by single `-`; a base must be a plain branch name
//! (no leading `-`, no `..`, no `@{`, no control or special character), and is then asked of git.

/// The longest slug, before a set's name makes it a project's (`<set>-<slug>`, at most 63).
pub const MAX_SLUG: usize = 40;

/// The slug of `title`: ASCII letters and digits, lower-cased, every run of anything else one
/// `-`, none at either end, at most `max` characters (cut at a `-` when one is near); `None`
/// when nothing is left.
pub fn slug(title: &str, max: usize) -> Option<String> {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() > max {
            break;
        }
    }
    if out.len() > max {
        out.truncate(max);
        // Cut at the last word's start when it is not too far back.
        if let Some(at) = out.rfind('-').filter(|at| *at >= max / 2) {
            out.truncate(at);
        }
    }
    let out = out.trim_end_matches('-').to_string();
    (!out.is_empty()).then_some(out)
}

/// Why `name` cannot be a base branch's name (before git is asked whether it exists).
pub fn base_refusal(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 200 {
        return Some("a branch name has 1 to 200 characters");
    }
    if name.starts_with('-') || name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return Some("a branch name does not start with '-' or '/' or end with '/' or '.'");
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") || name.ends_with(".lock") {
        return Some("a branch name holds no '..', '@{', '//' and does not end with .lock");
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
    if !name.chars().all(plain) {
        return Some("a base branch is written with letters, digits, '-', '_', '.' and '/' only");
    }
    if name.split('/').any(|part| part.starts_with('.')) {
        return Some("no part of a branch name starts with '.'");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_becomes_a_plain_slug_or_nothing() {
        assert_eq!(
            slug("Fix the login bug", MAX_SLUG).as_deref(),
            Some("fix-the-login-bug")
        );
        assert_eq!(
            slug("  --Fix: `rm -rf /`; $(reboot) ../..  ", MAX_SLUG).as_deref(),
            Some("fix-rm-rf-reboot")
        );
        assert_eq!(slug("Ünïcode café", MAX_SLUG).as_deref(), Some("n-code-caf"));
        assert_eq!(slug("../../..", MAX_SLUG), None);
        assert_eq!(slug("", MAX_SLUG), None);
        let long = "word ".repeat(2_000);
        let s = slug(&long, MAX_SLUG).unwrap();
        assert!(s.len() <= MAX_SLUG && s.ends_with("word"), "{s}");
        assert_eq!(slug(&"a".repeat(10_000), 12).as_deref(), Some("aaaaaaaaaaaa"));
    }

    #[test]
    fn a_base_is_a_plain_branch_name() {
        for good in ["main", "release/1.4", "feat_x-2"] {
            assert_eq!(base_refusal(good), None, "{good}");
        }
        for bad in [
            "",
            "-b",
            "--upload-pack=x",
            "a..b",
            "main@{1}",
            "/main",
            "main/",
            "x.lock",
            "a b",
            "a;b",
            "$(x)",
            "a`b",
            ".hidden",
            "a/.b",
            "main\n",
            "a//b",
            "HEAD~1",
            "a:b",
        ] {
            assert!(base_refusal(bad).is_some(), "{bad:?} passed");
        }
    }
}
