//! The checker the config boundary converts with: it collects every problem (key, message, fix)
//! so the operator sees all of them in one run, and reads paths, addresses and durations the one
//! way the whole config reads them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Problem;

/// Collects problems while converting, so the operator sees all of them in one run.
pub(crate) struct Checker<'a> {
    pub(super) base: &'a Path,
    pub(super) problems: Vec<Problem>,
}

impl Checker<'_> {
    pub(crate) fn problem(&mut self, key: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            message: message.into(),
            fix: fix.into(),
        });
    }

    /// Ends a stage: every problem found so far, or nothing when there is none.
    pub(super) fn done(&mut self, file: &Path) -> Result<(), crate::config::ConfigError> {
        if self.problems.is_empty() {
            return Ok(());
        }
        Err(crate::config::ConfigError::Invalid {
            file: file.to_path_buf(),
            problems: std::mem::take(&mut self.problems),
        })
    }

    /// `name` (of the `what` at `key`) is one `valid` accepts; else a problem, with `fix`.
    pub(super) fn valid_name(&mut self, key: &str, what: &str, name: &str, valid: fn(&str) -> bool, fix: &str) {
        if !valid(name) {
            self.problem(
                format!("{key}.name"),
                format!("{name:?} is not a valid {what} name"),
                fix,
            );
        }
    }

    /// `name` (of the table at `key`) is not one `seen` already holds.
    pub(super) fn unique(&mut self, seen: &mut std::collections::HashSet<String>, key: &str, name: &str, fix: &str) {
        if !seen.insert(name.to_string()) {
            self.problem(format!("{key}.name"), format!("{name:?} is used twice"), fix);
        }
    }

    pub(crate) fn path(&self, value: &str) -> PathBuf {
        let p = Path::new(value);
        if p.is_absolute() {
            lexical_clean(p)
        } else {
            lexical_clean(&self.base.join(p))
        }
    }

    pub(crate) fn socket_addr(&mut self, key: &str, value: &str) -> Option<SocketAddr> {
        match value.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.problem(
                    key,
                    format!("{value:?} is not an address with a port"),
                    format!("write {key} = \"127.0.0.1:8443\" (an IP address and a port; 0 picks a free port)"),
                );
                None
            }
        }
    }

    pub(crate) fn duration(&mut self, key: &str, value: &str) -> Duration {
        match parse_duration(value) {
            Some(d) => d,
            None => {
                self.problem(
                    key,
                    format!("{value:?} is not a duration"),
                    format!("write {key} = \"30s\" (a number with ms, s, m or h)"),
                );
                Duration::from_secs(1)
            }
        }
    }
}

/// `a/b/../c` → `a/c`, without touching the file system (paths may not exist yet).
pub fn lexical_clean(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `"500ms"`, `"10s"`, `"5m"`, `"1h"`.
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
        _ => None,
    }
}
