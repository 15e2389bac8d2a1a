use super::*;

#[test]
fn each_version_is_told_by_its_own_answers_only() {
    let v1 = br#"{"healthy":true,"version":"1.18.33"}"#;
    let v2 = br#"{"version":"2.1.2","pid":7,"urls":["http://127.0.0.1:4096"]}"#;
    let index_html = b"<!doctype html><html><head><title>OpenCode</title></head></html>";
    assert_eq!(V1.version_in_health(v1).as_deref(), Some("1.18.33"));
    assert_eq!(V2.version_in_health(v1), None);
    assert_eq!(V2.version_in_health(v2).as_deref(), Some("2.1.2"));
    assert_eq!(V1.version_in_health(v2), None);
    for d in ALL {
        assert_eq!(d.version_in_health(index_html), None, "{d:?}");
    }
}

#[test]
fn the_executable_says_which_version_it_is() {
    let (d, v) = from_version_output("1.18.33\n").unwrap();
    assert_eq!((d.family(), v.as_str()), ("1.x", "1.18.33"));
    let (d, v) = from_version_output("opencode v2.1.2\n").unwrap();
    assert_eq!((d.family(), v.as_str()), ("2.x", "2.1.2"));
    assert!(from_version_output("opencode v3.0.0").is_none());
    assert!(from_version_output("").is_none());
}

#[test]
fn the_ready_line_names_the_port_asked_for() {
    assert!(V1.ready_line("opencode server listening on http://127.0.0.1:4100", 4100));
    assert!(!V1.ready_line("opencode server listening on http://127.0.0.1:41000", 4100));
    assert!(V2.ready_line(r#"{"url":"http://127.0.0.1:4100"}"#, 4100));
    assert!(!V2.ready_line(r#"{"url":"http://127.0.0.1:41000"}"#, 4100));
    assert!(!V2.ready_line("server listening on http://127.0.0.1:4100", 4100));
    assert!(V2.serve_args(4100).contains(&"--stdio".to_string()));
}

#[test]
fn a_sessions_folder_is_read_where_each_version_keeps_it() {
    let v1 = serde_json::json!({"id": "ses_1", "directory": "/home/a/web"});
    let v2 = serde_json::json!({"data": {"id": "ses_1", "location": {"directory": "/home/a/web"}}});
    assert_eq!(V1.session_directory(&v1), Some("/home/a/web"));
    assert_eq!(V1.session_directory(&v2), None);
    assert_eq!(V2.session_directory(&v2), Some("/home/a/web"));
    assert_eq!(V2.session_directory(&v1), None);
    assert_eq!(V1.session_path("ses_1"), "/session/ses_1");
    assert_eq!(V2.session_path("ses_1"), "/api/session/ses_1");
    // An id is one segment, however it is written.
    assert_eq!(V2.session_path("a/b"), "/api/session/a%2Fb");
}

#[test]
fn an_npm_package_says_which_version_it_holds() {
    let d = |json: &str| from_package_json(json).map(|(d, v)| (d.family(), v));
    assert_eq!(
        d(r#"{"name":"opencode-ai","version":"1.18.33"}"#),
        Some(("1.x", "1.18.33".into()))
    );
    assert_eq!(
        d(r#"{"name":"@opencode/cli","version":"2.1.2"}"#),
        Some(("2.x", "2.1.2".into()))
    );
    assert_eq!(
        d(r#"{"name":"opencode-linux-x64","version":"1.18.33"}"#),
        Some(("1.x", "1.18.33".into()))
    );
    assert_eq!(d(r#"{"name":"left-pad","version":"1.3.0"}"#), None);
    assert_eq!(d(r#"{"name":"@opencode/cli","version":"3.0.0"}"#), None);
    assert_eq!(d("not json"), None);
}
