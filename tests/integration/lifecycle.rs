//! Starting and stopping: the committed dev config on a first start, and a drain on SIGTERM.

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, basic, read, read_until};
use crate::common::gateway::{Launched, serve_in};
use crate::common::stack::two_projects;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_requests_in_flight_finish_then_exits_zero() {
    let (mut gw, web, _api, c) = two_projects("[limits]\ndrain_timeout = \"3s\"\n").await;
    let alice = basic("alice", "alice-password-1");
    // An open event stream and a request that takes 1.5 s are both in flight.
    let stream = c
        .send(
            c.request("GET", "/p/web/event", Some(&alice))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    let mut stream = stream.into_body();
    read_until(&mut stream, Duration::from_secs(5), |t| t.contains("server.connected")).await;
    web.wait_subscribers(1).await;
    let slow = {
        let c = c.clone();
        let alice = alice.clone();
        tokio::spawn(async move { c.get("/p/web/delay", Some(&alice)).await })
    };
    // The slow request is in flight once the upstream has it (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !web.seen().iter().any(|s| s.target.starts_with("/delay")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow request never reached the upstream; it saw: {:?}",
            web.seen().iter().map(|s| s.target.clone()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = std::time::Instant::now();
    gw.signal(libc::SIGTERM);
    // The stream keeps flowing during the drain.
    web.events.send("{\"type\":\"during-drain\"}".into()).unwrap();
    let during = read_until(&mut stream, Duration::from_secs(2), |t| t.contains("during-drain")).await;
    assert!(during.contains("during-drain"), "{during}");
    let slow = slow.await.unwrap();
    assert_eq!(
        (slow.status.as_u16(), slow.body.as_str()),
        (200, "done"),
        "the request in flight finished"
    );
    let code = tokio::task::block_in_place(|| gw.wait_exit(Duration::from_secs(15)));
    assert_eq!(code, Some(0), "{}", gw.logs());
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "it waited for the drain"
    );
    // The process has exited; its last lines may still be in the pipe the test drains.
    assert!(gw.wait_log("stopped", Duration::from_secs(5)).await, "{}", gw.logs());
    let logs = gw.logs();
    assert!(
        logs.contains("SIGTERM: draining") && logs.contains("drain deadline reached") && logs.contains("stopped"),
        "{logs}"
    );
    // Nothing listens any more.
    let refused = tokio::net::TcpStream::connect(gw.https).await;
    assert!(
        matches!(&refused, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
        "{refused:?}"
    );
}

/// `serve -c <config>` in `root` with `PATH` (the shared fixture), returned once it has also
/// printed its whole banner, bounded.
fn serve_until_ready(config: &std::path::Path, root: &std::path::Path, path: &str) -> Launched {
    let run = serve_in(root, config, &[("PATH", path)]);
    // The banner ends with the way to set a new password (after the frame on a first start).
    let printed = |out: &str| {
        out.rsplit_once("opencode-gateway user passwd")
            .is_some_and(|(_, rest)| !out.contains("shown only this once") || rest.contains("\n+-"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !printed(&run.stdout.lock().unwrap()) {
        assert!(
            std::time::Instant::now() < deadline,
            "not ready with its attach commands within 30 s\nlog:\n{}\nstdout:\n{}",
            run.log.lock().unwrap(),
            run.stdout.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    run
}

fn copy_dev_config(root: &std::path::Path) -> std::path::PathBuf {
    let text = crate::common::dev_config::committed();
    assert!(
        !text.contains("[[user]]\nname = \"dev\""),
        "the committed dev config has no user yet: it is the first start's to make"
    );
    // Same file, but on ephemeral ports (tests never take fixed ones).
    let text = crate::common::dev_config::on_ephemeral_ports(&text);
    std::fs::create_dir_all(root.join("config")).unwrap();
    std::fs::create_dir_all(root.join("demo")).unwrap();
    let path = root.join("config/gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_committed_dev_config_makes_certs_and_a_user_on_first_start() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let config = copy_dev_config(root.path());
    // The copy as a repository of its own, with the project's ignore rules: after a first start
    // its tree must be as committed (issue 22: the first start wrote the user into the config).
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(repo.join(".gitignore"), root.path().join(".gitignore")).unwrap();
    std::fs::write(root.path().join("demo/README.md"), "the demo project\n").unwrap();
    git(root.path(), &["init", "-q"]);
    git(root.path(), &["add", "-A"]);
    git(root.path(), &["commit", "-q", "-m", "committed tree"]);
    let committed = std::fs::read_to_string(&config).unwrap();
    let repo_bin = repo.join("node_modules/.bin");
    let path = format!("{}:{}", repo_bin.display(), std::env::var("PATH").unwrap());
    // The repository's layout (config/ and certs-dev/ side by side), not the harness's one folder.
    let Launched {
        mut child,
        log,
        stdout: out,
        https,
        ..
    } = serve_until_ready(&config, root.path(), &path);
    let stdout = out.lock().unwrap().clone();
    let password = crate::common::dev_config::printed_password(&stdout);
    assert!(password.len() >= 16, "{password:?}");
    // Printed last, framed, with the way back beside it.
    let tail = &stdout[stdout.find("Its password, shown only this once:").unwrap()..];
    assert!(tail.contains("opencode-gateway user passwd dev"), "{stdout}");
    assert!(
        !tail.contains("opencode attach"),
        "nothing printed after the password:\n{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with('+'),
        "the frame closes the banner:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "NODE_EXTRA_CA_CERTS=certs-dev/ca.crt opencode attach https://127.0.0.1:{}/p/demo -u dev -p '{password}'",
            https.port()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("opencode run --attach"), "{stdout}");
    assert!(
        stdout.contains("ssh -N -L 4096:demo:80 -p ") && stdout.contains("known_hosts: [127.0.0.1]:"),
        "{stdout}"
    );
    for key in [
        "certs-dev/ca.key",
        "certs-dev/server.key",
        "certs-dev/ssh_host_ed25519_key",
        "config/gateway.users.toml",
    ] {
        let mode = std::fs::metadata(root.path().join(key)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{key}");
    }
    // The user went to the git-ignored users file; the config is as committed.
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        committed,
        "the config was not touched"
    );
    let users = std::fs::read_to_string(root.path().join("config/gateway.users.toml")).unwrap();
    assert!(
        users.contains("name = \"dev\"") && users.contains("$argon2id$"),
        "{users}"
    );
    assert!(!users.contains(&password), "only the hash is written");
    assert_eq!(
        git(root.path(), &["status", "--porcelain"]),
        "",
        "the tree is as committed"
    );
    assert!(!log.lock().unwrap().contains(&password), "the password is not logged");
    // The spawned project answers through the gateway with the printed credentials.
    let c = Https::new(https, &root.path().join("certs-dev/ca.crt"));
    let r = c.get("/p/demo/global/health", Some(&basic("dev", &password))).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, log.lock().unwrap());
    let r = read(
        c.send(
            c.request("GET", "/global/health", Some(&basic("dev", &password)))
                .body(Full::default())
                .unwrap(),
        )
        .await,
    )
    .await;
    assert_eq!(r.status, 200, "the only project is also served at /");
    let stopped = child.stop();
    assert!(
        stopped.is_some_and(|s| s.success()),
        "{stopped:?}\n{}",
        log.lock().unwrap()
    );
    // A second start creates no user, prints no password, says how to set a new one.
    let Launched {
        mut child, stdout: out, ..
    } = serve_until_ready(&config, root.path(), &path);
    let again = out.lock().unwrap().clone();
    assert!(!again.contains("shown only this once"), "{again}");
    assert!(again.contains("opencode attach https://127.0.0.1:"), "{again}");
    assert!(
        again.contains(" -u dev -p '<password>'"),
        "the only user is named: {again}"
    );
    assert!(
        again.contains("forgot the password? set a new one, then reload:\n")
            && again.contains("opencode-gateway user passwd dev\n"),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("config/gateway.users.toml")).unwrap(),
        users
    );
    assert_eq!(git(root.path(), &["status", "--porcelain"]), "");
    let stopped = child.stop();
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
}

/// Issue 22: a second `serve` on the same config said only "is another process using it?".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_config_names_the_gateway_already_running() {
    let (gw, _web, _api, _c) = two_projects("").await;
    let out = crate::common::process::output_within(
        std::process::Command::new(crate::common::gateway::BIN)
            .args(["serve", "-c"])
            .arg(&gw.config),
        None,
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("a gateway is already running on") && err.contains(&format!("pid {}", gw.pid())),
        "{err}"
    );
}
