//! A project set's task settings (issue 41): `repository`, the checkout `git worktree add` runs
//! in (by default the folder above the set's, when it is a git checkout: `/srv/app` for
//! `/srv/app/.worktrees/*`), and `worktree_files`, what a new task's worktree gets from that
//! checkout before its server starts (untracked config such as `opencode.json` or `.env`).
//! Only a set takes them: one folder is not a place to make worktrees in.

use std::path::{Component, Path, PathBuf};

use super::Checker;
use crate::config::file::RawProject;
use crate::config::settings::TaskSettings;

/// At most this many worktree files.
const MAX_FILES: usize = 32;

/// The set's task settings; a plain project with either key is told to move it.
pub(super) fn task_settings(c: &mut Checker<'_>, key: &str, p: &RawProject, parent: &Path) -> TaskSettings {
    let repository = match &p.repository {
        Some(r) => {
            let path = c.path(r);
            match path.canonicalize() {
                Ok(dir) if dir.join(".git").exists() => Some(dir),
                _ => {
                    c.problem(
                        format!("{key}.repository"),
                        format!("{} is not a git checkout", path.display()),
                        "point repository at the main checkout the set's worktrees are made from",
                    );
                    None
                }
            }
        }
        None => parent
            .parent()
            .filter(|d| d.join(".git").exists())
            .map(Path::to_path_buf),
    };
    TaskSettings {
        repository,
        worktree_files: files(c, key, p.worktree_files.as_deref().unwrap_or_default()),
    }
}

/// A box set's task settings: `repository` an absolute path on the box (by default the folder
/// above the set's), checked by git there when a task is made.
pub(super) fn task_settings_on_box(c: &mut Checker<'_>, key: &str, p: &RawProject, parent: &Path) -> TaskSettings {
    let repository = match &p.repository {
        Some(r) if Path::new(r).is_absolute() => Some(crate::config::validate::lexical_clean(Path::new(r))),
        Some(r) => {
            c.problem(
                format!("{key}.repository"),
                format!("{r:?} is not an absolute path on the box"),
                "write the main checkout's folder as the box sees it, from /",
            );
            None
        }
        None => parent.parent().filter(|d| d.parent().is_some()).map(Path::to_path_buf),
    };
    TaskSettings {
        repository,
        worktree_files: files(c, key, p.worktree_files.as_deref().unwrap_or_default()),
    }
}

/// Each a relative path inside the checkout: no `..`, no root, nothing empty.
fn files(c: &mut Checker<'_>, key: &str, listed: &[String]) -> Vec<PathBuf> {
    if listed.len() > MAX_FILES {
        c.problem(
            format!("{key}.worktree_files"),
            format!("{} files are listed", listed.len()),
            format!("list at most {MAX_FILES} files (a folder's files are listed one by one)"),
        );
        return Vec::new();
    }
    let mut kept = Vec::new();
    for f in listed {
        let path = Path::new(f);
        let plain = !f.is_empty() && path.components().all(|part| matches!(part, Component::Normal(_)));
        if plain {
            kept.push(path.to_path_buf());
        } else {
            c.problem(
                format!("{key}.worktree_files"),
                format!("{f:?} is not a path inside the checkout"),
                "write paths relative to the repository, without '..' or a leading '/' (\"opencode.json\", \".env\")",
            );
        }
    }
    kept
}

/// A project that is not a set may not have the keys.
pub(super) fn only_on_a_set(c: &mut Checker<'_>, key: &str, p: &RawProject) {
    for (set, field) in [
        (p.repository.is_some(), "repository"),
        (p.worktree_files.is_some(), "worktree_files"),
    ] {
        if set && p.directories.is_none() {
            c.problem(
                format!("{key} ({}).{field}", p.name),
                "only a project set (directories = \"…/*\") makes worktrees for tasks",
                format!("remove {field}, or make the project a set"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    /// A set under a checkout's `.worktrees` finds the checkout itself; what is not a checkout, a
    /// file path that climbs out, and the keys on a plain project are each refused with the key.
    #[test]
    fn a_sets_checkout_and_files_are_found_or_refused_with_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join(".worktrees")).unwrap();
        std::fs::create_dir_all(dir.path().join("plain")).unwrap();
        let base = "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n";
        let set = |extra: &str| {
            format!(
                "{base}[[project]]\nname = \"app\"\ndirectories = \"{}/*\"\nspawn = true\n{extra}\n",
                repo.join(".worktrees").display()
            )
        };
        let path = dir.path().join("gateway.toml");
        let s = crate::config::parse(&set("worktree_files = [\".env\", \"conf/a.json\"]"), &path).unwrap();
        let tasks = &s.project_sets[0].tasks;
        assert_eq!(
            tasks.repository.as_deref(),
            Some(repo.canonicalize().unwrap().as_path())
        );
        assert_eq!(tasks.worktree_files.len(), 2);
        let refused = |text: String| crate::config::parse(&text, &path).unwrap_err().to_string();
        let e = refused(set(&format!("repository = \"{}\"", dir.path().join("plain").display())));
        assert!(
            e.contains("project[0] (app).repository") && e.contains("is not a git checkout"),
            "{e}"
        );
        let e = refused(set("worktree_files = [\"../secrets\"]"));
        assert!(
            e.contains("project[0] (app).worktree_files") && e.contains("\"../secrets\" is not a path inside"),
            "{e}"
        );
        let e = refused(set("worktree_files = [\"/etc/passwd\"]"));
        assert!(e.contains("\"/etc/passwd\" is not a path inside"), "{e}");
        let plain = format!(
            "{base}[[project]]\nname = \"web\"\ndirectory = \"{}\"\nspawn = true\nworktree_files = [\".env\"]\n",
            dir.path().join("plain").display()
        );
        let e = refused(plain);
        assert!(
            e.contains("project[0] (web).worktree_files") && e.contains("only a project set"),
            "{e}"
        );
    }
}
