//! OpenCode's web UI in headless Chromium (Debian's, driven by playwright-core) through the
//! gateway on the project's own host, against a real OpenCode server the gateway spawned.
//! Screenshots of each step are kept in test-artifacts/webui/.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::gateway::Gateway;
use crate::common::opencode::FakeModel;
use crate::common::supervised::{server_config, spawned};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_web_ui_runs_a_prompt_answers_a_permission_and_opens_a_terminal_in_chromium() {
    let model = FakeModel::start("echo TOOLRAN > marker.txt").await;
    let project = tempfile::tempdir().unwrap();
    let dir = project.path().canonicalize().unwrap();
    let gw = Gateway::start(&server_config(&spawned("demo", &dir, &model, "")));
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shots = repo.join("test-artifacts/webui");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let child = tokio::process::Command::new("node")
        .arg(repo.join("tests/browser/webui.mjs"))
        .current_dir(&repo)
        .env("GW_URL", format!("https://demo.gw.localhost:{}", gw.https.port()))
        .env("GW_USER", "alice")
        .env("GW_PASS", "alice-password-1")
        .env("PROJECT_DIR", &dir)
        .env("CERT", gw.dir.path().join("certs/server.crt"))
        .env("SHOT_DIR", &shots)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(240), child.wait_with_output())
        .await
        .expect("the browser test finished within 240 s")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}\ngateway log:\n{}", gw.logs());
    assert!(text.contains("ok: every step passed"), "{text}");
    for shot in ["1-project", "2-permission", "3-finished", "4-terminal"] {
        assert!(shots.join(format!("{shot}.png")).exists(), "{shot}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("marker.txt")).unwrap().trim(),
        "TOOLRAN",
        "the allowed tool ran"
    );
    assert!(!text.contains("alice-password-1"));
}
