//! OpenCode 2.x (npm `@opencode/cli`, pinned) behind the gateway: a spawned 2.1.2 server,
//! detected as 2.x and judged by its own route table; its real clients (`run --server`,
//! `api --server`) through the gateway with a gateway token as their password; its folder pinned
//! against every spelling of `location` the real server reads; its own pairing refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::opencode::{ANSWER, FakeModel, opencode2_bin};
use crate::common::process::output_within_async;
use crate::common::supervised::{server_config, spawned};

const ALICE: &str = "alice-password-1";
pub(crate) const VERA: &str = "vera-password-1";
pub(crate) const OTTO: &str = "otto-password-1";

pub(crate) struct V2Stack {
    pub(crate) gw: Gateway,
    pub(crate) model: FakeModel,
    pub(crate) client: Https,
    project: PathBuf,
    outside: PathBuf,
    _dirs: tempfile::TempDir,
}

/// One spawned project "v2" on OpenCode 2.1.2 with the fake model; alice is admin, otto an
/// operator, vera a viewer.
pub(crate) async fn v2_stack() -> V2Stack {
    let model = FakeModel::start("echo unused").await;
    let dirs = tempfile::tempdir().unwrap();
    let project = dirs.path().join("project");
    let outside = dirs.path().join("outside");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let (project, outside) = (project.canonicalize().unwrap(), outside.canonicalize().unwrap());
    let vera = users_toml(&[
        TestUser {
            name: "vera",
            password: VERA,
            projects: "[\"v2\"]",
            role: "viewer",
        },
        TestUser {
            name: "otto",
            password: OTTO,
            projects: "[\"v2\"]",
            role: "operator",
        },
    ]);
    let config = server_config(&spawned("v2", &project, &model, ""))
        .replace(
            &format!(
                "opencode_bin = \"{}\"",
                crate::common::opencode::opencode_bin().display()
            ),
            &format!("opencode_bin = \"{}\"", opencode2_bin().display()),
        )
        .replace("[[user]]", &format!("{vera}[[user]]"));
    let gw = Gateway::start(&config);
    assert!(
        gw.wait_log(
            "upstream OpenCode matches the gateway's route table",
            Duration::from_secs(90)
        )
        .await,
        "the 2.x server was not read as 2.x:\n{}",
        gw.logs()
    );
    let client = Https::new(gw.https, &gw.ca());
    V2Stack {
        gw,
        model,
        client,
        project,
        outside,
        _dirs: dirs,
    }
}

/// An OpenCode 2 client command through the gateway, trusting its CA, with `password` as
/// `OPENCODE_SERVER_PASSWORD` and a home of its own: 120 s at most.
async fn v2_client(args: &[&str], s: &V2Stack, password: &str, home: &Path) -> std::process::Output {
    let mut cmd = std::process::Command::new(opencode2_bin());
    cmd.args(args)
        .env("NODE_EXTRA_CA_CERTS", s.gw.ca())
        .env("OPENCODE_SERVER_PASSWORD", password)
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .current_dir(home);
    output_within_async(cmd, Duration::from_secs(120)).await
}

fn text(out: &std::process::Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn opencode_2_clients_reach_a_spawned_2x_server_as_the_tokens_user() {
    let s = v2_stack().await;
    let (status, report) = s.gw.control("GET", "/status");
    assert_eq!(status, 200, "{report}");
    assert!(
        report.contains("\"family\":\"2.x\"") && report.contains("\"version\":\"2.1.2\""),
        "status names the project's OpenCode: {report}"
    );
    let token = token_for(&s, "alice");
    let home = tempfile::tempdir().unwrap();
    let url = format!("https://127.0.0.1:{}/p/v2", s.gw.https.port());

    // `run --server`: the fake model's answer, printed, as alice (OpenCode 2 sends `opencode`).
    s.model.answer_when(s.gw.events_opened_after_now());
    let out = v2_client(
        &["run", "--server", &url, "hello through the gateway"],
        &s,
        &token,
        home.path(),
    )
    .await;
    assert!(out.status.success(), "{}\ngateway:\n{}", text(&out), s.gw.logs());
    assert!(String::from_utf8_lossy(&out.stdout).contains(ANSWER), "{}", text(&out));
    assert!(
        s.gw.wait_log(
            "user=\"alice\" project=\"v2\" method=POST path=/p/v2/api/session/",
            Duration::from_secs(5)
        )
        .await,
        "the prompt went through the gateway as alice:\n{}",
        s.gw.logs()
    );

    // `api --server`: the server's own answer, through the gateway.
    let out = v2_client(&["api", "--server", &url, "GET", "/api/info"], &s, &token, home.path()).await;
    assert!(out.status.success(), "{}", text(&out));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(info["version"], "2.1.2", "{}", text(&out));

    // Its own pairing is refused, with the reason, whoever asks.
    let out = v2_client(&["api", "--server", &url, "server.pair"], &s, &token, home.path()).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("OpenCode's own pairing code is refused"),
        "{}",
        text(&out)
    );

    // A wrong token is the gateway's 401, never OpenCode's.
    let out = v2_client(
        &["api", "--server", &url, "GET", "/api/info"],
        &s,
        "ocgw_not-a-token",
        home.path(),
    )
    .await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        s.gw.wait_log(
            "project=\"-\" method=GET path=/p/v2/api/info status=401",
            Duration::from_secs(5)
        )
        .await
            || s.gw.logs().contains("path=/p/v2/api/info status=401"),
        "{}",
        s.gw.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_2x_project_stays_in_its_folder_whatever_location_a_request_names() {
    let s = v2_stack().await;
    let alice = basic("alice", ALICE);
    let other = s.outside.display().to_string();
    let enc = other.replace('/', "%2F");
    let mine = s.project.display().to_string();
    // Each spelling the real server reads (query deepObject, dotted, encoded, any case,
    // duplicated, the header) names the other folder; the server must still be in the project's.
    let spellings = [
        format!("location%5Bdirectory%5D={enc}"),
        format!("location[directory]={other}"),
        format!("%6Cocation%5Bdirectory%5D={enc}"),
        format!("LOCATION[directory]={other}"),
        format!("location.directory={other}"),
        format!("location%5Bdirectory%5D={enc}&location%5Bdirectory%5D={enc}"),
        format!("directory={enc}"),
    ];
    for q in &spellings {
        let (status, body) = json(&s.client, "GET", &format!("/p/v2/api/location?{q}"), &alice, "").await;
        assert_eq!(status, 200, "{q}: {body}");
        assert_eq!(
            body["directory"],
            mine.as_str(),
            "{q} moved the server to another folder: {body}"
        );
    }
    let req = s
        .client
        .request("GET", "/p/v2/api/location", Some(&alice))
        .header("x-opencode-directory", &enc)
        .body(Default::default())
        .unwrap();
    let r = s.client.call(req).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(&format!("\"directory\":\"{mine}\"")), "{}", r.body);

    // Bodies that name the other folder are refused, with the field.
    let bodies = [
        (
            "POST",
            "/p/v2/api/session",
            format!("{{\"location\":{{\"directory\":\"{other}\"}}}}"),
            "location.directory",
        ),
        (
            "POST",
            "/p/v2/api/shell",
            format!("{{\"command\":\"pwd\",\"cwd\":\"{other}\"}}"),
            "cwd",
        ),
        (
            "POST",
            "/p/v2/api/worktree",
            format!("{{\"projectID\":\"p\",\"directory\":\"{other}\"}}"),
            "directory",
        ),
    ];
    for (method, path, body, field) in &bodies {
        let (status, answer) = json(&s.client, method, path, &alice, body).await;
        assert_eq!(status, 403, "{method} {path} {body}: {answer}");
        assert!(
            answer.to_string().contains(field),
            "{method} {path}: the refusal names {field}: {answer}"
        );
    }
    // Inside the project, the same body works: the session is the project's.
    let (status, made) = json(
        &s.client,
        "POST",
        "/p/v2/api/session",
        &alice,
        &format!("{{\"location\":{{\"directory\":\"{mine}\"}}}}"),
    )
    .await;
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["data"]["location"]["directory"], mine.as_str(), "{made}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_2x_route_table_is_the_real_servers_document_and_roles_hold() {
    let s = v2_stack().await;
    let alice = basic("alice", ALICE);
    let vera = basic("vera", VERA);
    // Every operation of the real server's document is a row of the 2.x table (or refused).
    let (status, doc) = json(&s.client, "GET", "/p/v2/openapi.json", &alice, "").await;
    assert_eq!(status, 200);
    let table = &opencode_gateway::policy::table::V2;
    let mut operations = 0;
    for (path, ops) in doc["paths"].as_object().expect("an OpenAPI document") {
        for method in ["get", "post", "put", "patch", "delete"] {
            if ops.get(method).is_none() {
                continue;
            }
            operations += 1;
            let m = method.to_ascii_uppercase();
            let pattern = opencode_gateway::policy::drift::pattern_from_doc(&m, path, table).unwrap();
            assert!(
                table.has(&m, &pattern),
                "{m} {path} ({pattern}) is not classified in the 2.x table"
            );
        }
    }
    assert_eq!(operations, 144, "2.1.2's document");
    // A viewer reads, and writes nothing.
    let (status, page) = json(&s.client, "GET", "/p/v2/api/session", &vera, "").await;
    assert_eq!(status, 200, "{page}");
    let (status, refused) = json(&s.client, "POST", "/p/v2/api/session", &vera, "{}").await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.to_string().contains("needs the operator role"), "{refused}");
    let (status, refused) = json(&s.client, "POST", "/p/v2/api/shell", &vera, "{\"command\":\"id\"}").await;
    assert_eq!(status, 403, "{refused}");
    // The web UI's page is a viewer's; OpenCode's own pairing link is nobody's.
    let page = s.client.get("/p/v2/", Some(&vera)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("<html") || page.body.contains("<!doctype"),
        "{}",
        page.body
    );
    // Its files come compressed, though 2.x sends them without a length.
    let asset = page
        .body
        .split('"')
        .find(|p| p.starts_with("/_assets/") && p.ends_with(".js"))
        .unwrap_or_else(|| panic!("no script in the page: {}", page.body))
        .to_string();
    let get = |coding: &'static str| {
        let req = s
            .client
            .request("GET", &format!("/p/v2{asset}"), Some(&vera))
            .header("accept-encoding", coding)
            .body(Default::default())
            .unwrap();
        s.client.call(req)
    };
    let (plain, br) = (get("identity").await, get("br").await);
    assert_eq!((plain.status.as_u16(), br.status.as_u16()), (200, 200), "{asset}");
    assert_eq!(
        br.headers.get("content-encoding").map(|v| v.to_str().unwrap()),
        Some("br"),
        "{asset}: {:?}",
        br.headers
    );
    assert!(plain.headers.get("content-encoding").is_none());
    assert!(
        br.body.len() < plain.body.len(),
        "{asset}: {} ≥ {}",
        br.body.len(),
        plain.body.len()
    );
    let (status, refused) = json(&s.client, "GET", "/p/v2/auth/connect/abcdef", &alice, "").await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused.to_string().contains("OpenCode's own pairing code is refused"),
        "{refused}"
    );
}

/// A gateway token for `user`, limited to project v2, as `token create` prints it.
fn token_for(s: &V2Stack, user: &str) -> String {
    let (made, out) = s.gw.cli(&["token", "create", user, "--projects", "v2"]);
    assert!(made, "{out}");
    out.lines()
        .find(|l| l.starts_with("ocgw_"))
        .unwrap_or_else(|| panic!("no token printed: {out}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and tmux: run scripts/test.sh"]
async fn opencode_2s_tui_works_through_the_gateway_for_an_operator_and_shows_a_viewer_her_refusal() {
    let s = v2_stack().await;
    let url = format!("https://127.0.0.1:{}/p/v2", s.gw.https.port());
    let ca = s.gw.ca();
    for (user, tag) in [("otto", "op"), ("vera", "view")] {
        let token = token_for(&s, user);
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let tmux = crate::common::tmux::Tmux::new(&format!("v2tui-{tag}"));
        let (config, data, state) = (h.join("config"), h.join("data"), h.join("state"));
        tmux.start(
            &format!("{} --server {url}; sleep 30", opencode2_bin().display()),
            h,
            &[
                ("OPENCODE_SERVER_PASSWORD", token.as_str()),
                ("NODE_EXTRA_CA_CERTS", ca.to_str().unwrap()),
                ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
                ("HOME", h.to_str().unwrap()),
                ("XDG_CONFIG_HOME", config.to_str().unwrap()),
                ("XDG_DATA_HOME", data.to_str().unwrap()),
                ("XDG_STATE_HOME", state.to_str().unwrap()),
            ],
        );
        let screen = tmux.wait_screen("Ask anything", Duration::from_secs(60)).await;
        assert!(
            screen.contains("Ask anything"),
            "{user}: the TUI did not open:\n{screen}\n{}",
            s.gw.logs()
        );
        // The folder it shows is the project's, wherever the client runs.
        assert!(screen.contains(&s.project.display().to_string()), "{user}:\n{screen}");
        tmux.run(&["send-keys", "-t", "tui", "-l", &format!("hello from {user}")]);
        tmux.run(&["send-keys", "-t", "tui", "Enter"]);
        if user == "otto" {
            let screen = tmux.wait_screen(ANSWER, Duration::from_secs(60)).await;
            assert!(
                screen.contains(ANSWER),
                "the answer never showed:\n{screen}\n{}",
                s.gw.logs()
            );
        } else {
            let refused = "user=\"vera\" project=\"v2\" method=POST path=/p/v2/api/session".to_string();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !s
                .gw
                .logs()
                .lines()
                .any(|l| l.contains(&refused) && l.contains("status=403"))
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no refusal for vera:\n{}",
                    s.gw.logs()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let logs = s.gw.logs();
            assert!(
                !logs
                    .lines()
                    .any(|l| l.contains(&refused) && l.contains("/prompt status=200")),
                "{logs}"
            );
        }
    }
}
