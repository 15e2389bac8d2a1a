//! The git a task runs (issue 41), in a project set's checkout, as the set's OS user (`run_as`,
//! else the gateway's own), bounded in time, with the environment emptied but for `PATH`, `HOME`
//! and `LANG`, and no hook run (`core.hooksPath=/dev/null`: a hook is the agent's to write, the
//! gateway's to run otherwise). Every name passed has been checked (`support/task_name.rs`) and
//! every path is absolute, so none reads as an option.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one git command may take.
const BOUND: Duration = Duration::from_secs(60);

/// A checkout, and whom its commands run as.
pub(crate) struct Checkout<'a> {
    pub repo: &'a Path,
    pub run_as: Option<&'a str>,
}

impl Checkout<'_> {
    pub(crate) fn command(&self, program: &str) -> Result<tokio::process::Command, String> {
        let mut cmd = tokio::process::Command::new(program);
        cmd.current_dir(self.repo)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        match self.run_as {
            Some(user) => {
                let (uid, gid, home) = crate::upstream::supervise::launch::lookup_user(user)?;
                cmd.uid(uid).gid(gid).env("HOME", home);
            }
            None => {
                cmd.env("HOME", std::env::var_os("HOME").unwrap_or_else(|| "/".into()));
            }
        }
        Ok(cmd)
    }

    /// Run `program args` in the checkout: its output, or its first line of complaint.
    async fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<String, String> {
        let mut cmd = self.command(program)?;
        cmd.args(args);
        let said = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_string();
        match tokio::time::timeout(BOUND, cmd.output()).await {
            Err(_) => Err(format!("{program} did not finish within {} s", BOUND.as_secs())),
            Ok(Err(e)) => Err(format!("cannot run {program}: {e}")),
            Ok(Ok(out)) if out.status.success() => Ok(said(&out.stdout)),
            Ok(Ok(out)) => {
                let text = said(&out.stderr);
                let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message");
                Err(format!(
                    "{program} {}: {first}",
                    args.first().map(|a| a.to_string_lossy()).unwrap_or_default()
                ))
            }
        }
    }

    pub(super) async fn git(&self, args: &[&str]) -> Result<String, String> {
        let mut all: Vec<&std::ffi::OsStr> = vec!["-c".as_ref(), "core.hooksPath=/dev/null".as_ref()];
        all.extend(args.iter().map(std::ffi::OsStr::new));
        self.run("git", &all).await
    }

    /// What the folder holds now, to tell a change by: its `HEAD` and `git status --porcelain`
    /// (`None`: not a checkout git can read).
    pub(crate) async fn state(&self) -> Option<(String, String)> {
        let head = self.git(&["rev-parse", "HEAD"]).await.ok()?;
        let status = self.git(&["status", "--porcelain"]).await.ok()?;
        Some((head, status))
    }

    /// Is `name` a branch of the checkout?
    pub(crate) async fn has_branch(&self, name: &str) -> bool {
        let full = format!("refs/heads/{name}");
        self.git(&["rev-parse", "--verify", "--quiet", &full]).await.is_ok()
    }

    /// The checkout's current branch (the base when none is asked for).
    pub(crate) async fn current_branch(&self) -> Result<String, String> {
        self.git(&["symbolic-ref", "--short", "HEAD"]).await
    }

    /// `git worktree add --track -b <branch> <folder> <base>`: the branch's upstream is its base
    /// (git's own record of it, which the review's diff reads back: `@{upstream}`).
    pub(crate) async fn add_worktree(&self, branch: &str, folder: &Path, base: &str) -> Result<(), String> {
        let base = format!("refs/heads/{base}");
        let folder = folder.to_string_lossy();
        self.git(&["worktree", "add", "--quiet", "--track", "-b", branch, &folder, &base])
            .await
            .map(drop)
    }

    /// "Remove" on a task (issue 41, item 4): the worktree goes, its branch stays. Without
    /// `force` git refuses a worktree with uncommitted or untracked files (and the main checkout).
    pub(crate) async fn remove_only_worktree(&self, folder: &Path, force: bool) -> Result<(), String> {
        let path = folder.to_string_lossy();
        let mut args = vec!["worktree", "remove"];
        if force {
            args.push("--force");
        }
        args.push(&path);
        self.git(&args).await.map(drop)
    }

    /// Undo [`Checkout::add_worktree`]: the worktree and the branch it made go.
    pub(crate) async fn remove_worktree(&self, branch: &str, folder: &Path) -> Result<(), String> {
        let path = folder.to_string_lossy();
        let removed = self.git(&["worktree", "remove", "--force", &path]).await;
        let deleted = self.git(&["branch", "-D", branch]).await;
        removed.and(deleted).map(drop)
    }

    /// Copy `files` (relative to the checkout, checked) into `folder`, keeping their folders; a
    /// file the checkout does not have is skipped and named.
    pub(crate) async fn copy_files(&self, files: &[PathBuf], folder: &Path) -> Result<Vec<String>, String> {
        let mut missing = Vec::new();
        for f in files {
            if std::fs::symlink_metadata(self.repo.join(f)).is_err() {
                missing.push(f.display().to_string());
                continue;
            }
            // Links are copied as links (`-P`), so a link cannot read through as the gateway.
            let args: [&std::ffi::OsStr; 5] = [
                "-P".as_ref(),
                "--parents".as_ref(),
                "--".as_ref(),
                f.as_os_str(),
                folder.as_os_str(),
            ];
            self.run("cp", &args).await?;
        }
        Ok(missing)
    }
}
