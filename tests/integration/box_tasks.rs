//! Tasks on a box's projects (issue 41, item 1: "locally, or on its box"), with a real OpenSSH
//! server standing in for the box, logged in to as an OS user of its own, real git and the real
//! OpenCode: the set's folder is listed over the box's link, `task new` makes the worktree there
//! (owned by the box's user, not the gateway's), copies the set's files there, the set serves it,
//! its server starts on the box and the prompt runs; the acceptance test runs there (as the box's
//! user), fails, passes after the asked changes; the review shows the diff read there; Remove
//! refuses uncommitted changes, then removes the worktree there and the routes answer 404.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::opencode::FakeModel;
use crate::common::sshd::TestBox;
use crate::common::supervised::{server_config, spawned};
use crate::tasks::{checkout, git};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, git and OpenSSH's sshd: run scripts/test.sh"]
async fn a_task_on_a_box_is_made_tested_reviewed_and_removed_there_as_the_boxs_user() {
    use crate::common::login::{LOGIN_HOST, browser_get, form_login, portal_post};
    let Some((on_box, user)) = tokio::task::block_in_place(|| TestBox::with_own_user("ocgw-boxtask")) else {
        return;
    };
    let model = FakeModel::start("true").await.allowing_bash();
    let tmp = tempfile::tempdir().unwrap();
    let repo = checkout(tmp.path());
    std::fs::write(repo.join(".gitignore"), ".env\n").unwrap();
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["commit", "-q", "-m", "ignore .env"]);
    // The box's user owns the checkout, as on a real box; the test's own git then says whose.
    let owned = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", user.uid, user.gid)])
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(owned.success());
    let tested_by = tmp.path().join("tested-by");
    let set = spawned(
        "app",
        &repo.join(".worktrees/*"),
        &model,
        &format!(
            "box = \"gpu1\"\nstart = \"on-demand\"\nworktree_files = [\".env\"]\naccept = \"id -u > {}; cat fixed.txt\"",
            tested_by.display()
        ),
    )
    .replace("directory = ", "directories = ");
    let users = users_toml(&[TestUser {
        name: "bob",
        password: "bob-password-12",
        projects: "[\"app-*\"]",
        role: "operator",
    }]);
    let limits = "[limits]\nspawn_ready_timeout = \"90s\"\n";
    let config = server_config(&format!("{}{set}{users}{limits}", on_box.table()));
    let gw = Gateway::start_with(&config, &[], |_| {});

    let (ok, out) = tokio::task::block_in_place(|| {
        gw.cli(&[
            "task",
            "new",
            "app",
            "Fix it",
            "--prompt",
            "RUNCMD: echo wip > wip.txt",
            "--as",
            "bob",
        ])
    });
    assert!(ok, "{out}\n{}", gw.logs());
    assert!(out.contains("branch fix-it from main"), "{out}");
    let tree = repo.join(".worktrees/fix-it");
    for made in [tree.clone(), tree.join(".env")] {
        let meta = std::fs::symlink_metadata(&made).unwrap();
        assert_eq!(
            meta.uid(),
            user.uid,
            "{} was made on the box, as its user",
            made.display()
        );
    }
    assert_eq!(std::fs::read_to_string(tree.join(".env")).unwrap(), "LOCAL_ONLY=1\n");
    let session = crate::tasks::session_in(&out);
    refused_at_the_check_there(&gw, &repo);

    // The acceptance test ran on the box, as its user, and failed; asked changes make it pass.
    let audit = crate::common::audit::file(&gw);
    let outcome = |n: usize| {
        let audit = audit.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                let runs: Vec<serde_json::Value> = crate::common::audit::records(&audit)
                    .into_iter()
                    .filter(|r| r["event"] == "acceptance_test")
                    .collect();
                if runs.len() >= n {
                    return runs[n - 1].clone();
                }
                assert!(Instant::now() < deadline, "acceptance test run {n} never came");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let first = outcome(1).await;
    assert_eq!(
        (&first["passed"], &first["reason"]),
        (&false.into(), &"exit 1".into()),
        "{first}"
    );
    assert_eq!(
        std::fs::read_to_string(&tested_by).unwrap().trim(),
        user.uid.to_string()
    );
    let c = Https::new(gw.https, &gw.ca());
    let lh = c.host(LOGIN_HOST);
    let cookie = form_login(&c, "bob", "bob-password-12").await;
    let ask = format!("project=app-fix-it&session={session}&do=ask&text=RUNCMD%3A+echo+fixed+%3E+fixed.txt");
    let asked = portal_post(&lh, &cookie, "/_gw/review", &ask).await;
    assert_eq!(asked.status, 303, "{}", asked.body);
    let second = outcome(2).await;
    assert_eq!(second["passed"], true, "{second}");

    // The review: the diff read on the box, file by file; the card counts it.
    let review = "/_gw/review?project=app-fix-it";
    let page = browser_get(&lh, review, Some(&cookie), true).await.body;
    for file in ["wip.txt", "fixed.txt"] {
        assert!(page.contains(&format!("data-file=\"{file}\"")), "{file}: {page}");
    }
    assert!(page.contains("+2 \u{2212}0 in 2 files since main"), "{page}");
    removed_there(&gw, &c, &lh, &cookie, &repo, &tree).await;
}

/// Remove refuses while the worktree holds uncommitted changes; confirmed, the worktree goes
/// on the box (the branch stays), the set no longer serves it, and its routes answer 404.
async fn removed_there(gw: &Gateway, c: &Https, lh: &Https, cookie: &str, repo: &Path, tree: &Path) {
    use crate::common::login::portal_post;
    let refused = portal_post(lh, cookie, "/_gw/review", "project=app-fix-it&do=remove").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("holds uncommitted changes"), "{}", refused.body);
    assert!(tree.is_dir(), "nothing removed");
    let removed = portal_post(lh, cookie, "/_gw/review", "project=app-fix-it&do=remove&confirm=yes").await;
    assert_eq!(removed.status, 303, "{}\n{}", removed.body, gw.logs());
    assert!(!tree.exists(), "the worktree is gone");
    let branches = git(repo, &["-c", "safe.directory=*", "branch", "--list", "fix-it"]);
    assert!(branches.contains("fix-it"), "the branch is kept: {branches}");
    let (status, _) = json(c, "GET", "/p/app-fix-it/session", &basic("bob", "bob-password-12"), "").await;
    assert_eq!(status, 404, "its routes answer 404");
    let r = crate::common::audit::find(&crate::common::audit::file(gw), "task_removed", |_| true).await;
    assert_eq!(
        (&r["project"], &r["uncommitted_removed"]),
        (&"app-fix-it".into(), &"true".into()),
        "{r}"
    );
    assert!(!gw.logs().contains("could not be listed"), "{}", gw.logs());
}

/// The check's questions are asked of git on the box: a base that is not a branch there, a
/// branch that exists there, a folder that exists there; each refused with its reason, nothing made.
fn refused_at_the_check_there(gw: &Gateway, repo: &Path) {
    std::fs::create_dir(repo.join(".worktrees/taken")).unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["Other", "--base", "nope"], "base \"nope\" is not a branch of"),
        (&["Fix it"], "a branch named fix-it exists"),
        (&["Taken"], "taken exists: give the task another title"),
    ];
    for (args, why) in cases {
        let mut all = vec!["task", "new", "app"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--prompt", "x", "--as", "bob"]);
        let (ok, out) = tokio::task::block_in_place(|| gw.cli(&all));
        assert!(
            !ok && out.contains("(step check)") && out.contains(why),
            "{args:?}: {out}"
        );
    }
    std::fs::remove_dir(repo.join(".worktrees/taken")).unwrap();
    let trees = git(repo, &["-c", "safe.directory=*", "worktree", "list"]);
    assert_eq!(trees.lines().count(), 2, "the checkout and fix-it only: {trees}");
}
