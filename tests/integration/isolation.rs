//! Isolation between people: two spawned projects, each run as its own OS user (`run_as`). An
//! operator of one (the shell route, a terminal, the bash tool, the file API) cannot read or write
//! the other's folder or OpenCode state, the gateway's config, keys or state, nor use the other's
//! server; each vector is also shown working on the operator's own files, so the test can fail.
//! Creating OS users needs root (see `common/os_users.rs`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

use crate::common::client::{Https, basic, json, pty_socket, read_terminal_until};
use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::opencode::FakeModel;
use crate::common::os_users::{self, OsUser};
use crate::common::supervised::{project_port, server_config, server_pid};

const GATEWAY_ENV: &str = "GATEWAY_ONLY_SECRET";
const GATEWAY_ENV_VALUE: &str = "never-in-a-project-env-58";

fn ann() -> String {
    basic("ann", "ann-password-1")
}

/// A spawned project run as `user`, with the fake model and its tools allowed without asking.
fn spawned_as(name: &str, dir: &Path, model: &FakeModel, user: &str) -> String {
    let mut config: serde_json::Value = serde_json::from_str(&model.config_json()).unwrap();
    config["permission"] = serde_json::json!({"bash": "allow", "edit": "allow", "external_directory": "allow"});
    let config = config.to_string().replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "[[project]]\nname = \"{name}\"\ndirectory = \"{}\"\nspawn = true\nrun_as = \"{user}\"\nenv = {{ OPENCODE_CONFIG_CONTENT = \"{config}\", OPENCODE_DISABLE_MODELS_FETCH = \"1\" }}\n\n",
        dir.display()
    )
}

/// The first string in `v` containing `needle` (a tool's output inside a message).
fn text_with(v: &serde_json::Value, needle: &str) -> Option<String> {
    match v {
        serde_json::Value::String(s) if s.contains(needle) => Some(s.clone()),
        serde_json::Value::Array(a) => a.iter().find_map(|x| text_with(x, needle)),
        serde_json::Value::Object(o) => o.values().find_map(|x| text_with(x, needle)),
        _ => None,
    }
}

fn line<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label} line in:\n{out}"))
}

fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap()
}

fn assert_private_to(path: &Path, user: &OsUser) {
    let m = std::fs::metadata(path).unwrap();
    assert_eq!(
        (m.uid(), m.mode() & 0o777),
        (user.uid, 0o700),
        "{} belongs to {} with mode 0700",
        path.display(),
        user.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn run_as_keeps_an_operator_out_of_another_projects_files_server_and_the_gateways_secrets() {
    let Some(users) = os_users::ensure(&["ocgw-a", "ocgw-b"]) else {
        return;
    };
    let (ua, ub) = (&users[0], &users[1]);
    // The projects' folders: each its user's, 0700, under a folder everyone may pass through.
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let (a, b) = (base.path().join("a"), base.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(a.join("own.txt"), "A-OWN-71\n").unwrap();
    std::fs::write(b.join("secret.txt"), "B-SECRET-29\n").unwrap();
    os_users::give(&a.join("own.txt"), ua, 0o644);
    os_users::give(&b.join("secret.txt"), ub, 0o644);
    os_users::give(&a, ua, 0o700);
    os_users::give(&b, ub, 0o700);
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());

    // The bash tool's command (the fake model asks for it): B's file, then A's own.
    let bash_out = a.join("bash-out.txt");
    let model = FakeModel::start(&format!(
        "{{ id -un; cat {b_s}/secret.txt; touch {b_s}/planted-by-bash; cat {a_s}/own.txt; }} > {} 2>&1",
        bash_out.display()
    ))
    .await;
    let config = server_config(&format!(
        "{}{}{}",
        spawned_as("a", &a, &model, &ua.name),
        spawned_as("b", &b, &model, &ub.name),
        users_toml(&[
            TestUser {
                name: "ann",
                password: "ann-password-1",
                projects: "[\"a\"]",
                role: "operator"
            },
            TestUser {
                name: "ben",
                password: "ben-password-1",
                projects: "[\"b\"]",
                role: "operator"
            },
        ])
    ));
    // The gateway's folder as an operator would set it up: passable by all, config 0600 (as
    // `init` writes it); the gateway makes its keys and state itself.
    let gw = Gateway::start_with(&config, &[(GATEWAY_ENV, GATEWAY_ENV_VALUE)], |d| {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(d.join("gateway.toml"), std::fs::Permissions::from_mode(0o600)).unwrap();
    });
    let c = Https::new(gw.https, &gw.ca());
    for p in ["a", "b"] {
        let who = if p == "a" {
            ann()
        } else {
            basic("ben", "ben-password-1")
        };
        let r = c.get(&format!("/p/{p}/global/health"), Some(&who)).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, gw.logs());
    }
    let (port_a, port_b) = (project_port(&gw, "a").unwrap(), project_port(&gw, "b").unwrap());
    let (pid_a, pid_b) = (server_pid(port_a), server_pid(port_b));
    assert_eq!(
        (uid_of(pid_a), uid_of(pid_b)),
        (ua.uid, ub.uid),
        "each server runs as its user"
    );
    let environ_b =
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid_b}/environ")).unwrap()).replace('\0', "\n");
    let password_b = environ_b
        .lines()
        .find_map(|l| l.strip_prefix("OPENCODE_SERVER_PASSWORD="))
        .unwrap()
        .to_string();

    // What the gateway made: each project's state folder, its session database's folder and its
    // temporary folder are its user's, 0700 (the rest of OpenCode's setup is that user's own);
    // the state folder's root is the gateway's and nobody else may list or write it.
    let gwdir = gw.dir.path().to_path_buf();
    let state = gwdir.join("state");
    for (p, u) in [("a", ua), ("b", ub)] {
        let dir = state.join("projects").join(p);
        assert_private_to(&dir, u);
        for sub in ["data", "data/opencode", "tmp"] {
            assert_private_to(&dir.join(sub), u);
        }
    }
    let root = std::fs::metadata(&state).unwrap();
    assert_eq!(
        (root.uid(), root.mode() & 0o066),
        (0, 0),
        "state_dir is root's, unreadable by others"
    );

    // 1. The shell route: one command, one line per check.
    let (status, session) = json(&c, "POST", "/p/a/session", &ann(), "{}").await;
    assert_eq!(status, 200, "{session}");
    let id = session["id"].as_str().unwrap().to_string();
    let st = state.display().to_string();
    let gd = gwdir.display().to_string();
    let script = format!(
        r#"echo "WHO:$(id -un)"
echo "GROUPS:$(id -G)"
echo "R_B:$(cat {b_s}/secret.txt 2>&1)"
echo "W_B:$(touch {b_s}/planted 2>&1)"
echo "R_BSTATE:$(ls {st}/projects/b 2>&1)"
echo "R_BDATA:$(ls {st}/projects/b/data 2>&1)"
echo "W_BSTATE:$(touch {st}/projects/b/planted 2>&1)"
echo "R_STATE:$(ls {st} 2>&1)"
echo "W_STATE:$(touch {st}/planted 2>&1)"
echo "R_CONTROL:$(ls {st}/control 2>&1)"
echo "R_CONFIG:$(cat {gd}/gateway.toml 2>&1)"
echo "R_TLSKEY:$(cat {gd}/certs/server.key 2>&1)"
echo "R_CAKEY:$(cat {gd}/certs/ca.key 2>&1)"
echo "PORT_B:$(curl -s -o /dev/null -w '%{{http_code}}' -u opencode:$OPENCODE_SERVER_PASSWORD http://127.0.0.1:{port_b}/session)"
echo "PORT_A:$(curl -s -o /dev/null -w '%{{http_code}}' -u opencode:$OPENCODE_SERVER_PASSWORD http://127.0.0.1:{port_a}/session)"
echo "OWN_R:$(cat {a_s}/own.txt 2>&1)"
echo "OWN_W:$(touch {a_s}/planted-by-a 2>&1 && echo ok)"
echo "OWN_STATE:$(ls -d {st}/projects/a/data 2>&1)"
env | sed 's/^/ENV:/'"#
    )
    // OpenCode's shell route mangles newlines: one line of commands.
    .replace('\n', "; ");
    let body = serde_json::json!({"agent": "build", "command": script}).to_string();
    let (status, reply) = json(&c, "POST", &format!("/p/a/session/{id}/shell"), &ann(), &body).await;
    assert_eq!(status, 200, "{reply}");
    let out = text_with(&reply, &format!("WHO:{}", ua.name)).unwrap_or_else(|| panic!("no shell output in {reply}"));
    let denied = |cmd: &str, path: &str| format!("{cmd}: {path}: Permission denied");
    assert_eq!(line(&out, "WHO:"), ua.name);
    assert_eq!(line(&out, "GROUPS:"), ua.gid.to_string(), "none of root's groups");
    assert_eq!(line(&out, "R_B:"), denied("cat", &format!("{b_s}/secret.txt")));
    assert_eq!(
        line(&out, "W_B:"),
        format!("touch: cannot touch '{b_s}/planted': Permission denied")
    );
    assert_eq!(
        line(&out, "R_BSTATE:"),
        format!("ls: cannot open directory '{st}/projects/b': Permission denied")
    );
    assert_eq!(
        line(&out, "R_BDATA:"),
        format!("ls: cannot access '{st}/projects/b/data': Permission denied")
    );
    assert_eq!(
        line(&out, "W_BSTATE:"),
        format!("touch: cannot touch '{st}/projects/b/planted': Permission denied")
    );
    assert_eq!(
        line(&out, "R_STATE:"),
        format!("ls: cannot open directory '{st}': Permission denied")
    );
    assert_eq!(
        line(&out, "W_STATE:"),
        format!("touch: cannot touch '{st}/planted': Permission denied")
    );
    assert_eq!(
        line(&out, "R_CONTROL:"),
        format!("ls: cannot open directory '{st}/control': Permission denied")
    );
    assert_eq!(line(&out, "R_CONFIG:"), denied("cat", &format!("{gd}/gateway.toml")));
    assert_eq!(
        line(&out, "R_TLSKEY:"),
        denied("cat", &format!("{gd}/certs/server.key"))
    );
    assert_eq!(line(&out, "R_CAKEY:"), denied("cat", &format!("{gd}/certs/ca.key")));
    assert_eq!(line(&out, "PORT_B:"), "401", "A's password does not open B's server");
    assert_eq!(line(&out, "PORT_A:"), "200", "the same request works on A's own server");
    assert_eq!(line(&out, "OWN_R:"), "A-OWN-71");
    assert_eq!(line(&out, "OWN_W:"), "ok");
    assert_eq!(line(&out, "OWN_STATE:"), format!("{st}/projects/a/data"));
    assert!(!b.join("planted").exists() && !state.join("planted").exists());
    // A's server's environment: its own password (a known non-goal), nothing of the gateway's or B's.
    assert!(out.contains("ENV:OPENCODE_SERVER_PASSWORD="), "{out}");
    for leak in [GATEWAY_ENV, GATEWAY_ENV_VALUE, password_b.as_str()] {
        assert!(!out.contains(leak), "{leak} in A's environment:\n{out}");
    }

    // 2. A terminal: B's file is denied, A's own is read.
    let (status, pty) = json(&c, "POST", "/p/a/pty", &ann(), "{}").await;
    assert_eq!(status, 200, "{pty}");
    let pty_id = pty["id"].as_str().unwrap().to_string();
    let mut ws = pty_socket(&c, &format!("/p/a/pty/{pty_id}/connect?cursor=0"), Some(&ann())).await;
    ws.send(Message::text(format!(
        "cat {b_s}/secret.txt; cat {a_s}/own.txt; echo PTY$((6*7))X\r"
    )))
    .await
    .unwrap();
    let screen = read_terminal_until(&mut ws, "PTY42X").await;
    assert!(
        screen.contains(&denied("cat", &format!("{b_s}/secret.txt"))) && screen.contains("A-OWN-71"),
        "terminal said: {screen:?}"
    );
    assert!(!screen.contains("B-SECRET-29"));
    drop(ws);

    // 3. The bash tool, run by the model's call.
    let (status, _) = json(
        &c,
        "POST",
        &format!("/p/a/session/{id}/prompt_async"),
        &ann(),
        r#"{"parts":[{"type":"text","text":"please RUNBASH"}]}"#,
    )
    .await;
    assert_eq!(status, 204);
    let deadline = Instant::now() + Duration::from_secs(45);
    let bash = loop {
        let text = std::fs::read_to_string(&bash_out).unwrap_or_default();
        if text.contains("A-OWN-71") {
            break text;
        }
        assert!(Instant::now() < deadline, "the bash tool did not run:\n{}", gw.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        bash,
        format!(
            "{}\n{}\ntouch: cannot touch '{b_s}/planted-by-bash': Permission denied\nA-OWN-71\n",
            ua.name,
            denied("cat", &format!("{b_s}/secret.txt"))
        )
    );

    // 4. The file API, by absolute path: A's own file reads, B's does not.
    let q = |p: &str| format!("/p/a/file/content?path={}", p.replace('/', "%2F"));
    let own = c.get(&q(&format!("{a_s}/own.txt")), Some(&ann())).await;
    assert_eq!(own.status, 200, "{}", own.body);
    assert!(own.body.contains("A-OWN-71"), "{}", own.body);
    let other = c.get(&q(&format!("{b_s}/secret.txt")), Some(&ann())).await;
    assert!(!other.body.contains("B-SECRET-29"), "{} {}", other.status, other.body);
    // OpenCode's read fails with EACCES, which it answers as an unexplained 500.
    assert_eq!(other.status, 500, "{}", other.body);
    assert!(other.body.contains("UnknownError"), "{}", other.body);
    assert!(!b.join("planted-by-bash").exists());
}
