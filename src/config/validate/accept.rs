//! A project's acceptance test (issue 41, item 3): `accept = "npm test"`, run by the gateway in
//! the project's folder (a spawned project's, a set's worktree) when a session goes idle with
//! changes, as the project's OS user, within `accept_timeout` (default 10m, at most 2h).

use std::time::Duration;

use super::Checker;
use super::checker::parse_duration;
use crate::config::file::RawProject;
use crate::config::settings::AcceptTest;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
const MAX_TIMEOUT: Duration = Duration::from_secs(7200);

pub(super) fn accept(c: &mut Checker<'_>, key: &str, p: &RawProject) -> Option<AcceptTest> {
    let command = p.accept.as_deref()?.trim();
    if command.is_empty() || command.len() > 1000 || command.contains('\0') {
        c.problem(
            format!("{key}.accept"),
            "the command is empty, over 1000 bytes or holds a NUL",
            "write the test command as you would type it: accept = \"npm test\"",
        );
        return None;
    }
    if !p.spawn {
        c.problem(
            format!("{key}.accept"),
            "the gateway runs an acceptance test in the folder of a server it spawns (here, or on a box)",
            "remove accept, or let the gateway spawn the project's server (spawn = true, directory or directories; box = … for one on a box)",
        );
        return None;
    }
    let timeout = match p.accept_timeout.as_deref() {
        None => DEFAULT_TIMEOUT,
        Some(t) => match parse_duration(t).filter(|d| !d.is_zero() && *d <= MAX_TIMEOUT) {
            Some(d) => d,
            None => {
                c.problem(
                    format!("{key}.accept_timeout"),
                    format!("{t:?} is not a duration up to 2h"),
                    "write accept_timeout = \"10m\"",
                );
                return None;
            }
        },
    };
    Some(AcceptTest {
        command: command.to_string(),
        timeout,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_acceptance_test_is_for_a_spawned_project_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        let web = dir.path().join("web");
        std::fs::create_dir_all(&web).unwrap();
        let base = "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n";
        let spawned = |extra: &str| {
            format!(
                "{base}[[project]]\nname = \"web\"\ndirectory = \"{}\"\nspawn = true\n{extra}\n",
                web.display()
            )
        };
        let s = crate::config::parse(&spawned("accept = \"npm test\"\naccept_timeout = \"5m\""), &path).unwrap();
        let test = s.projects[0].accept.clone().unwrap();
        assert_eq!((test.command.as_str(), test.timeout.as_secs()), ("npm test", 300));
        let refused = |text: String| crate::config::parse(&text, &path).unwrap_err().to_string();
        let e = refused(spawned("accept = \"npm test\"\naccept_timeout = \"3h\""));
        assert!(
            e.contains("project[0] (web).accept_timeout") && e.contains("up to 2h"),
            "{e}"
        );
        let e = refused(spawned("accept = \"  \""));
        assert!(e.contains("project[0] (web).accept"), "{e}");
        let external = format!(
            "{base}[[project]]\nname = \"web\"\nupstream = \"http://127.0.0.1:4096\"\nupstream_password_env = \"X\"\naccept = \"npm test\"\n"
        );
        let e = refused(external);
        assert!(
            e.contains("project[0] (web).accept") && e.contains("a server it spawns (here, or on a box)"),
            "{e}"
        );
    }
}
