//! A box's host key (issue 24): the gateway logs in to a box only when it presents the pinned
//! key (a `host_key` line, or the box's entries in a `known_hosts` file), and refuses any other
//! before the login, so an impostor never sees the gateway's user or key. A real OpenSSH server
//! (`sshd` on a loopback port) stands in for the box and for the impostor; `check` refuses what
//! cannot be pinned.

use std::time::{Duration, Instant};

use crate::common::client::{Https, basic};
use crate::common::gateway::{ALICE, BIN};
use crate::common::sshd::{Sshd, box_table, client_key, keygen};
use crate::common::stack::one_project_as;

const PW: &str = "box-upstream-pw";

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
    // Connections are kept and reused: one per worker thread of the gateway at most (here, as
    // in CI, up to the machine's cores, bounded at 4), never one per request.
    let logins = sshd.log.lock().unwrap().matches("Accepted publickey for root").count();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    assert!(
        (1..=workers).contains(&logins),
        "{logins} SSH logins for 3 requests, {workers} workers"
    );
    sshd.child.stop();

    a_box_that_does_not_answer_is_502_and_waits_its_backoff(&key, &sshd.host_key).await;
    another_host_key_is_refused_before_login(&key, &public).await;
}

/// A box whose SSH server does not answer: 502, naming the box and why; while the backoff
/// waits, requests are refused at once with the last error, and the box is not asked again.
async fn a_box_that_does_not_answer_is_502_and_waits_its_backoff(key: &std::path::Path, host_key: &str) {
    let alice = basic("alice", "alice-password-1");
    let on_box = |config: String| config.replacen("name = \"web\"\n", "name = \"web\"\nbox = \"gpu1\"\n", 1);
    let nothing = crate::common::free_port();
    let (gw_down, _web_down) = one_project_as(PW, &box_table(nothing, key, host_key), &[ALICE], on_box).await;
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
}

/// A box that presents another host key than the pinned one (an impostor whose sshd would let
/// the gateway's key in): refused, with the reason, in the answer and the log, before login.
async fn another_host_key_is_refused_before_login(key: &std::path::Path, public: &str) {
    let alice = basic("alice", "alice-password-1");
    let on_box = |config: String| config.replacen("name = \"web\"\n", "name = \"web\"\nbox = \"gpu1\"\n", 1);
    let other = Sshd::start(public);
    let wrong = tempfile::tempdir().unwrap();
    keygen(&wrong.path().join("k"));
    let pinned_elsewhere = std::fs::read_to_string(wrong.path().join("k.pub"))
        .unwrap()
        .trim()
        .to_string();
    let (gw2, _web2) = one_project_as(PW, &box_table(other.port, key, &pinned_elsewhere), &[ALICE], on_box).await;
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
    // Refused before login: the impostor saw the gateway's connection (its SSH banner) end in
    // the key exchange, and no step of a login (the gateway's user, its key) ever reached it.
    let seen = until_the_gateway_left(&other, 0).await;
    assert!(
        seen.contains("Connection from 127.0.0.1 port") && seen.contains("remote software version russh"),
        "{seen}"
    );
    let login = LOGIN_STEPS.iter().find(|step| seen.contains(*step));
    assert_eq!(login, None, "the impostor saw a login attempt:\n{seen}");
}

/// What OpenSSH's sshd logs (at DEBUG1) once a client asks to log in: the request, its verdict,
/// or the end of a connection that had begun one.
const LOGIN_STEPS: [&str; 7] = [
    "userauth",
    "Accepted ",
    "Failed ",
    "Postponed ",
    "authenticating user",
    "invalid user",
    "Authentication refused",
];

/// What `sshd` logged from byte `from` on, once the gateway's connection (russh's banner) in it
/// has ended before a login (`[preauth]`), or a login step shows (a pinned key refused only after
/// login would keep the connection open): bounded, fails with the log.
async fn until_the_gateway_left(sshd: &Sshd, from: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = sshd.log.lock().unwrap()[from..].to_string();
        let ended = log
            .split_once("remote software version russh")
            .is_some_and(|(_, after)| {
                after.lines().any(|l| {
                    (l.starts_with("Connection closed by") || l.starts_with("Disconnected from"))
                        && l.ends_with("[preauth]")
                })
            });
        if ended || LOGIN_STEPS.iter().any(|step| log.contains(step)) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "the box's sshd never saw the gateway's connection end:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A key the box's `known_hosts` file revokes (`@revoked`) is refused before login even where a
/// plain line lists it (the SSH library's reader alone skips the marker and trusts the plain
/// line): at a reload that adds the revocation to the file a running gateway pins the box with
/// (before the change, such a file was refused, the reload failed, and the running gateway went
/// on trusting the key), and at start, where the gateway also warns that it has no key left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenSSH's sshd: run scripts/test.sh"]
async fn a_box_key_revoked_in_known_hosts_is_refused_before_login_even_where_a_plain_line_lists_it() {
    let keys = tempfile::tempdir().unwrap();
    let (key, public) = client_key(keys.path());
    let sshd = Sshd::start(&format!("restrict,port-forwarding,permitopen=\"127.0.0.1:*\" {public}"));
    let known_hosts = keys.path().join("known_hosts");
    let plain = format!("[127.0.0.1]:{} {}\n", sshd.port, sshd.host_key);
    std::fs::write(&known_hosts, &plain).unwrap();
    let table = box_table(sshd.port, &key, &sshd.host_key).replace(
        &format!("host_key = \"{}\"", sshd.host_key),
        &format!("known_hosts = \"{}\"", known_hosts.display()),
    );
    let on_box = |config: String| config.replacen("name = \"web\"\n", "name = \"web\"\nbox = \"gpu1\"\n", 1);
    let (gw, _web) = one_project_as(PW, &table, &[ALICE], on_box).await;
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    let r = c.get("/p/web/global/health", Some(&alice)).await;
    assert_eq!(
        r.status,
        200,
        "pinned through the plain line: {}\n{}",
        r.body,
        gw.logs()
    );

    // The key is revoked; the plain line stays, as in a file kept by hand.
    std::fs::write(&known_hosts, format!("{plain}@revoked * {}\n", sshd.host_key)).unwrap();
    gw.signal(libc::SIGHUP);
    assert!(
        gw.wait_log("configuration reloaded", Duration::from_secs(10)).await,
        "the reload with the revocation: {}",
        gw.logs()
    );
    let from = sshd.log.lock().unwrap().len();
    let logins_before = sshd.log.lock().unwrap().matches("Accepted publickey for").count();
    assert!(logins_before >= 1, "the first request logged in");
    let r = c.get("/p/web/global/health", Some(&alice)).await;
    let revoked = "its host key (SHA256:";
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(
        r.body.contains("box gpu1: ")
            && r.body.contains(revoked)
            && r.body
                .contains("is revoked (a @revoked line of its known_hosts); refused"),
        "{}",
        r.body
    );
    assert!(
        gw.wait_log("box_host_key_revoked", Duration::from_secs(10)).await,
        "{}",
        gw.logs()
    );
    let seen = until_the_gateway_left(&sshd, from).await;
    let login = LOGIN_STEPS.iter().find(|step| seen.contains(*step));
    assert_eq!(login, None, "the box saw a login with its revoked key:\n{seen}");

    // A gateway started on the file: warned, and refused the same way.
    let (fresh, _web2) = one_project_as(PW, &table, &[ALICE], on_box).await;
    assert!(
        fresh
            .logs()
            .contains("box gpu1: its known_hosts file revokes every key it has for the box"),
        "{}",
        fresh.logs()
    );
    let c = Https::new(fresh.https, &fresh.ca());
    let r = c.get("/p/web/global/health", Some(&alice)).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body.contains("is revoked"), "{}", r.body);
    assert_eq!(
        sshd.log.lock().unwrap().matches("Accepted publickey for").count(),
        logins_before,
        "only the logins before the revocation"
    );
}

/// `check` refuses a box whose key others may read, one with no pinned host key and one whose
/// known_hosts file has no key for it, `run_as` on a box and an environment variable name no
/// shell could export, naming the key and the fix.
#[test]
fn check_refuses_a_box_key_others_can_read_and_a_box_without_a_pinned_host_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = client_key(dir.path());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A known_hosts file with keys of other hosts only.
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(
        &known_hosts,
        "[gpu1.lan]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
    )
    .unwrap();
    let config = crate::common::gateway::base_config(&format!(
        "[[box]]\nname = \"gpu1\"\nssh = \"dev@gpu1.lan:22\"\nkey = \"{}\"\n\n[[box]]\nname = \"gpu2\"\nssh = \"dev@gpu1.lan\"\nkey = \"{0}\"\nknown_hosts = \"{}\"\n\n[[project]]\nname = \"train\"\nbox = \"gpu1\"\nupstream = \"http://127.0.0.1:4096\"\n\n[[project]]\nname = \"other\"\nbox = \"nope\"\nupstream = \"http://127.0.0.1:4097\"\n\n[[project]]\nname = \"spawner\"\nbox = \"gpu1\"\nspawn = true\ndirectory = \"/srv/spawner\"\nrun_as = \"dev\"\n\n[[project]]\nname = \"envy\"\nbox = \"gpu1\"\nspawn = true\ndirectory = \"/srv/envy\"\nenv = {{ \"BAD NAME\" = \"x\" }}\n",
        key.display(),
        known_hosts.display()
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
    // A server on a box runs as the box's user; an environment name no shell could export.
    assert!(
        err.contains("(spawner).run_as") && err.contains("runs as the box's SSH user"),
        "{err}"
    );
    assert!(
        err.contains("(envy).env") && err.contains("\"BAD NAME\" is not an environment variable name"),
        "{err}"
    );
    // The entry for port 2222 is not the box's (port 22): named, with the fix.
    assert!(
        err.contains("box[1] (gpu2).known_hosts")
            && err.contains("has no key for gpu1.lan")
            && err.contains("ssh-keyscan -t ed25519 -p 22 gpu1.lan"),
        "{err}"
    );
}
