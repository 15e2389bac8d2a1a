//! In-place edits of the config file's `[[user]]` tables with toml_edit, so the operator's comments
//! and layout survive `user add|passwd|remove` and the first-start user.

use std::path::Path;

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, value};

#[derive(Debug, thiserror::Error)]
pub(crate) enum EditError {
    #[error("the config file is not valid TOML: {0}")]
    Parse(String),
    #[error("a user named {0:?} already exists (change their password with `user passwd {0}`)")]
    Exists(String),
    #[error("there is no user named {0:?} (`user list` shows them)")]
    Missing(String),
    #[error("`user` in the config file is not an array of [[user]] tables")]
    Shape,
}

fn users(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, EditError> {
    if !doc.contains_key("user") {
        doc.insert("user", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    doc["user"].as_array_of_tables_mut().ok_or(EditError::Shape)
}

fn find<'a>(arr: &'a mut ArrayOfTables, name: &str) -> Option<&'a mut Table> {
    arr.iter_mut()
        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
}

pub(crate) fn add_user(
    text: &str,
    name: &str,
    hash: &str,
    projects: &[String],
    role: &str,
) -> Result<String, EditError> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| EditError::Parse(e.to_string()))?;
    let arr = users(&mut doc)?;
    if find(arr, name).is_some() {
        return Err(EditError::Exists(name.to_string()));
    }
    let mut t = Table::new();
    t.insert("name", value(name));
    t.insert("password_hash", value(hash));
    let mut list = Array::new();
    for p in projects {
        list.push(p.as_str());
    }
    t.insert("projects", value(list));
    t.insert("role", value(role));
    arr.push(t);
    Ok(doc.to_string())
}

pub(crate) fn set_password(text: &str, name: &str, hash: &str) -> Result<String, EditError> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| EditError::Parse(e.to_string()))?;
    let arr = users(&mut doc)?;
    let t = find(arr, name).ok_or_else(|| EditError::Missing(name.to_string()))?;
    t.insert("password_hash", value(hash));
    Ok(doc.to_string())
}

pub(crate) fn remove_user(text: &str, name: &str) -> Result<String, EditError> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| EditError::Parse(e.to_string()))?;
    let arr = users(&mut doc)?;
    let idx = arr
        .iter()
        .position(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
        .ok_or_else(|| EditError::Missing(name.to_string()))?;
    arr.remove(idx);
    Ok(doc.to_string())
}

/// Replace a file's content atomically (write a sibling, then rename). The result is 0600 whatever
/// the old file's mode (the config holds password hashes), owned as the old file was: root editing
/// the service's users file must not take it from the service (`init --system`).
pub(crate) fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    crate::support::files::write_private(&tmp, text)?;
    if let Ok(old) = std::fs::metadata(path) {
        let new = std::fs::metadata(&tmp)?;
        if (old.uid(), old.gid()) != (new.uid(), new.gid()) {
            // Only root may give a file away; anyone else keeps the file as their own, as before.
            let _ = std::os::unix::fs::chown(&tmp, Some(old.uid()), Some(old.gid()));
        }
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "# top comment\n[server]\nlisten = \"127.0.0.1:0\" # inline\n\n# users below\n[[user]]\nname = \"alice\" # the owner\npassword_hash = \"old\"\nprojects = [\"*\"]\nrole = \"admin\"\n";

    /// As root (CI, scripts/test.sh), a rewritten file stays its owner's: the service's users
    /// file edited by `sudo opencode-gateway user add`.
    #[test]
    fn a_rewrite_keeps_the_owner_and_makes_the_file_owner_only() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        std::fs::write(&path, CONFIG).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let given = std::os::unix::fs::chown(&path, Some(65534), Some(65534)).is_ok();
        let before = std::fs::metadata(&path).unwrap();
        write_atomically(&path, "# new\n").unwrap();
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# new\n");
        assert_eq!(after.mode() & 0o777, 0o600);
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
        if !given {
            println!("not root: the owner kept was the test's own");
        }
    }

    #[test]
    fn add_keeps_comments_and_appends_a_table() {
        let out = add_user(CONFIG, "bob", "$argon2id$x", &["web".into()], "viewer").unwrap();
        assert!(out.contains("# top comment") && out.contains("# inline") && out.contains("# the owner"));
        assert!(out.contains("name = \"bob\""));
        assert!(out.contains("projects = [\"web\"]"));
        assert!(matches!(
            add_user(&out, "bob", "h", &[], "viewer"),
            Err(EditError::Exists(_))
        ));
    }

    #[test]
    fn passwd_replaces_only_the_hash() {
        let out = set_password(CONFIG, "alice", "new").unwrap();
        assert!(out.contains("password_hash = \"new\""));
        assert!(!out.contains("\"old\""));
        assert!(out.contains("# the owner"));
        assert!(matches!(set_password(CONFIG, "carol", "x"), Err(EditError::Missing(_))));
    }

    #[test]
    fn remove_drops_the_user() {
        let out = remove_user(CONFIG, "alice").unwrap();
        assert!(!out.contains("alice"));
        assert!(out.contains("# top comment"));
        assert!(matches!(remove_user(&out, "alice"), Err(EditError::Missing(_))));
    }
}
