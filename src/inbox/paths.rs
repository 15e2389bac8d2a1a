//! The paths a permission policy judges (hostile round five, item 8). OpenCode's file tools ask
//! with the path as the tool resolved it, lexically (`src/out/f` relative to the worktree, or
//! `/abs/dir/*`), never through symbolic links: with `src/out` a link to a folder outside the
//! project, `edit: src/**` allowed a write outside. So for a file permission each path is also
//! resolved on disk (the longest part that exists, through its links), and when that reaches
//! elsewhere the real path is judged beside OpenCode's: every pattern must be allowed, a deny of
//! either wins. A real path still inside the project is said the way OpenCode says its own
//! (relative to the same base); one outside is said absolute, so only a rule naming it allows it.

use std::path::{Component, Path, PathBuf};

/// OpenCode's permissions whose patterns are paths (1.18.33 and 2.x).
const PATH_PERMISSIONS: &[&str] = &["edit", "write", "read", "list", "glob", "grep", "external_directory"];

/// What a request under a policy is, as the model holds it.
#[derive(Debug)]
pub(crate) struct Asked {
    pub project: String,
    pub session: String,
    pub permission: String,
    pub patterns: Vec<String>,
    pub filepath: Option<String>,
    pub command: Option<String>,
}

/// The patterns to judge for `asked`, whose project is pinned to `root` (if any).
pub(crate) fn judged(asked: &Asked, root: Option<&Path>) -> Vec<String> {
    let mut out = asked.patterns.clone();
    if let Some(command) = whole_command(asked) {
        out.push(command.to_string());
    }
    if !PATH_PERMISSIONS.contains(&asked.permission.as_str()) {
        return out;
    }
    let root = root.and_then(|r| r.canonicalize().ok());
    let one = asked.patterns.len() == 1;
    for pattern in &asked.patterns {
        let filepath = asked.filepath.as_deref().filter(|_| one);
        if let Some(real) = crossing(pattern, filepath, root.as_deref())
            && !out.contains(&real)
        {
            out.push(real);
        }
    }
    out
}

/// A shell command's whole line, when OpenCode's patterns may not say all it does: it writes
/// through a redirect (1.18.33 and 2.1.2 put no pattern on a redirect of a compound statement or
/// at the end of a list: `{ echo x; } > f` asks `["echo x"]`), or it nests a substitution in
/// escaped backticks (whose inner command gets no pattern). Judged beside the patterns, it
/// takes a rule that names it.
fn whole_command(asked: &Asked) -> Option<&str> {
    use crate::policy::permission::{SHELL_PERMISSIONS, hides_commands, writes_by_redirect};
    let command = asked.command.as_deref()?.trim();
    let shell = SHELL_PERMISSIONS.contains(&asked.permission.as_str());
    let needed = writes_by_redirect(command) || hides_commands(command);
    (shell && needed && !asked.patterns.iter().any(|p| p == command)).then_some(command)
}

/// The real spelling of `pattern` when resolving it crosses a link to somewhere else; `None`
/// when it reaches what it says (or cannot be read as a path).
fn crossing(pattern: &str, filepath: Option<&str>, root: Option<&Path>) -> Option<String> {
    // `external_directory` asks for `/dir/*`: the folder is the path.
    let (path, tail) = match pattern.strip_suffix("/*") {
        Some(dir) => (dir, "/*"),
        None => (pattern, ""),
    };
    if path.contains(['*', '?']) || path.contains('\0') || path.is_empty() {
        return None;
    }
    let (absolute, base) = absolute(path, filepath, root)?;
    let lexical = clean(&absolute);
    let real = resolve(&lexical)?;
    if real == lexical {
        return None;
    }
    let said = match (base.and_then(|b| resolve(&clean(&b))), root) {
        (Some(base), Some(root)) if real.starts_with(root) => real.strip_prefix(&base).ok().map(Path::to_path_buf),
        _ => None,
    };
    let said = said.unwrap_or(real);
    Some(format!("{}{tail}", said.display()))
}

/// The absolute path `path` names, and the base a relative one is relative to: the tool's own
/// `filepath` when it ends with the pattern (the worktree is what is left), else the project's
/// folder.
fn absolute(path: &str, filepath: Option<&str>, root: Option<&Path>) -> Option<(PathBuf, Option<PathBuf>)> {
    let p = Path::new(path);
    if p.is_absolute() {
        return Some((p.to_path_buf(), None));
    }
    if let Some(full) = filepath.map(Path::new).filter(|f| f.is_absolute())
        && full.ends_with(p)
    {
        let base = full.ancestors().nth(p.components().count()).map(Path::to_path_buf);
        return Some((full.to_path_buf(), base));
    }
    let root = root?;
    Some((root.join(p), Some(root.to_path_buf())))
}

/// `.` and `..` taken out, lexically (as OpenCode's `path.resolve` does).
fn clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `p` through its links: the longest prefix that exists, resolved, and the rest as written.
fn resolve(p: &Path) -> Option<PathBuf> {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        rest.push(existing.file_name()?.to_os_string());
        if !existing.pop() {
            return None;
        }
    }
    let mut real = existing.canonicalize().ok()?;
    for part in rest.iter().rev() {
        real.push(part);
    }
    Some(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(permission: &str, patterns: &[&str], filepath: Option<&Path>) -> Asked {
        Asked {
            project: "p".into(),
            session: "ses_1".into(),
            permission: permission.into(),
            patterns: patterns.iter().map(|s| s.to_string()).collect(),
            filepath: filepath.map(|f| f.display().to_string()),
            command: None,
        }
    }

    #[test]
    fn a_path_through_a_link_is_judged_where_it_really_goes() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let (proj, outside) = (base.join("proj"), base.join("outside"));
        std::fs::create_dir_all(proj.join("src/real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, proj.join("src/out")).unwrap();
        std::os::unix::fs::symlink(proj.join("src/real"), proj.join("src/inner")).unwrap();
        let root = Some(proj.as_path());
        // Out through the link: the real, absolute path is judged too.
        let out = judged(&asked("edit", &["src/out/f"], Some(&proj.join("src/out/f"))), root);
        assert_eq!(
            out,
            vec!["src/out/f".to_string(), outside.join("f").display().to_string()]
        );
        // Without the tool's filepath, relative to the project's folder.
        let out = judged(&asked("read", &["src/out/f"], None), root);
        assert_eq!(out[1], outside.join("f").display().to_string());
        // A link that stays inside: said relative to the worktree, as OpenCode says its own.
        let out = judged(&asked("edit", &["src/inner/g"], Some(&proj.join("src/inner/g"))), root);
        assert_eq!(out, vec!["src/inner/g".to_string(), "src/real/g".to_string()]);
        // external_directory's folder pattern.
        let link = base.join("elsewhere");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let pattern = format!("{}/*", link.display());
        let out = judged(&asked("external_directory", &[&pattern], None), root);
        assert_eq!(out[1], format!("{}/*", outside.display()));
        // No link crossed, a command, a wildcard: OpenCode's patterns alone.
        assert_eq!(judged(&asked("edit", &["src/real/x"], None), root), vec!["src/real/x"]);
        assert_eq!(
            judged(&asked("bash", &["cat src/out/f"], None), root),
            vec!["cat src/out/f"]
        );
        assert_eq!(judged(&asked("edit", &["src/*"], None), root), vec!["src/*"]);
    }

    /// What 1.18.33 and 2.1.2 ask for commands whose patterns lose a redirect (issue 55's
    /// captures): the whole line is judged too; a command whose patterns say it all is not.
    #[test]
    fn a_shell_command_whose_patterns_lose_its_redirect_is_judged_whole() {
        let with = |command: &str, patterns: &[&str]| Asked {
            command: Some(command.to_string()),
            ..asked("bash", patterns, None)
        };
        for (command, patterns) in [
            ("{ echo x; } > ../outside/f", &["echo x"][..]),
            ("true && echo x > ../outside/f", &["true", "echo x"]),
            ("echo x | cat > ../outside/f", &["echo x", "cat"]),
            (
                "echo `echo \\`touch ../outside/n\\``",
                &["echo `echo \\`touch ../outside/n\\``", "echo \\`touch ../outside/n\\`"],
            ),
        ] {
            let out = judged(&with(command, patterns), None);
            assert!(out.iter().any(|p| p == command), "{command}: {out:?}");
        }
        // The redirect is in the pattern already, or there is none: the patterns alone.
        assert_eq!(judged(&with("echo x > f", &["echo x > f"]), None), vec!["echo x > f"]);
        assert_eq!(
            judged(&with("npm test && ls", &["npm test", "ls"]), None),
            vec!["npm test", "ls"]
        );
        let mut shell = with("{ echo x; } > f", &["echo x"]);
        shell.permission = "shell".into();
        assert_eq!(judged(&shell, None).len(), 2, "2.x's name");
    }
}
