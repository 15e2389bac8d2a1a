//! Issue 16: an OpenCode of another version behind the gateway. Routes its API document lists
//! and the table does not know get a safe default (operator; never viewer or approver), are
//! matched with the canonical rules, and are logged and reported; `[[route_role]]` changes that.

use std::process::Command;
use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, basic};
use crate::common::fake_upstream::{Api, FakeUpstream};
use crate::common::gateway::{ALICE, BIN, Gateway, TestUser, base_config, external_project, users_toml};

const PW: &str = "pw-drift-upstream";

/// A newer OpenCode: a new root with a GET and a POST, a new route under a known root.
fn newer_api() -> Api {
    let doc = serde_json::json!({
        "openapi": "3.1.0",
        "paths": {
            "/newroot/things": { "get": {}, "post": {} },
            "/session/{sessionID}/new-thing": { "get": {} },
            "/session/{sessionID}": { "get": {}, "delete": {}, "patch": {} },
            "/global/health": { "get": {} },
        }
    });
    Api {
        version: "1.99.0".into(),
        doc: Some(doc.to_string()),
        doc_delay: Duration::ZERO,
    }
}

const VERA: TestUser<'static> = TestUser {
    name: "vera",
    password: "vera-password-1",
    projects: "[\"*\"]",
    role: "viewer",
};

fn config(up: &FakeUpstream, extra: &str) -> String {
    base_config(&format!(
        "{}{}{extra}",
        external_project("web", &up.url()),
        users_toml(&[ALICE, VERA])
    ))
}

/// The moment after start, while the server's document is still being read, is no gap: a
/// request for a route only the document knows waits for the read instead of being judged by the
/// table alone (which would take an unknown root for the web UI's files, open to viewers).
#[tokio::test]
async fn a_request_while_the_document_is_read_waits_for_it() {
    let api = Api {
        doc_delay: Duration::from_millis(1500),
        ..newer_api()
    };
    let up = FakeUpstream::start_with_api(PW, api).await;
    let gw = Gateway::start_behind(&config(&up, ""), PW);
    let c = Https::new(gw.https, &gw.ca());
    let r = c
        .get("/p/web/newroot/things", Some(&basic(VERA.name, VERA.password)))
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("needs the operator role"), "{}", r.body);
    assert!(
        up.seen().iter().all(|s| !s.target.starts_with("/newroot")),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn a_newer_opencode_gets_safe_defaults_a_viewer_cannot_use_and_route_role_changes_them() {
    let up = FakeUpstream::start_with_api(PW, newer_api()).await;
    let mut gw = Gateway::start_behind(&config(&up, ""), PW);
    assert!(
        gw.wait_log("defaulted=", Duration::from_secs(20)).await,
        "no drift warning:\n{}",
        gw.logs()
    );
    let logs = gw.logs();
    let line = logs.lines().find(|l| l.contains("defaulted=")).unwrap();
    for want in [
        "version=\"1.99.0\"",
        "table_version=\"1.18.33\"",
        "GET /newroot/things operator (default)",
        "POST /newroot/things operator (default)",
        "GET /session/*/new-thing operator (default)",
    ] {
        assert!(line.contains(want), "{want:?} missing in: {line}");
    }
    assert!(
        !line.contains("/session/* "),
        "routes the table knows get no default: {line}"
    );

    let c = Https::new(gw.https, &gw.ca());
    let vera = basic(VERA.name, VERA.password);
    let alice = basic(ALICE.name, ALICE.password);
    let post = |auth: &str| {
        c.request("POST", "/p/web/newroot/things", Some(auth))
            .body(Full::from("{}"))
            .unwrap()
    };

    // A viewer: refused the new GET and POST, with the route, the role and why.
    let r = c.get("/p/web/newroot/things", Some(&vera)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body
            .contains("GET /newroot/things needs the operator role; you are viewer"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("[[route_role]]"),
        "the refusal says how to grant it: {}",
        r.body
    );
    let r = c.call(post(&vera)).await;
    assert_eq!(r.status, 403);
    assert!(
        r.body.contains("POST /newroot/things needs the operator role"),
        "{}",
        r.body
    );
    let r = c.get("/p/web/session/ses_1/new-thing", Some(&vera)).await;
    assert_eq!(r.status, 403);
    assert!(
        r.body.contains("GET /session/*/new-thing needs the operator role"),
        "{}",
        r.body
    );
    // A root the document lists is the API, not the web UI's files, even for a path it lacks.
    let r = c.get("/p/web/newroot/unlisted", Some(&vera)).await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("is not a route the gateway allows"), "{}", r.body);
    // The web UI's files still load; table routes keep the table's role.
    assert_eq!(c.get("/p/web/assets/app.js", Some(&vera)).await.status, 200);
    assert_eq!(c.get("/p/web/session/ses_1", Some(&vera)).await.status, 200);
    assert!(
        !up.seen()
            .iter()
            .any(|s| s.target.contains("newroot") || s.target.contains("new-thing")),
        "nothing refused reached the upstream"
    );

    // An operator: the default lets them, in the canonical spelling.
    assert_eq!(c.get("/p/web/NewRoot/%74hings;x", Some(&alice)).await.status, 200);
    assert_eq!(c.call(post(&alice)).await.status, 200);
    assert_eq!(c.get("/p/web/Session/ses_1/NEW-THING/", Some(&alice)).await.status, 200);
    let targets: Vec<String> = up.seen().into_iter().map(|s| s.target).collect();
    assert!(targets.contains(&"/newroot/things".to_string()), "{targets:?}");
    assert!(targets.contains(&"/session/ses_1/new-thing".to_string()), "{targets:?}");

    // status shows the version and the defaulted routes.
    let (code, status) = gw.control("GET", "/status");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let api = &status["projects"][0]["api"];
    assert_eq!(api["version"], "1.99.0", "{status}");
    assert_eq!(api["table_version"], "1.18.33");
    let defaulted = api["defaulted_routes"].to_string();
    assert!(
        defaulted.contains("GET /newroot/things operator (default)"),
        "{defaulted}"
    );

    // [[route_role]] grants the new GET to viewers (reload swaps it in); the POST stays operator.
    let granted = config(
        &up,
        "[[route_role]]\nmethod = \"GET\"\npath = \"/newroot/things\"\nrole = \"viewer\"\n",
    );
    gw.write_config(&granted);
    assert_eq!(gw.control("POST", "/reload").0, 200);
    assert_eq!(c.get("/p/web/newroot/things", Some(&vera)).await.status, 200);
    let r = c.call(post(&vera)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let (_, status) = gw.control("GET", "/status");
    assert!(
        status.contains("GET /newroot/things viewer ([[route_role]])"),
        "{status}"
    );

    // check shows the table's version and the entry.
    let out = crate::common::process::bounded(Command::new(BIN).args(["check", "-c"]).arg(&gw.config));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("table of OpenCode 1.18.33"), "{text}");
    assert!(text.contains("[[route_role]] GET /newroot/things viewer"), "{text}");
    gw.signal(libc::SIGTERM);
    gw.wait_exit(Duration::from_secs(15));
}

#[tokio::test]
async fn an_unreadable_api_document_leaves_the_table_alone() {
    // The fake's default serves no document (its `/doc` is not JSON, like a static-file answer).
    let up = FakeUpstream::start(PW).await;
    let gw = Gateway::start_behind(&config(&up, ""), PW);
    assert!(
        gw.wait_log(
            "could not read the upstream's version and API document",
            Duration::from_secs(20)
        )
        .await,
        "{}",
        gw.logs()
    );
    assert!(!gw.logs().contains("defaulted="));
    let c = Https::new(gw.https, &gw.ca());
    let vera = basic(VERA.name, VERA.password);
    // The table alone: an unknown route under a table root is refused, the web UI loads.
    assert_eq!(c.get("/p/web/session/ses_1/new-thing", Some(&vera)).await.status, 403);
    assert_eq!(c.get("/p/web/assets/app.js", Some(&vera)).await.status, 200);
    assert_eq!(c.get("/p/web/favicon-v3.ico", Some(&vera)).await.status, 200);
    // A root nobody lists (a newer OpenCode's `/vault`) is an operator's until the document is
    // read (round four: a viewer got 200 for the 10 s until the next try).
    for path in ["/p/web/vault", "/p/web/Vault/items", "/p/web/%76ault"] {
        let refused = c.get(path, Some(&vera)).await;
        assert_eq!(refused.status, 403, "{path}: {}", refused.body);
        assert!(
            refused.body.contains("needs the operator role") && refused.body.contains("API document has not been read"),
            "{path}: {}",
            refused.body
        );
    }
    let ops = basic(ALICE.name, ALICE.password);
    assert_eq!(c.get("/p/web/vault", Some(&ops)).await.status, 200);
    let (_, status) = gw.control("GET", "/status");
    assert!(status.contains("not read yet"), "{status}");
}

/// The real OpenCode 1.18.33, spawned and external: its document equals the table, so no route
/// gets a default, and status says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_real_opencode_of_the_tables_version_gets_no_default_spawned_or_external() {
    use crate::common::opencode::FakeModel;
    use crate::common::supervised::{server_config, spawned};
    let model = FakeModel::start("true").await;
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(&server_config(&spawned("demo", dir.path(), &model, "")));
    assert_real_table_version(&gw, "demo").await;
    drop(gw);
    let s = crate::common::stack::setup("true").await;
    assert_real_table_version(&s.gw, "demo").await;
}

async fn assert_real_table_version(gw: &Gateway, project: &str) {
    assert!(
        gw.wait_log(
            "upstream OpenCode matches the gateway's route table",
            Duration::from_secs(60)
        )
        .await,
        "{}",
        gw.logs()
    );
    assert!(!gw.logs().contains("defaulted="), "{}", gw.logs());
    let (_, status) = gw.control("GET", "/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let p = status["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == project)
        .unwrap();
    assert_eq!(p["api"]["version"], "1.18.33", "{status}");
    assert_eq!(p["api"]["defaulted_routes"], serde_json::json!([]), "{status}");
    assert!(p["api"]["routes_listed"].as_u64().unwrap() > 150, "{status}");
}
