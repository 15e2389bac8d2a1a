//! The gateway's own secrets as paths: the config file (password hashes), TLS and SSH keys, the
//! dev CA, `state_dir`, password and env files. Built once from validated settings, so the request
//! path can ask [`ProtectedPaths::covers`] whether a file a client names is one of them, and the
//! config boundary can refuse a project whose directory holds (or lies inside) one.

use std::path::{Component, Path, PathBuf};

/// One protected path: the config key that names it, the path as written (absolute, cleaned)
/// and the same path with symlinks resolved.
#[derive(Debug, Clone)]
pub(crate) struct Protected {
    pub key: String,
    pub path: PathBuf,
    pub canonical: PathBuf,
    /// A folder the gateway owns (`state_dir`, the dev certificate folder): everything inside counts.
    pub dir: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ProtectedPaths {
    entries: Vec<Protected>,
}

impl ProtectedPaths {
    pub fn add(&mut self, key: impl Into<String>, path: &Path, dir: bool) {
        let path = absolute(path);
        let canonical = resolve(&path);
        self.entries.push(Protected {
            key: key.into(),
            path,
            canonical,
            dir,
        });
    }

    pub(crate) fn entries(&self) -> &[Protected] {
        &self.entries
    }

    /// Is `candidate` one of the protected paths, or inside a protected folder? Relative paths are
    /// taken from the working directory (see [`ProtectedPaths::covers_in`] for a project's folder).
    /// `..` is applied lexically first (as Node's `path.join` does), then symlinks are resolved:
    /// one `realpath` of the longest existing prefix, nothing else.
    pub fn covers(&self, candidate: &Path) -> bool {
        let abs = absolute(candidate);
        self.matches(&abs) || self.matches(&resolve(&abs)) || self.hard_link(&abs)
    }

    /// A hard link to a protected file is the file under another name (OpenCode refuses to
    /// follow a symlink out of its directory, but a hard link is indistinguishable to it). Only a
    /// file with more than one link costs more than one `stat`.
    fn hard_link(&self, candidate: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = std::fs::metadata(candidate) else {
            return false;
        };
        if !m.is_file() || m.nlink() < 2 {
            return false;
        }
        self.entries
            .iter()
            .filter(|e| !e.dir)
            .any(|e| std::fs::metadata(&e.path).is_ok_and(|p| p.dev() == m.dev() && p.ino() == m.ino()))
    }

    /// Like [`ProtectedPaths::covers`], with a relative `candidate` taken from `base` (a
    /// project's directory, as OpenCode's file API reads it).
    pub fn covers_in(&self, base: &Path, candidate: &Path) -> bool {
        self.covers(&base.join(candidate))
    }

    /// The entry that `candidate` falls under, without touching the file system (`candidate`
    /// must already be absolute and clean).
    fn matches(&self, candidate: &Path) -> bool {
        self.entries.iter().any(|e| {
            let hit = |p: &Path| {
                if e.dir {
                    candidate.starts_with(p)
                } else {
                    candidate == p
                }
            };
            hit(&e.path) || hit(&e.canonical)
        })
    }
}

/// Absolute (against the working directory) and lexically clean (`.` and `..` applied).
pub(crate) fn absolute(p: &Path) -> PathBuf {
    lexical_clean(&joined(p))
}

/// Absolute: against the working directory when relative (as it is when that is unknown).
pub(crate) fn joined(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

fn lexical_clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `path` with symlinks resolved as far as it exists; the missing rest appended as written (a key
/// made on first start does not exist yet, but its folder may be a symlink).
pub(crate) fn resolve(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(canon) = existing.canonicalize() {
            let mut out = canon;
            for name in rest.iter().rev() {
                out.push(name);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Where the dev CA and the server certificate it signs live: the CA beside the server certificate.
#[derive(Debug, Clone)]
pub struct DevCertPaths {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl DevCertPaths {
    /// The CA lives beside the server certificate.
    pub fn beside(cert: &Path, key: &Path) -> Self {
        let dir = cert.parent().unwrap_or(Path::new("."));
        DevCertPaths {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(root: &Path) -> ProtectedPaths {
        let mut p = ProtectedPaths::default();
        p.add("config file", &root.join("gw/gateway.toml"), false);
        p.add("tls.key", &root.join("gw/certs/server.key"), false);
        p.add("server.state_dir", &root.join("state"), true);
        p
    }

    #[test]
    fn files_and_everything_inside_protected_folders_are_covered() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("gw/certs")).unwrap();
        std::fs::create_dir_all(root.join("project")).unwrap();
        let p = paths(root);
        assert!(p.covers(&root.join("gw/gateway.toml")));
        assert!(p.covers(&root.join("gw/certs/server.key")));
        assert!(p.covers(&root.join("state")));
        assert!(
            p.covers(&root.join("state/projects/web/opencode.db")),
            "inside a folder"
        );
        assert!(
            !p.covers(&root.join("gw/certs/server.key.bak")),
            "a file covers only itself"
        );
        assert!(
            !p.covers(&root.join("gw")),
            "the config's folder itself is not a secret"
        );
        assert!(
            !p.covers(&root.join("stateful")),
            "component-wise, not by string prefix"
        );
        assert!(!p.covers(&root.join("project/README.md")));
    }

    #[test]
    fn dot_dot_and_relative_paths_are_resolved_before_comparing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("gw/certs")).unwrap();
        std::fs::create_dir_all(root.join("project/src")).unwrap();
        let p = paths(&root);
        let project = root.join("project");
        assert!(p.covers(&project.join("../gw/certs/server.key")));
        assert!(p.covers(&project.join("src/../../state/x")));
        assert!(p.covers(&project.join("./../gw/./gateway.toml")));
        assert!(
            p.covers_in(&project, Path::new("../gw/gateway.toml")),
            "relative to a project"
        );
        assert!(p.covers_in(&project, Path::new("src/../../gw/certs/server.key")));
        assert!(!p.covers_in(&project, Path::new("src/../README.md")));
        assert!(
            !p.covers_in(&project, Path::new("gw/gateway.toml")),
            "a same-named file in the project"
        );
        // Relative to the working directory.
        let cwd = std::env::current_dir().unwrap();
        let mut q = ProtectedPaths::default();
        q.add("config file", Path::new("config/x.toml"), false);
        assert!(q.covers(&cwd.join("config/x.toml")));
        assert!(q.covers(Path::new("config/../config/x.toml")));
    }

    #[test]
    fn symlinks_into_and_from_protected_paths_are_seen_through() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("gw/certs")).unwrap();
        std::fs::write(root.join("gw/certs/server.key"), "k").unwrap();
        std::fs::create_dir_all(root.join("project")).unwrap();
        let p = paths(&root);
        // A link in the project to the key, and to the certificate folder.
        std::os::unix::fs::symlink(root.join("gw/certs/server.key"), root.join("project/k")).unwrap();
        std::os::unix::fs::symlink(root.join("gw/certs"), root.join("project/c")).unwrap();
        assert!(p.covers(&root.join("project/k")));
        assert!(p.covers(&root.join("project/c/server.key")));
        assert!(p.covers_in(&root.join("project"), Path::new("c/server.key")));
        // Protected paths configured through a symlinked folder match their real location too.
        std::os::unix::fs::symlink(root.join("gw"), root.join("gw-link")).unwrap();
        let mut q = ProtectedPaths::default();
        q.add("tls.key", &root.join("gw-link/certs/server.key"), false);
        assert!(q.covers(&root.join("gw/certs/server.key")));
        assert!(q.covers(&root.join("gw-link/certs/server.key")));
        // A key that does not exist yet, in a folder reached through a symlink.
        q.add("ssh.host_key", &root.join("gw-link/certs/ssh_host_ed25519_key"), false);
        assert!(q.covers(&root.join("gw/certs/ssh_host_ed25519_key")));
    }
}
