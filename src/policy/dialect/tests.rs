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
