//! The README's trigger example (issue 40's must-show), as written: its `[[policy]]` and
//! `[[trigger]]` block in the config of a gateway in front of the real OpenCode (project `web`: a
//! git repository with an npm test script and a remote), and its signed `curl` run in a real
//! terminal (tmux), only `GH_HOOK_SECRET`, `GATEWAY` and `CA` set as the README says. The fake
//! model does what the prompt asks (runs its backticked commands in turn): `npm test` runs
//! without a person, `git push` is rejected by the policy and never runs (the remote stays
//! empty), the model's last words show the rejection, the run ends ok with its cost, and the
//! portal's trigger card at 390 px shows it (screenshots in `test-artifacts/readme_trigger/`).

use std::path::Path;
use std::time::Duration;

use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::opencode::{BACKTICKED, FakeModel, OpenCode};
use crate::common::stack::ALICE_PW;
use crate::common::tmux::Tmux;

const SECRET: &str = "the-readme-example-hook-secret-77";

/// The README's fenced block of `kind` that contains `needle`.
fn readme_block(kind: &str, needle: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    readme
        .split(&format!("```{kind}\n"))
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .find(|b| b.contains(needle))
        .unwrap_or_else(|| panic!("no ```{kind} block with {needle} in the README"))
}

/// Project `web`: a git repository whose `npm test` leaves `test-ran`, with a bare `origin`.
fn web_repository(dir: &Path) -> std::path::PathBuf {
    let git = |args: &[&str], at: &Path| {
        let out = crate::common::process::bounded(std::process::Command::new("git").args(args).current_dir(at));
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let remote = dir.parent().unwrap().join("origin.git");
    git(&["init", "-q", "--bare", remote.to_str().unwrap()], dir);
    std::fs::write(
        dir.join("package.json"),
        r#"{"name": "web", "private": true, "scripts": {"test": "echo tests pass > test-ran"}}"#,
    )
    .unwrap();
    git(&["init", "-q", "-b", "main"], dir);
    git(&["remote", "add", "origin", remote.to_str().unwrap()], dir);
    git(&["add", "package.json"], dir);
    git(
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "start",
        ],
        dir,
    );
    remote
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, tmux and Chromium: run scripts/test.sh"]
async fn the_readmes_trigger_example_runs_as_written_in_a_terminal() {
    let model = FakeModel::start(BACKTICKED).await.priced(3.0, 15.0);
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let remote = web_repository(&oc.project);
    let users = users_toml(&[
        TestUser {
            name: "alice",
            password: ALICE_PW,
            projects: "[\"*\"]",
            role: "operator",
        },
        TestUser {
            name: "ci-bot",
            password: "a-password-nobody-uses-42",
            projects: "[\"web\"]",
            role: "operator",
        },
    ]);
    let config = base_config(&format!(
        "[[project]]\nname = \"web\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\n\n{users}{}",
        oc.url(),
        readme_block("toml", "[[trigger]]")
    ));
    let pw = oc.password.clone();
    let gw = Gateway::start_with(&config, &[("GH_HOOK_SECRET", SECRET)], move |d| {
        crate::common::write_secret(&d.join("pw"), &pw)
    });

    // The README's curl, in a terminal, as a file of its lines.
    let shell = tempfile::tempdir().unwrap();
    std::fs::write(shell.path().join("hook.sh"), readme_block("sh", "_gw/hook/gh")).unwrap();
    let ca = gw.ca();
    let address = format!("https://127.0.0.1:{}", gw.https.port());
    let tmux = Tmux::new("readme-hook");
    tmux.start(
        "bash hook.sh; echo; echo CURL-DONE; sleep 600",
        shell.path(),
        &[
            ("GH_HOOK_SECRET", SECRET),
            ("GATEWAY", &address),
            ("CA", ca.to_str().unwrap()),
        ],
    );
    let screen = tmux.wait_screen("CURL-DONE", Duration::from_secs(30)).await;
    std::fs::write(
        crate::common::browser::shots("readme_trigger").join("terminal.txt"),
        &screen,
    )
    .unwrap();
    let answer: serde_json::Value = serde_json::from_str(
        screen
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no answer on the screen:\n{screen}\n{}", gw.logs())),
    )
    .unwrap_or_else(|e| panic!("{e}: {screen}"));
    assert_eq!(answer["trigger"], "gh", "{screen}");
    let session = answer["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{screen}"))
        .to_string();

    the_run_went_as_the_readme_says(&gw, &oc.project, &remote, &session).await;
    let shots = crate::common::browser::shots("readme_trigger_card");
    let cert = gw.dir.path().join("certs/server.crt");
    let said = crate::common::browser::run(
        "trigger_card.mjs",
        &[
            ("GW_PORT", gw.https.port().to_string().as_ref()),
            ("CERT", cert.as_os_str()),
            ("SHOT_DIR", shots.as_os_str()),
            ("TRIGGER", "gh".as_ref()),
            ("OUTCOME", "ok".as_ref()),
        ],
        Duration::from_secs(90),
        || gw.logs(),
    )
    .await;
    eprintln!("{screen}\n{said}");
}

/// What the run did: the tests ran, the push was rejected by the policy's rule and never ran,
/// the model read the rejection, the run ended ok with a cost.
async fn the_run_went_as_the_readme_says(gw: &Gateway, project: &Path, remote: &Path, session: &str) {
    let t = crate::trigger_runs::newest_run_until(gw, "gh", "the README's run ended", |run| {
        run["session"] == session && run["outcome"] != "running"
    })
    .await;
    assert_eq!(t["runs"][0]["outcome"], "ok", "{t:#}");
    assert!(t["runs"][0]["usd"].as_f64().is_some_and(|usd| usd > 0.0), "{t:#}");
    assert_eq!(
        std::fs::read_to_string(project.join("test-ran")).unwrap_or_default(),
        "tests pass\n",
        "npm test ran"
    );
    let refs = crate::common::process::bounded(
        std::process::Command::new("git")
            .args(["for-each-ref"])
            .current_dir(remote),
    );
    assert!(
        refs.status.success() && refs.stdout.is_empty(),
        "the push never ran: {refs:?}"
    );
    let audit = crate::common::audit::file(gw);
    for (rule, answer) in [("allow: bash: npm test*", "once"), ("deny: bash: git push*", "reject")] {
        let r = crate::common::audit::find(&audit, "policy_answer", |r| {
            r["session"] == session && r["rule"] == rule
        })
        .await;
        assert_eq!((&r["answer"], &r["policy"]), (&answer.into(), &"ci".into()), "{r}");
    }
    // The agent read the rejection: the model's last words are what the push's tool answered.
    let c = crate::common::client::Https::new(gw.https, &gw.ca());
    let alice = crate::common::client::basic("alice", ALICE_PW);
    let path = format!("/p/web/session/{session}/message");
    let (status, messages) = crate::common::client::json(&c, "GET", &path, &alice, "").await;
    assert_eq!(status, 200, "{messages}");
    let said: Vec<String> = (messages.as_array().into_iter().flatten())
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .filter(|t| t.starts_with("SAW:"))
        .collect();
    assert!(
        said.iter()
            .any(|t| t.contains("denied by the gateway's policy ci: git push*")),
        "the model's words: {said:?}"
    );
}
