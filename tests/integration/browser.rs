//! OpenCode's web UI in headless Chromium (Debian's, driven by playwright-core) through the
//! gateway on the project's own host, against a real OpenCode server the gateway spawned.
//! Screenshots of each step are kept in test-artifacts/webui/.

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
    let shots = crate::common::browser::shots("webui");
    let url = format!("https://demo.gw.localhost:{}", gw.https.port());
    let cert = gw.dir.path().join("certs/server.crt");
    let text = crate::common::browser::run(
        "webui.mjs",
        &[
            ("GW_URL", url.as_ref()),
            ("GW_USER", "alice".as_ref()),
            ("GW_PASS", "alice-password-1".as_ref()),
            ("PROJECT_DIR", dir.as_os_str()),
            ("CERT", cert.as_os_str()),
            ("SHOT_DIR", shots.as_os_str()),
        ],
        Duration::from_secs(240),
        || format!("gateway log:\n{}", gw.logs()),
    )
    .await;
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
