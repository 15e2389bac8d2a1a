//! The config boundary and the command line: every fixture under tests/fixtures is checked (valid
//! ones load, invalid ones name their key and fix), and the CLI's commands do what they say.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::gateway::BIN;
use crate::common::process::output_within;

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    files
}

/// The CLI with `args`, to its end: 60 s at most (a `serve` that should refuse its config and
/// starts serving instead is killed, and the test fails with what it printed).
fn cli(args: &[&str], stdin: Option<&str>, cwd: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd).env_remove("OCGW_FIXTURE_UNSET_VAR");
    output_within(
        &mut cmd,
        Some(stdin.unwrap_or_default().as_bytes()),
        Duration::from_secs(60),
    )
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_valid_fixture_loads_and_check_accepts_it() {
    for file in fixtures("valid") {
        let settings = opencode_gateway::config::load(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(!settings.projects.is_empty());
        let out = cli(&["check", "-c", file.to_str().unwrap()], None, Path::new("/"));
        assert!(out.status.success(), "{}: {}", file.display(), text(&out));
        assert!(text(&out).contains("OK"));
    }
}

#[test]
fn every_invalid_fixture_is_refused_naming_its_key_and_fix() {
    for file in fixtures("invalid") {
        let source = std::fs::read_to_string(&file).unwrap();
        let expected: Vec<&str> = source.lines().filter_map(|l| l.strip_prefix("# expect: ")).collect();
        assert!(!expected.is_empty(), "{} has no '# expect:' line", file.display());
        let err = opencode_gateway::config::load(&file)
            .expect_err(&file.display().to_string())
            .to_string();
        let out = cli(&["check", "-c", file.to_str().unwrap()], None, Path::new("/"));
        assert_eq!(out.status.code(), Some(1), "{}", file.display());
        let shown = text(&out);
        for e in &expected {
            assert!(err.contains(e), "{}: expected {e:?} in:\n{err}", file.display());
            assert!(
                shown.contains(e),
                "{}: check did not say {e:?}:\n{shown}",
                file.display()
            );
        }
        assert!(
            shown.contains(file.to_str().unwrap()),
            "the message names the file:\n{shown}"
        );
        assert!(shown.contains("Fix:"), "{}: no fix in:\n{shown}", file.display());
    }
}

#[test]
fn serve_refuses_to_start_on_a_bad_config() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid/upstream-not-loopback.toml");
    let out = cli(&["serve", "-c", file.to_str().unwrap()], None, Path::new("/"));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("not a loopback address"), "{}", text(&out));
}

#[test]
fn check_prints_listeners_projects_routes_and_users() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/valid/full.toml");
    let out = text(&cli(&["check", "-c", file.to_str().unwrap()], None, Path::new("/")));
    for needle in [
        "https  0.0.0.0:8443",
        "admin  127.0.0.1:9090",
        "ssh    127.0.0.1:2222",
        "(the host key is made on first start)",
        "web  upstream http://127.0.0.1:4096 (password held by the gateway)",
        "api  spawned `opencode serve`",
        "https://devbox.example.test:8443/p/web/",
        "https://web.gw.example.test:8443/",
        "port 127.0.0.1:8444",
        "alice  api as viewer, web as operator; password, 1 ssh key(s)",
        "phone  app-* as approver, web as approver; 1 ssh key(s)",
        "carol  web as viewer; single sign-on as carol@example.com",
        "single sign-on: https://accounts.example.com as client opencode-gateway (users matched by verified email",
        "app-<folder>  project set: one spawned server per folder",
        "project/wt-* (read every 1 s; now 0 project(s))",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
    }
    assert!(
        !out.contains("fixture-upstream-password") && !out.contains("sk-test"),
        "no secret is printed"
    );
}

#[test]
fn hash_password_reads_stdin_and_prints_a_verifiable_argon2id_hash() {
    let out = cli(&["hash-password"], Some("correct horse battery\n"), Path::new("/"));
    assert!(out.status.success(), "{}", text(&out));
    let phc = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
    let hash = argon2::PasswordHash::new(&phc).unwrap();
    use argon2::PasswordVerifier;
    assert!(
        argon2::Argon2::default()
            .verify_password(b"correct horse battery", &hash)
            .is_ok()
    );
    let wrong = argon2::Argon2::default().verify_password(b"correct horse batter", &hash);
    assert!(
        matches!(wrong, Err(argon2::password_hash::Error::PasswordInvalid)),
        "refused as the wrong password: {wrong:?}"
    );
    let short = cli(&["hash-password"], Some("short\n"), Path::new("/"));
    assert_eq!(short.status.code(), Some(1));
    assert!(text(&short).contains("shorter than 8"));
}

const COMMENTED: &str = r#"# A config with comments that must survive edits.
[server]
listen = "127.0.0.1:8443" # the HTTPS port

[tls]
cert = "certs/server.crt"
key = "certs/server.key"
dev_ca = true

[[project]]
name = "web"
upstream = "http://127.0.0.1:4096"

# The owner.
[[user]]
name = "alice"
password_hash = "$argon2id$v=19$m=19456,t=2,p=1$hnXrCVeTu4NoWLdElfHJEw$N1rNl6VO+ZfhOWV+i+Mcc2VUFrcEx2wvp4FoZuXrJ3w"
projects = ["*"]
role = "admin"
"#;

#[test]
fn user_commands_edit_the_file_in_place_and_keep_its_comments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, COMMENTED).unwrap();
    let c = cfg.to_str().unwrap();
    let out = cli(
        &["user", "add", "bob", "--projects", "web", "--role", "viewer", "-c", c],
        Some("bob-password-1\n"),
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let after_add = std::fs::read_to_string(&cfg).unwrap();
    for kept in ["# A config with comments", "# the HTTPS port", "# The owner."] {
        assert!(after_add.contains(kept), "lost {kept:?}:\n{after_add}");
    }
    assert!(!after_add.contains("bob-password-1"), "only the hash is written");
    let settings = opencode_gateway::config::load(&cfg).unwrap();
    let bob = settings.users.iter().find(|u| u.name == "bob").unwrap();
    assert_eq!(bob.grants.role_in("web"), Some(opencode_gateway::config::Role::Viewer));
    let list = text(&cli(&["user", "list", "-c", c], None, dir.path()));
    assert!(
        list.contains("bob  web as viewer; password") && list.contains("alice  all projects as admin"),
        "{list}"
    );
    let dup = cli(&["user", "add", "bob", "-c", c], Some("another-password\n"), dir.path());
    assert_eq!(dup.status.code(), Some(1));
    assert!(text(&dup).contains("already exists"));

    let out = cli(
        &["user", "passwd", "bob", "-c", c],
        Some("bob-password-2\n"),
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let after_passwd = std::fs::read_to_string(&cfg).unwrap();
    assert_ne!(after_add, after_passwd);
    assert!(after_passwd.contains("# The owner."));

    let out = cli(&["user", "remove", "bob", "-c", c], None, dir.path());
    assert!(out.status.success(), "{}", text(&out));
    let after_remove = std::fs::read_to_string(&cfg).unwrap();
    assert!(!after_remove.contains("bob") && after_remove.contains("# The owner."));
    let missing = cli(&["user", "remove", "bob", "-c", c], None, dir.path());
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing).contains("no user named \"bob\""));
}

#[test]
fn init_writes_a_config_check_accepts_with_certs_and_a_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("My Project");
    std::fs::create_dir(&project).unwrap();
    let out = cli(
        &["init", "--dir", "gw", "--project-dir", project.to_str().unwrap()],
        None,
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    let password = shown
        .lines()
        .find_map(|l| l.strip_prefix("user \"dev\", password: "))
        .unwrap()
        .trim()
        .to_string();
    assert!(
        shown.contains(&format!(
            "opencode attach https://127.0.0.1:8443/p/my-project -u dev -p '{password}'"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("known_hosts: [127.0.0.1]:2222 ssh-ed25519 AAAA"),
        "{shown}"
    );
    assert!(shown.contains("fingerprint SHA256:"), "{shown}");
    let cfg = dir.path().join("gw/gateway.toml");
    let check = cli(&["check", "-c", cfg.to_str().unwrap()], None, dir.path());
    assert!(check.status.success(), "{}", text(&check));
    assert!(text(&check).contains("my-project  spawned"));
    assert!(
        text(&check).contains("known_hosts: [127.0.0.1]:2222 ssh-ed25519"),
        "check prints the host key too"
    );
    // The line alone, as OpenSSH reads it (issue 22: the grep of `check` needed editing).
    let line = cli(
        &["check", "--known-hosts", "-c", cfg.to_str().unwrap()],
        None,
        dir.path(),
    );
    assert!(line.status.success(), "{}", text(&line));
    let line = String::from_utf8(line.stdout).unwrap();
    assert!(
        line.starts_with("[127.0.0.1]:2222 ssh-ed25519 AAAA") && line.lines().count() == 1,
        "{line}"
    );
    let kh = dir.path().join("known_hosts");
    std::fs::write(&kh, &line).unwrap();
    let found = std::process::Command::new("ssh-keygen")
        .args(["-F", "[127.0.0.1]:2222", "-f"])
        .arg(&kh)
        .output()
        .unwrap();
    assert!(found.status.success(), "ssh-keygen does not read it: {line}");
    let mode = std::fs::metadata(dir.path().join("gw/certs/ssh_host_ed25519_key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!std::fs::read_to_string(&cfg).unwrap().contains(&password));
    let mode = std::fs::metadata(dir.path().join("gw/certs/server.key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let again = cli(
        &["init", "--dir", "gw", "--project-dir", project.to_str().unwrap()],
        None,
        dir.path(),
    );
    assert_eq!(again.status.code(), Some(1), "init never overwrites a config");
}

#[test]
fn cert_dev_makes_a_ca_and_a_certificate_for_the_names_clients_use() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(
        &["cert", "dev", "--out", "c", "-c", "/nonexistent.toml"],
        None,
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("*.gw.localhost"));
    for f in ["ca.crt", "ca.key", "server.crt", "server.key"] {
        assert!(dir.path().join("c").join(f).exists(), "{f}");
    }
    // The gateway loads the pair.
    let ca = dir.path().join("c/ca.crt");
    let settings = opencode_gateway::config::Tls {
        cert: dir.path().join("c/server.crt"),
        key: dir.path().join("c/server.key"),
        dev_ca: false,
        dev_names: Vec::new(),
        acme: None,
    };
    if let Err(e) = opencode_gateway::front::listen::tls::server_config(&settings) {
        panic!("the gateway refuses its dev certificate: {e:#}");
    }
    // The certificate chain verifies, with the CA as the only root, for the names clients use,
    // and not for another name (refused for the name, not another reason).
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(&ca).unwrap()).unwrap();
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap();
    let leaf = CertificateDer::from_pem_file(dir.path().join("c/server.crt")).unwrap();
    let verify = |name: &str| {
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier.verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
    };
    for name in ["localhost", "demo.gw.localhost", "127.0.0.1", "::1"] {
        if let Err(e) = verify(name) {
            panic!("{name}: {e:?}");
        }
    }
    let refused = verify("evil.example");
    assert!(
        matches!(
            refused,
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. }
            ))
        ),
        "evil.example: {refused:?}"
    );
}

#[test]
fn check_warns_when_projects_of_different_users_share_an_os_user() {
    use crate::common::gateway::{TestUser, base_config, users_toml};
    let dir = tempfile::tempdir().unwrap();
    let mut projects = String::new();
    for (name, run_as) in [("a", ""), ("b", ""), ("c", "ocgw-c"), ("d", "ocgw-c"), ("e", "ocgw-e")] {
        std::fs::create_dir(dir.path().join(name)).unwrap();
        let run_as = if run_as.is_empty() {
            String::new()
        } else {
            format!("run_as = \"{run_as}\"\n")
        };
        projects += &format!("[[project]]\nname = \"{name}\"\ndirectory = \"{name}\"\nspawn = true\n{run_as}\n");
    }
    let user = |name, projects| TestUser {
        name,
        password: "pw-for-check-1",
        projects,
        role: "operator",
    };
    // a and b: the gateway's own user, different people. c and d: one run_as, the same people.
    // e: its own user.
    let config = base_config(&format!(
        "{projects}{}",
        users_toml(&[
            user("ann", "[\"a\", \"c\", \"d\"]"),
            user("ben", "[\"b\", \"c\", \"d\", \"e\"]"),
        ])
    ))
    .replace(
        "state_dir = \"state\"\n",
        "state_dir = \"state\"\nallow_projects_as_gateway_user = true\n",
    );
    let file = dir.path().join("gateway.toml");
    crate::common::write_secret(&file, &config);
    let out = cli(&["check", "-c", file.to_str().unwrap()], None, dir.path());
    assert!(out.status.success(), "{}", text(&out));
    let warnings: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("warning: projects"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        warnings,
        [
            "warning: projects a and b both run as the gateway's own OS user (no run_as) but are granted to different users (a: ann; b: ben); anyone who can use one can read and write the other's files through it. Fix: give each project its own run_as user, or grant both to the same users"
        ],
        "{}",
        text(&out)
    );
    // Said plainly: what allowing the gateway's own user means (round five, item 2).
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("warning: a, b run as the gateway's own OS user (")
            && said.contains("can read the gateway's keys, users file and state database")
            && said.contains("allow_projects_as_gateway_user lets all 2 users do so"),
        "{said}"
    );
    // Without that line, the same config is refused, naming the projects' run_as.
    let strict = config.replace("allow_projects_as_gateway_user = true\n", "");
    crate::common::write_secret(&file, &strict);
    let out = cli(&["check", "-c", file.to_str().unwrap()], None, dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    for key in ["project a.run_as", "project b.run_as"] {
        assert!(text(&out).contains(key), "{key}: {}", text(&out));
    }
    assert!(
        !text(&out).contains("project c.run_as"),
        "c runs as its own user: {}",
        text(&out)
    );
}
