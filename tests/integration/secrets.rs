//! The gateway's own secrets (config with password hashes, TLS, CA and SSH keys, state) never
//! live where a project's clients can read them: configs that put them there are refused, `init`
//! writes them outside the project, and the dev CA can only vouch for the gateway's own names.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::gateway::{BIN, hash};
use crate::common::process::output_within;

/// The CLI with `args`, to its end: 60 s at most (a `serve` that should refuse its config and
/// starts serving instead is killed, and the test fails with what it printed).
fn run(args: &[&str], cwd: &Path, env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(&mut cmd, None, Duration::from_secs(60))
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

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every file under `dir`, relative.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(
                files(&p)
                    .into_iter()
                    .map(|f| format!("{}/{f}", e.file_name().to_string_lossy())),
            );
        } else {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

/// `init` run in `project` with HOME and the XDG folders in `root`: what it printed.
pub fn init_in(root: &Path, project: &Path) -> String {
    let out = run(
        &["init"],
        project,
        &[
            ("HOME", &root.join("home")),
            ("XDG_CONFIG_HOME", &root.join("xdg-config")),
            ("XDG_STATE_HOME", &root.join("xdg-state")),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

#[test]
fn init_in_a_project_folder_writes_config_keys_and_state_outside_it_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let project = root.join("webapp");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "# webapp\n").unwrap();
    let shown = init_in(&root, &project);
    assert_eq!(files(&project), ["README.md"], "init wrote nothing into the project");
    let gw = root.join("xdg-config/opencode-gateway");
    let state = root.join("xdg-state/opencode-gateway");
    let cfg = gw.join("gateway.toml");
    for needle in [
        format!("config  {}", cfg.display()),
        format!("keys    {}", gw.join("certs").display()),
        format!("state   {}", state.display()),
    ] {
        assert!(shown.contains(&needle), "init says where: {needle:?} in\n{shown}");
    }
    assert_eq!(
        files(&gw),
        [
            "certs/ca.crt",
            "certs/ca.key",
            "certs/server.crt",
            "certs/server.key",
            "certs/ssh_host_ed25519_key",
            "certs/ssh_host_ed25519_key.pub",
            "gateway.toml"
        ]
    );
    assert_eq!(mode(&cfg), 0o600, "the config holds password hashes");
    for key in ["ca.key", "server.key", "ssh_host_ed25519_key"] {
        assert_eq!(mode(&gw.join("certs").join(key)), 0o600, "{key}");
    }
    for d in [&gw, &gw.join("certs"), &state] {
        assert_eq!(mode(d), 0o700, "{}", d.display());
    }
    assert!(
        std::fs::read_to_string(&cfg)
            .unwrap()
            .contains(&format!("directory = \"{}\"", project.display()))
    );
    let check = run(&["check", "-c", cfg.to_str().unwrap()], &root, &[]);
    assert!(check.status.success(), "{}", text(&check));
    assert!(!text(&check).contains("warning"), "{}", text(&check));
    // After init, commands find its config without -c (issue 22); the variable overrides.
    let xdg = [
        ("HOME", root.join("home")),
        ("XDG_CONFIG_HOME", root.join("xdg-config")),
        ("XDG_STATE_HOME", root.join("xdg-state")),
    ];
    let xdg: Vec<(&str, &Path)> = xdg.iter().map(|(k, v)| (*k, v.as_path())).collect();
    let found = run(&["check"], &project, &xdg);
    assert!(found.status.success(), "{}", text(&found));
    assert!(
        text(&found).starts_with(&format!("{}: OK", cfg.display())),
        "{}",
        text(&found)
    );
    let missing = root.join("nowhere.toml");
    let mut with_env = xdg.clone();
    with_env.push(("OPENCODE_GATEWAY_CONFIG", missing.as_path()));
    let refused = run(&["check"], &project, &with_env);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("nowhere.toml"),
        "the variable wins: {}",
        text(&refused)
    );

    // A second user is refused while the project runs as the gateway's own OS user (it could
    // read the gateway's keys through the project), naming the fix; the config is untouched.
    let before = std::fs::read_to_string(&cfg).unwrap();
    let second = output_within(
        Command::new(BIN).args(["user", "add", "bob", "-c", cfg.to_str().unwrap()]),
        Some(b"bob-password-1\n"),
        Duration::from_secs(60),
    );
    assert!(!second.status.success(), "{}", text(&second));
    assert!(
        text(&second).contains("project webapp.run_as") && text(&second).contains("allow_projects_as_gateway_user"),
        "{}",
        text(&second)
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), before);
    std::fs::write(
        &cfg,
        before.replacen("[server]\n", "[server]\nallow_projects_as_gateway_user = true\n", 1),
    )
    .unwrap();

    // Edits by `user` leave the config owner-only, even one an editor made 0644.
    chmod(&cfg, 0o644);
    let added = output_within(
        Command::new(BIN).args(["user", "add", "bob", "-c", cfg.to_str().unwrap()]),
        Some(b"bob-password-1\n"),
        Duration::from_secs(60),
    );
    assert!(added.status.success(), "{}", text(&added));
    assert_eq!(mode(&cfg), 0o600, "user add rewrote the config 0600");
    let removed = run(&["user", "remove", "bob", "-c", cfg.to_str().unwrap()], &root, &[]);
    assert!(removed.status.success(), "{}", text(&removed));
    assert_eq!(mode(&cfg), 0o600);

    // `check` warns (and still accepts) when the config or a key is readable by others.
    chmod(&cfg, 0o640);
    let key = gw.join("certs/server.key");
    chmod(&key, 0o644);
    let check = run(&["check", "-c", cfg.to_str().unwrap()], &root, &[]);
    let said = text(&check);
    assert!(check.status.success(), "a warning, not a refusal:\n{said}");
    for needle in [
        format!(
            "warning: {} (config file) is readable by group or others (mode 640); it holds password hashes. Fix: chmod 600 {}",
            cfg.display(),
            cfg.display()
        ),
        format!(
            "warning: {} (tls.key) is readable by group or others (mode 644); it is a secret. Fix: chmod 600 {}",
            key.display(),
            key.display()
        ),
    ] {
        assert!(said.contains(&needle), "missing {needle:?} in\n{said}");
    }
    assert!(!said.contains("ca.key"), "the CA key is still 0600:\n{said}");

    // A second init does not overwrite, and --dir inside the project is refused before writing.
    let again = run(
        &["init"],
        &project,
        &[
            ("HOME", &root.join("home")),
            ("XDG_CONFIG_HOME", &root.join("xdg-config")),
            ("XDG_STATE_HOME", &root.join("xdg-state")),
        ],
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again).contains("already exists"), "{}", text(&again));
    let inside = run(&["init", "--dir", "gw"], &project, &[]);
    assert_eq!(inside.status.code(), Some(1));
    assert!(
        text(&inside).contains(&format!(
            "would go to {}, inside the project folder {}",
            project.join("gw").display(),
            project.display()
        )) && text(&inside).contains("Fix: pass --dir <a folder outside the project>"),
        "{}",
        text(&inside)
    );
    assert_eq!(files(&project), ["README.md"]);
}

fn openssl(args: &[&str], cwd: &Path) -> Output {
    Command::new("openssl")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("openssl is installed (scripts/test.sh installs it)")
}

#[test]
fn a_certificate_the_dev_ca_signs_for_another_domain_fails_verification_in_openssl() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = run(&["cert", "dev", "--out", "c", "-c", "/nonexistent.toml"], d, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let ca = openssl(&["x509", "-in", "c/ca.crt", "-noout", "-text"], d);
    let ca = String::from_utf8_lossy(&ca.stdout);
    assert!(ca.contains("X509v3 Name Constraints: critical"), "{ca}");
    // DNS names only: OpenCode's CLI (Bun's TLS) refuses a CA with an IP-address constraint.
    let constraints = ca.split("X509v3 Name Constraints").nth(1).unwrap_or("");
    let constraints = constraints.split("X509v3 Subject Key Identifier").next().unwrap_or("");
    assert!(
        constraints.contains("DNS:localhost") && !constraints.contains("IP:"),
        "{ca}"
    );
    // The gateway's own certificate verifies, for its names.
    for (flag, name) in [
        ("-verify_hostname", "localhost"),
        ("-verify_hostname", "demo.gw.localhost"),
        ("-verify_ip", "127.0.0.1"),
        ("-verify_ip", "::1"),
    ] {
        let ok = openssl(&["verify", "-CAfile", "c/ca.crt", flag, name, "c/server.crt"], d);
        assert!(ok.status.success(), "{name}: {}", text(&ok));
    }
    // Someone with ca.key signs a certificate for evil.example: refused for the constraint.
    let made = openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "evil.key",
            "-subj",
            "/CN=evil.example",
            "-addext",
            "subjectAltName=DNS:evil.example",
            "-CA",
            "c/ca.crt",
            "-CAkey",
            "c/ca.key",
            "-days",
            "1",
            "-out",
            "evil.crt",
        ],
        d,
    );
    assert!(made.status.success(), "{}", text(&made));
    let refused = openssl(&["verify", "-CAfile", "c/ca.crt", "evil.crt"], d);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("permitted subtree violation"),
        "refused for the name constraint, not another reason:\n{}",
        text(&refused)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_viewer_cannot_read_any_gateway_secret_through_opencodes_file_api_after_init() {
    use crate::common::client::{Https, basic};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let project = root.join("webapp");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "# webapp readme marker\n").unwrap();
    init_in(&root, &project);
    let gw = root.join("xdg-config/opencode-gateway");
    let cfg = gw.join("gateway.toml");
    // The config init wrote, on ephemeral ports, with the pinned OpenCode and a viewer (who, with
    // the project run as the gateway's own OS user, needs the flag that says every user may).
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("listen = \"127.0.0.1:8443\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:9090\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:2222\"", "listen = \"127.0.0.1:0\"")
        .replace(
            "[tls]",
            &format!(
                "opencode_bin = \"{}\"\nallow_projects_as_gateway_user = true\n\n[tls]",
                crate::common::opencode::opencode_bin().display()
            ),
        )
        .replace(
            "spawn = true ",
            "env = { OPENCODE_DISABLE_MODELS_FETCH = \"1\" }\nspawn = true ",
        );
    std::fs::write(
        &cfg,
        format!(
            "{text}\n[[user]]\nname = \"vera\"\npassword_hash = \"{}\"\nprojects = [\"webapp\"]\nrole = \"viewer\"\n",
            hash("vera-password-1")
        ),
    )
    .unwrap();
    // The shared fixture: SIGTERM on drop, so it stops the OpenCode server it spawned.
    let crate::common::gateway::Launched { child, https, log, .. } =
        crate::common::gateway::serve_in(&project, &cfg, &[]);
    let c = Https::new(https, &gw.join("certs/ca.crt"));
    let vera = basic("vera", "vera-password-1");
    // The file API works for the viewer: the project's own file is served.
    let readme = c
        .get(
            &format!(
                "/p/webapp/file/content?path={}",
                crate::common::client::encode("README.md")
            ),
            Some(&vera),
        )
        .await;
    assert_eq!(readme.status, 200, "{}\n{}", readme.body, log.lock().unwrap());
    assert!(readme.body.contains("webapp readme marker"), "{}", readme.body);
    // Every secret, by the names the old layout used, by absolute path and by `..` from the project.
    let secrets = [
        cfg.clone(),
        gw.join("certs/ca.key"),
        gw.join("certs/server.key"),
        gw.join("certs/ssh_host_ed25519_key"),
    ];
    let mut names: Vec<String> = [
        "gateway.toml",
        "certs/ca.key",
        "certs/server.key",
        "certs/ssh_host_ed25519_key",
        "state",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for s in &secrets {
        names.push(s.display().to_string());
        names.push(format!("../{}", s.strip_prefix(&root).unwrap().display()));
    }
    let material: Vec<String> = secrets
        .iter()
        .map(|s| {
            let t = std::fs::read_to_string(s).unwrap();
            // A line of the key's base64 body, or the config's password hash.
            t.lines()
                .find(|l| l.len() > 40 && !l.starts_with("-----"))
                .unwrap()
                .to_string()
        })
        .collect();
    for name in &names {
        let r = c
            .get(
                &format!("/p/webapp/file/content?path={}", crate::common::client::encode(name)),
                Some(&vera),
            )
            .await;
        for (secret, m) in secrets.iter().zip(&material) {
            assert!(
                !r.body.contains(m.as_str()),
                "{name}: the viewer read {} ({}):\n{}",
                secret.display(),
                r.status,
                r.body
            );
        }
        for marker in ["PRIVATE KEY", "$argon2id$", "OPENSSH"] {
            assert!(!r.body.contains(marker), "{name}: {marker} in {}: {}", r.status, r.body);
        }
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
        if name.starts_with('/') || name.starts_with("../") {
            // A name that reaches a secret: the gateway refuses it, for that reason.
            assert_eq!(r.status, 403, "{name}: {}", r.body);
            assert_eq!(v["error"], "forbidden", "{name}: {}", r.body);
            assert!(
                v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("one of the gateway's own files")),
                "{name}: refused for another reason: {}",
                r.body
            );
        } else {
            // The old layout's names: init put nothing there, so OpenCode reads an empty file of
            // the project's (and no gateway file is in the project to be read).
            assert!(!project.join(name).exists(), "{name} is in the project");
            assert_eq!(r.status, 200, "{name}: {}", r.body);
            assert_eq!(v["content"], "", "{name}: {}", r.body);
        }
    }
    drop(child);
}
