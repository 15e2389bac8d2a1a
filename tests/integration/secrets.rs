//! The gateway's own secrets (config with password hashes, TLS, CA and SSH keys, state) never
//! live where a project's clients can read them: configs that put them there are refused, `init`
//! writes them outside the project, and the dev CA can only vouch for the gateway's own names.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::gateway::{BIN, hash};

fn run(args: &[&str], cwd: &Path, env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A config in `gw/` whose project is `project/`; `server`, `tls` and `ssh` lines are the caller's.
fn config(root: &Path, tls_and_state: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(root.join("gw")).unwrap();
    std::fs::create_dir_all(root.join("project")).unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{tls_and_state}\n[[project]]\nname = \"web\"\nupstream = \"http://127.0.0.1:9\"\ndirectory = \"../project\"\n\n[[user]]\nname = \"alice\"\npassword_hash = \"{}\"\nprojects = [\"*\"]\nrole = \"operator\"\n",
        hash("alice-password-1")
    );
    let path = root.join("gw/gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_and_serve_refuse_a_key_state_dir_or_config_inside_a_project_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let project = root.join("project");
    let cases: Vec<(&str, String, String, &str)> = vec![
        (
            "the TLS key",
            "state_dir = \"../state\"\n[tls]\ncert = \"../project/certs/server.crt\"\nkey = \"../project/certs/server.key\"\ndev_ca = true\n".into(),
            format!("tls.key: {}", project.join("certs/server.key").display()),
            "point tls.key at a path outside it",
        ),
        (
            "the SSH host key",
            "state_dir = \"../state\"\n[tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n[ssh]\nlisten = \"127.0.0.1:0\"\nhost_key = \"../project/.ssh/host_key\"\n".into(),
            format!("ssh.host_key: {}", project.join(".ssh/host_key").display()),
            "point ssh.host_key at a path outside it",
        ),
        (
            "state_dir",
            "state_dir = \"../project/.gateway-state\"\n[tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n".into(),
            format!("server.state_dir: {}", project.join(".gateway-state").display()),
            "point server.state_dir at a path outside it",
        ),
        (
            "a state_dir holding the project",
            "state_dir = \"..\"\n[tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n".into(),
            format!(
                "server.state_dir: the directory of project \"web\" ({}) is inside {}",
                project.display(),
                root.display()
            ),
            "point server.state_dir at a folder of its own",
        ),
    ];
    for (what, tls, named, fix) in cases {
        let cfg = config(&root, &tls);
        let c = cfg.to_str().unwrap();
        for verb in ["check", "serve"] {
            let out = run(&[verb, "-c", c], &root, &[]);
            let shown = text(&out);
            assert_eq!(out.status.code(), Some(1), "{what}: {verb} must refuse:\n{shown}");
            assert!(shown.contains(&named), "{what}: {verb} names {named:?}:\n{shown}");
            assert!(
                shown.contains(&format!("project \"web\" ({})", project.display())),
                "{what}: {verb} names the project:\n{shown}"
            );
            assert!(shown.contains(fix), "{what}: {verb} gives the fix {fix:?}:\n{shown}");
            assert!(!shown.contains("gateway ready"), "{what}: {verb} served nothing");
        }
        assert!(
            !project.join("certs").exists(),
            "{what}: no key was made in the project"
        );
    }
    // The config file itself inside the project (the old `init` layout).
    let inside = project.join("gateway.toml");
    std::fs::write(
        &inside,
        std::fs::read_to_string(config(&root, "state_dir = \"../state\"\n[tls]\ncert = \"../gw/certs/server.crt\"\nkey = \"../gw/certs/server.key\"\ndev_ca = true\n"))
            .unwrap()
            .replace("directory = \"../project\"", "directory = \".\"")
            .replace("\"../state\"", "\"../gw/state\""),
    )
    .unwrap();
    for verb in ["check", "serve"] {
        let out = run(&[verb, "-c", inside.to_str().unwrap()], &root, &[]);
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(1), "{shown}");
        assert!(
            shown.contains(&format!(
                "config file: {} is inside the directory of project \"web\"",
                inside.display()
            )),
            "{shown}"
        );
        assert!(shown.contains("move the config file out of it"), "{shown}");
    }
}
