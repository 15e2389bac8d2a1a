//! One bounded command in a folder, on this machine or on a box (issue 41): a task's git, its
//! review's diff, its acceptance test, a box set's listing. Every caller gets the same bounds
//! whichever the host: a time limit after which the command's whole process group is killed,
//! standard output kept as a head (past it the command is stopped: "cut") or a tail, and the
//! first 4 KiB of standard error (the rest read and dropped, so a chatty command never blocks).
//!
//! Here, the command runs with an emptied environment (`PATH`, `HOME`, `LANG` and what the job
//! names) as the project's OS user (`run_as`) in a process group of its own. On a box it runs as
//! the box's SSH user through [`super::box_exec`].

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};

pub(crate) use super::job_spec::{Failed, Job, Keep, Kept, MAX_STDERR, Ran};
use super::ssh_link::BoxLink;

/// Where a command runs.
#[derive(Clone)]
pub(crate) enum Host {
    /// This machine, as `run_as` (else the gateway's own user).
    Here { run_as: Option<String> },
    /// A box, as its SSH user, over its one connection.
    Box(Arc<BoxLink>),
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Here { run_as } => write!(f, "here as {}", run_as.as_deref().unwrap_or("the gateway's user")),
            Host::Box(link) => write!(f, "box {}", link.name()),
        }
    }
}

/// Run `job` on `host`.
pub(crate) async fn run(host: &Host, job: &Job<'_>) -> Result<Ran, Failed> {
    match host {
        Host::Here { run_as } => here(run_as.as_deref(), job).await,
        Host::Box(link) => super::box_exec::run(link, job).await,
    }
}

fn command(run_as: Option<&str>, job: &Job<'_>) -> Result<tokio::process::Command, String> {
    let mut cmd = tokio::process::Command::new(job.program);
    cmd.current_dir(job.dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(job.args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    match run_as {
        Some(user) => {
            let (uid, gid, home) = super::supervise::launch::lookup_user(user)?;
            cmd.uid(uid).gid(gid).env("HOME", home);
        }
        None => {
            cmd.env("HOME", std::env::var_os("HOME").unwrap_or_else(|| "/".into()));
        }
    }
    for (k, v) in job.env {
        cmd.env(k, v);
    }
    Ok(cmd)
}

async fn here(run_as: Option<&str>, job: &Job<'_>) -> Result<Ran, Failed> {
    let mut child = (command(run_as, job).map_err(Failed::Cannot)?.spawn())
        .map_err(|e| Failed::Cannot(format!("cannot run {}: {e}", job.program)))?;
    let group = child.id().and_then(|p| i32::try_from(p).ok());
    let kill = || {
        if let Some(pid) = group {
            // SAFETY: kill(2) on the process group the command was started in.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    };
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let work = async {
        let ((out, cut), (err, _)) = tokio::join!(
            read(stdout, Kept::new(job.keep), kill),
            read(stderr, Kept::new(Keep::First(MAX_STDERR)), || {})
        );
        let status = match child.wait().await {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(s.code().map_or("killed by a signal".into(), |c| format!("exit {c}"))),
            Err(e) => Err(format!("cannot wait for {}: {e}", job.program)),
        };
        Ran { status, out, cut, err }
    };
    match tokio::time::timeout(job.timeout, work).await {
        Ok(ran) => Ok(ran),
        Err(_) => {
            kill();
            Err(Failed::TimedOut)
        }
    }
}

/// Read `from` to its end into `kept`; `stop` when it says the command should be stopped.
async fn read(from: Option<impl AsyncRead + Unpin>, mut kept: Kept, stop: impl Fn()) -> (Vec<u8>, bool) {
    let Some(mut from) = from else {
        return kept.finish();
    };
    let mut buf = [0u8; 8192];
    while let Ok(n) = from.read(&mut buf).await
        && n > 0
    {
        if kept.push(&buf[..n]) {
            stop();
            break;
        }
    }
    kept.finish()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::path::Path;
    use std::time::Duration;

    use super::*;

    fn job<'a>(dir: &'a Path, args: &'a [&'a OsStr], keep: Keep, timeout: Duration) -> Job<'a> {
        Job {
            dir,
            program: "sh",
            args,
            env: &[],
            keep,
            timeout,
        }
    }

    #[tokio::test]
    async fn a_command_runs_in_its_folder_with_only_the_named_environment() {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "-c".as_ref(),
            "pwd; echo $WHO; echo ${CARGO_MANIFEST_DIR:-none}; echo oops >&2; exit 3".as_ref(),
        ];
        // Cargo gives the test this variable: the command must not see it.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let env = [("WHO", OsStr::new("tester"))];
        let job = Job {
            env: &env,
            ..job(dir.path(), &args, Keep::Head(1024), Duration::from_secs(10))
        };
        let ran = run(&Host::Here { run_as: None }, &job).await.unwrap();
        let out = String::from_utf8(ran.out.clone()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], dir.path().canonicalize().unwrap().to_str().unwrap());
        assert_eq!(&lines[1..], ["tester", "none"], "the gateway's environment stays out");
        assert_eq!(ran.status, Err("exit 3".to_string()));
        assert_eq!(ran.complaint(), "oops");
    }

    #[tokio::test]
    async fn a_head_past_its_bound_stops_the_command_and_a_tail_keeps_the_end() {
        let dir = tempfile::tempdir().unwrap();
        // Endless output: only the cut ends it, long before the time limit.
        let endless = ["-c".as_ref(), "yes line".as_ref()];
        let started = std::time::Instant::now();
        let ran = run(
            &Host::Here { run_as: None },
            &job(dir.path(), &endless, Keep::Head(100), Duration::from_secs(60)),
        )
        .await
        .unwrap();
        assert!(ran.cut && ran.out.len() == 100, "{ran:?}");
        assert!(started.elapsed() < Duration::from_secs(30), "the cut did not stop it");
        let counted = ["-c".as_ref(), "seq 1 10000".as_ref()];
        let ran = run(
            &Host::Here { run_as: None },
            &job(dir.path(), &counted, Keep::Tail(11), Duration::from_secs(10)),
        )
        .await
        .unwrap();
        assert_eq!(
            (String::from_utf8_lossy(&ran.out).as_ref(), ran.cut),
            ("9999\n10000\n", true)
        );
    }

    #[tokio::test]
    async fn past_its_time_the_whole_group_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("child.pid");
        let script = format!("sleep 300 & echo $! > {}; wait", marker.display());
        let args = ["-c".as_ref(), script.as_ref()];
        let got = run(
            &Host::Here { run_as: None },
            &job(dir.path(), &args, Keep::Head(100), Duration::from_millis(500)),
        )
        .await;
        assert_eq!(got.unwrap_err(), Failed::TimedOut);
        let pid: i32 = std::fs::read_to_string(&marker).unwrap().trim().parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // Alive: listed and not a zombie (a zombie waits for whoever reaps orphans here).
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
        };
        while alive() {
            assert!(
                std::time::Instant::now() < deadline,
                "the command's child {pid} outlived it"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
