//! Project sets: one project per git worktree, found while the gateway runs (no reload), each with
//! its own spawned OpenCode server, granted by pattern, and gone when the worktree is removed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::client::{Https, Reply, basic};
use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::opencode::FakeModel;
use crate::common::supervised::{pids_with, project_port, server_config, spawned};

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

/// Ask until the answer is `want`, for at most `within` (then return the last answer).
async fn until(c: &Https, path: &str, auth: &str, within: Duration, want: u16) -> Reply {
    let start = Instant::now();
    loop {
        let r = c.get(path, Some(auth)).await;
        if r.status == want || start.elapsed() > within {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn environ_of(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()).replace('\0', "\n")
}

/// The server this gateway started on `port`: its environment names the project's state folder
/// (another test run on this machine may hold a server with a similar command line), and its
/// parent is not one of them (a server's own children inherit both).
fn our_server(port: u16, state: &Path) -> u32 {
    let ours: Vec<u32> = pids_with(&format!("serve --hostname 127.0.0.1 --port {port}"))
        .into_iter()
        .filter(|p| environ_of(*p).contains(&format!("TMPDIR={}\n", state.join("tmp").display())))
        .collect();
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let top: Vec<u32> = ours
        .iter()
        .copied()
        .filter(|p| parent(*p).is_none_or(|pp| !ours.contains(&pp)))
        .collect();
    assert_eq!(top.len(), 1, "one server on port {port}: {ours:?}");
    top[0]
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
    // A start may take long beside the suite's heaviest tests (a fleet of `opencode run` on two
    // cores took one past the default 30 s): this test is about discovery, not start-up speed.
    let limits = "[limits]\nspawn_ready_timeout = \"90s\"\n";
    let gw = Gateway::start_with(&server_config(&format!("{set}{users}{limits}")), &[], |_| {});
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
    let r = until(&c, "/p/app-feat/global/health", &bob, Duration::from_secs(10), 200).await;
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

    // Its own server, with its own session database, listed by status.
    let port = project_port(&gw, "app-feat").expect("app-feat is ready");
    let state = gw.dir.path().join("state/projects/app-feat");
    let pid = our_server(port, &state);
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap()).replace('\0', "\n");
    let db = state.join("data/opencode/opencode.db");
    assert!(
        environ.contains(&format!("OPENCODE_DB={}\n", db.display())),
        "{environ}"
    );

    // `git worktree remove`: the routes answer 404 and the server stops, without a reload.
    git(&repo, &["worktree", "remove", trees.join("feat").to_str().unwrap()]);
    // (A request that took the old state just before the swap may see the server stop: a 502.)
    let r = until(&c, "/p/app-feat/global/health", &bob, Duration::from_secs(10), 404).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pid), "the removed worktree's server stopped");
    assert!(
        pids_with(&format!("--port {port}"))
            .iter()
            .all(|p| !environ_of(*p).contains(&state.display().to_string())),
        "no process of the removed project is left"
    );
    assert_eq!(
        c.host("app-feat.gw.localhost")
            .get("/global/health", Some(&bob))
            .await
            .status,
        404
    );
    assert!(!gw.logs().contains("panicked"));
    // The audit trail: the worktree's project came and went, and its server started and stopped.
    use crate::common::audit::{file, find};
    let f = file(&gw);
    let added = serde_json::json!(["app-feat"]);
    find(&f, "projects_discovered", |r| r["projects_added"] == added).await;
    find(&f, "projects_discovered", |r| r["projects_removed"] == added).await;
    find(&f, "server_started", |r| r["project"] == "app-feat").await;
    find(&f, "server_stopped", |r| r["project"] == "app-feat").await;
}
