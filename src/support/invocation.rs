//! How a person types a program's name so that it runs, for every command the gateway prints
//! (issue 38: after `cargo run --release -- serve` every printed `opencode-gateway …` named a
//! program that was not installed). A program on `PATH` is its bare name; one under the
//! current folder is its relative path (`target/release/opencode-gateway`, what `cargo run`
//! ran in a checkout); any other its absolute path. Quoted for a POSIX shell where needed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This program, as typed from the folder it was started in (worked out once: the folder and
/// `PATH` a gateway started with are the ones its printed commands are read in).
pub fn me() -> &'static str {
    static ME: OnceLock<String> = OnceLock::new();
    ME.get_or_init(|| match std::env::current_exe() {
        Ok(exe) => typed(&without_deleted(exe), "opencode-gateway"),
        Err(_) => "opencode-gateway".into(),
    })
}

/// A file's path as typed from the current folder: relative when under it, quoted.
pub fn path_here(path: &Path) -> String {
    let shown = std::env::current_dir()
        .ok()
        .and_then(|d| path.strip_prefix(d).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf());
    quoted(&shown.display().to_string())
}

/// `program` (a file found by the gateway) as typed from the current folder, `name` when that
/// name on `PATH` is the same file.
pub fn typed(program: &Path, name: &str) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cwd = std::env::current_dir().ok();
    typed_in(program, name, &path, cwd.as_deref())
}

fn typed_in(program: &Path, name: &str, path: &std::ffi::OsStr, cwd: Option<&Path>) -> String {
    let same = |a: &Path| same_file(a, program);
    if std::env::split_paths(path).any(|dir| same(&dir.join(name))) {
        return name.into();
    }
    let absolute = if program.is_absolute() {
        program.to_path_buf()
    } else {
        cwd.map_or_else(|| program.to_path_buf(), |c| c.join(program))
    };
    let shown = match cwd.and_then(|c| absolute.strip_prefix(c).ok()) {
        // `./` so that a shell does not look a bare name up on PATH.
        Some(rel) if rel.components().count() == 1 => Path::new(".").join(rel),
        Some(rel) => rel.to_path_buf(),
        None => absolute,
    };
    quoted(&shown.display().to_string())
}

/// Whether two paths name one file (both exist, and resolve to the same place).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Linux names a replaced executable `… (deleted)` (a `cargo build` while the gateway runs);
/// the path without it is the new build, which is what a person would run.
fn without_deleted(exe: PathBuf) -> PathBuf {
    match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(s) => PathBuf::from(s),
        None => exe,
    }
}

/// `s` as one word for a POSIX shell: as is when plain, else single-quoted.
pub fn quoted(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.into()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, rel: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "").unwrap();
        p
    }

    #[test]
    fn a_program_is_typed_by_name_on_path_relative_under_the_folder_else_absolute() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        let built = file(&repo, "target/release/opencode-gateway");
        let elsewhere = file(d.path(), "opt/my tools/opencode-gateway");
        let bin = d.path().join("bin");
        let none = std::ffi::OsString::new();
        assert_eq!(
            typed_in(&built, "opencode-gateway", &none, Some(&repo)),
            "target/release/opencode-gateway"
        );
        assert_eq!(
            typed_in(&file(&repo, "opencode-gateway"), "opencode-gateway", &none, Some(&repo)),
            "./opencode-gateway"
        );
        let abs = typed_in(&elsewhere, "opencode-gateway", &none, Some(&repo));
        assert_eq!(abs, format!("'{}'", elsewhere.display()));
        // The same name on PATH but another file: still the path, never the name.
        file(&bin, "opencode-gateway");
        let path = std::env::join_paths([&bin]).unwrap();
        assert_eq!(
            typed_in(&built, "opencode-gateway", &path, Some(&repo)),
            "target/release/opencode-gateway"
        );
        std::os::unix::fs::symlink(&built, bin.join("ocgw")).unwrap();
        assert_eq!(typed_in(&built, "ocgw", &path, Some(&repo)), "ocgw");
    }

    #[test]
    fn a_replaced_executable_is_named_by_its_path() {
        assert_eq!(
            without_deleted(PathBuf::from("/x/opencode-gateway (deleted)")),
            PathBuf::from("/x/opencode-gateway")
        );
        assert_eq!(quoted("it's"), r"'it'\''s'");
    }
}
