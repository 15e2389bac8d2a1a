//! Running one of the Chromium scripts in tests/browser/ (playwright-core driving Debian's
//! Chromium): its output, once it has passed every step.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

/// Run `tests/browser/<script>` with `envs` within `within`; panics with everything it printed
/// (and `context`, e.g. the gateway's log) unless it exits 0 having said "ok: every step passed".
pub async fn run(script: &str, envs: &[(&str, &OsStr)], within: Duration, context: impl Fn() -> String) -> String {
    run_wrapped(&[], script, envs, within, context).await
}

/// [`run`], node started by `wrapper` (e.g. `ip netns exec <namespace>`) when it is not empty.
pub async fn run_wrapped(
    wrapper: &[&str],
    script: &str,
    envs: &[(&str, &OsStr)],
    within: Duration,
    context: impl Fn() -> String,
) -> String {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = std::process::Command::new(program);
            c.args(args).arg("node");
            c
        }
        None => std::process::Command::new("node"),
    };
    cmd.arg(repo.join("tests/browser").join(script)).current_dir(&repo);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    // Past `within`, node and the Chromium it started are killed and the test fails with their output.
    let out = super::process::output_within_async(cmd, within).await;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}\n{}", context());
    assert!(text.contains("ok: every step passed"), "{text}");
    text
}

/// A fresh folder for a script's screenshots, `test-artifacts/<name>/`.
pub fn shots(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("test-artifacts")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
