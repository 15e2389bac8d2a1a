//! Keeping a pinned project inside its directory on an OpenCode server it may share with other
//! directories (an external upstream: one process serves every directory it is asked for).
//! Session IDs are global, so a session is usable only if its directory is the project's; and
//! the listings that span directories are filtered to the project (the event streams that do:
//! `event_scope.rs`).
//! A spawned project's server has private data folders, so none of this is needed there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::ttl_map::TtlMap;

const MAX_CACHED_SESSIONS: usize = 10_000;
const SESSION_DIR_LIFE: Duration = Duration::from_secs(600);

/// Session ID → its directory, learned from the upstream. Entries expire: a session can be moved.
pub struct SessionDirs {
    map: TtlMap<String, PathBuf>,
}

impl Default for SessionDirs {
    fn default() -> Self {
        SessionDirs {
            map: TtlMap::new(MAX_CACHED_SESSIONS, SESSION_DIR_LIFE),
        }
    }
}

impl SessionDirs {
    pub(crate) fn get(&self, id: &str) -> Option<PathBuf> {
        self.map.get(id)
    }

    pub(crate) fn insert(&self, id: &str, dir: PathBuf) {
        self.map.insert(id.to_string(), dir);
    }
}

/// A directory OpenCode names is the pinned root or inside it: the one test of the proxy's
/// listings and event stream, and of the inbox's watch.
pub(crate) fn dir_inside(dir: &str, root: &Path) -> bool {
    Path::new(dir).starts_with(root)
}

/// `GET /project`: keep projects whose worktree holds the pinned directory or lies inside it.
pub fn filter_projects(body: &[u8], root: &Path) -> Option<Vec<u8>> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let kept: Vec<_> = v
        .as_array()?
        .iter()
        .filter(|p| {
            // 1.x names a project's folder `worktree`, 2.x `canonical`.
            p["worktree"]
                .as_str()
                .or_else(|| p["canonical"].as_str())
                .is_some_and(|w| root.starts_with(w) || dir_inside(w, root))
        })
        .cloned()
        .collect();
    serde_json::to_vec(&kept).ok()
}

/// `GET /experimental/session`: keep sessions in the pinned directory.
pub fn filter_sessions(body: &[u8], root: &Path) -> Option<Vec<u8>> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let kept: Vec<_> = v
        .as_array()?
        .iter()
        .filter(|s| s["directory"].as_str().is_some_and(|d| dir_inside(d, root)))
        .cloned()
        .collect();
    serde_json::to_vec(&kept).ok()
}

/// `GET /api/session` (v2): keep the page's sessions whose location is in the pinned directory.
pub fn filter_session_page(body: &[u8], root: &Path) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let data = v.get_mut("data")?.as_array_mut()?;
    data.retain(|s| {
        s["location"]["directory"]
            .as_str()
            .or_else(|| s["directory"].as_str())
            .is_some_and(|d| dir_inside(d, root))
    });
    serde_json::to_vec(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_keep_the_project_only() {
        let root = Path::new("/home/a/web");
        let projects = br#"[{"id":"global","worktree":"/"},{"id":"p1","worktree":"/home/a/web"},{"id":"p2","worktree":"/home/b/secret"}]"#;
        let out = String::from_utf8(filter_projects(projects, root).unwrap()).unwrap();
        assert!(out.contains("p1") && out.contains("global") && !out.contains("secret"));
        let sessions = br#"[{"id":"s1","directory":"/home/a/web"},{"id":"s2","directory":"/home/b/secret"}]"#;
        let out = String::from_utf8(filter_sessions(sessions, root).unwrap()).unwrap();
        assert!(out.contains("s1") && !out.contains("s2"));
        let page = br#"{"data":[{"id":"s1","location":{"directory":"/home/a/web/sub"}},{"id":"s2","location":{"directory":"/home/b"}}],"cursor":{"next":null}}"#;
        let out = String::from_utf8(filter_session_page(page, root).unwrap()).unwrap();
        assert!(
            out.contains("s1") && !out.contains("s2") && out.contains("cursor"),
            "{out}"
        );
    }
}
