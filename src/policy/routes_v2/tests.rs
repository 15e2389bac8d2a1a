use super::*;
use crate::policy::routes::Class;

/// The reviewed fixture: (method, pattern, class word).
fn fixture() -> Vec<(String, String, String)> {
    include_str!("../../../tests/fixtures/opencode-2.1.2-routes.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 3, "{l}");
            (w[0].to_string(), w[1].to_string(), w[2].to_string())
        })
        .collect()
}

fn word(c: Class) -> &'static str {
    match c {
        Class::Read => "read",
        Class::Respond => "respond",
        Class::Operate => "operate",
        Class::Configure => "configure",
    }
}

/// Does `pattern` match the concrete `path`, as the gateway's own matcher reads it
/// (`authz::match_pattern`: `*` one segment, a last `**` the rest)?
fn matches(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').skip(1).collect();
    let s: Vec<std::borrow::Cow<'_, str>> = path.split('/').skip(1).map(Into::into).collect();
    crate::policy::authz::match_pattern(&p, &s).is_some()
}

/// A path the pattern names, its parameters filled (`**` with two segments).
fn example(pattern: &str) -> String {
    pattern.replace("**", "dir/file.rs").replace('*', "x_1")
}

#[test]
fn the_table_is_the_reviewed_document_every_operation_classified() {
    let fixture = fixture();
    assert_eq!(fixture.len(), 144, "2.1.2's document has 144 operations");
    for (method, pattern, class) in &fixture {
        let in_table = ROUTES.iter().find(|(m, p, _)| m == method && p == pattern);
        let refused = REFUSED.iter().any(|(m, p, _)| m == method && p == pattern);
        match class.as_str() {
            "never" => assert!(
                refused && in_table.is_none(),
                "{method} {pattern} is refused for everyone"
            ),
            _ => {
                let (_, _, c) = in_table.unwrap_or_else(|| panic!("{method} {pattern} is not in the table"));
                assert_eq!(word(*c), class, "{method} {pattern}");
                assert!(!refused, "{method} {pattern}");
            }
        }
    }
    for (method, pattern, _) in ROUTES {
        let documented = fixture.iter().any(|(m, p, _)| m == method && p == pattern);
        assert!(
            documented != NOT_IN_DOCUMENT.contains(pattern),
            "{method} {pattern}: in the table, the document says otherwise"
        );
    }
}

#[test]
fn each_operation_is_matched_by_its_own_row_first() {
    for (method, pattern, _) in ROUTES.iter().filter(|(_, p, _)| !NOT_IN_DOCUMENT.contains(p)) {
        let path = example(pattern);
        let first = ROUTES.iter().find(|(m, p, _)| m == method && matches(p, &path));
        assert_eq!(first.map(|r| r.1), Some(*pattern), "{method} {path}");
    }
    // A literal is not taken for a parameter: `active` is the list of running sessions.
    let first = ROUTES
        .iter()
        .find(|(m, p, _)| *m == GET && matches(p, "/api/session/active"));
    assert_eq!(first.map(|r| (r.1, r.2)), Some(("/api/session/active", Read)));
}

#[test]
fn what_runs_or_changes_things_is_never_a_viewers() {
    for (method, pattern, class) in ROUTES {
        if *class == Read && *method != GET {
            assert_eq!(
                (*method, *pattern),
                (POST, "/api/session/*/view"),
                "a write a viewer may do"
            );
        }
    }
    // Terminals, shells, file writes and model work are an operator's at least.
    for (method, pattern) in [
        (GET, "/api/pty/*/connect"),
        (GET, "/api/experimental/persistent-pty/*/connect"),
        (POST, "/api/shell"),
        (POST, "/api/session/*/shell"),
        (POST, "/api/experimental/fs/write"),
        (POST, "/api/session/*/prompt"),
    ] {
        let c = ROUTES
            .iter()
            .find(|(m, p, _)| *m == method && *p == pattern)
            .map(|r| r.2);
        assert!(c >= Some(Operate), "{method} {pattern}: {c:?}");
    }
}

#[test]
fn what_asks_the_model_is_an_operators_route_of_the_table() {
    for (method, pattern) in ASKS_MODEL {
        let c = ROUTES.iter().find(|(m, p, _)| m == method && p == pattern).map(|r| r.2);
        assert_eq!(c, Some(Operate), "{method} {pattern}");
    }
}
