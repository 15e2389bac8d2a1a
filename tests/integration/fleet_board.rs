//! The fleet board from a phone (issue 41, must show): Chromium at 390 px drives New task three
//! times against the real OpenCode (one server per task's worktree), the fake model and real git,
//! then a review, Ask for changes, a passing test, Remove refused then confirmed, and Stop on a
//! session tree (`tests/browser/fleet_board.mjs`). Screenshots go to test-artifacts/fleet_board/;
//! the time from New task to the agent's first words on its card is printed.

use std::time::Duration;

use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::opencode::FakeModel;
use crate::common::supervised::{server_config, spawned};
use crate::tasks::{checkout, git};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and Chromium: run scripts/test.sh"]
async fn the_board_from_a_phone_starts_reviews_removes_and_stops_tasks() {
    let model = FakeModel::start("true").await.allowing_bash();
    let tmp = tempfile::tempdir().unwrap();
    let repo = checkout(tmp.path());
    let set = spawned(
        "app",
        &repo.join(".worktrees/*"),
        &model,
        "start = \"on-demand\"\naccept = \"cat fixed.txt\"",
    )
    .replace("directory = ", "directories = ");
    let users = users_toml(&[TestUser {
        name: "bob",
        password: "bob-password-12",
        projects: "[\"app-*\"]",
        role: "operator",
    }]);
    let gw = Gateway::start_with(&server_config(&format!("{set}{users}")), &[], |_| {});
    let shots = crate::common::browser::shots("fleet_board");
    let cert = gw.dir.path().join("certs/server.crt");
    let said = crate::common::browser::run(
        "fleet_board.mjs",
        &[
            ("GW_PORT", gw.https.port().to_string().as_ref()),
            ("CERT", cert.as_os_str()),
            ("SHOT_DIR", shots.as_os_str()),
        ],
        Duration::from_secs(400),
        || gw.logs(),
    )
    .await;
    eprintln!("{said}");
    // What the board did, as git and the audit see it.
    assert!(!repo.join(".worktrees/fix-it").exists(), "removed");
    let branches = git(&repo, &["branch", "--list"]);
    for b in ["fix-it", "half-done", "fan-out"] {
        assert!(branches.contains(b), "branch {b} kept: {branches}");
    }
    let audit = crate::common::audit::file(&gw);
    let removed = crate::common::audit::find(&audit, "task_removed", |_| true).await;
    assert_eq!(
        (&removed["user"], &removed["uncommitted_removed"]),
        (&"bob".into(), &"true".into()),
        "{removed}"
    );
    for shot in ["board.png", "review.png", "remove-refused.png", "stopped-tree.png"] {
        assert!(shots.join(shot).is_file(), "{shot}");
    }
}
