//! What `--version` names besides the crate's version, read once at build time:
//! - `OCGW_OPENCODE_VERSION`: the OpenCode version the route table was read from. Its one source
//!   is package.json's `opencode-ai` pin, the version the tests run (tests/integration/drift.rs
//!   checks that this OpenCode's API document equals the table), so a new pin is a new claim.
//! - `OCGW_OPENCODE2_VERSION`: the same for OpenCode 2's table, from the `@opencode/cli` pin.
//! - `OCGW_GIT_COMMIT`: `git rev-parse --short HEAD`, or "unknown" where there is no git checkout
//!   (a crate tarball, a copied tree).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=package.json");
    let package = std::fs::read_to_string("package.json").expect("package.json (it pins opencode-ai)");
    let opencode = pinned(&package, "opencode-ai").expect("package.json pins opencode-ai to one version");
    println!("cargo:rustc-env=OCGW_OPENCODE_VERSION={opencode}");
    let opencode2 = pinned(&package, "@opencode/cli").expect("package.json pins @opencode/cli to one version");
    println!("cargo:rustc-env=OCGW_OPENCODE2_VERSION={opencode2}");
    println!(
        "cargo:rustc-env=OCGW_GIT_COMMIT={}",
        commit().unwrap_or_else(|| "unknown".into())
    );
}

/// The exact version `"name": "x.y.z"` names in package.json (no range: a range claims nothing).
fn pinned(json: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\"");
    let rest = &json[json.find(&key)? + key.len()..];
    let value = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let version = &value[..value.find('"')?];
    let exact = !version.is_empty() && version.chars().all(|c| c.is_ascii_digit() || c == '.');
    exact.then(|| version.to_string())
}

/// The short commit of HEAD; the build runs again when HEAD or its branch moves (a worktree's
/// HEAD and refs live outside the work tree, so git is asked where they are).
fn commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    // Only this crate's own checkout: a crate tarball unpacked inside some other repository
    // must say "unknown", not that repository's commit.
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let here = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    if Path::new(&top).canonicalize().ok()? != Path::new(&here).canonicalize().ok()? {
        return None;
    }
    let short = git(&["rev-parse", "--short", "HEAD"])?;
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    // A path that does not exist would make cargo run this script on every build.
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    Some(short)
}
