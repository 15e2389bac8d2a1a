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

    /// A fresh, empty database.
    pub fn database(&self, name: &str) -> String {
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        self.url(name)
    }
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
