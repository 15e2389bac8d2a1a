use super::needs_restart;
use crate::config::Settings;

/// One edit of the settings.
type Change<'a> = Box<dyn Fn(&mut Settings) + 'a>;

/// Settings of a small valid config, with `extra` appended (tables of its own).
fn settings(extra: &str) -> Settings {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:8443\"\nstate_dir = \"state\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n\
         [[project]]\nname = \"web\"\nupstream = \"http://127.0.0.1:4096\"\n{extra}"
    );
    // One path for every call: paths in the file are relative to it.
    crate::config::parse(&config, std::path::Path::new("/nonexistent/gw/gateway.toml")).unwrap()
}

/// Each key a reload cannot apply, changed alone, is named once, in words; the same settings
/// name nothing.
#[test]
fn each_change_a_reload_cannot_apply_is_named() {
    let old = settings("");
    assert_eq!(needs_restart(&old, &old.clone()), Vec::<String>::new());
    let addr = |s: &str| s.parse().unwrap();
    let cases: Vec<(&str, Change<'_>)> = vec![
        (
            "project web's listen (new: 127.0.0.1:0)",
            Box::new(|s| s.projects[0].listen = Some(addr("127.0.0.1:0"))),
        ),
        (
            "server.listen (127.0.0.1:8443 → 0.0.0.0:8443)",
            Box::new(|s| s.server.listen = addr("0.0.0.0:8443")),
        ),
        (
            "server.http_listen (new: 0.0.0.0:8080)",
            Box::new(|s| s.server.http_listen = Some(addr("0.0.0.0:8080"))),
        ),
        (
            "admin.listen (new: 127.0.0.1:9090)",
            Box::new(|s| {
                s.admin = Some(crate::config::settings::Admin {
                    listen: addr("127.0.0.1:9090"),
                })
            }),
        ),
        ("[limits]", Box::new(|s| s.limits.max_body_bytes += 1)),
        ("[audit]", Box::new(|s| s.audit = None)),
        ("server.state_dir", Box::new(|s| s.server.state_dir.push("elsewhere"))),
        (
            "[store] url",
            Box::new(|s| s.store_url = Some(crate::config::Secret::new("postgres://u:hunter2@db/gw"))),
        ),
        (
            "server.log_format",
            Box::new(|s| s.server.log_format = crate::support::telemetry::LogFormat::Json),
        ),
    ];
    for (named, change) in cases {
        let mut new = old.clone();
        change(&mut new);
        let said = needs_restart(&old, &new);
        assert_eq!(said, [named], "{named}");
        assert!(!said.concat().contains("hunter2"), "{said:?}");
    }
}

/// A port taken away: the project's, with the project gone (its port answers 404 until the
/// restart), or only its `listen`.
#[test]
fn a_listener_taken_away_is_named_with_what_it_does_until_the_restart() {
    let old = settings("listen = \"127.0.0.1:8444\"\n");
    let mut gone = old.clone();
    gone.projects.clear();
    assert_eq!(
        needs_restart(&old, &gone),
        [
            "project web's listen 127.0.0.1:8444 (project removed: its own port stays open until a restart and answers 404)"
        ]
    );
    let mut no_port = old.clone();
    no_port.projects[0].listen = None;
    assert_eq!(
        needs_restart(&old, &no_port),
        ["project web's listen 127.0.0.1:8444 (removed: it stays open until a restart)"]
    );
}

/// What a reload applies is not named: users, a project's upstream, a new project without a
/// port, the base domain.
#[test]
fn what_a_reload_applies_is_not_named() {
    let old = settings("");
    let new = settings("[[project]]\nname = \"api\"\nupstream = \"http://127.0.0.1:4097\"\n");
    assert_eq!(needs_restart(&old, &new), Vec::<String>::new());
    let mut new = old.clone();
    new.server.base_domain = Some("gw.example.com".into());
    new.projects[0].directory = Some("/srv/web".into());
    assert_eq!(needs_restart(&old, &new), Vec::<String>::new());
}
