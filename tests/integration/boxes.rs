//! Projects on another machine, reached over SSH (issue 24): a real OpenSSH server (`sshd` on a
//! loopback port, its own host key, the gateway's key authorized) stands in for the box, and
//! the project's server listens on the box's loopback (here, the same machine's).

use std::time::{Duration, Instant};

use crate::common::client::{Https, basic};
use crate::common::gateway::{ALICE, BIN};
use crate::common::opencode::ANSWER;
use crate::common::sshd::{Sshd, TestBox, box_table, client_key, keygen};
use crate::common::stack::one_project_as;

const PW: &str = "box-upstream-pw";

/// OpenCode's real clients through a box: `opencode run --attach` runs a prompt to its end (the
/// model's name reaches it in an event, across the SSH channel) and the fake model's answer is
/// read back from the run's session; a terminal WebSocket runs what is typed (the upgrade is
/// spliced over a channel), with the project pinned to the server's folder on the box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and OpenSSH's sshd: run scripts/test.sh"]
async fn opencode_run_attach_and_a_terminal_reach_a_real_opencode_on_a_box() {
    use crate::common::stack::{ALICE_PW, setup_as};

    let keys = tempfile::tempdir().unwrap();
    let (key, public) = client_key(keys.path());
    let sshd = Sshd::start(&format!("restrict,port-forwarding,permitopen=\"127.0.0.1:*\" {public}"));
    // Pinned through a known_hosts file, its names hashed as `ssh-keygen -H` leaves them.
    let known_hosts = keys.path().join("known_hosts");
    std::fs::write(&known_hosts, format!("[127.0.0.1]:{} {}\n", sshd.port, sshd.host_key)).unwrap();
    let hashed = std::process::Command::new("ssh-keygen")
        .args(["-H", "-f"])
        .arg(&known_hosts)
        .output()
        .unwrap();
    assert!(hashed.status.success(), "{}", String::from_utf8_lossy(&hashed.stderr));
    assert!(!std::fs::read_to_string(&known_hosts).unwrap().contains("127.0.0.1"));
    let table = box_table(sshd.port, &key, &sshd.host_key).replace(
        &format!("host_key = \"{}\"", sshd.host_key),
        &format!("known_hosts = \"{}\"", known_hosts.display()),
    );
    assert!(table.contains("known_hosts"), "{table}");
    let s = setup_as("echo unused", true, |config| {
        let config = config.replacen("name = \"demo\"\n", "name = \"demo\"\nbox = \"gpu1\"\n", 1);
        config.replacen("[[project]]", &format!("{table}[[project]]"), 1)
    })
    .await;
    let url = format!("https://127.0.0.1:{}/p/demo", s.gw.https.port());
    let work = tempfile::tempdir().unwrap();
    s.model.answer_when(s.gw.events_opened_after_now());
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
        "run over the box failed ({}): {}\n{stderr}\ngateway:\n{}\naccess lines:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        s.gw.logs(),
        s.gw.stdout.lock().unwrap()
    );
    // The model's answer came back over the box. `run --attach` (1.18.33) prints none: it ends
    // when its prompt's POST answers, before the event with the text (seen straight to
    // OpenCode too), so the answer is read from the run's session, through the gateway and the box.
    // (`run` quotes a message argument that has spaces.)
    let answered = answer_of_the_only_session(&s.client).await;
    assert_eq!(
        answered,
        ["\"hello over the box\"", ANSWER],
        "the run's prompt and the model's answer"
    );
    let forwarded = format!("target 127.0.0.1 port {}", s.oc.port);
    assert!(
        sshd.log.lock().unwrap().contains(&forwarded),
        "the box's sshd forwarded nothing to OpenCode:\n{}",
        sshd.log.lock().unwrap()
    );
    the_portal_names_the_box_and_a_terminal_runs_there(&s).await;

    a_dead_box_connection_ends_an_event_stream_cleanly(&s, &sshd).await;
}

/// The portal names the box the project runs on, and a terminal WebSocket over the box runs
/// what is typed (the upgrade is spliced over a channel).
async fn the_portal_names_the_box_and_a_terminal_runs_there(s: &crate::common::stack::Setup) {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;

    use crate::common::client::{json, pty_socket, read_terminal_until};
    use crate::common::stack::{ALICE_PW, alice};
    let cookie = crate::common::login::form_login(&s.client, "alice", ALICE_PW).await;
    let portal = crate::common::login::browser_get(
        &s.client.host(crate::common::login::LOGIN_HOST),
        "/",
        Some(&cookie),
        true,
    )
    .await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    assert!(
        portal.body.contains("id=\"project-demo\"") && portal.body.contains("on gpu1</span>"),
        "{}",
        portal.body
    );
    let (status, pty) = json(&s.client, "POST", "/p/demo/pty", &alice(), "{}").await;
    assert_eq!(status, 200, "{pty}");
    let id = pty["id"].as_str().unwrap().to_string();
    let mut ws = pty_socket(&s.client, &format!("/p/demo/pty/{id}/connect?cursor=0"), Some(&alice())).await;
    ws.send(Message::text("echo BOX$((6*7))X\r")).await.unwrap();
    let said = read_terminal_until(&mut ws, "BOX42X").await;
    assert!(said.contains("BOX42X"), "terminal said: {said:?}");
    drop(ws);
}

/// The box's SSH connection dies under an open event stream: the stream ends cleanly (not hung,
/// not cut: an event source reconnects), and the next request connects again.
async fn a_dead_box_connection_ends_an_event_stream_cleanly(s: &crate::common::stack::Setup, sshd: &Sshd) {
    use crate::common::stack::alice;
    let resp = s
        .client
        .send(
            s.client
                .request("GET", "/p/demo/event", Some(&alice()))
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let mut events = resp.into_body();
    crate::common::client::read_until(&mut events, Duration::from_secs(10), |t| t.contains("server.connected")).await;
    // One connection per worker thread (at most 4): the requests so far were spread over them.
    let connects = s.gw.metric("box_connects_total{box=\"gpu1\"}");
    let most = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4) as u64;
    assert!(
        (1..=most).contains(&connects),
        "{connects} connections, at most {most} expected"
    );
    let sessions = descendants(sshd.child.id());
    assert!(!sessions.is_empty(), "no sshd process for the gateway's connection");
    for pid in sessions {
        // SAFETY: the test's own sshd's per-connection processes.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        use http_body_util::BodyExt;
        loop {
            match events.frame().await {
                None => return "ended",
                Some(Err(_)) => return "cut",
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert_eq!(
        ended,
        Ok("ended"),
        "the event stream must end as a stream ends (not hang, not be cut)"
    );
    let r = s.client.get("/p/demo/global/health", Some(&alice())).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, s.gw.logs());
    assert!(
        s.gw.metric("box_connects_total{box=\"gpu1\"}") > connects,
        "connected again"
    );
}

/// The texts of the only session's messages, in order, read through the gateway.
async fn answer_of_the_only_session(c: &Https) -> Vec<String> {
    use crate::common::client::json;
    use crate::common::stack::alice;
    let (status, sessions) = json(c, "GET", "/p/demo/session", &alice(), "").await;
    assert_eq!(status, 200, "{sessions}");
    let [session] = sessions.as_array().map(Vec::as_slice).unwrap_or_default() else {
        panic!("not one session: {sessions}");
    };
    let id = session["id"].as_str().unwrap();
    let (status, messages) = json(c, "GET", &format!("/p/demo/session/{id}/message"), &alice(), "").await;
    assert_eq!(status, 200, "{messages}");
    messages
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect()
}

/// Every process under `pid` (children, theirs, …).
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // After the command's closing parenthesis: state, then the parent's pid.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            if ppid == Some(parent) {
                found.push(p);
                parents.push(p);
            }
        }
    }
    found
}

fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(u32::MAX)
}

/// The box user's processes, but for sshd's own for its connection (`sshd-session`, or `sshd:`).
fn box_processes(uid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if uid_of(pid) != uid {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.is_empty() && !cmd.starts_with("sshd") {
            out.push(format!("{pid} {cmd}"));
        }
    }
    out
}

/// Until the box user runs nothing but sshd's own processes (bounded), or fail saying what is left.
async fn until_nothing_runs(uid: u32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = box_processes(uid);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still running on the box {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The one server on `port`, once there is one (bounded).
async fn one_server(gw: &crate::common::gateway::Gateway, not: Option<u32>) -> (u16, u32) {
    use crate::common::supervised::{pids_with, project_port};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(port) = project_port(gw, "demo") {
            let pids = pids_with(&format!("serve --hostname 127.0.0.1 --port {port}"));
            if pids.len() == 1 && Some(pids[0]) != not {
                return (port, pids[0]);
            }
        }
        assert!(Instant::now() < deadline, "no server ready on the box:\n{}", gw.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `spawn = true` on a box: the gateway starts `opencode serve` there over SSH (as the box's
/// user, not the gateway's), forwards to it, starts it again after `kill -9`, stops it when the
/// project is removed, and leaves nothing running on the box when the gateway itself is killed
/// (its SSH connection ends, and the script on the box ends the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, OpenSSH's sshd and root: run scripts/test.sh"]
async fn a_project_spawned_on_a_box_runs_there_restarts_and_leaves_nothing_behind() {
    use crate::common::client::json;
    use crate::common::gateway::Gateway;
    use crate::common::opencode::FakeModel;
    use crate::common::os_users;
    use crate::common::supervised::{server_config, spawned};

    let Some((on_box, user)) = tokio::task::block_in_place(|| TestBox::with_own_user("ocgw-box")) else {
        return;
    };
    let user = &user;
    let sshd = &on_box.sshd;
    let model = FakeModel::start("true").await;
    let work = tempfile::tempdir().unwrap();
    os_users::give(work.path(), user, 0o700);
    let table = on_box.table();
    let project = spawned("demo", work.path(), &model, "box = \"gpu1\"");
    let config = server_config(&format!("{table}{project}"));
    let mut gw = Gateway::start(&config);
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    let r = c.get("/p/demo/global/health", Some(&alice)).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, gw.logs());
    let (port, first) = one_server(&gw, None).await;
    assert_eq!(uid_of(first), user.uid, "the server runs as the box's user");
    assert!(
        sshd.log
            .lock()
            .unwrap()
            .contains(&format!("target 127.0.0.1 port {port}")),
        "requests reach it through the box's sshd:\n{}",
        sshd.log.lock().unwrap()
    );
    let (status, session) = json(&c, "POST", "/p/demo/session", &alice, "{}").await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(
        session["directory"],
        work.path().display().to_string(),
        "pinned to its folder on the box"
    );
    let (_, st) = gw.control("GET", "/status");
    let st: serde_json::Value = serde_json::from_str(&st).unwrap();
    let demo = st["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "demo")
        .unwrap()
        .clone();
    assert_eq!(demo["box"], "gpu1", "{st}");
    assert_eq!(st["boxes"][0]["state"], "connected", "{st}");
    assert!(st["boxes"][0]["rtt_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{st}");
    let audit = gw.dir.path().join("state/audit.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .contains("\"box\":\"gpu1\"")
    {
        assert!(
            Instant::now() < deadline,
            "no server_started naming the box in the audit trail"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // kill -9 on the box: started again, on the box.
    // SAFETY: killing a process the test started through the gateway.
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    assert!(
        gw.wait_log("project server failed; restarting", Duration::from_secs(20))
            .await,
        "{}",
        gw.logs()
    );
    let (_, second) = one_server(&gw, Some(first)).await;
    assert_eq!(uid_of(second), user.uid);
    assert_eq!(c.get("/p/demo/global/health", Some(&alice)).await.status, 200);
    assert_eq!(gw.metric("upstream_restarts_total{project=\"demo\"}"), 1);

    // Removed from the config: stopped on the box, with all it started.
    gw.write_config(&server_config(&table));
    let (code, body) = gw.control("POST", "/reload");
    assert_eq!(code, 200, "{body}");
    until_nothing_runs(user.uid, "after the project was removed").await;

    // Back, then the gateway is killed outright: its SSH connection ends, and so does the server.
    gw.write_config(&config);
    let (code, body) = gw.control("POST", "/reload");
    assert_eq!(code, 200, "{body}");
    assert_eq!(c.get("/p/demo/global/health", Some(&alice)).await.status, 200);
    let (_, third) = one_server(&gw, Some(second)).await;
    assert_eq!(uid_of(third), user.uid);
    gw.signal(libc::SIGKILL);
    let _ = tokio::task::block_in_place(|| gw.wait_exit(Duration::from_secs(10)));
    until_nothing_runs(user.uid, "after the gateway was killed").await;
}

/// `doctor` connects to each box as the gateway will and asks it what `check` cannot see from
/// here: a host key that is not the pinned one, the box's `opencode` and its version, a project
/// folder that is a link on the box, and a key whose forced command runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and OpenSSH's sshd: run scripts/test.sh"]
async fn doctor_checks_each_box_host_key_opencode_and_folders_on_the_box() {
    let keys = tempfile::tempdir().unwrap();
    let (key, public) = client_key(keys.path());
    let forwarding = keys.path().join("fwd");
    std::fs::create_dir(&forwarding).unwrap();
    let (fwd_key, fwd_public) = client_key(&forwarding);
    let sshd = Sshd::start(&format!(
        "restrict,port-forwarding,permitopen=\"127.0.0.1:*\" {public}\nrestrict,port-forwarding,permitopen=\"127.0.0.1:*\",command=\"/bin/false\" {fwd_public}"
    ));
    let other = tempfile::tempdir().unwrap();
    keygen(&other.path().join("k"));
    let not_the_box = std::fs::read_to_string(other.path().join("k.pub"))
        .unwrap()
        .trim()
        .to_string();
    let work = tempfile::tempdir().unwrap();
    let real = work.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = work.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let boxes = box_table(sshd.port, &key, &sshd.host_key)
        + &box_table(sshd.port, &fwd_key, &sshd.host_key).replace("gpu1", "fwd")
        + &box_table(sshd.port, &key, &not_the_box).replace("gpu1", "evil");
    let config = crate::common::gateway::base_config(&format!(
        "{boxes}[[project]]\nname = \"train\"\nbox = \"gpu1\"\nspawn = true\ndirectory = \"{}\"\n\n[[project]]\nname = \"linked\"\nbox = \"gpu1\"\nupstream = \"http://127.0.0.1:4096\"\ndirectory = \"{}\"\n\n{}",
        real.display(),
        link.display(),
        crate::common::gateway::users_toml(&[ALICE])
    ));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    let out = crate::common::process::bounded(std::process::Command::new(BIN).args(["doctor", "-c"]).arg(&path));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!out.status.success(), "{stdout}");
    let line = |prefix: &str| crate::common::line_starting(&stdout, prefix);
    let connected = line("ok   box gpu1: connected to 127.0.0.1:");
    assert!(
        connected.contains("host key is the pinned one") && connected.contains("round trip"),
        "{connected}"
    );
    let version = line("ok   box gpu1: opencode ");
    // Which opencode, and how it was found (box_table names it by its path).
    assert!(
        version.contains(&format!(
            "{} (version 1.18.33), as its [[box]] opencode names it",
            crate::common::opencode::opencode_bin().display()
        )),
        "{version}"
    );
    line(&format!(
        "ok   project train: folder {} exists on box gpu1",
        real.display()
    ));
    let linked = line(&format!(
        "fail project linked: {} is {} on box gpu1",
        link.display(),
        real.display()
    ));
    assert!(
        linked.contains(&format!("Fix: set directory = \"{}\"", real.display())),
        "{linked}"
    );
    line("warn box fwd: the box ran nothing for the gateway's key");
    let evil = line("fail box evil: ");
    assert!(evil.contains("is not the pinned one"), "{evil}");
}

/// A box that accepts TCP but never speaks SSH (the worst stopped box: no refusal, only
/// silence) does not slow a local project: while requests to the box's project wait for its
/// SSH answer (up to its 8 s connect timeout), every one of 100 requests to a local project is
/// answered within [`LOCAL_BOUND`]; then the box's project answers 502 naming the box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_box_does_not_slow_a_local_project() {
    let keys = tempfile::tempdir().unwrap();
    let (key, _) = client_key(keys.path());
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        // Accepted and held open, never answered.
        let mut open = Vec::new();
        for s in silent.incoming().take(4) {
            open.push(s);
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    let some_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    let extra = format!(
        "[limits]\nupstream_connect_timeout = \"8s\"\n\n{}[[project]]\nname = \"train\"\nbox = \"gpu1\"\nupstream = \"http://127.0.0.1:4096\"\nupstream_password_file = \"pw\"\n\n",
        box_table(port, &key, some_key)
    );
    let (gw, _web) = one_project_as(PW, &extra, &[ALICE], |c| c).await;
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    let quiet = latencies(
        &c,
        &alice,
        "before the box's requests were sent (the gateway's own may be waiting on it)",
    )
    .await;
    let waiting: Vec<_> = (0..4)
        .map(|_| {
            let (c, alice) = (c.clone(), alice.clone());
            tokio::spawn(async move { c.get("/p/train/global/health", Some(&alice)).await })
        })
        .collect();
    // The box's requests are under way (the gateway is connecting to it) before the local ones.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, status) = gw.control("GET", "/status");
        let status: serde_json::Value = serde_json::from_str(&status).unwrap();
        if status["boxes"][0]["state"] == "connecting" {
            break;
        }
        assert!(Instant::now() < deadline, "the gateway never tried the box: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let busy = latencies(&c, &alice, "while the box's requests waited").await;
    assert!(
        waiting.iter().all(|w| !w.is_finished()),
        "the box's requests ended before the local ones: nothing was measured while the box was silent"
    );
    eprintln!(
        "local project, 100 requests: before the box's requests {}; while they wait {}",
        summary(&quiet),
        summary(&busy)
    );
    for w in waiting {
        let r = w.await.unwrap();
        assert_eq!(r.status, 502, "{}", r.body);
        assert!(r.body.contains("box gpu1"), "{}", r.body);
    }
    drop(held);
}

/// How long one request to the local project may take while its box is silent. A local request
/// costs a few milliseconds here (debug build: p50 3 ms, the slowest of 300 84 ms); one that
/// waited on the box would wait for the box's 8 s connect timeout. 1 s is far from both.
const LOCAL_BOUND: Duration = Duration::from_secs(1);

/// 100 requests to the local project, one after another, each answered 200 within
/// [`LOCAL_BOUND`] (failing at the first that is not, with its time): each one's time.
async fn latencies(c: &Https, auth: &str, when: &str) -> Vec<Duration> {
    let mut took = Vec::new();
    for i in 0..100 {
        let sent = Instant::now();
        let r = c.get("/p/web/global/health", Some(auth)).await;
        took.push(sent.elapsed());
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            took[i] < LOCAL_BOUND,
            "local request {i} {when}: {:?}, over the bound of {LOCAL_BOUND:?} (those before: {}): it waited on the silent box",
            took[i],
            summary(&took[..i])
        );
    }
    took
}

/// p50, p99 and the slowest of some requests' times.
fn summary(took: &[Duration]) -> String {
    if took.is_empty() {
        return "none".into();
    }
    let mut sorted = took.to_vec();
    sorted.sort();
    let at = |q: usize| {
        sorted
            .get(sorted.len().saturating_sub(1) * q / 100)
            .copied()
            .unwrap_or_default()
    };
    format!("p50 {:?}, p99 {:?}, max {:?}", at(50), at(99), at(100))
}
