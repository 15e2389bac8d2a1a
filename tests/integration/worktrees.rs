//! Project sets: one project per git worktree, found while the gateway runs (no reload), each with
//! its own spawned OpenCode server, granted by pattern, and gone when the worktree is removed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::client::{Https, Reply, basic};
use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::opencode::FakeModel;
use crate::common::supervised::{pids_with, project_port, server_config, server_pid, spawned};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ask until the answer is not `skip`, for at most `within`.
async fn until(c: &Https, path: &str, auth: &str, within: Duration, skip: u16) -> Reply {
    let start = Instant::now();
    loop {
        let r = c.get(path, Some(auth)).await;
        if r.status != skip || start.elapsed() > within {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_git_worktree_becomes_a_project_granted_by_pattern_and_goes_away_with_it() {
    let model = FakeModel::start("true").await;
    let tmp = tempfile::tempdir().unwrap();
    let (repo, trees) = (tmp.path().join("repo"), tmp.path().join("trees"));
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&trees).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "-m", "first"]);

    let set =
        spawned("app", &trees.join("*"), &model, "start = \"on-demand\"").replace("directory = ", "directories = ");
    let users = users_toml(&[
        TestUser {
            name: "bob",
            password: "bob-password-12",
            projects: "[\"app-*\"]",
            role: "operator",
        },
        TestUser {
            name: "carol",
            password: "carol-password-1",
            projects: "[\"web-*\"]",
            role: "admin",
        },
    ]);
    let gw = Gateway::start_with(&server_config(&format!("{set}{users}")), &[], |_| {});
    let c = Https::new(gw.https, &gw.ca());
    let (bob, carol) = (basic("bob", "bob-password-12"), basic("carol", "carol-password-1"));
    assert_eq!(
        c.get("/p/app-feat/global/health", Some(&bob)).await.status,
        404,
        "no worktree yet"
    );

    // `git worktree add`: reachable without a reload, within the discovery period plus a start.
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feat",
            trees.join("feat").to_str().unwrap(),
        ],
    );
    let r = until(&c, "/p/app-feat/global/health", &bob, Duration::from_secs(10), 404).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, gw.logs());
    let dir = trees.join("feat").canonicalize().unwrap();
    let r = c.get("/p/app-feat/path", Some(&bob)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let path: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        path["directory"].as_str(),
        dir.to_str(),
        "the server runs in the worktree: {}",
        r.body
    );
    let by_host = c.host("app-feat.gw.localhost").get("/global/health", Some(&bob)).await;
    assert_eq!(by_host.status, 200, "{}", by_host.body);
    assert_eq!(
        c.get("/p/app-feat/global/health", Some(&carol)).await.status,
        403,
        "not granted"
    );

    // Its own server, with its own XDG state, listed by status.
    let port = project_port(&gw, "app-feat").expect("app-feat is ready");
    let pid = server_pid(port);
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap()).replace('\0', "\n");
    let state = gw.dir.path().join("state/projects/app-feat");
    assert!(
        environ.contains(&format!("XDG_DATA_HOME={}", state.join("data").display())),
        "{environ}"
    );

    // `git worktree remove`: the routes answer 404 and the server stops, without a reload.
    git(&repo, &["worktree", "remove", trees.join("feat").to_str().unwrap()]);
    let r = until(&c, "/p/app-feat/global/health", &bob, Duration::from_secs(10), 200).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pid), "the removed worktree's server stopped");
    assert!(pids_with(&format!("--port {port}")).is_empty());
    assert_eq!(
        c.host("app-feat.gw.localhost")
            .get("/global/health", Some(&bob))
            .await
            .status,
        404
    );
    assert!(!gw.logs().contains("panicked"));
}
