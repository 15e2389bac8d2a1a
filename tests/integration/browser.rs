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
    in_chromium(&gw, &dir, "webui").await;
}

/// The same, with the project's server spawned on a box (as the box's user, through its sshd):
/// the page, its event stream, the permission and the terminal all cross SSH channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, OpenSSH's sshd and root: run scripts/test.sh"]
async fn the_web_ui_works_the_same_for_a_project_spawned_on_a_box() {
    let Some((on_box, user)) =
        tokio::task::block_in_place(|| crate::common::sshd::TestBox::with_own_user("ocgw-box-web"))
    else {
        return;
    };
    let model = FakeModel::start("echo TOOLRAN > marker.txt").await;
    let project = tempfile::tempdir().unwrap();
    let dir = project.path().canonicalize().unwrap();
    crate::common::os_users::give(&dir, &user, 0o700);
    let table = on_box.table();
    let gw = Gateway::start(&server_config(&format!(
        "{table}{}",
        spawned("demo", &dir, &model, "box = \"gpu1\"")
    )));
    in_chromium(&gw, &dir, "webui-box").await;
    let port = crate::common::supervised::project_port(&gw, "demo").expect("the server on the box is ready");
    let log = on_box.sshd.log.lock().unwrap().clone();
    assert!(
        log.contains(&format!("target 127.0.0.1 port {port}")),
        "the page's requests crossed no channel of the box's sshd:\n{log}"
    );
}

/// Log in to the project's host, run a prompt whose tool asks for permission, allow it, see it
/// finish, open a terminal: each step's screenshot kept under test-artifacts/`shots_name`/.
async fn in_chromium(gw: &Gateway, dir: &std::path::Path, shots_name: &str) {
    let shots = crate::common::browser::shots(shots_name);
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
