//! The git a task runs (issue 41), in a project set's checkout, as the set's OS user (`run_as`,
//! else the gateway's own) or on the set's box as its SSH user, bounded in time
//! (`upstream::job`: an emptied environment here, arguments never parsed as shell code there),
//! and no hook run (`core.hooksPath=/dev/null`: a hook is the agent's to write, the gateway's to
//! run otherwise). Every name passed has been checked (`support/task_name.rs`) and every path
//! is absolute, so none reads as an option.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::upstream::job::{self, Failed, Host, Job, Keep, Ran};

/// How long one git command may take.
const BOUND: Duration = Duration::from_secs(60);
/// Its output read, at most.
const MAX_OUTPUT: usize = 1024 * 1024;

/// A checkout, and where its commands run.
pub(crate) struct Checkout<'a> {
    pub repo: &'a Path,
    pub host: &'a Host,
}

impl Checkout<'_> {
    /// Run `program args` (with `env`) in the checkout, keeping `keep` of its output, within `timeout`.
    pub(crate) async fn job(
        &self,
        program: &str,
        args: &[&OsStr],
        env: &[(&str, &OsStr)],
        keep: Keep,
        timeout: Duration,
    ) -> Result<Ran, Failed> {
        let job = Job {
            dir: self.repo,
            program,
            args,
            env,
            keep,
            timeout,
        };
        job::run(self.host, &job).await
    }

    /// Run `program args` in the checkout: its output, or its first line of complaint.
    async fn run(&self, program: &str, args: &[&OsStr]) -> Result<String, String> {
        let said = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_string();
        match self.job(program, args, &[], Keep::Head(MAX_OUTPUT), BOUND).await {
            Err(Failed::TimedOut) => Err(format!("{program} did not finish within {} s", BOUND.as_secs())),
            Err(Failed::Cannot(e)) => Err(e),
            Ok(ran) if ran.status.is_ok() => Ok(said(&ran.out)),
            Ok(ran) => Err(format!(
                "{program} {}: {}",
                args.first().map(|a| a.to_string_lossy()).unwrap_or_default(),
                ran.complaint()
            )),
        }
    }

    pub(super) async fn git(&self, args: &[&str]) -> Result<String, String> {
        let mut all: Vec<&OsStr> = vec!["-c".as_ref(), "core.hooksPath=/dev/null".as_ref()];
        all.extend(args.iter().map(OsStr::new));
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

    /// Is there anything (a link included) at `path`, where the checkout is?
    pub(crate) async fn exists(&self, path: &Path) -> Result<bool, String> {
        let args: [&OsStr; 4] = [
            "-c".as_ref(),
            "[ -e \"$1\" ] || [ -L \"$1\" ]".as_ref(),
            "sh".as_ref(),
            path.as_os_str(),
        ];
        match self.job("sh", &args, &[], Keep::Head(4096), BOUND).await {
            Ok(ran) => Ok(ran.status.is_ok()),
            Err(Failed::TimedOut) => Err(format!(
                "looking for {} took over {} s",
                path.display(),
                BOUND.as_secs()
            )),
            Err(Failed::Cannot(e)) => Err(e),
        }
    }

    /// Copy `files` (relative to the checkout, checked) into `folder`, keeping their folders; a
    /// file the checkout does not have is skipped and named.
    pub(crate) async fn copy_files(&self, files: &[PathBuf], folder: &Path) -> Result<Vec<String>, String> {
        let mut missing = Vec::new();
        for f in files {
            if !self.exists(&self.repo.join(f)).await? {
                missing.push(f.display().to_string());
                continue;
            }
            // Links are copied as links (`-P`), so a link cannot read through as the gateway.
            let args: [&OsStr; 5] = [
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

    /// Remove the file at `path` (a private index), where the checkout is.
    pub(crate) async fn remove_file(&self, path: &Path) {
        let args: [&OsStr; 3] = ["-f".as_ref(), "--".as_ref(), path.as_os_str()];
        if let Err(e) = self.run("rm", &args).await {
            tracing::warn!(path = %path.display(), error = %e, "a review's private index was not removed");
        }
    }
}
