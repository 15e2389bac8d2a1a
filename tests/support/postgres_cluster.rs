//! A throwaway PostgreSQL cluster for tests: Debian's `initdb` and `pg_ctl` in a temporary folder,
//! listening only on a Unix socket in that folder (no TCP port, nothing another test can reach),
//! run as the `postgres` OS user when the tests run as root (PostgreSQL refuses root), stopped
//! when dropped. `None` (and a `SKIPPED:` line) when PostgreSQL is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

fn bin_dir() -> Option<PathBuf> {
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
    pub fn start() -> Option<Cluster> {
        let Some(bin) = bin_dir() else {
            println!(
                "SKIPPED: PostgreSQL is not installed (apt-get install postgresql): the PostgreSQL store was not tested"
            );
            return None;
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
        let out = cmd.output().unwrap();
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

    /// A fresh, empty database.
    pub fn database(&self, name: &str) -> String {
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
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
        let _ = cmd.args(["-m", "immediate", "stop", "-D"]).arg(&data).output();
    }
}
