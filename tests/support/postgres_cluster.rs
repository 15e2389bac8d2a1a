//! A throwaway PostgreSQL cluster for tests: Debian's `initdb` and `pg_ctl` in a temporary folder,
//! listening only on a Unix socket in that folder (no TCP port, nothing another test can reach),
//! run as the `postgres` OS user when the tests run as root (PostgreSQL refuses root), stopped
//! when dropped. Where PostgreSQL is not installed: `None`, after [`skip::skip`] said so (under
//! CI it fails the test instead). Every wait is bounded: a program that hangs, or a cluster that
//! does not answer, fails the test saying which.
//!
//! `OCGW_TEST_PG_BIN` (tests only) names the folder holding `initdb` and `pg_ctl` instead of the
//! newest `/usr/lib/postgresql/*/bin`: PostgreSQL installed elsewhere, or (a folder without
//! them) a run that shows how a machine without PostgreSQL is reported.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "skip.rs"]
pub mod skip;

/// The variable naming the folder of PostgreSQL's programs (tests only).
pub const BIN_VAR: &str = "OCGW_TEST_PG_BIN";
/// How long `initdb`, `pg_ctl` (whose own wait for the start is 60 s) and the admin connection
/// may take.
const PROGRAM_BOUND: Duration = Duration::from_secs(90);
const CONNECT_BOUND_SECS: u64 = 10;

pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

/// The folder holding `initdb` and `pg_ctl`, or why there is none.
fn bin_dir() -> Result<PathBuf, String> {
    let has_both = |b: &Path| b.join("initdb").exists() && b.join("pg_ctl").exists();
    if let Some(dir) = std::env::var_os(BIN_VAR) {
        let dir = PathBuf::from(dir);
        return if has_both(&dir) {
            Ok(dir)
        } else {
            Err(format!("no initdb and pg_ctl in {} ({BIN_VAR})", dir.display()))
        };
    }
    newest_installed()
        .ok_or_else(|| "PostgreSQL is not installed (no initdb and pg_ctl in /usr/lib/postgresql/*/bin)".into())
}

fn newest_installed() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
        .collect();
    found.sort();
    found.pop()
}

impl Cluster {
    /// A running cluster, or `None` (said through [`skip::skip`]) without PostgreSQL. On the
    /// test's own thread: a test that starts it elsewhere names itself with [`Cluster::start_for`].
    pub fn start() -> Option<Cluster> {
        Self::start_for(&skip::this_test())
    }

    /// [`Cluster::start`] for the test named `test`.
    pub fn start_for(test: &str) -> Option<Cluster> {
        let bin = match bin_dir() {
            Ok(bin) => bin,
            Err(why) => {
                skip::skip(
                    test,
                    &format!("{why}: the PostgreSQL store is not tested by this run"),
                    &format!("apt-get install postgresql, or set {BIN_VAR} to the folder of its programs"),
                );
                return None;
            }
        };
        let as_postgres = is_root();
        let dir = tempfile::tempdir().unwrap();
        if as_postgres {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown postgres {}", dir.path().display());
        }
        let c = Cluster { dir, bin, as_postgres };
        let data = c.dir.path().join("data");
        c.run("initdb", &["-A", "trust", "-U", "ocgw", "--no-sync", "-D"], Some(&data));
        let opts = format!("-k {} -c listen_addresses='' -c fsync=off", c.dir.path().display());
        c.run(
            "pg_ctl",
            &[
                "-w",
                "-t",
                "60",
                "-l",
                &c.dir.path().join("log").display().to_string(),
                "-o",
                &opts,
                "start",
                "-D",
            ],
            Some(&data),
        );
        Some(c)
    }

    fn run(&self, program: &str, args: &[&str], last: Option<&Path>) {
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
            c
        } else {
            Command::new(self.bin.join(program))
        };
        cmd.args(args);
        if let Some(p) = last {
            cmd.arg(p);
        }
        let out = bounded(&mut cmd, program).unwrap_or_else(|why| panic!("{why}"));
        assert!(
            out.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A connection string for `database` (made by [`Cluster::database`]).
    pub fn url(&self, database: &str) -> String {
        format!(
            "host={} user=ocgw dbname={database} sslmode=disable",
            self.dir.path().display()
        )
    }

    /// Stop every process of the cluster (SIGSTOP: the postmaster first, so it forks no more,
    /// then its children): connections stay open and nothing answers, as a hung database
    /// host. Running again when the guard is dropped, whatever the test did.
    pub fn freeze(&self) -> Frozen {
        let pid_file = self.dir.path().join("data/postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).unwrap();
        let postmaster: i32 = text.lines().next().unwrap().trim().parse().unwrap();
        let mut pids = vec![postmaster];
        signal(postmaster, libc::SIGSTOP);
        pids.extend(children(postmaster));
        for &pid in &pids[1..] {
            signal(pid, libc::SIGSTOP);
        }
        Frozen { pids }
    }

    /// A fresh, empty database. The admin connection is bounded: a cluster that does not
    /// answer fails the test saying so.
    pub fn database(&self, name: &str) -> String {
        let admin_url = format!(
            "{} connect_timeout={CONNECT_BOUND_SECS} options='-c statement_timeout={}s'",
            self.url("postgres"),
            PROGRAM_BOUND.as_secs()
        );
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("the throwaway cluster did not take a connection: {e}"));
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        self.url(name)
    }
}

/// A stopped cluster's processes; dropping it lets them run again.
pub struct Frozen {
    pids: Vec<i32>,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in self.pids.iter().rev() {
            signal(pid, libc::SIGCONT);
        }
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid this cluster's pid file or /proc named; no memory is involved.
    let rc = unsafe { libc::kill(pid, sig) };
    assert!(
        rc == 0 || sig == libc::SIGCONT,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// The processes whose parent is `parent` (/proc/<pid>/stat's fourth field).
fn children(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // After the command's closing parenthesis: state, then the parent's pid.
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) == Some(parent)
        })
        .collect()
}

/// `cmd`'s output once it exits, or what it printed when it ran past [`PROGRAM_BOUND`] (then
/// it was killed, with everything it started: its own process group). Its output goes to
/// files: a pipe nobody reads could stall it, and one a forked server holds would never close.
fn bounded(cmd: &mut Command, program: &str) -> Result<std::process::Output, String> {
    use std::os::unix::process::CommandExt;
    let out = tempfile::tempfile().unwrap();
    let err = tempfile::tempfile().unwrap();
    cmd.stdout(out.try_clone().unwrap())
        .stderr(err.try_clone().unwrap())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start {program}: {e}"))?;
    let deadline = Instant::now() + PROGRAM_BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let group = i32::try_from(child.id()).expect("a pid");
            // SAFETY: kill(2) on the process group this call made; no memory is involved.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            let _ = child.wait();
            return Err(format!(
                "{program} did not finish within {PROGRAM_BOUND:?} (killed); it printed: {}{}",
                read_all(out),
                read_all(err)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(std::process::Output {
        status,
        stdout: read_all(out).into_bytes(),
        stderr: read_all(err).into_bytes(),
    })
}

fn read_all(mut f: std::fs::File) -> String {
    use std::io::{Read, Seek};
    let mut s = String::new();
    let _ = f.rewind().and_then(|_| f.read_to_string(&mut s));
    s
}

fn is_root() -> bool {
    // The effective user, as `id -u` says: no libc call needed for one test helper.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        // Bounded too (a drop while a test unwinds must not hang it); a failure is only said.
        if let Err(why) = bounded(cmd.args(["-m", "immediate", "stop", "-D"]).arg(&data), "pg_ctl stop") {
            eprintln!("{why}");
        }
    }
}
