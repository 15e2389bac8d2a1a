//! Your own OpenCode through the gateway (issue 38): a server the gateway spawns uses the
//! configuration and credentials of the OS user it runs as, as plain `opencode` in that folder
//! would, with a session database and a temporary folder of its own. A provider (the fake model)
//! configured only in that user's global config, no `opencode.json` in the project: `opencode run
//! --attach` through the gateway gets the model's answer, `status` names the model, the project
//! folder stays clean, and twenty starts and stops leave the temporary folder as it was.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::client::Https;
use crate::common::gateway::Gateway;
use crate::common::opencode::{ANSWER, FakeModel, opencode_bin};
use crate::common::stack::ALICE_PW;
use crate::common::supervised::{project_port, server_config};

/// The gateway with one spawned project (demo, in `project`) told nothing of a model, its
/// user's global OpenCode config holding `global` (when given), and `TMPDIR` = `tmp`.
fn gateway(project: &Path, global: Option<String>, tmp: &Path) -> Gateway {
    let table = format!(
        "[[project]]\nname = \"demo\"\ndirectory = \"{}\"\nspawn = true\nenv = {{ OPENCODE_DISABLE_MODELS_FETCH = \"1\" }}\n\n",
        project.display()
    );
    let tmp = tmp.display().to_string();
    Gateway::start_with(&server_config(&table), &[("TMPDIR", &tmp)], |d| {
        if let Some(config) = global {
            crate::common::opencode::write_user_config(&d.join("home"), &config);
        }
    })
}

/// `status`'s words for demo's model, once its server said (bounded).
async fn model_of(gw: &Gateway) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = gw.control("GET", "/status");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if let Some(m) = v["projects"][0]["model"].as_str() {
            return m.to_string();
        }
        assert!(Instant::now() < deadline, "status never named a model: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_provider_only_in_the_users_global_config_answers_through_the_gateway() {
    let model = FakeModel::start("true").await;
    let project = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway(project.path(), Some(model.config_json()), tmp.path());
    let c = Https::new(gw.https, &gw.ca());
    let alice = crate::common::client::basic("alice", ALICE_PW);
    assert_eq!(c.get("/p/demo/global/health", Some(&alice)).await.status, 200);
    assert_eq!(model_of(&gw).await, "fake/fake-model");
    assert!(!gw.logs().contains("will likely fail"), "{}", gw.logs());

    // The client as a person runs it, from a home of its own that knows no provider.
    let client_home = tempfile::tempdir().unwrap();
    let url = format!("https://127.0.0.1:{}/p/demo", gw.https.port());
    model.answer_when(gw.events_opened_after_now());
    let mut cmd = std::process::Command::new(opencode_bin());
    cmd.args(["run", "--attach", &url, "-u", "alice", "-p", ALICE_PW, "hello"])
        .env("NODE_EXTRA_CA_CERTS", gw.ca())
        .env("HOME", client_home.path())
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .current_dir(project.path());
    let out = crate::common::process::output_within_async(cmd, Duration::from_secs(120)).await;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // `run --attach` 1.18.33 prints the model's name, not its answer: the answer is read back
    // from the run's session (the only one).
    assert!(
        out.status.success() && printed.contains("fake-model"),
        "{}: {printed}\n{}\naccess lines:\n{}",
        out.status,
        gw.logs(),
        gw.stdout.lock().unwrap()
    );
    let messages = crate::common::opencode::only_session_messages(&c, "demo", &alice).await;
    assert!(messages.to_string().contains(ANSWER), "{messages}");
    assert!(model.requests.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    // Nothing of OpenCode's was written into the project.
    let left: Vec<String> = std::fs::read_dir(project.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "the project folder holds {left:?}");

    // What is its own: the session database and the temporary folder, under its state folder.
    let state = gw.dir.path().join("state/projects/demo");
    let pid = crate::common::supervised::server_pid(project_port(&gw, "demo").unwrap());
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap()).replace('\0', "\n");
    for (name, value) in [
        ("OPENCODE_DB", state.join("data/opencode/opencode.db")),
        ("TMPDIR", state.join("tmp")),
        ("HOME", gw.dir.path().join("home")),
    ] {
        assert!(
            environ.contains(&format!("{name}={}\n", value.display())),
            "{name}: {environ}"
        );
    }
    assert!(!environ.contains("XDG_CONFIG_HOME="), "{environ}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn without_a_usable_model_the_log_says_so_and_how_to_mend_it() {
    let project = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway(project.path(), None, tmp.path());
    let c = Https::new(gw.https, &gw.ca());
    let alice = crate::common::client::basic("alice", ALICE_PW);
    assert_eq!(c.get("/p/demo/global/health", Some(&alice)).await.status, 200);
    assert!(model_of(&gw).await.starts_with("none set"), "{}", gw.logs());
    assert!(
        gw.wait_log(
            "no model is set and no provider of the user's is set up",
            Duration::from_secs(10)
        )
        .await,
        "{}",
        gw.logs()
    );
    assert!(gw.logs().contains("opencode auth login"), "{}", gw.logs());
    // The start's banner, printed once the server said its model, says so too.
    let deadline = Instant::now() + Duration::from_secs(40);
    let banner = loop {
        let out = gw.stdout.lock().unwrap().clone();
        if out.contains("forgot the password?") || Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let warning = crate::common::line_starting(&banner.replace("\n  ", "\n"), "WARNING: ");
    assert!(
        banner.contains("\n  model: none set (OpenCode picks one of: opencode)\n")
            && warning.contains("no model is set and no provider of the user's is set up")
            && warning.contains("opencode auth login"),
        "{banner}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn twenty_starts_and_stops_leave_the_temporary_folder_as_it_was() {
    let model = FakeModel::start("true").await;
    let project = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut gw = gateway(project.path(), Some(model.config_json()), tmp.path());
    let own_tmp = gw.dir.path().join("state/projects/demo/tmp");
    let mut port = None;
    for start in 1..=20 {
        if start > 1 {
            let (ok, text) = gw.cli(&["restart", "demo"]);
            assert!(ok, "{text}");
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        port = loop {
            let now = project_port(&gw, "demo");
            if now.is_some() && now != port {
                break now;
            }
            assert!(Instant::now() < deadline, "start {start}: not ready:\n{}", gw.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // The server unpacks into its own folder, never the gateway's TMPDIR.
        let own: Vec<_> = std::fs::read_dir(&own_tmp).unwrap().collect();
        assert!(!own.is_empty(), "start {start}: nothing in {}", own_tmp.display());
        let outer: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(outer.is_empty(), "the gateway's TMPDIR after start {start}: {outer:?}");
    }
    gw.signal(libc::SIGTERM);
    assert_eq!(
        tokio::task::block_in_place(|| gw.wait_exit(Duration::from_secs(30))),
        Some(0)
    );
    assert!(
        !own_tmp.exists(),
        "the stopped server's folder is left: {}",
        own_tmp.display()
    );
}
