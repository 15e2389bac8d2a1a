//! Appending and rotating the audit file. Every append takes an exclusive `flock` on a lock file
//! beside it, so the gateway's writer thread and a CLI command (revoking a token or a device
//! while the gateway runs) never interleave a line or rotate under each other. A line is one
//! `write` on an `O_APPEND` descriptor, with no user-space buffer: once `append` returns, the
//! record is in the kernel, whole, in exactly one file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::config::AuditConfig;

pub(crate) struct Appender {
    cfg: AuditConfig,
    file: File,
    lock: File,
}

fn open_log(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::PermissionsExt;
    let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    // The mode applies only to a file this creates: one found readable by others is narrowed.
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(file)
}

pub(crate) fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

struct Locked<'a>(&'a File);

impl<'a> Locked<'a> {
    fn new(f: &'a File) -> std::io::Result<Self> {
        // SAFETY: flock on a descriptor we own; it blocks only behind another audit writer.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Locked(f))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Appender {
    pub(crate) fn open(cfg: AuditConfig) -> std::io::Result<Appender> {
        if let Some(dir) = cfg.file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(lock_path(&cfg.file))?;
        let file = open_log(&cfg.file)?;
        Ok(Appender { cfg, file, lock })
    }

    /// Append one line (it ends with `\n`), rotating first when it would not fit.
    pub(crate) fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        let lock = self.lock.try_clone()?;
        let _held = Locked::new(&lock)?;
        // Another writer may have rotated since: follow the path, not the old descriptor.
        let current = std::fs::metadata(&self.cfg.file).ok();
        let ours = self.file.metadata()?;
        if current.as_ref().is_none_or(|m| !same_file(m, &ours)) {
            self.file = open_log(&self.cfg.file)?;
        }
        let size = self.file.metadata()?.len();
        if size > 0 && size + line.len() as u64 > self.cfg.max_bytes {
            self.rotate()?;
        }
        // One write of the whole line. A full disk can take part of it: the part is cut off
        // again (under the lock, so nobody appended since), or the next record would be glued to
        // half a line and neither would read back.
        let size = self.file.metadata()?.len();
        match self.file.write(line) {
            Ok(n) if n == line.len() => self.file.flush(),
            result => {
                let _ = self.file.set_len(size);
                Err(match result {
                    Ok(_) => std::io::Error::other("the audit line was written short (is the disk full?)"),
                    Err(e) => e,
                })
            }
        }
    }

    /// `audit.jsonl.(keep-1)` → `.keep`, …, `audit.jsonl` → `.1`; the oldest beyond `keep` goes.
    fn rotate(&mut self) -> std::io::Result<()> {
        let base = &self.cfg.file;
        if self.cfg.keep == 0 {
            std::fs::remove_file(base)?;
        } else {
            let _ = std::fs::remove_file(rotated(base, self.cfg.keep));
            for n in (1..self.cfg.keep).rev() {
                let from = rotated(base, n);
                if from.exists() {
                    std::fs::rename(&from, rotated(base, n + 1))?;
                }
            }
            std::fs::rename(base, rotated(base, 1))?;
        }
        self.file = open_log(base)?;
        Ok(())
    }
}

fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Append one record now, from a CLI command (same lock, same rotation as the gateway's writer).
pub(crate) fn append_once(cfg: &AuditConfig, record: &super::Record) -> std::io::Result<()> {
    Appender::open(cfg.clone())?.append(&record.to_line())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn cfg(dir: &Path, max_bytes: u64, keep: u32) -> AuditConfig {
        AuditConfig {
            file: dir.join("audit.jsonl"),
            max_bytes,
            keep,
        }
    }

    fn line(i: usize) -> Vec<u8> {
        format!("{{\"n\":{},\"pad\":\"{}\"}}\n", 1000 + i, "x".repeat(40)).into_bytes()
    }

    fn lines_of(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn rotates_by_size_keeps_n_files_and_never_splits_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path(), 200, 2);
        let mut a = Appender::open(c.clone()).unwrap();
        let len = line(0).len() as u64;
        for i in 0..20 {
            a.append(&line(i)).unwrap();
        }
        let per_file = (200 / len) as usize;
        let files = [c.file.clone(), rotated(&c.file, 1), rotated(&c.file, 2)];
        for f in &files {
            let size = std::fs::metadata(f).unwrap().len();
            assert!(size <= 200, "{} is {size} bytes", f.display());
            let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
            for l in lines_of(f) {
                let v: serde_json::Value = serde_json::from_str(&l).expect("a whole JSON line");
                assert!(v["n"].is_u64());
            }
        }
        assert!(!rotated(&c.file, 3).exists(), "only keep=2 rotations are kept");
        // The newest records are in the base file, the next older in .1, then .2, in order.
        let all: Vec<u64> = files
            .iter()
            .rev()
            .flat_map(|f| lines_of(f))
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(&l).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(all.last(), Some(&1019));
        assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "{all:?}");
        assert_eq!(all.len(), per_file * 2 + lines_of(&c.file).len());
    }

    #[test]
    fn a_file_found_readable_by_others_is_narrowed_to_the_owner() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path(), 1 << 20, 1);
        std::fs::write(&c.file, b"").unwrap();
        std::fs::set_permissions(&c.file, std::fs::Permissions::from_mode(0o644)).unwrap();
        Appender::open(c.clone()).unwrap().append(&line(1)).unwrap();
        let mode = std::fs::metadata(&c.file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_line_larger_than_max_bytes_is_written_whole_in_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path(), 10, 3);
        let mut a = Appender::open(c.clone()).unwrap();
        a.append(&line(1)).unwrap();
        a.append(&line(2)).unwrap();
        assert_eq!(lines_of(&c.file).len(), 1);
        assert_eq!(lines_of(&rotated(&c.file, 1)).len(), 1);
    }

    #[test]
    fn two_appenders_follow_each_others_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path(), 200, 5);
        let mut a = Appender::open(c.clone()).unwrap();
        let mut b = Appender::open(c.clone()).unwrap();
        for i in 0..12 {
            if i % 2 == 0 {
                a.append(&line(i)).unwrap()
            } else {
                b.append(&line(i)).unwrap()
            }
        }
        let total: usize = (0..=5)
            .map(|n| if n == 0 { c.file.clone() } else { rotated(&c.file, n) })
            .map(|f| lines_of(&f).len())
            .sum();
        assert_eq!(total, 12, "no line lost to a rotation by the other writer");
        assert!(std::fs::metadata(&c.file).unwrap().len() <= 200);
    }
}
