//! New tasks (issue 41, item 1) with real git and the real OpenCode: `task new` makes the branch
//! (the title's slug) and the worktree in the set's checkout, copies the set's `worktree_files`,
//! the set serves the folder as a project, its server starts, a session titled after the task is
//! told the prompt and the fake model answers. Hostile titles and bases, a viewer, a taken name:
//! each refused at the check with its reason, nothing made. A step that fails after the worktree
//! (a worktree file git's checkout cannot copy) undoes the worktree and its branch.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::opencode::{ANSWER, FakeModel};
use crate::common::supervised::{server_config, spawned};

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
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
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The session `task new` printed it made.
pub(crate) fn session_in(out: &str) -> String {
    let after = out
        .split("session ")
        .nth(1)
        .unwrap_or_else(|| panic!("no session in: {out}"));
    after.split_whitespace().next().unwrap().to_string()
}

/// A checkout with one commit on main, an untracked `.env` and `notes/local.txt`, a folder, and
/// the two sets' folders inside it.
pub(crate) fn checkout(root: &Path) -> std::path::PathBuf {
    let repo = root.join("repo");
    for d in ["", ".worktrees", ".doomed", "adir"] {
        std::fs::create_dir_all(repo.join(d)).unwrap();
    }
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join(".env"), "LOCAL_ONLY=1\n").unwrap();
    std::fs::create_dir_all(repo.join("notes")).unwrap();
    std::fs::write(repo.join("notes/local.txt"), "mine\n").unwrap();
    repo
}

fn gateway(repo: &Path, model: &FakeModel) -> Gateway {
    let set = |name: &str, folder: &str, files: &str| {
        spawned(
            name,
            &repo.join(folder).join("*"),
            model,
            &format!("start = \"on-demand\"\nworktree_files = {files}"),
        )
        .replace("directory = ", "directories = ")
    };
    let sets = set("app", ".worktrees", r#"[".env", "notes/local.txt", "absent.json"]"#)
        + &set("doomed", ".doomed", r#"["adir"]"#);
    let users = users_toml(&[
        TestUser {
            name: "bob",
            password: "bob-password-12",
            projects: "[\"app-*\", \"doomed-*\"]",
            role: "operator",
        },
        TestUser {
            name: "vic",
            password: "vic-password-12",
            projects: "[\"app-*\"]",
            role: "viewer",
        },
    ]);
    let limits = "[limits]\nspawn_ready_timeout = \"90s\"\n";
    Gateway::start_with(&server_config(&format!("{sets}{users}{limits}")), &[], |_| {})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and git: run scripts/test.sh"]
async fn a_new_task_makes_its_branch_worktree_server_and_prompted_session() {
    let model = FakeModel::start("true").await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = checkout(tmp.path());
    let gw = gateway(&repo, &model);
    let (ok, out) = tokio::task::block_in_place(|| {
        gw.cli(&[
            "task",
            "new",
            "app",
            "Fix the login bug",
            "--prompt",
            "hello",
            "--as",
            "bob",
        ])
    });
    assert!(ok, "{out}\n{}", gw.logs());
    assert!(out.contains("branch fix-the-login-bug from main"), "{out}");
    assert!(
        out.contains("note: worktree_files: the checkout has no absent.json"),
        "{out}"
    );
    let tree = repo.join(".worktrees/fix-the-login-bug");
    assert_eq!(std::fs::read_to_string(tree.join(".env")).unwrap(), "LOCAL_ONLY=1\n");
    assert_eq!(std::fs::read_to_string(tree.join("notes/local.txt")).unwrap(), "mine\n");
    assert!(git(&tree, &["branch", "--show-current"]).trim() == "fix-the-login-bug");
    let session = crate::tasks::session_in(&out);

    // The session is the task's, in the new project, and the model answered its prompt.
    let c = Https::new(gw.https, &gw.ca());
    let bob = basic("bob", "bob-password-12");
    let (status, list) = json(&c, "GET", "/p/app-fix-the-login-bug/session", &bob, "").await;
    assert_eq!(status, 200, "{list}");
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == session.as_str() && s["title"] == "Fix the login bug"),
        "{list:#}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let path = format!("/p/app-fix-the-login-bug/session/{session}/message");
        let (_, messages) = json(&c, "GET", &path, &bob, "").await;
        if messages.to_string().contains(ANSWER) {
            break;
        }
        assert!(Instant::now() < deadline, "the model never answered: {messages:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let audit = crate::common::audit::file(&gw);
    let r = crate::common::audit::find(&audit, "task_created", |r| r["session"] == session.as_str()).await;
    assert_eq!(
        (&r["user"], &r["branch"], &r["from"]),
        (&"bob".into(), &"fix-the-login-bug".into(), &"control_socket".into()),
        "{r}"
    );

    refusals_make_nothing(&gw, &repo, tmp.path()).await;
    from_the_portal(&gw, &c, &repo).await;
}

/// "New task" on the portal: offered to bob (operator of the set), made by his form post; not
/// offered to vic (viewer), whose post is refused with the role; a cross-site post refused first.
async fn from_the_portal(gw: &Gateway, c: &Https, repo: &Path) {
    use crate::common::login::{LOGIN_HOST, browser_get, form_login, portal_post};
    let lh = c.host(LOGIN_HOST);
    let bob = form_login(c, "bob", "bob-password-12").await;
    let page = browser_get(&lh, "/", Some(&bob), true).await;
    assert!(
        page.body.contains("id=\"new-task\"") && page.body.contains("<option>app</option>"),
        "{}",
        page.body
    );
    // The form offers the agents and models of a running server of the set (the CLI's task's).
    for offered in ["<option>fake/fake-model</option>", "<option>plan</option>"] {
        assert!(page.body.contains(offered), "{offered}: {}", page.body);
    }
    let form = "set=app&title=From+the+phone&prompt=hello&agent=plan&model=fake%2Ffake-model";
    let made = portal_post(&lh, &bob, "/_gw/task", form).await;
    assert_eq!(made.status, 303, "{}\n{}", made.body, gw.logs());
    let to = crate::common::login::location(&made);
    assert_eq!(to, "/?done=task_created#project-app-from-the-phone");
    assert!(repo.join(".worktrees/from-the-phone").is_dir());
    let audit = crate::common::audit::file(gw);
    let r = crate::common::audit::find(&audit, "task_created", |r| r["branch"] == "from-the-phone").await;
    assert_eq!((&r["user"], &r["from"]), (&"bob".into(), &"control_room".into()), "{r}");
    let session = r["session"].as_str().unwrap();
    let path = format!("/p/app-from-the-phone/session/{session}/message");
    // prompt_async answers before OpenCode has stored the message: wait for it (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    let messages = loop {
        let (status, messages) = json(c, "GET", &path, &basic("bob", "bob-password-12"), "").await;
        assert_eq!(status, 200, "{messages}");
        if messages.as_array().is_some_and(|m| !m.is_empty()) {
            break messages;
        }
        assert!(Instant::now() < deadline, "the task's prompt never reached its session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let asked = &messages[0]["info"];
    assert_eq!(
        (&asked["role"], &asked["agent"]),
        (&"user".into(), &"plan".into()),
        "{messages:#}"
    );

    let vic = form_login(c, "vic", "vic-password-12").await;
    let page = browser_get(&lh, "/", Some(&vic), true).await;
    assert!(
        !page.body.contains("id=\"new-task\""),
        "a viewer is offered New task: {}",
        page.body
    );
    let refused = portal_post(&lh, &vic, "/_gw/task", "set=app&title=Viewer+task&prompt=hello").await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("needs the operator role in app-viewer-task; vic has viewer"),
        "{}",
        refused.body
    );
    let cross = lh
        .request("POST", "/_gw/task", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", &bob)
        .header("origin", "https://evil.example")
        .header("sec-fetch-site", "cross-site")
        .body(http_body_util::Full::from("set=app&title=Cross+site&prompt=hello"))
        .unwrap();
    let r = lh.call(cross).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(!repo.join(".worktrees/viewer-task").exists() && !repo.join(".worktrees/cross-site").exists());
}

/// Each refused at the check with its step and reason; no branch, worktree or marker made.
async fn refusals_make_nothing(gw: &Gateway, repo: &Path, tmp: &Path) {
    let branches = git(repo, &["branch", "--list"]);
    let trees = git(repo, &["worktree", "list"]);
    let marker = tmp.join("pwned");
    let shell = format!("$(touch {})`touch {}`", marker.display(), marker.display());
    let long = "x".repeat(10_000);
    let cases: [(&[&str], &str); 9] = [
        (
            &["app", "Fix the login bug", "--as", "bob"],
            "a branch named fix-the-login-bug exists",
        ),
        (
            &["app", "!!! ... ///", "--as", "bob"],
            "the title has no letter or digit",
        ),
        (&["app", &long, "--as", "bob"], "title: write 1 to 200 characters"),
        (
            &["app", "Line\none", "--as", "bob"],
            "title: write 1 to 200 characters, on one line",
        ),
        (
            &["app", "x", "--as", "bob", "--base=--orphan"],
            "base \"--orphan\": a branch name does not start with '-'",
        ),
        (&["app", "x", "--as", "bob", "--base", "main..HEAD"], "holds no '..'"),
        (
            &["app", "x", "--as", "bob", "--base", "nosuch"],
            "base \"nosuch\" is not a branch",
        ),
        (
            &["app", "Look around", "--as", "vic"],
            "needs the operator role in app-look-around; vic has viewer",
        ),
        (&["nosuch", "x", "--as", "bob"], "no project set is named \"nosuch\""),
    ];
    for (args, says) in cases {
        let mut all = vec!["task", "new"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--prompt", "hello"]);
        let (ok, out) = tokio::task::block_in_place(|| gw.cli(&all));
        assert!(
            !ok && out.contains("step check") && out.contains(says),
            "{args:?}: {out}"
        );
    }
    // Shell characters in a title are only a title: the slug names the branch, nothing runs.
    let (ok, out) =
        tokio::task::block_in_place(|| gw.cli(&["task", "new", "doomed", &shell, "--prompt", "hello", "--as", "bob"]));
    assert!(
        !ok && out.contains("step files"),
        "a folder in worktree_files fails its copy: {out}"
    );
    assert!(!marker.exists(), "a title ran a command");
    assert_eq!(
        git(repo, &["branch", "--list"]),
        branches,
        "a failed or refused task left a branch"
    );
    assert_eq!(
        git(repo, &["worktree", "list"]),
        trees,
        "a failed or refused task left a worktree"
    );
    assert!(
        std::fs::read_dir(repo.join(".doomed")).unwrap().next().is_none(),
        "a folder was left in .doomed"
    );
}

/// A task's acceptance test (`accept`): its turn ends with a file changed, the test runs in the
/// worktree and fails with its output's tail on the portal; asked for changes, the agent makes
/// the file the test wants, the test passes, the card says ready for review and the team is told
/// (without the output).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and git: run scripts/test.sh"]
async fn a_tasks_acceptance_test_fails_then_passes_after_asked_changes_and_is_told_ready() {
    use crate::common::login::{LOGIN_HOST, browser_get, form_login};
    let model = FakeModel::start("true").await.allowing_bash();
    let (hook, hooked) = crate::common::webhook::receiver(vec![]).await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = checkout(tmp.path());
    let set = spawned(
        "app",
        &repo.join(".worktrees/*"),
        &model,
        "start = \"on-demand\"\naccept = \"cat fixed.txt\"",
    )
    .replace("directory = ", "directories = ");
    let users = users_toml(&[
        TestUser {
            name: "bob",
            password: "bob-password-12",
            projects: "[\"app-*\"]",
            role: "operator",
        },
        TestUser {
            name: "vic",
            password: "vic-password-12",
            projects: "[\"app-*\"]",
            role: "viewer",
        },
    ]);
    let notify =
        format!("[notify]\nwebhook = \"{hook}\"\ndebounce = \"100ms\"\n\n[fleet]\nmax_waiting_reviews = 1\n\n");
    let gw = Gateway::start_with(&server_config(&format!("{notify}{set}{users}")), &[], |_| {});
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
    assert!(ok, "{out}");
    let session = crate::tasks::session_in(&out);
    let c = Https::new(gw.https, &gw.ca());
    let lh = c.host(LOGIN_HOST);
    let cookie = form_login(&c, "bob", "bob-password-12").await;
    let accept_until = |state: &'static str| {
        let (lh, cookie) = (lh.clone(), cookie.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let page = browser_get(&lh, "/", Some(&cookie), true).await.body;
                if page.contains(&format!("data-accept=\"{state}\"")) {
                    return page;
                }
                assert!(
                    Instant::now() < deadline,
                    "no {state} acceptance test on the portal: {page}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let page = accept_until("failed").await;
    assert!(
        page.contains("test failed (exit 1)") && page.contains("cat: fixed.txt: No such file or directory"),
        "{page}"
    );
    // Ask for changes, from the review page: the next prompt makes the file.
    let review = "/_gw/review?project=app-fix-it";
    let page = browser_get(&lh, review, Some(&cookie), true).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("data-file=\"wip.txt\""),
        "the agent's new file is in the diff: {}",
        page.body
    );
    assert!(page.body.contains("+1 \u{2212}0 in 1 file since main"), "{}", page.body);
    let ask = format!("project=app-fix-it&session={session}&do=ask&text=RUNCMD%3A+echo+fixed+%3E+fixed.txt");
    let asked = crate::common::login::portal_post(&lh, &cookie, "/_gw/review", &ask).await;
    assert_eq!(asked.status, 303, "{}", asked.body);
    let page = accept_until("passed").await;
    assert!(page.contains("test passed: ready for review"), "{page}");
    let told = crate::budgets::alerts_until(&hooked, 1).await;
    let ready: Vec<_> = told.iter().filter(|a| a["kind"] == "ready_for_review").collect();
    assert_eq!(ready.len(), 1, "{told:?}");
    assert_eq!(
        (&ready[0]["project"], &ready[0]["session"]),
        (&"app-fix-it".into(), &session.clone().into()),
        "{told:?}"
    );
    let audit = crate::common::audit::file(&gw);
    let runs: Vec<bool> = crate::common::audit::records(&audit)
        .iter()
        .filter(|r| r["event"] == "acceptance_test")
        .map(|r| r["passed"] == true)
        .collect();
    assert_eq!(runs, [false, true], "one run per change");
    // One task of bob's waits for review: the fleet's cap refuses him another until it is done.
    let (ok, out) =
        tokio::task::block_in_place(|| gw.cli(&["task", "new", "app", "Another", "--prompt", "x", "--as", "bob"]));
    assert!(!ok, "{out}");
    assert!(
        out.contains("1 task of yours is ready for review (fleet.max_waiting_reviews = 1)"),
        "{out}"
    );
    assert!(!repo.join(".worktrees/another").exists(), "nothing made");
    let prompts = crate::common::audit::records(&audit);
    let asked = prompts
        .iter()
        .find(|r| r["event"] == "prompt" && r["from"] == "control_room");
    assert!(
        asked.is_some_and(|r| r["user"] == "bob"),
        "the asked changes went the road as bob: {prompts:?}"
    );
    review_then_remove(&gw, &lh, &cookie, &repo).await;
}

/// The passed task's review shows both files, escaped; Remove refuses while they are not
/// committed, and after the commit removes the worktree (the branch stays, the routes answer 404).
async fn review_then_remove(gw: &Gateway, lh: &Https, cookie: &str, repo: &Path) {
    use crate::common::login::{browser_get, portal_post};
    let folder = repo.join(".worktrees/fix-it");
    std::fs::write(folder.join("odd <b>name.txt"), "<script>x</script>\n").unwrap();
    let page = browser_get(lh, "/_gw/review?project=app-fix-it", Some(cookie), true)
        .await
        .body;
    for file in ["wip.txt", "fixed.txt"] {
        assert!(page.contains(&format!("data-file=\"{file}\"")), "{file}: {page}");
    }
    assert!(page.contains("+3 \u{2212}0 in 3 files since main"), "{page}");
    assert!(
        !page.contains("<script>x") && page.contains("&#60;script&#62;x"),
        "escaped: {page}"
    );
    let portal = browser_get(lh, "/", Some(cookie), true).await.body;
    assert!(
        portal.contains("fix-it: +3 \u{2212}0 in 3 files since main"),
        "the card counts: {portal}"
    );
    a_viewer_and_another_site_cannot_act(gw, lh).await;
    let refused = portal_post(lh, cookie, "/_gw/review", "project=app-fix-it&do=remove").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("holds uncommitted changes"), "{}", refused.body);
    assert!(folder.is_dir(), "nothing removed");
    git(&folder, &["add", "-A"]);
    git(&folder, &["commit", "-q", "-m", "the task"]);
    let page = browser_get(lh, "/_gw/review?project=app-fix-it", Some(cookie), true)
        .await
        .body;
    assert!(
        page.contains("+3 \u{2212}0 in 3 files since main"),
        "committed changes count the same: {page}"
    );
    let removed = portal_post(lh, cookie, "/_gw/review", "project=app-fix-it&do=remove").await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert!(!folder.exists(), "the worktree is gone");
    assert!(
        git(repo, &["branch", "--list", "fix-it"]).contains("fix-it"),
        "the branch is kept"
    );
    let c = Https::new(gw.https, &gw.ca());
    let (status, _) = json(&c, "GET", "/p/app-fix-it/session", &basic("bob", "bob-password-12"), "").await;
    assert_eq!(status, 404, "its routes answer 404");
    let r = crate::common::audit::find(&crate::common::audit::file(gw), "task_removed", |_| true).await;
    assert_eq!(
        (&r["user"], &r["project"]),
        (&"bob".into(), &"app-fix-it".into()),
        "{r}"
    );
}

/// A viewer sees the review without its forms, and is refused asking and removing with the role;
/// a post from another site is refused before any of it.
async fn a_viewer_and_another_site_cannot_act(gw: &Gateway, lh: &Https) {
    use crate::common::login::{browser_get, form_login, portal_post};
    let c = Https::new(gw.https, &gw.ca());
    let vic = form_login(&c, "vic", "vic-password-12").await;
    let page = browser_get(lh, "/_gw/review?project=app-fix-it", Some(&vic), true).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("data-file=\"wip.txt\"")
            && !page.body.contains("id=\"remove\"")
            && !page.body.contains("id=\"ask\""),
        "{}",
        page.body
    );
    let removed = portal_post(lh, &vic, "/_gw/review", "project=app-fix-it&do=remove&confirm=yes").await;
    assert_eq!(removed.status, 403, "{}", removed.body);
    assert!(
        removed.body.contains("needs the operator role; vic has viewer"),
        "{}",
        removed.body
    );
    let session = gw.control("GET", "/inbox?project=app-fix-it").1;
    let id = serde_json::from_str::<serde_json::Value>(&session).unwrap()["projects"][0]["sessions"][0]["id"].clone();
    let ask = format!(
        "project=app-fix-it&session={}&do=ask&text=RUNCMD%3A+rm+-rf+.",
        id.as_str().unwrap()
    );
    let asked = portal_post(lh, &vic, "/_gw/review", &ask).await;
    assert_eq!(asked.status, 403, "{}", asked.body);
    assert!(asked.body.contains("viewer"), "refused for the role: {}", asked.body);
    let other = browser_get(lh, "/_gw/review?project=elsewhere", Some(&vic), true).await;
    assert_eq!(other.status, 404, "{}", other.body);
    let cross = lh
        .request("POST", "/_gw/review", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", &vic)
        .header("origin", "https://evil.example")
        .header("sec-fetch-site", "cross-site")
        .body(http_body_util::Full::from("project=app-fix-it&do=remove&confirm=yes"))
        .unwrap();
    let cross = lh.call(cross).await;
    assert_eq!(cross.status, 403, "{}", cross.body);
}
