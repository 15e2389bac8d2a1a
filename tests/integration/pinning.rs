//! The attack: a client of project "demo" tries every way OpenCode offers to act in another
//! directory. Each vector is first shown to work against the raw OpenCode server (so the test can
//! fail), then through the gateway it either lands in the project (proved by what OpenCode answers:
//! the project's own files) or gets the gateway's 403, and /etc/passwd is never read.

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::Https;
use crate::common::client::{EventLog, direct_call, json, session_in};
use crate::common::opencode::OpenCode;
use crate::common::stack::{Setup, alice, setup_pinned};

const PASSWD: &str = "root:x:0:0";

async fn direct(port: u16, password: &str, path: &str, headers: &[(&str, &str)]) -> String {
    direct_call(port, password, "GET", path, headers, "").await
}

async fn through(c: &Https, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut b = c.request("GET", path, Some(&alice()));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let r = c.call(b.body(Full::default()).unwrap()).await;
    (r.status.as_u16(), r.body)
}

crate::here_and_on_a_box!(
    no_directory_selector_reaches_outside_the_project,
    no_directory_selector_reaches_outside_the_project_on_a_box,
    no_directory_selector_reaches_outside_the_project_with
);

async fn no_directory_selector_reaches_outside_the_project_with(s: &Setup) {
    let project = s.oc.project.display().to_string();
    let escape = format!("{project}/../../../../../../etc");
    std::fs::write(s.oc.project.join("passwd"), PROJECT_PASSWD).unwrap();
    let vectors: Vec<(String, Vec<(&str, String)>)> = vec![
        ("/file/content?path=/etc/passwd&directory=/etc".into(), vec![]),
        ("/file/content?path=passwd&directory=/etc".into(), vec![]),
        (format!("/file/content?path=passwd&directory={escape}"), vec![]),
        ("/file/content?path=passwd&%64irectory=%2Fetc".into(), vec![]),
        (
            "/file/content?path=passwd".into(),
            vec![("x-opencode-directory", "/etc".into())],
        ),
        (
            "/file/content?path=passwd".into(),
            vec![("x-opencode-directory", "%2Fetc".into())],
        ),
        (
            "/file/content?path=passwd".into(),
            vec![("X-OpenCode-Directory", escape.clone())],
        ),
        ("/api/fs/read/passwd?location%5Bdirectory%5D=%2Fetc".into(), vec![]),
        (
            "/api/fs/read/passwd".into(),
            vec![("x-opencode-directory", "/etc".into())],
        ),
    ];
    for (path, headers) in &vectors {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let raw = direct(s.oc.port, &s.oc.password, path, &h).await;
        assert!(
            raw.contains(PASSWD),
            "the vector {path} {h:?} should work against raw OpenCode:\n{raw}"
        );
        let (status, body) = through(&s.client, &format!("/p/demo{path}"), &h).await;
        assert!(
            !body.contains(PASSWD),
            "{path} {h:?} read /etc/passwd through the gateway ({status}): {body}"
        );
        assert_landed_in_project(
            &s.oc,
            &format!("{path} {h:?}"),
            path.contains("path=/etc/passwd"),
            status,
            &body,
        );
    }
    // Workspace selectors are dropped too: the project's own passwd is read.
    let (status, body) = through(
        &s.client,
        "/p/demo/file/content?path=passwd&workspace=/etc&directory=/etc",
        &[("x-opencode-workspace", "/etc")],
    )
    .await;
    assert!(!body.contains(PASSWD), "{body}");
    assert_landed_in_project(&s.oc, "workspace selectors", false, status, &body);
    // Selectors land in the project: the server says which directory it acted in.
    for (path, headers) in [
        ("/path?directory=/etc", vec![]),
        ("/path", vec![("x-opencode-directory", "/etc")]),
        // The direct road writes GET heads itself (http/upstream_head.rs): a selector in
        // capitals beside another, one that Connection names, one twice.
        (
            "/path",
            vec![("X-OPENCODE-DIRECTORY", "/etc"), ("x-opencode-workspace", "/tmp")],
        ),
        (
            "/path",
            vec![
                ("x-opencode-directory", "/etc"),
                ("connection", "x-opencode-directory, keep-alive"),
            ],
        ),
        (
            "/path",
            vec![("x-opencode-directory", "/etc"), ("x-opencode-directory", "/tmp")],
        ),
        ("/api/location?location%5Bdirectory%5D=%2Fetc", vec![]),
    ] {
        let (status, body) = through(&s.client, &format!("/p/demo{path}"), &headers).await;
        assert_eq!(status, 200, "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["directory"].as_str(),
            Some(project.as_str()),
            "{path} landed in {body}"
        );
    }
    // Listing the filesystem from another root is pinned too: it lists the project's folder.
    let (status, listing) = through(&s.client, "/p/demo/file?path=.&directory=/etc", &[]).await;
    assert_eq!(status, 200, "{listing}");
    assert!(!listing.contains("/etc/"), "{listing}");
    let entries: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let absolute: Vec<&str> = entries
        .as_array()
        .unwrap_or_else(|| panic!("a listing: {listing}"))
        .iter()
        .filter_map(|e| e["absolute"].as_str())
        .collect();
    assert!(
        absolute.contains(&format!("{project}/passwd").as_str()),
        "the listing is of the project's folder: {listing}"
    );
}

/// The project's own `passwd`: what a pinned read of `passwd` must return.
const PROJECT_PASSWD: &str = "project-passwd-marker-5e1";

/// A vector through the gateway either got the gateway's 403 with its reason, or OpenCode acted
/// in the project's folder: a relative `passwd` is the project's marker file, and the absolute
/// `/etc/passwd` is OpenCode's own refusal (a 500 whose reference its log files as "Path escapes
/// the location"), which it gives only when the directory is not `/etc` or above.
fn assert_landed_in_project(oc: &OpenCode, what: &str, absolute: bool, status: u16, body: &str) {
    if status == 403 {
        let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(v["error"], "forbidden", "{what}: a 403 not from the gateway: {body}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains("outside the project")),
            "{what}: a 403 for another reason: {body}"
        );
        return;
    }
    if !absolute {
        assert_eq!(status, 200, "{what}: {body}");
        assert!(
            body.contains(PROJECT_PASSWD),
            "{what}: not the project's passwd, so not the project's folder: {body}"
        );
        return;
    }
    assert_eq!(
        status, 500,
        "{what}: OpenCode should refuse a path outside its directory: {body}"
    );
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let reference = v["data"]["ref"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no error reference: {body}"));
    // OpenCode writes its log a moment after it answers.
    let needle = format!("ref={reference} ");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        if let Some(l) = oc.server_log().lines().find(|l| l.contains(&needle)) {
            break l.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: OpenCode never logged its error {reference}:\n{}",
            oc.server_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        line.contains("Path escapes the location"),
        "{what}: OpenCode refused for another reason: {line}"
    );
}

crate::here_and_on_a_box!(
    bodies_that_choose_a_directory_outside_the_project_get_403,
    bodies_that_choose_a_directory_outside_the_project_get_403_on_a_box,
    bodies_that_choose_a_directory_outside_the_project_get_403_with
);

async fn bodies_that_choose_a_directory_outside_the_project_get_403_with(s: &Setup) {
    let project = s.oc.project.display().to_string();
    std::os::unix::fs::symlink("/etc", s.oc.project.join("etc-link")).unwrap();
    for (path, body) in [
        ("/p/demo/pty", r#"{"cwd":"/etc"}"#.to_string()),
        ("/p/demo/pty", format!(r#"{{"cwd":"{project}/../../etc"}}"#)),
        ("/p/demo/pty", format!(r#"{{"cwd":"{project}/etc-link"}}"#)),
        ("/p/demo/pty", format!(r#"{{"cwd":"{project}/%2E%2E/%2E%2E/etc"}}"#)),
        (
            "/p/demo/api/session",
            r#"{"location":{"directory":"/etc"}}"#.to_string(),
        ),
    ] {
        let (status, resp) = json(&s.client, "POST", path, &alice(), &body).await;
        assert_eq!(status, 403, "{path} {body}: {resp}");
        assert!(resp.to_string().contains("outside the project"), "{resp}");
    }
    // Inside the project is fine.
    let (status, pty) = json(
        &s.client,
        "POST",
        "/p/demo/pty",
        &alice(),
        &format!(r#"{{"cwd":"{project}"}}"#),
    )
    .await;
    assert_eq!(status, 200, "{pty}");
    assert_eq!(pty["cwd"].as_str(), Some(project.as_str()));
    // Workspace switching is not offered for a pinned project (the admin role would be needed anyway).
    let (status, _) = json(&s.client, "POST", "/p/demo/experimental/workspace", &alice(), "{}").await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn sessions_listings_and_events_of_other_directories_stay_hidden_on_a_shared_server() {
    let s = setup_pinned("echo unused", true).await;
    let other = tempfile::tempdir().unwrap();
    let other_dir = other.path().canonicalize().unwrap().display().to_string();
    // Every event stream a project's client can open (the global one, the v2 bus, the project's
    // own), by its plain name and by spellings OpenCode's router reads as the same route (case,
    // percent-encoding, empty segments, `;` parameters, a directory asked in the query): each is
    // read on the event-stream road (upstream/direct.rs) and scoped alike.
    let mut logs = Vec::new();
    for path in [
        "/p/demo/global/event".to_string(),
        "/p/demo/GLOBAL/Event".to_string(),
        "/p/demo/%67lobal/%65vent".to_string(),
        "/p/demo/global//event/".to_string(),
        "/p/demo/global;x=1/event".to_string(),
        format!("/p/demo/global/event?directory={other_dir}"),
        // The v2 bus (1.18.33 serves it too, for every folder: round five, item 3) and the
        // project's own stream, which the server scopes to the pinned folder.
        "/p/demo/api/event".to_string(),
        "/p/demo/API/EVENT".to_string(),
        "/p/demo/api/%65vent;x".to_string(),
        format!("/p/demo/api/event?location[directory]={other_dir}"),
        "/p/demo/event".to_string(),
    ] {
        let events = EventLog::open(&s.client, &path, &alice()).await;
        events.wait_for("server.connected", Duration::from_secs(20)).await;
        // OpenCode joins the stream to its bus just after "connected": a probe session in the
        // project (listed and announced like the project's own, so the checks below still hold)
        // shows it has.
        events.until_subscribed(&s.client, "/p/demo/session", &alice()).await;
        logs.push((path, events));
    }
    // Someone with direct access creates a session in another directory of the same server.
    let foreign = session_in(s.oc.port, &s.oc.password, &other_dir).await;
    let foreign_id = foreign["id"].as_str().unwrap();
    assert_eq!(foreign["directory"].as_str(), Some(other_dir.as_str()));
    // A session of the project itself.
    let (status, mine) = json(&s.client, "POST", "/p/demo/session", &alice(), "{}").await;
    assert_eq!(status, 200);
    let mine_id = mine["id"].as_str().unwrap();
    // The other directory's session cannot be read or driven through the gateway.
    for path in [
        format!("/p/demo/session/{foreign_id}"),
        format!("/p/demo/session/{foreign_id}/message"),
        format!("/p/demo/api/session/{foreign_id}"),
        format!("/p/demo/api/session/{foreign_id}/event"),
    ] {
        let (status, body) = json(&s.client, "GET", &path, &alice(), "").await;
        assert_eq!(status, 403, "{path}: {body}");
    }
    let (status, _) = json(
        &s.client,
        "GET",
        &format!("/p/demo/session/{mine_id}/message"),
        &alice(),
        "",
    )
    .await;
    assert_eq!(status, 200);
    // Listings that span directories show the project's only.
    let (_, sessions) = json(&s.client, "GET", "/p/demo/experimental/session", &alice(), "").await;
    let listed = sessions.to_string();
    assert!(listed.contains(mine_id) && !listed.contains(foreign_id), "{listed}");
    let (status, projects) = json(&s.client, "GET", "/p/demo/project", &alice(), "").await;
    assert_eq!(status, 200);
    assert!(!projects.to_string().contains(&other_dir), "{projects}");
    // Every spelling's stream carried the project's session.created, not the other one.
    for (path, events) in &logs {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !events
            .events("session.created")
            .iter()
            .any(|e| e.to_string().contains(mine_id))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{path}: the project's own event never arrived"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let all: Vec<String> = events.events("session.created").iter().map(|e| e.to_string()).collect();
        assert!(all.iter().all(|e| !e.contains(foreign_id)), "{path}: {all:?}");
    }
}

/// The reference the properties and fuzz targets judge the gateway by (tests/oracle/), against the
/// real server: every directory OpenCode acts in for a header is one of the reference's readings
/// of it, and every query spelling OpenCode takes as `directory` is one the reference reads so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_oracle_reads_queries_and_directories_as_the_real_opencode_does() {
    use crate::oracle;
    let s = setup_pinned("echo unused", true).await;
    let cwd = s.oc.project.display().to_string();
    let base = tempfile::tempdir().unwrap();
    let base = base.path().canonicalize().unwrap().display().to_string();
    let acted_in = |body: String| -> String {
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
        v["directory"].as_str().unwrap_or_else(|| panic!("{body}")).to_string()
    };
    for value in [
        format!("{base}/a"),
        format!("{base}/a/../b"),
        format!("{base}/a/./b//c/"),
        format!("{base}/a/../../.."),
        format!("{base}/%2E%2E/x"),
        crate::common::client::encode(&format!("{base}/a/../b")),
        format!("{base}/with%20space"),
        format!("{base}/100%"),
    ] {
        let dir = acted_in(direct(s.oc.port, &s.oc.password, "/path", &[("x-opencode-directory", &value)]).await);
        let readings = oracle::directories(&cwd, &value);
        assert!(
            readings.contains(&dir),
            "header {value}: OpenCode acted in {dir}, the reference reads {readings:?}"
        );
    }
    let mut read_as_directory = 0;
    for name in [
        "directory",
        "%64irectory",
        "direc%74ory",
        "%64%69%72%65%63%74%6F%72%79",
        "Directory",
        "directory%20",
        "dir+ectory",
        "directory%00",
    ] {
        let probe = format!("{base}/probe-{}", name.len());
        let query = format!("{name}={probe}");
        let dir = acted_in(direct(s.oc.port, &s.oc.password, &format!("/path?{query}"), &[]).await);
        if dir == probe {
            read_as_directory += 1;
            assert!(
                oracle::query_names(&query).iter().any(|n| n == "directory"),
                "OpenCode took {name} as directory; the reference does not"
            );
        } else {
            assert_eq!(dir, cwd, "{name}: {dir}");
        }
    }
    assert!(read_as_directory >= 2, "the encoded spellings work upstream");
}
