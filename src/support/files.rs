//! The gateway's own private files: folders only their owner can enter and files only their owner
//! can read, from the first byte (keys, tokens' key, the state database's folder, the config a
//! command rewrites).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Create a folder (and missing parents) that only its owner can enter (0700); an existing folder
/// is left as it is.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.as_os_str().is_empty() {
        return Ok(());
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Create a file readable by its owner only (0600) from the first byte.
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents.as_bytes())
}
