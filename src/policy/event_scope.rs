//! The event streams a shared server sends for every folder it serves, filtered to a pinned
//! project's folder (hostile round five, item 3). Pure.
//!
//! What OpenCode sends (1.18.33 and 2.1.2, seen): `GET /event` is scoped by the server itself
//! (to the folder the gateway pins); these are not, whatever the query or header says:
//! - `GET /global/event` (1.x): `{"directory","project","payload":{…}}`; frames without a
//!   `directory` are the server's own (`server.connected`, `server.heartbeat`,
//!   `global.disposed`).
//! - `GET /api/event` (1.18.33's v2 bus, and 2.x's only stream):
//!   `{"id","type","location":{"directory"},"data":{…}}`; some frames carry no `location`
//!   (`server.connected`; on 2.x `session.deleted`, `session.execution.*`, `credential.*`),
//!   and a session's are told by its `data.sessionID`.
//!
//! The filter fails closed: a frame is passed only when it names a folder inside the project,
//! belongs to a session this stream has seen inside it, or is one of the server's own frames
//! that name nothing. A frame it cannot read is dropped; comments (`: heartbeat`) pass.

use std::collections::HashSet;
use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::scope::dir_inside;

/// Which envelope the stream's frames have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `GET /global/event`: the folder in the envelope's `directory`.
    Global,
    /// `GET /api/event`: the folder in `location.directory`, sessions by `data.sessionID`.
    Located,
}

/// Frames of the server's own that name no folder, and may pass.
const GLOBAL_OWN: &[&str] = &["server.connected", "server.heartbeat", "global.disposed"];
const LOCATED_OWN: &[&str] = &["server.connected"];

/// Sessions remembered per stream as the project's; past it the set starts again (their frames
/// without a folder are then dropped until one with a folder comes: failing closed).
const MAX_SESSIONS: usize = 4096;

/// A stream's filter: complete events are judged at their blank line; a partial one waits for
/// the rest of itself (never for a buffer to fill).
pub struct EventFilter {
    root: PathBuf,
    shape: Shape,
    pending: BytesMut,
    mine: HashSet<String>,
}

impl EventFilter {
    pub fn new(root: PathBuf, shape: Shape) -> Self {
        EventFilter {
            root,
            shape,
            pending: BytesMut::new(),
            mine: HashSet::new(),
        }
    }

    /// The event's JSON (its `data:` lines joined), `None` for an event of comments only.
    fn data(event: &[u8]) -> Option<Result<Value, ()>> {
        let text = std::str::from_utf8(event).ok();
        let Some(text) = text else { return Some(Err(())) };
        let lines: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if lines.is_empty() {
            return None;
        }
        Some(serde_json::from_str(&lines.join("\n")).map_err(|_| ()))
    }

    fn keep(&mut self, event: &[u8]) -> bool {
        match Self::data(event) {
            None => true,
            Some(Err(())) => false,
            Some(Ok(v)) => match self.shape {
                Shape::Global => self.keep_global(&v),
                Shape::Located => self.keep_located(&v),
            },
        }
    }

    fn keep_global(&self, v: &Value) -> bool {
        match v.get("directory") {
            Some(Value::String(dir)) => dir_inside(dir, &self.root),
            Some(_) => false,
            None => v["payload"]["type"].as_str().is_some_and(|t| GLOBAL_OWN.contains(&t)),
        }
    }

    fn keep_located(&mut self, v: &Value) -> bool {
        let session = v["data"]["sessionID"].as_str();
        match v.get("location").map(|l| &l["directory"]) {
            Some(Value::String(dir)) => {
                let inside = dir_inside(dir, &self.root);
                if let Some(id) = session {
                    self.learn(id, inside);
                }
                inside
            }
            Some(_) => false,
            None => match session {
                Some(id) => self.mine.contains(id),
                None => v["type"].as_str().is_some_and(|t| LOCATED_OWN.contains(&t)),
            },
        }
    }

    fn learn(&mut self, id: &str, inside: bool) {
        if !inside {
            self.mine.remove(id);
            return;
        }
        if self.mine.len() >= MAX_SESSIONS && !self.mine.contains(id) {
            self.mine.clear();
        }
        self.mine.insert(id.to_string());
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

    fn frame(json: &str) -> Vec<u8> {
        format!("data: {json}\n\n").into_bytes()
    }

    #[test]
    fn the_global_stream_keeps_the_projects_folder_and_the_servers_own_frames() {
        let mut f = EventFilter::new(PathBuf::from("/home/a/web"), Shape::Global);
        let mine = frame(r#"{"directory":"/home/a/web","payload":{"type":"x"}}"#);
        let other = frame(r#"{"directory":"/home/b","payload":{"type":"session.created"}}"#);
        let beat = frame(r#"{"payload":{"type":"server.heartbeat","properties":{}}}"#);
        let unnamed = frame(r#"{"payload":{"type":"session.created","properties":{"info":{"title":"secret"}}}}"#);
        let odd = frame(r#"{"directory":7,"payload":{"type":"x"}}"#);
        let all = [&other[..], &mine, &beat, &unnamed, &odd, b"data: not json\n\n"].concat();
        assert_eq!(&f.push(&all)[..], [&mine[..], &beat[..]].concat().as_slice());
        assert!(f.push(&mine[..10]).is_empty(), "a split event waits for its end");
        assert_eq!(&f.push(&mine[10..])[..], &mine[..]);
    }

    /// Frames as 1.18.33's and 2.1.2's `/api/event` send them (`/tmp` captures of issue 55):
    /// a session of the other folder's frames are dropped, those without a `location` too
    /// unless their session was seen inside; a comment passes.
    #[test]
    fn the_api_stream_keeps_the_projects_folder_and_its_sessions_frames() {
        let mut f = EventFilter::new(PathBuf::from("/p/a"), Shape::Located);
        let connected = frame(r#"{"id":"evt_1","type":"server.connected","data":{}}"#);
        let heartbeat = b": heartbeat\n\n".to_vec();
        let created_b = frame(
            r#"{"id":"evt_2","type":"session.created","location":{"directory":"/p/b"},"data":{"sessionID":"ses_b","title":"secret-b"}}"#,
        );
        let created_a = frame(
            r#"{"id":"evt_3","type":"session.created","location":{"directory":"/p/a/sub"},"data":{"sessionID":"ses_a","title":"mine"}}"#,
        );
        let started_a = frame(r#"{"id":"evt_4","type":"session.execution.started","data":{"sessionID":"ses_a"}}"#);
        let started_b = frame(r#"{"id":"evt_5","type":"session.execution.started","data":{"sessionID":"ses_b"}}"#);
        let unseen = frame(r#"{"id":"evt_6","type":"session.deleted","data":{"sessionID":"ses_c"}}"#);
        let credential = frame(r#"{"id":"evt_7","type":"credential.switched","data":{"integrationID":"x"}}"#);
        let all = [
            &connected[..],
            &heartbeat,
            &created_b,
            &created_a,
            &started_a,
            &started_b,
            &unseen,
            &credential,
        ]
        .concat();
        let kept = f.push(&all);
        assert_eq!(
            &kept[..],
            [&connected[..], &heartbeat, &created_a, &started_a].concat().as_slice(),
            "{}",
            String::from_utf8_lossy(&kept)
        );
        // A session moved out of the folder is no longer the project's.
        let moved = frame(r#"{"type":"session.moved","location":{"directory":"/p/b"},"data":{"sessionID":"ses_a"}}"#);
        assert!(f.push(&moved).is_empty());
        assert!(f.push(&started_a).is_empty());
    }
}
