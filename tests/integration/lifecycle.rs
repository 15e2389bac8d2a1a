//! Starting and stopping: the committed dev config on a first start, and a drain on SIGTERM.

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, basic, read, read_until};
use crate::common::process::Guarded;
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

type Shared = std::sync::Arc<std::sync::Mutex<String>>;

/// `serve -c <config>` in `root` with `PATH`, its stderr and stdout kept; returns once it logs
/// "gateway ready" and has printed its attach commands, which end with the SSH host key's
/// known_hosts line (one print, so all of it is there then), bounded.
fn serve_until_ready(config: &std::path::Path, root: &std::path::Path, path: &str) -> (Guarded, Shared, Shared) {
    let log = Shared::default();
    let out = Shared::default();
    // Stopped and reaped however the test ends (SIGTERM first: it stops the server it spawned).
    let mut child = Guarded::spawn(
        std::process::Command::new(crate::common::gateway::BIN)
            .args(["serve", "-c"])
            .arg(config)
            .current_dir(root)
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
        Duration::from_secs(15),
    );
    crate::common::pump_lines(child.stderr.take().unwrap(), log.clone());
    crate::common::pump_lines(child.stdout.take().unwrap(), out.clone());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !log.lock().unwrap().contains("gateway ready") || !out.lock().unwrap().contains("known_hosts: ") {
        assert!(
            std::time::Instant::now() < deadline,
            "not ready with its attach commands within 30 s\nlog:\n{}\nstdout:\n{}",
            log.lock().unwrap(),
            out.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, log, out)
}

/// The committed `config/gateway.toml` (a local `serve` of the working tree's copy adds a user to
/// it): `git show HEAD:config/gateway.toml`, or the file when git or the repository is missing.
fn committed_dev_config() -> String {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shown = std::process::Command::new("git")
        .args(["show", "HEAD:config/gateway.toml"])
        .current_dir(repo)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match shown {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
        _ => std::fs::read_to_string(repo.join("config/gateway.toml")).unwrap(),
    }
}

fn copy_dev_config(root: &std::path::Path) -> std::path::PathBuf {
    let text = committed_dev_config();
    assert!(
        !text.contains("[[user]]\nname = \"dev\""),
        "the committed dev config has no user yet: it is the first start's to make"
    );
    for fixed in ["127.0.0.1:8443", "127.0.0.1:9090", "127.0.0.1:2222"] {
        assert!(text.contains(&format!("listen = \"{fixed}\"")), "{fixed}");
    }
    // Same file, but on ephemeral ports (tests never take fixed ones).
    let text = text
        .replace("listen = \"127.0.0.1:8443\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:9090\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:2222\"", "listen = \"127.0.0.1:0\"")
        .lines()
        .filter(|l| !l.starts_with("public_url"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::create_dir_all(root.join("config")).unwrap();
    std::fs::create_dir_all(root.join("demo")).unwrap();
    let path = root.join("config/gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_committed_dev_config_makes_certs_and_a_user_on_first_start() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let config = copy_dev_config(root.path());
    let repo_bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("node_modules/.bin");
    let path = format!("{}:{}", repo_bin.display(), std::env::var("PATH").unwrap());
    // The repository's layout (config/ and certs-dev/ side by side), not the harness's one folder.
    let (mut child, log, out) = serve_until_ready(&config, root.path(), &path);
    let stdout = out.lock().unwrap().clone();
    let password = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Created gateway user \"dev\" with password: "))
        .unwrap_or_else(|| panic!("no password printed:\n{stdout}"))
        .trim()
        .to_string();
    let https: std::net::SocketAddr = log
        .lock()
        .unwrap()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("https="))
        .unwrap()
        .parse()
        .unwrap();
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
    ] {
        let mode = std::fs::metadata(root.path().join(key)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{key}");
    }
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains("name = \"dev\"") && written.contains("$argon2id$"),
        "{written}"
    );
    assert!(!written.contains(&password), "only the hash is written");
    assert!(
        written.contains("# On first start the gateway makes"),
        "comments are kept"
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
    // A second start creates no user and prints no password.
    let (mut child, _log, out) = serve_until_ready(&config, root.path(), &path);
    assert!(!out.lock().unwrap().contains("Created gateway user"));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), written);
    let stopped = child.stop();
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
}
