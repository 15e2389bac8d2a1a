//! Directory pinning. OpenCode lets every request choose the directory it acts in (query
//! `directory`, `workspace`, `location[directory]`, `location[workspace]`, headers
//! `x-opencode-directory`, `x-opencode-workspace`, and fields of a few bodies). For a project with
//! a `directory`, the gateway removes every selector a client sends and names the project's
//! directory itself (one header, which OpenCode's v1 and v2 routes both read), and checks the
//! body fields that choose a directory, refusing any outside the project. Pure functions; the
//! pipeline applies them.
//!
//! This is defence in depth: the boundary between projects is one OpenCode process per project
//! with its own data folders (spawned projects), since an operator can reach any path through a
//! terminal or a prompt anyway.

use std::path::{Component, Path, PathBuf};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::json_body::Body;
use super::plan::BodyRule;

pub(crate) const DIRECTORY_HEADER: HeaderName = HeaderName::from_static("x-opencode-directory");
const WORKSPACE_HEADER: HeaderName = HeaderName::from_static("x-opencode-workspace");

/// Is this (decoded) query parameter name a directory or workspace selector?
pub fn is_selector_param(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("directory") || n.contains("workspace") || n.starts_with("location")
}

/// The header value naming `dir`, percent-encoded as OpenCode's clients send it.
pub(crate) fn directory_header(dir: &Path) -> HeaderValue {
    let mut out = String::new();
    for b in dir.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/._-~".contains(b) {
            out.push(*b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&out).expect("percent-encoded ASCII is a valid header value")
}

/// Replace the client's directory and workspace headers with the project's directory.
pub fn pin_headers(headers: &mut HeaderMap, dir: &HeaderValue) {
    headers.remove(&DIRECTORY_HEADER);
    headers.remove(&WORKSPACE_HEADER);
    headers.insert(DIRECTORY_HEADER, dir.clone());
}

/// Is `candidate` (as a client wrote it) inside `root` (canonical)? Relative paths are taken
/// from `root`; `..` is resolved; so are symlinks, for the part of the path that exists; a
/// percent-encoded spelling must be inside too.
pub fn inside(root: &Path, candidate: &str) -> bool {
    let decoded = crate::policy::query::percent_decode(candidate, false);
    [candidate, decoded.as_ref()]
        .iter()
        .all(|c| resolve(root, c).is_some_and(|p| p.starts_with(root)))
}

fn resolve(root: &Path, candidate: &str) -> Option<PathBuf> {
    if candidate.is_empty() || candidate.contains('\0') {
        return None;
    }
    let p = Path::new(candidate);
    let p = if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
    let clean = crate::config::validate::lexical_clean(&p);
    if clean.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    // Resolve symlinks in the longest prefix that exists; the rest cannot be a link yet.
    let mut existing = clean.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(existing.file_name()?.to_os_string());
        if !existing.pop() {
            return None;
        }
    }
    let mut real = existing.canonicalize().ok()?;
    for part in rest.iter().rev() {
        real.push(part);
    }
    Some(real)
}

fn field<'v>(v: &'v serde_json::Value, dotted: &str) -> Option<&'v serde_json::Value> {
    dotted.split('.').try_fold(v, |v, k| v.get(k))
}

/// The body with the rule's `placed` field set to the project's directory, when the rule has one
/// and the body leaves it out (absent or null): `Ok(None)` when nothing is to be placed. Read
/// after [`check_body`] passed, so a present field is already inside the project. A body whose
/// path to the field is not made of objects is refused: the gateway cannot place the folder.
pub fn placed(body: &Body, rule: &BodyRule, root: &Path) -> Result<Option<serde_json::Value>, String> {
    let (Some(dotted), Body::Json(v)) = (rule.placed, body) else {
        return Ok(None);
    };
    if field(v, dotted).is_some_and(|x| !x.is_null()) {
        return Ok(None);
    }
    let mut out = v.clone();
    let mut at = &mut out;
    let keys: Vec<&str> = dotted.split('.').collect();
    for (i, key) in keys.iter().enumerate() {
        let serde_json::Value::Object(map) = at else {
            return Err(format!(
                "{dotted}: the body is not an object there, so the project's folder cannot be set"
            ));
        };
        let next = if i + 1 == keys.len() {
            serde_json::Value::String(root.to_string_lossy().into_owned())
        } else {
            serde_json::Value::Object(Default::default())
        };
        let slot = map.entry(key.to_string()).or_insert(serde_json::Value::Null);
        if slot.is_null() {
            *slot = next;
        }
        at = slot;
    }
    Ok(Some(out))
}

/// What a checked body names, for the checks the caller makes with state of its own.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BodyNames {
    /// Sessions (to scope on a shared upstream).
    pub sessions: Vec<String>,
    /// Directories (inside the project; the caller keeps the gateway's own files out).
    pub paths: Vec<String>,
}

/// Check a body (the one reading, `json_body.rs`) against a rule: `Err` says which field points
/// where; `Ok` has the sessions and directories the body names.
pub fn check_body(body: &Body, rule: &BodyRule, root: &Path) -> Result<BodyNames, String> {
    let mut names = BodyNames::default();
    let Body::Json(v) = body else {
        return Ok(names);
    };
    for f in rule.forbidden {
        if field(v, f).is_some_and(|x| !x.is_null()) {
            return Err(format!("{f} cannot be chosen through the gateway"));
        }
    }
    for f in rule.inside {
        match field(v, f) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(s)) if inside(root, s) => names.paths.push(s.clone()),
            Some(other) => {
                return Err(format!(
                    "{f} = {other} is outside the project's directory {}",
                    root.display()
                ));
            }
        }
    }
    for f in rule.sessions {
        match field(v, f) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(s)) => names.sessions.push(s.clone()),
            Some(other) => return Err(format!("{f} = {other} is not a session ID")),
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("proj");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        let root = root.canonicalize().unwrap();
        (t, root)
    }

    #[test]
    fn a_folder_read_only_from_the_body_is_placed_when_left_out() {
        let (_t, root) = root();
        let rule = crate::policy::plan::body_rule("POST", "/api/session").unwrap();
        let r = root.to_str().unwrap();
        let read = |s: &str| crate::policy::json_body::read(s.as_bytes()).unwrap();
        for body in [
            r#"{}"#,
            r#"{"location":null}"#,
            r#"{"location":{}}"#,
            r#"{"location":{"directory":null}}"#,
            r#"{"title":"x"}"#,
        ] {
            let v = placed(&read(body), rule, &root)
                .unwrap()
                .unwrap_or_else(|| panic!("{body}"));
            assert_eq!(v["location"]["directory"], r, "{body}");
        }
        let kept = format!(r#"{{"location":{{"directory":"{r}/sub"}}}}"#);
        assert_eq!(
            placed(&read(&kept), rule, &root).unwrap(),
            None,
            "a folder given is kept"
        );
        assert!(placed(&read(r#"{"location":"x"}"#), rule, &root).is_err());
        assert!(placed(&read("[]"), rule, &root).is_err());
        assert_eq!(
            placed(&read(""), rule, &root).unwrap(),
            None,
            "no body: the upstream refuses it"
        );
        let other = crate::policy::plan::body_rule("POST", "/api/shell").unwrap();
        assert_eq!(placed(&read("{}"), other, &root).unwrap(), None);
    }

    #[test]
    fn paths_inside_and_outside() {
        let (t, root) = root();
        let r = root.to_str().unwrap();
        assert!(inside(&root, r));
        assert!(inside(&root, &format!("{r}/sub")));
        assert!(inside(&root, &format!("{r}/new/not/yet")));
        assert!(inside(&root, "sub"), "relative to the project");
        assert!(!inside(&root, "/etc"));
        assert!(!inside(&root, &format!("{r}/../../etc")));
        assert!(!inside(&root, "../x"));
        assert!(
            !inside(&root, &format!("{r}/%2E%2E/%2E%2E/etc")),
            "a percent-encoded escape"
        );
        assert!(!inside(&root, &format!("{r}x")), "a sibling with the same prefix");
        assert!(!inside(&root, ""));
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        assert!(!inside(&root, &format!("{r}/link")), "a symlink out");
        assert!(!inside(&root, &format!("{r}/link/passwd")));
        drop(t);
    }

    #[test]
    fn selectors_are_recognised_by_decoded_name() {
        for n in [
            "directory",
            "workspace",
            "location[directory]",
            "location[workspace]",
            "location",
            "Directory",
        ] {
            assert!(is_selector_param(n), "{n}");
        }
        assert!(!is_selector_param("path") && !is_selector_param("cursor"));
    }

    #[test]
    fn bodies_that_choose_a_directory_are_checked() {
        let (_t, root) = root();
        use crate::policy::plan::body_rule;
        let check_body =
            |b: &[u8], rule, root: &Path| check_body(&crate::policy::json_body::read(b).unwrap(), rule, root);
        let rule = body_rule("POST", "/pty").unwrap();
        assert!(check_body(br#"{"cwd":"/etc"}"#, rule, &root).is_err());
        assert!(check_body(format!(r#"{{"cwd":"{}/sub"}}"#, root.display()).as_bytes(), rule, &root).is_ok());
        assert!(check_body(b"{}", rule, &root).is_ok());
        assert!(check_body(b"", rule, &root).is_ok());
        assert!(check_body(br#"{"cwd":5}"#, rule, &root).is_err());
        let rule = body_rule("POST", "/api/session").unwrap();
        assert!(check_body(br#"{"location":{"directory":"/etc"}}"#, rule, &root).is_err());
        assert!(check_body(br#"{"location":{"workspaceID":"w1"}}"#, rule, &root).is_err());
        assert!(body_rule("POST", "/session/*/message").is_none());
        let rule = body_rule("POST", "/experimental/control-plane/move-session").unwrap();
        let named = check_body(
            br#"{"sessionID":"ses_b","destination":{"directory":"sub"}}"#,
            rule,
            &root,
        );
        assert_eq!(
            named,
            Ok(BodyNames {
                sessions: vec!["ses_b".to_string()],
                paths: vec!["sub".to_string()]
            }),
            "the moved session and the destination are named for the caller's checks"
        );
    }

    #[test]
    fn the_header_is_percent_encoded() {
        assert_eq!(directory_header(Path::new("/tmp/My Project")), "/tmp/My%20Project");
    }
}
