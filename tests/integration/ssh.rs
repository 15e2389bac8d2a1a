//! The SSH front door with the real OpenSSH client: forwards to granted projects are served by the
//! same pipeline (identity, roles, credential injection), everything else is refused with a
//! reason, and closing the connection frees what it held.

use std::path::Path;
use std::time::Duration;

use crate::common::client::{plain, plain_send, read_until, try_read_until};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{Gateway, base_config, external_project, hash};
use crate::common::ssh::{Key, Tunnel, keygen, known_hosts, run, ssh};
use crate::common::write_secret;

const PW: &str = "ssh-upstream-pw";

pub struct SshSetup {
    pub gw: Gateway,
    pub dir: tempfile::TempDir,
    pub alice: Key,
    pub vera: Key,
    pub stranger: Key,
    pub kh: std::path::PathBuf,
}

/// `[ssh]` plus projects from `projects_toml`; alice (operator of all, key + password), vera
/// (viewer of web), bob (operator of web only, same key as vera's stranger is unknown).
pub fn setup_ssh(projects_toml: &str) -> SshSetup {
    let dir = tempfile::tempdir().unwrap();
    let alice = keygen(dir.path(), "alice_key");
    let vera = keygen(dir.path(), "vera_key");
    let stranger = keygen(dir.path(), "stranger_key");
    let users = format!(
        "[[user]]\nname = \"alice\"\npassword_hash = \"{}\"\nssh_keys = [\"{}\"]\nprojects = [\"*\"]\nrole = \"operator\"\n\n[[user]]\nname = \"vera\"\nssh_keys = [\"{}\"]\nprojects = [\"web\"]\nrole = \"viewer\"\n",
        hash("alice-password-1"),
        alice.public_line,
        vera.public_line
    );
    let config = base_config(&format!(
        "[ssh]\nlisten = \"127.0.0.1:0\"\nhost_key = \"certs/ssh_host_ed25519_key\"\n\n{projects_toml}{users}"
    ));
    let gw = Gateway::start_behind(&config, PW);
    let kh = known_hosts(&gw, dir.path());
    SshSetup {
        gw,
        dir,
        alice,
        vera,
        stranger,
        kh,
    }
}

fn projects(web: &FakeUpstream, api: &FakeUpstream) -> String {
    external_project("web", &web.url()) + &external_project("api", &api.url())
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The real `ssh` logging in as alice with the gateway password only (answered by `ask`, asked at
/// most `prompts` times), from its own loopback `source` address (so the login allowance it spends is
/// its test's alone), running `id` (which the gateway refuses: no shell).
fn password_login(s: &SshSetup, ask: &Path, prompts: u32, source: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("ssh");
    cmd.args([
        "-F",
        "/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "PubkeyAuthentication=no",
        "-o",
        "PreferredAuthentications=password",
    ])
    .arg("-o")
    .arg(format!("NumberOfPasswordPrompts={prompts}"))
    .args(["-b", source])
    .arg("-o")
    .arg(format!("UserKnownHostsFile={}", s.kh.display()))
    .args(["-p", &s.gw.ssh.unwrap().port().to_string(), "alice@127.0.0.1", "id"])
    .env("SSH_ASKPASS", ask)
    .env("SSH_ASKPASS_REQUIRE", "force")
    .env("DISPLAY", ":0")
    .stdin(std::process::Stdio::null());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_is_served_as_its_ssh_user_with_the_upstream_credential() {
    let web = FakeUpstream::start(PW).await;
    let api = FakeUpstream::start(PW).await;
    let s = setup_ssh(&projects(&web, &api));
    let t = Tunnel::open(&s.gw, &s.kh, &s.alice.private, "alice", "web");
    // No password asked; one sent anyway is neither needed nor forwarded.
    let r = plain(
        t.local,
        "GET",
        "/echo",
        &[("authorization", "Basic Ym9ndXM6Ym9ndXM=")],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = web.seen();
    let got = seen.last().unwrap();
    assert_eq!(
        got.headers["authorization"].to_str().unwrap(),
        crate::common::client::basic("opencode", PW)
    );
    assert_eq!(got.headers["x-forwarded-proto"], "http");
    assert!(
        s.gw.wait_log(
            "transport=\"ssh\" user=\"alice\" project=\"web\"",
            Duration::from_secs(5)
        )
        .await,
        "{}",
        s.gw.logs()
    );
    // A page that rebinds its own name to the tunnel's port is refused.
    let r = plain(t.local, "GET", "/echo", &[("host", "evil.example:4096")], "").await;
    assert_eq!(r.status, 403);
    // The audit trail: one login for the connection, by key.
    let f = crate::common::audit::file(&s.gw);
    let login = crate::common::audit::find(&f, "login", |r| r["user"] == "alice").await;
    assert_eq!(
        (
            login["via"].as_str(),
            login["method"].as_str(),
            login["credential"].as_str()
        ),
        (Some("ssh"), Some("ssh"), Some("publickey"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewers_tunnel_can_read_but_not_prompt() {
    let web = FakeUpstream::start(PW).await;
    let api = FakeUpstream::start(PW).await;
    let s = setup_ssh(&projects(&web, &api));
    let t = Tunnel::open(&s.gw, &s.kh, &s.vera.private, "vera", "web");
    assert_eq!(plain(t.local, "GET", "/session", &[], "").await.status, 200);
    let r = plain(t.local, "POST", "/session", &[], "{}").await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("needs the operator role"), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_but_forwards_to_granted_projects_is_refused_and_logged() {
    let web = FakeUpstream::start(PW).await;
    let api = FakeUpstream::start(PW).await;
    let s = setup_ssh(&projects(&web, &api));
    // A command (a session channel: shell, exec and sftp all need one).
    let out = tokio::task::block_in_place(|| run(ssh(&s.gw, &s.kh, &s.alice.private, "alice", &[], &["id"])));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("only forwards to projects"), "{}", stderr(&out));
    let out = tokio::task::block_in_place(|| run(ssh(&s.gw, &s.kh, &s.alice.private, "alice", &["-s"], &["sftp"])));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("only forwards to projects"),
        "sftp refused for having no session channel, not another reason: {}",
        stderr(&out)
    );
    // A remote forward.
    let out = tokio::task::block_in_place(|| {
        run(ssh(
            &s.gw,
            &s.kh,
            &s.alice.private,
            "alice",
            &["-N", "-o", "ExitOnForwardFailure=yes", "-R", "0:127.0.0.1:22"],
            &[],
        ))
    });
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("remote port forwarding failed"),
        "{}",
        stderr(&out)
    );
    // Forwards to an ungranted project and to an address rather than a project.
    for (user, key, target, why) in [
        ("vera", &s.vera.private, "api", "vera has no access to project api"),
        ("alice", &s.alice.private, "127.0.0.1", "127.0.0.1 is not a project"),
    ] {
        let mut t = Tunnel::open(&s.gw, &s.kh, key, user, target);
        let mut sock = tokio::net::TcpStream::connect(t.local).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = sock.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
        let mut buf = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut buf)).await;
        assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "the forward carried nothing");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !t.stderr.lock().unwrap().contains(why) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            t.stderr.lock().unwrap().contains(why),
            "ssh did not show why: {}",
            t.stderr.lock().unwrap()
        );
        t.close();
    }
    // A key that is nobody's, and a user that does not exist.
    let out = tokio::task::block_in_place(|| run(ssh(&s.gw, &s.kh, &s.stranger.private, "alice", &["-N"], &[])));
    assert!(stderr(&out).contains("Permission denied"), "{}", stderr(&out));
    let out = tokio::task::block_in_place(|| run(ssh(&s.gw, &s.kh, &s.alice.private, "mallory", &["-N"], &[])));
    assert!(stderr(&out).contains("Permission denied"), "{}", stderr(&out));
    // Both refusals are in the audit trail (issue 21, defect 6: key refusals were not), the
    // unknown name not written down.
    use crate::common::audit::{file, find};
    let f = file(&s.gw);
    let refused = find(&f, "login_failed", |r| r["reason"] == "key_not_authorized").await;
    assert_eq!(refused["user"], "alice", "{refused}");
    assert_eq!(refused["credential"], "publickey", "{refused}");
    assert!(
        refused["fingerprint"]
            .as_str()
            .is_some_and(|f| f.starts_with("SHA256:")),
        "{refused}"
    );
    let unknown = find(&f, "login_failed", |r| r["reason"] == "unknown_user").await;
    assert!(unknown.get("user").is_none_or(|u| u.is_null()), "{unknown}");
    assert!(
        !std::fs::read_to_string(&f).unwrap().contains("mallory"),
        "an unknown name is never recorded"
    );
    // The last refusal's line, then all of them (the log reaches the test through a pipe).
    assert!(
        s.gw.wait_log("reason=\"unknown_user\"", Duration::from_secs(5)).await,
        "{}",
        s.gw.logs()
    );
    let logs = s.gw.logs();
    assert_eq!(
        logs.matches("reason=\"session_refused\"").count(),
        2,
        "the command and sftp are both refused as sessions:\n{logs}"
    );
    for reason in [
        "session_refused",
        "remote_forward_refused",
        "target_not_granted",
        "unknown_target",
        "key_not_authorized",
        "unknown_user",
    ] {
        assert!(
            logs.contains(&format!("reason=\"{reason}\"")),
            "the log does not say {reason}:\n{logs}"
        );
    }
    assert!(
        web.seen().is_empty() && api.seen().is_empty(),
        "nothing reached an upstream"
    );
}

/// The gateway password over SSH goes through the HTTPS path's limiter and caches: once the
/// address's allowance is spent, even the right (cached) password is refused (issue 21, defect 1:
/// the right one used to be accepted from an address over its allowance), and a token typed as the
/// password never costs an argon2 run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_password_logs_in_over_ssh_through_the_same_limiter() {
    let web = FakeUpstream::start(PW).await;
    let api = FakeUpstream::start(PW).await;
    // A burst of 3, then one a minute: the allowance cannot refill while the test runs.
    let s = setup_ssh(&format!(
        "[limits]\nauth_failure_burst = 3\nauth_failures_per_minute = 1\n\n{}",
        projects(&web, &api)
    ));
    use std::os::unix::fs::PermissionsExt;
    let answer = |name: &str, password: &str| {
        let path = s.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\necho '{password}'\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        path
    };
    let right = answer("right.sh", "alice-password-1");
    let wrong = answer("wrong.sh", "not-the-password");
    let token = answer("token.sh", &format!("ocgw_{}", "A".repeat(43)));
    let with_password = |ask: &Path| password_login(&s, ask, 1, "127.0.0.31");
    let argon2 = || s.gw.metric("argon2_verifications_total");
    let before = argon2();
    // Attempt 1 of 3: the right password logs in (then the command is refused: there is no shell).
    let out = tokio::task::block_in_place(|| run(with_password(&right)));
    assert!(stderr(&out).contains("only forwards to projects"), "{}", stderr(&out));
    // The log reaches the test through a pipe a thread drains: wait for it, bounded.
    assert!(
        s.gw.wait_log("method=\"password\"", Duration::from_secs(5)).await,
        "{}",
        s.gw.logs()
    );
    assert_eq!(argon2(), before + 1, "one argon2 run for the first login");
    // Attempt 2: a token typed as the password is refused without argon2.
    let out = tokio::task::block_in_place(|| run(with_password(&token)));
    assert!(stderr(&out).contains("Permission denied"), "{}", stderr(&out));
    assert_eq!(argon2(), before + 1, "a token never goes to argon2");
    // Attempt 3, the last of the burst: a wrong password.
    let out = tokio::task::block_in_place(|| run(with_password(&wrong)));
    assert!(stderr(&out).contains("Permission denied"), "{}", stderr(&out));
    assert_eq!(s.gw.metric("logins_total{method=\"password\",outcome=\"failure\"}"), 2);
    // The allowance is spent: the right password, cached since attempt 1, is refused too.
    let runs = argon2();
    let out = tokio::task::block_in_place(|| run(with_password(&right)));
    assert!(
        stderr(&out).contains("Permission denied") && !stderr(&out).contains("only forwards"),
        "the right password from a spent address: {}",
        stderr(&out)
    );
    assert_eq!(argon2(), runs, "refused before any verification");
    assert!(
        s.gw.wait_log("login refused: limit reached", Duration::from_secs(5))
            .await,
        "{}",
        s.gw.logs()
    );
    assert!(s.gw.metric("limiter_refusals_total{reason=\"login\"}") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_forwards_over_one_and_many_connections_work_and_closing_frees_them() {
    let web = FakeUpstream::start(PW).await;
    let api = FakeUpstream::start(PW).await;
    let s = setup_ssh(&projects(&web, &api));
    let tunnels: Vec<Tunnel> = (0..4)
        .map(|_| Tunnel::open(&s.gw, &s.kh, &s.alice.private, "alice", "web"))
        .collect();
    let mut tasks = Vec::new();
    for t in &tunnels {
        for i in 0..10 {
            let local = t.local;
            tasks.push(tokio::spawn(async move {
                plain(local, "GET", &format!("/global/health?n={i}"), &[], "")
                    .await
                    .status
                    .as_u16()
            }));
        }
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), 200);
    }
    assert_eq!(s.gw.metric("ssh_sessions_open"), 4);
    // An event stream through a tunnel, then the tunnel goes away.
    let mut t = Tunnel::open(&s.gw, &s.kh, &s.alice.private, "alice", "web");
    let resp = plain_send(t.local, "GET", "/event", &[], "").await;
    let mut body = resp.into_body();
    read_until(&mut body, Duration::from_secs(5), |x| x.contains("server.connected")).await;
    web.wait_subscribers(1).await;
    assert_eq!(s.gw.metric("streams_open"), 1);
    t.close();
    drop(tunnels);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (sessions, streams, subs) = (
            s.gw.metric("ssh_sessions_open"),
            s.gw.metric("streams_open"),
            web.events.receiver_count(),
        );
        if sessions == 0 && streams == 0 && subs == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left open: {sessions} sessions, {streams} streams, {subs} upstream streams"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn opencode_run_sse_and_a_terminal_work_through_an_ssh_tunnel() {
    through_a_tunnel(None).await;
}

/// The same through the gateway's SSH front door to a project on a box: two SSH hops (the
/// client's tunnel to the gateway, the gateway's channel to the box), one road.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and OpenSSH's sshd: run scripts/test.sh"]
async fn opencode_run_sse_and_a_terminal_work_through_an_ssh_tunnel_to_a_project_on_a_box() {
    let on_box = tokio::task::block_in_place(crate::common::sshd::TestBox::start);
    let port = through_a_tunnel(Some(&on_box)).await;
    let log = on_box.sshd.log.lock().unwrap();
    assert!(
        log.contains(&format!("target 127.0.0.1 port {port}")),
        "the box's sshd forwarded nothing to OpenCode:\n{log}"
    );
}

/// `opencode run --attach`, an event stream and a terminal through `ssh -L` to the gateway's
/// front door, the project on `on_box` if given; returns OpenCode's port.
async fn through_a_tunnel(on_box: Option<&crate::common::sshd::TestBox>) -> u16 {
    use crate::common::opencode::{ANSWER, FakeModel, OpenCode, opencode_bin};
    use futures_util::{SinkExt, StreamExt};
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let pw = oc.password.clone();
    let dir = tempfile::tempdir().unwrap();
    let alice = keygen(dir.path(), "alice_key");
    let config = base_config(&format!(
        "[ssh]\nlisten = \"127.0.0.1:0\"\nhost_key = \"certs/ssh_host_ed25519_key\"\n\n[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\n\n[[user]]\nname = \"alice\"\nssh_keys = [\"{}\"]\nprojects = [\"*\"]\nrole = \"operator\"\n",
        oc.url(),
        alice.public_line
    ));
    let config = match on_box {
        Some(b) => b.put_on(&config, "demo"),
        None => config,
    };
    let gw = Gateway::start_with(&config, &[], move |d| write_secret(&d.join("pw"), &pw));
    let kh = known_hosts(&gw, dir.path());
    let t = Tunnel::open(&gw, &kh, &alice.private, "alice", "demo");
    let url = format!("http://{}", t.local);

    // opencode run, with no gateway password: the SSH login is the identity.
    let work = tempfile::tempdir().unwrap();
    model.answer_when(gw.events_opened_after_now());
    let mut cmd = std::process::Command::new(opencode_bin());
    cmd.args(["run", "--attach", &url, "hello over ssh"])
        .current_dir(work.path())
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1");
    let out = crate::common::process::output_within_async(cmd, Duration::from_secs(120)).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}\n{}", out.status, gw.logs());
    assert!(
        err.contains("fake-model"),
        "no event reached the client through the tunnel: {err}\naccess lines:\n{}",
        gw.stdout.lock().unwrap()
    );
    let sessions = plain(t.local, "GET", "/session", &[], "").await;
    let id = serde_json::from_str::<serde_json::Value>(&sessions.body).unwrap()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let messages = plain(t.local, "GET", &format!("/session/{id}/message"), &[], "").await;
    assert!(messages.body.contains(ANSWER), "{}", messages.body);

    // An SSE stream through the tunnel carries a new session's event.
    let resp = plain_send(t.local, "GET", "/global/event", &[], "").await;
    let mut events = resp.into_body();
    read_until(&mut events, Duration::from_secs(10), |x| x.contains("server.connected")).await;
    // OpenCode subscribes the stream to its bus just after saying "connected": a session made in
    // that instant is not announced, so make sessions until one is (bounded).
    let mut announced = false;
    for _ in 0..5 {
        let created = plain(t.local, "POST", "/session", &[], "{}").await;
        let new_id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        if try_read_until(&mut events, Duration::from_secs(3), |x| x.contains(&new_id))
            .await
            .is_ok()
        {
            announced = true;
            break;
        }
    }
    assert!(announced, "no session.created came through the tunnel's event stream");

    // A terminal through the tunnel.
    let pty = plain(t.local, "POST", "/pty", &[], "{}").await;
    let pty_id = serde_json::from_str::<serde_json::Value>(&pty.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let tcp = tokio::net::TcpStream::connect(t.local).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{}/pty/{pty_id}/connect?cursor=0", t.local), tcp)
        .await
        .unwrap();
    ws.send(tokio_tungstenite::tungstenite::Message::text("echo SSH$((6*7))PTY\r"))
        .await
        .unwrap();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.contains("SSH42PTY") {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(m))) => seen.push_str(&String::from_utf8_lossy(&m.into_data())),
            _ => break,
        }
    }
    assert!(seen.contains("SSH42PTY"), "{seen:?}");
    oc.port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stalls_before_logging_in_is_closed_at_the_login_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let web = FakeUpstream::start(PW).await;
    let s = setup_ssh(&format!(
        "[limits]\nssh_login_timeout = \"1s\"\n\n{}",
        external_project("web", &web.url())
    ));
    let addr = s.gw.ssh.unwrap();
    // After the banner, and in the middle of the key exchange (a packet that never completes).
    let stalls: [&[u8]; 2] = [b"SSH-2.0-stall\r\n", b"SSH-2.0-stall\r\n\x00\x00\x04\x00\x0a\x14abc"];
    for sent in stalls {
        let started = std::time::Instant::now();
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(sent).await.unwrap();
        let mut buf = [0u8; 4096];
        let closed = loop {
            match tokio::time::timeout(Duration::from_secs(8), tcp.read(&mut buf)).await {
                Err(_) => break None,
                Ok(Ok(0)) | Ok(Err(_)) => break Some(started.elapsed()),
                Ok(Ok(_)) => continue, // the gateway's banner and KEXINIT
            }
        };
        let took = closed.unwrap_or_else(|| panic!("a client that stalled ({sent:?}) was still connected after 8 s"));
        assert!(
            took >= Duration::from_millis(900),
            "closed before the deadline: {took:?}"
        );
    }
    assert!(
        s.gw.wait_log("reason=\"login_timeout\"", Duration::from_secs(5)).await,
        "{}",
        s.gw.logs()
    );
}

/// Issue 21, defect 6: on one SSH connection a second password try got no answer until the
/// login deadline. A person who mistypes must get in on a later try of the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_password_try_on_one_connection_is_answered() {
    let web = FakeUpstream::start(PW).await;
    let api = FakeUpstream::start(PW).await;
    let s = setup_ssh(&projects(&web, &api));
    use std::os::unix::fs::PermissionsExt;
    // Wrong the first two times it is asked (the same typo twice), right the third.
    let count = s.dir.path().join("asked");
    let ask = s.dir.path().join("thrice.sh");
    std::fs::write(
        &ask,
        format!(
            "#!/bin/sh\necho x >> '{0}'\nif [ $(wc -l < '{0}') -ge 3 ]; then echo alice-password-1; else echo typo; fi\n",
            count.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&ask, std::fs::Permissions::from_mode(0o700)).unwrap();
    let cmd = password_login(&s, &ask, 3, "127.0.0.32");
    let started = std::time::Instant::now();
    let out = tokio::task::block_in_place(|| run(cmd));
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().lines().count(),
        3,
        "three tries were asked"
    );
    assert!(
        stderr(&out).contains("only forwards to projects"),
        "the second try logged in after {:?}: {}",
        started.elapsed(),
        stderr(&out)
    );
}
