//! A worktree's changes against its base (issue 41, items 2 and 4): what the card counts
//! (files, lines added and removed) and what the review page shows, file by file.
//!
//! The base is the branch's upstream (`git worktree add --track` records the task's base there),
//! compared from where the branch left it (`git merge-base HEAD @{upstream}`); a worktree without
//! one is compared with its own `HEAD`. What the agent wrote but never committed counts too, new
//! files included: the worktree is staged into a private index (`GIT_INDEX_FILE`, in the
//! worktree's own git folder, removed after) and that is compared, so the real index is never
//! touched. Git runs as the project's OS user (`Checkout`), bounded in time and in output.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::task_git::Checkout;
use crate::upstream::job::{Failed, Keep, Ran};

/// The whole diff read, at most.
const MAX_DIFF: usize = 1024 * 1024;
/// One file's diff shown, at most (the rest is cut and said so).
const MAX_FILE: usize = 64 * 1024;
/// How long reading the diff may take.
const BOUND: Duration = Duration::from_secs(30);

/// One changed file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileDiff {
    pub path: String,
    /// Lines added and removed (`None`: a binary file).
    pub lines: Option<(u64, u64)>,
    /// Its part of the diff (empty when only counted, or past the whole diff's bound).
    pub text: String,
    /// Its text was cut at [`MAX_FILE`].
    pub cut: bool,
}

/// A worktree's changes against its base.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Changes {
    /// The base branch (`None`: compared with the worktree's own `HEAD`).
    pub base: Option<String>,
    /// The worktree's branch (`None`: a detached `HEAD`).
    pub branch: Option<String>,
    pub files: Vec<FileDiff>,
    /// The whole diff was past [`MAX_DIFF`]: files after the cut show counts only.
    pub cut: bool,
}

impl Changes {
    /// Lines added and removed in all (binary files not counted).
    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.files.iter().filter_map(|f| f.lines)).fold((0, 0), |(a, r), (fa, fr)| (a + fa, r + fr))
    }
}

impl Checkout<'_> {
    /// The worktree's changes against its base: counts only, or with each file's diff text.
    pub(crate) async fn changes(&self, with_text: bool) -> Result<Changes, String> {
        let base = (self
            .git(&["rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}"])
            .await)
            .ok();
        let from = match base {
            Some(_) => self.git(&["merge-base", "HEAD", "@{upstream}"]).await?,
            None => self.git(&["rev-parse", "HEAD"]).await?,
        };
        let git_dir = self.git(&["rev-parse", "--absolute-git-dir"]).await?;
        static N: AtomicU64 = AtomicU64::new(0);
        let index = std::path::Path::new(&git_dir).join(format!(
            "ocgw-review-index-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let read = self.staged_diff(&index, &from, with_text).await;
        self.remove_file(&index).await;
        let (numstat, text, cut) = read?;
        let branch = self.git(&["symbolic-ref", "--short", "-q", "HEAD"]).await.ok();
        Ok(Changes {
            base,
            branch,
            files: files(&numstat, &text),
            cut,
        })
    }

    /// Stage the worktree into `index` and compare it with `from`: the counts (`--numstat -z`),
    /// and the text when asked, read up to [`MAX_DIFF`].
    async fn staged_diff(
        &self,
        index: &std::path::Path,
        from: &str,
        with_text: bool,
    ) -> Result<(String, String, bool), String> {
        self.with_index(index, vec!["read-tree", "HEAD"], 4096).await?;
        self.with_index(index, vec!["add", "-A"], 4096).await?;
        let diff = ["diff", "--cached", "--no-renames", "--no-ext-diff", "--no-textconv"];
        let counts = [&diff[..], &["--numstat", "-z", from]].concat();
        let (numstat, _) = self.with_index(index, counts, MAX_DIFF).await?;
        let (text, cut) = if with_text {
            self.with_index(index, [&diff[..], &["--no-color", from]].concat(), MAX_DIFF)
                .await?
        } else {
            (String::new(), false)
        };
        Ok((numstat, text, cut))
    }

    /// `git args` with the private index, keeping up to `max` bytes of its output.
    async fn with_index(&self, index: &std::path::Path, args: Vec<&str>, max: usize) -> Result<(String, bool), String> {
        let all: Vec<&std::ffi::OsStr> = ["-c", "core.hooksPath=/dev/null", "-c", "core.quotePath=false"]
            .into_iter()
            .chain(args)
            .map(std::ffi::OsStr::new)
            .collect();
        let env = [("GIT_INDEX_FILE", index.as_os_str())];
        bounded(self.job("git", &all, &env, Keep::Head(max), BOUND).await)
    }
}

/// A git command's output (cut: there was more), or its first line of complaint.
fn bounded(ran: Result<Ran, Failed>) -> Result<(String, bool), String> {
    let ran = ran.map_err(|e| match e {
        Failed::TimedOut => format!("git did not finish within {} s", BOUND.as_secs()),
        Failed::Cannot(e) => e,
    })?;
    if let (false, Err(_)) = (ran.cut, &ran.status) {
        return Err(format!("git: {}", ran.complaint()));
    }
    Ok((String::from_utf8_lossy(&ran.out).into_owned(), ran.cut))
}

/// The files `--numstat -z` names, each with its part of `text` (the diff, in the same order).
fn files(numstat: &str, text: &str) -> Vec<FileDiff> {
    let mut parts = split_diff(text).into_iter();
    (numstat.split('\0').filter(|e| !e.is_empty()))
        .filter_map(|entry| {
            let mut f = entry.splitn(3, '\t');
            let (added, removed, path) = (f.next()?, f.next()?, f.next()?);
            let lines = added.parse().ok().zip(removed.parse().ok());
            let mut text = parts.next().unwrap_or_default();
            let cut = text.len() > MAX_FILE;
            if cut {
                let mut end = MAX_FILE;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
            Some(FileDiff {
                path: path.to_string(),
                lines,
                text,
                cut,
            })
        })
        .collect()
}

/// The diff's text, one part per file (each from its `diff --git` line).
fn split_diff(text: &str) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    for line in text.split_inclusive('\n') {
        match parts.last_mut() {
            Some(part) if !line.starts_with("diff --git ") => part.push_str(line),
            _ => parts.push(line.to_string()),
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_gets_its_counts_and_its_part_and_binaries_have_no_counts() {
        let numstat = "2\t1\tsrc/a.rs\0-\t-\tlogo.png\0";
        let text =
            "diff --git a/src/a.rs b/src/a.rs\n+x\n+y\n-z\ndiff --git a/logo.png b/logo.png\nBinary files differ\n";
        let got = files(numstat, text);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].path.as_str(), got[0].lines), ("src/a.rs", Some((2, 1))));
        assert!(got[0].text.starts_with("diff --git a/src/a.rs") && got[0].text.ends_with("-z\n"));
        assert_eq!((got[1].path.as_str(), got[1].lines), ("logo.png", None));
        assert!(got[1].text.contains("Binary"));
        let c = Changes {
            base: None,
            branch: None,
            files: got,
            cut: false,
        };
        assert_eq!(c.totals(), (2, 1));
    }

    #[test]
    fn a_large_files_part_is_cut_on_a_character() {
        let numstat = "1\t0\tbig.txt\0";
        let text = format!("diff --git a/big.txt b/big.txt\n+{}\n", "é".repeat(MAX_FILE));
        let got = files(numstat, &text);
        assert!(got[0].cut && got[0].text.len() <= MAX_FILE);
        // Counts without text (the card's): every file still named.
        assert_eq!(files(numstat, "")[0].text, "");
    }
}
