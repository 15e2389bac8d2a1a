//! Projects on another machine, reached over SSH (issue 24): a real OpenSSH server (`sshd` on a
//! loopback port, its own host key, the gateway's key authorized) stands in for the box, and
//! the project's server listens on the box's loopback (here, the same machine's).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::client::{Https, basic};
use crate::common::gateway::{ALICE, BIN};
use crate::common::process::Guarded;
use crate::common::stack::one_project_as;

const PW: &str = "box-upstream-pw";

/// An OpenSSH server on a loopback port that lets in one key (as root: the tests run as root).
struct Sshd {
    child: Guarded,
    port: u16,
    /// Its host key, as an OpenSSH public key line.
    host_key: String,
    /// What it logged (DEBUG1: each forwarded channel's target).
    log: std::sync::Arc<std::sync::Mutex<String>>,
    _dir: tempfile::TempDir,
}

fn keygen(path: &Path) {
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

impl Sshd {
    /// Started on a picked port (tried again if another process took it first), returned once
    /// it accepts connections, bounded.
    fn start(authorized_key: &str) -> Sshd {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        std::fs::write(d.join("authorized_keys"), authorized_key).unwrap();
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        for _ in 0..5 {
            let port = crate::common::free_port();
            let config = format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nAllowTcpForwarding local\nPermitOpen 127.0.0.1:*\nAllowAgentForwarding no\nX11Forwarding no\nPermitTTY no\nLogLevel DEBUG1\n",
                d = d.display()
            );
            std::fs::write(d.join("sshd_config"), config).unwrap();
            let mut child = Guarded::spawn(
                std::process::Command::new("/usr/sbin/sshd")
                    .args(["-D", "-e", "-f"])
                    .arg(d.join("sshd_config"))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped()),
                Duration::from_secs(5),
            );
            let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
            crate::common::pump_lines(child.stderr.take().unwrap(), log.clone());
            let listening = |_: &str| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
            if crate::common::process::ready_or_exited(&mut child, &log, Duration::from_secs(20), "sshd", listening) {
                let host_key = std::fs::read_to_string(d.join("host_key.pub"))
                    .unwrap()
                    .trim()
                    .to_string();
                return Sshd {
                    child,
                    port,
                    host_key,
                    log,
                    _dir: dir,
                };
            }
            let log = log.lock().unwrap().clone();
            assert!(log.contains("Address already in use"), "sshd exited:\n{log}");
        }
        panic!("5 picked ports were taken before sshd could bind them");
    }
}

/// The gateway's key to the box, written into `dir` (0600), and its public line.
fn client_key(dir: &Path) -> (PathBuf, String) {
    let key = dir.join("box_ed25519");
    keygen(&key);
    let public = std::fs::read_to_string(dir.join("box_ed25519.pub")).unwrap();
    (key, public)
}

fn box_table(port: u16, key: &Path, host_key: &str) -> String {
    format!(
        "[[box]]\nname = \"gpu1\"\nssh = \"root@127.0.0.1:{port}\"\nkey = \"{}\"\nhost_key = \"{host_key}\"\n\n",
        key.display()
    )
}

/// A project on the box: the gateway reaches its server through the box's SSH server (which
/// logs each forwarded channel), a box that does not answer makes the project answer 502 naming
/// the box, and a box that presents another host key than the pinned one is refused, loudly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenSSH's sshd: run scripts/test.sh"]
async fn a_project_on_a_box_is_reached_through_its_ssh_server_and_only_with_the_pinned_host_key() {
    let keys = tempfile::tempdir().unwrap();
    let (key, public) = client_key(keys.path());
    // The narrowed line docs/configuration.md gives: forwarding to the box's loopback only.
    let mut sshd = Sshd::start(&format!("restrict,port-forwarding,permitopen=\"127.0.0.1:*\" {public}"));
    let on_box = |config: String| config.replacen("name = \"web\"\n", "name = \"web\"\nbox = \"gpu1\"\n", 1);
    let (gw, web) = one_project_as(PW, &box_table(sshd.port, &key, &sshd.host_key), &[ALICE], on_box).await;
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    for _ in 0..3 {
        let r = c.get("/p/web/global/health", Some(&alice)).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, gw.logs());
    }
    assert!(
        web.seen().iter().any(|s| s.target == "/global/health"),
        "the upstream on the box answered"
    );
    let upstream_port = web.url().rsplit(':').next().unwrap().to_string();
    let forwarded = format!("target 127.0.0.1 port {upstream_port}");
    assert!(
        sshd.log.lock().unwrap().contains(&forwarded),
        "the box's sshd forwarded no channel to the upstream:\n{}",
        sshd.log.lock().unwrap()
    );
    assert!(
        sshd.log.lock().unwrap().matches("Accepted publickey for root").count() == 1,
        "one SSH connection for every request"
    );
    sshd.child.stop();

    // A box whose SSH server does not answer: 502, naming the box and why.
    let nothing = crate::common::free_port();
    let (gw_down, _web_down) = one_project_as(PW, &box_table(nothing, &key, &sshd.host_key), &[ALICE], on_box).await;
    let c_down = Https::new(gw_down.https, &gw_down.ca());
    let r = c_down.get("/p/web/global/health", Some(&alice)).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body.contains("box gpu1: cannot connect"), "{}", r.body);
    // While the backoff waits (1 s, then 2, 4, …), requests are refused at once with the last
    // error, and the box is not asked again. Asked until a refusal says the next try is at least
    // 2 s away (bounded), then once more at once.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c_down.get("/p/web/global/health", Some(&alice)).await;
        assert_eq!(r.status, 502, "{}", r.body);
        assert!(r.body.contains("box gpu1"), "{}", r.body);
        let secs = r
            .body
            .split_once("tried again in ")
            .and_then(|(_, rest)| rest.split(' ').next()?.parse::<u64>().ok());
        if secs.is_some_and(|s| s >= 2) {
            break;
        }
        assert!(Instant::now() < deadline, "the backoff never reached 2 s: {}", r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let tries = gw_down.metric("box_connect_failures_total{box=\"gpu1\"}");
    assert!(tries >= 2, "{tries}");
    let asked = Instant::now();
    let again = c_down.get("/p/web/global/health", Some(&alice)).await;
    assert_eq!(again.status, 502, "{}", again.body);
    assert!(
        again.body.contains("box gpu1: unreachable, tried again in") && again.body.contains("cannot connect"),
        "{}",
        again.body
    );
    assert!(
        asked.elapsed() < Duration::from_millis(900),
        "it waited {:?}",
        asked.elapsed()
    );
    assert_eq!(
        gw_down.metric("box_connect_failures_total{box=\"gpu1\"}"),
        tries,
        "no new attempt"
    );
    let (_, status) = gw_down.control("GET", "/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["boxes"][0]["state"], "not connected", "{status}");
    assert!(
        status["boxes"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot connect")),
        "{status}"
    );
    assert_eq!(gw_down.metric("box_up{box=\"gpu1\"}"), 0);

    // Another box key than the pinned one: refused, with the reason, in the answer and the log.
    let other = Sshd::start(&public);
    let wrong = tempfile::tempdir().unwrap();
    keygen(&wrong.path().join("k"));
    let pinned_elsewhere = std::fs::read_to_string(wrong.path().join("k.pub"))
        .unwrap()
        .trim()
        .to_string();
    let (gw2, _web2) = one_project_as(PW, &box_table(other.port, &key, &pinned_elsewhere), &[ALICE], on_box).await;
    let c2 = Https::new(gw2.https, &gw2.ca());
    let r = c2.get("/p/web/global/health", Some(&alice)).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(
        r.body.contains("box gpu1") && r.body.contains("is not the pinned one"),
        "{}",
        r.body
    );
    assert!(
        gw2.wait_log("box_host_key_mismatch", Duration::from_secs(10)).await,
        "{}",
        gw2.logs()
    );
}

/// `check` refuses a box whose key others may read, and one with no pinned host key, naming the
/// key and the fix.
#[test]
fn check_refuses_a_box_key_others_can_read_and_a_box_without_a_pinned_host_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = client_key(dir.path());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = crate::common::gateway::base_config(&format!(
        "[[box]]\nname = \"gpu1\"\nssh = \"dev@gpu1.lan:22\"\nkey = \"{}\"\n\n[[project]]\nname = \"train\"\nbox = \"gpu1\"\nupstream = \"http://127.0.0.1:4096\"\n\n[[project]]\nname = \"other\"\nbox = \"nope\"\nupstream = \"http://127.0.0.1:4097\"\n",
        key.display()
    ));
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, config).unwrap();
    let out = crate::common::process::bounded(std::process::Command::new(BIN).args(["check", "-c"]).arg(&file));
    let err = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("box[0] (gpu1).key") && err.contains(&format!("chmod 600 {}", key.display())),
        "{err}"
    );
    assert!(
        err.contains("box[0] (gpu1).host_key") && err.contains("not pinned"),
        "{err}"
    );
    assert!(
        err.contains("(other).box") && err.contains("no [[box]] is named \"nope\""),
        "{err}"
    );
}

/// OpenCode's real clients through a box: `opencode run --attach` gets the fake model's answer
/// (its event stream crosses the SSH channel) and a terminal WebSocket runs what is typed (the
/// upgrade is spliced over a channel), with the project pinned to the server's folder on the box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and OpenSSH's sshd: run scripts/test.sh"]
async fn opencode_run_attach_and_a_terminal_reach_a_real_opencode_on_a_box() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;

    use crate::common::client::{json, pty_socket, read_terminal_until};
    use crate::common::stack::{ALICE_PW, alice, setup_as};

    let keys = tempfile::tempdir().unwrap();
    let (key, public) = client_key(keys.path());
    let sshd = Sshd::start(&format!("restrict,port-forwarding,permitopen=\"127.0.0.1:*\" {public}"));
    let table = box_table(sshd.port, &key, &sshd.host_key);
    let s = setup_as("echo unused", true, |config| {
        let config = config.replacen("name = \"demo\"\n", "name = \"demo\"\nbox = \"gpu1\"\n", 1);
        config.replacen("[[project]]", &format!("{table}[[project]]"), 1)
    })
    .await;
    let url = format!("https://127.0.0.1:{}/p/demo", s.gw.https.port());
    let work = tempfile::tempdir().unwrap();
    let out = crate::real_opencode::run_cli(
        &[
            "run",
            "--attach",
            &url,
            "-u",
            "alice",
            "-p",
            ALICE_PW,
            "hello over the box",
        ],
        &s.gw.ca(),
        work.path(),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("fake-model"),
        "run over the box failed: {}\n{stderr}\ngateway:\n{}",
        String::from_utf8_lossy(&out.stdout),
        s.gw.logs()
    );
    let forwarded = format!("target 127.0.0.1 port {}", s.oc.port);
    assert!(
        sshd.log.lock().unwrap().contains(&forwarded),
        "the box's sshd forwarded nothing to OpenCode:\n{}",
        sshd.log.lock().unwrap()
    );
    let (status, pty) = json(&s.client, "POST", "/p/demo/pty", &alice(), "{}").await;
    assert_eq!(status, 200, "{pty}");
    let id = pty["id"].as_str().unwrap().to_string();
    let mut ws = pty_socket(&s.client, &format!("/p/demo/pty/{id}/connect?cursor=0"), Some(&alice())).await;
    ws.send(Message::text("echo BOX$((6*7))X\r")).await.unwrap();
    let said = read_terminal_until(&mut ws, "BOX42X").await;
    assert!(said.contains("BOX42X"), "terminal said: {said:?}");
}
