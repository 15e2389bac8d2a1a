use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

/// A layout in temporary folders, owned by whoever runs the test (chown to oneself needs no root).
fn layout(root: &Path) -> Layout {
    // SAFETY: getuid and getgid have no preconditions.
    let me = unsafe { (libc::getuid(), libc::getgid()) };
    Layout {
        dir: root.join("etc/opencode-gateway"),
        state: root.join("var/lib/opencode-gateway"),
        owner: me,
        run_as: "ocgw-project-user".into(),
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn writes_a_config_that_loads_with_owner_only_secrets_and_a_first_user() {
    let root = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let l = layout(root.path());
    let password = write(&l, project.path(), "web", false).unwrap();
    let config = l.dir.join("gateway.toml");
    let s = crate::config::load(&config).unwrap();
    assert_eq!(s.server.state_dir, l.state);
    assert!(s.tls.cert.starts_with(l.state.join("certs")), "{:?}", s.tls.cert);
    assert!(s.ssh.as_ref().unwrap().host_key.starts_with(l.state.join("certs")));
    assert_eq!(s.projects.len(), 1);
    assert_eq!(s.projects[0].name, "web");
    // The project runs as a user of its own, never as the secrets' owner.
    assert_eq!(s.projects[0].run_as.as_deref(), Some("ocgw-project-user"));
    // The first user's hash is in the users file, which the password verifies.
    let users = std::fs::read_to_string(l.dir.join(USERS_FILE)).unwrap();
    assert!(
        users.contains("name = \"dev\"") && !users.contains(&password),
        "{users}"
    );
    assert!(!std::fs::read_to_string(&config).unwrap().contains("argon2id"));
    assert_eq!(s.users.len(), 1);
    // The modes the package and the service rely on; check has nothing to warn about.
    assert_eq!(mode(&config), 0o640);
    assert_eq!(mode(&l.dir.join(USERS_FILE)), 0o600);
    assert_eq!(mode(&l.state), 0o711, "the project's user passes through to its folder");
    for key in ["certs/server.key", "certs/ca.key", "certs/ssh_host_ed25519_key"] {
        let p = l.state.join(key);
        assert_eq!(mode(&p), 0o600, "{key}");
        assert_eq!(std::fs::metadata(&p).unwrap().uid(), l.owner.0, "{key}");
    }
    assert_eq!(crate::cli::check::permission_warnings(&s), Vec::<String>::new());
    // No temporary file is left beside the config.
    let left: Vec<_> = std::fs::read_dir(&l.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn replaces_the_packaged_example_but_never_an_edited_config() {
    let root = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let l = layout(root.path());
    std::fs::create_dir_all(&l.dir).unwrap();
    let config = l.dir.join("gateway.toml");
    std::fs::write(&config, PACKAGED_EXAMPLE).unwrap();
    write(&l, project.path(), "web", true).unwrap();
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains("init --system") && written.contains("0.0.0.0:8443"),
        "{written}"
    );
    // Now the file is not the example: a second run refuses and leaves it as it was.
    let err = write(&l, project.path(), "api", false).unwrap_err().to_string();
    assert!(err.contains("not the packaged example"), "{err}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), written);
}

#[test]
fn refuses_a_project_folder_that_holds_the_gateway_files() {
    let root = tempfile::tempdir().unwrap();
    let l = layout(root.path());
    let err = write(&l, root.path(), "web", false).unwrap_err().to_string();
    assert!(err.contains("inside the project folder"), "{err}");
    assert!(!l.dir.join("gateway.toml").exists());
}

/// The packaged example is accepted as it stands and names nothing to serve.
#[test]
fn the_packaged_example_validates_and_serves_nothing() {
    let s = crate::config::parse(PACKAGED_EXAMPLE, Path::new("/etc/opencode-gateway/gateway.toml")).unwrap();
    assert!(s.projects.is_empty() && s.project_sets.is_empty() && s.users.is_empty());
    assert_eq!(s.server.state_dir, Path::new(STATE_DIR));
    assert!(crate::cli::serve::nothing_to_serve(&s).is_some());
}
