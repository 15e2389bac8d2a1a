//! Keeping a pinned project inside its directory on an OpenCode server it may share with other
//! directories (an external upstream: one process serves every directory it is asked for).
//! Session IDs are global, so a session is usable only if its directory is the project's; and
//! the listings and the event stream that span directories are filtered to the project.
//! A spawned project's server has private data folders, so none of this is needed there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{Bytes, BytesMut};

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
            p["worktree"]
                .as_str()
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

/// Filters `GET /global/event`, whose events carry the directory they come from, to the pinned
/// directory. Events are complete at a blank line; a partial one waits for the rest of itself
/// (never for a buffer to fill).
pub struct EventFilter {
    root: PathBuf,
    pending: BytesMut,
}

impl EventFilter {
    pub fn new(root: PathBuf) -> Self {
        EventFilter {
            root,
            pending: BytesMut::new(),
        }
    }

    fn keep(&self, event: &[u8]) -> bool {
        let text = String::from_utf8_lossy(event);
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim_start())
                && let Some(dir) = v.get("directory").and_then(|d| d.as_str())
            {
                return dir_inside(dir, &self.root);
            }
        }
        true
    }

    /// The complete, allowed events in `chunk` (plus what was pending before it).
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        let mut out = BytesMut::new();
        while let Some(end) = find_event_end(&self.pending) {
            let event = self.pending.split_to(end);
            if self.keep(&event) {
                out.extend_from_slice(&event);
            }
        }
        out.freeze()
    }
}

fn find_event_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
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

    #[test]
    fn events_of_other_directories_are_dropped_and_split_events_wait_for_their_end() {
        let mut f = EventFilter::new(PathBuf::from("/home/a/web"));
        let mine = b"data: {\"directory\":\"/home/a/web\",\"payload\":{\"type\":\"x\"}}\n\n";
        let other = b"data: {\"directory\":\"/home/b\",\"payload\":{\"type\":\"y\"}}\n\n";
        let plain = b"data: {\"payload\":{\"type\":\"server.connected\"}}\n\n";
        let mut all = Vec::new();
        all.extend_from_slice(other);
        all.extend_from_slice(mine);
        all.extend_from_slice(plain);
        let out = f.push(&all);
        assert_eq!(&out[..], [&mine[..], &plain[..]].concat().as_slice());
        assert!(f.push(&mine[..10]).is_empty());
        assert_eq!(&f.push(&mine[10..])[..], &mine[..]);
    }
}
