use super::*;

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

/// A public key line of its own for each `seed`.
fn key(seed: u8) -> String {
    let k = russh::keys::PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&[seed; 32]));
    k.public_key().to_openssh().unwrap()
}

fn lines(revoked: &[Revoked]) -> Vec<(usize, String)> {
    revoked.iter().map(|r| (r.line, r.key.to_openssh().unwrap())).collect()
}

#[test]
fn a_negated_pattern_on_the_boxs_line_is_refused_with_its_line() {
    let text = format!("# the team's hosts\nother.lan {KEY}\n[127.0.0.1]:2222,!gpu1.lan {KEY}\n");
    let (problem, fix) = read(&text, "/etc/kh", "127.0.0.1", 2222).expect_err("refused");
    assert!(
        problem.starts_with("/etc/kh line 3: the entry for [127.0.0.1]:2222 has the negated pattern !gpu1.lan"),
        "{problem}"
    );
    assert!(fix.contains("write line 3 without `!` patterns"), "{fix}");
    // Negating the box itself, on port 22 (its bare name).
    let text = format!("*.lan,!gpu1.lan {KEY}\n");
    let (problem, _) = read(&text, "kh", "gpu1.lan", 22).expect_err("refused");
    assert!(
        problem.starts_with("kh line 1: the entry for gpu1.lan has the negated pattern !gpu1.lan"),
        "{problem}"
    );
    // A hashed name for the box (`ssh-keygen -H` of "[127.0.0.1]:2222") beside a negation.
    let hashed = "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|zKYaAqmSav3Qxr2sffNqWFIcbe4=";
    assert!(names(hashed, "[127.0.0.1]:2222") && !names(hashed, "[127.0.0.1]:2223"));
    let text = format!("{hashed},!10.0.0.9 {KEY}\n");
    assert!(read(&text, "kh", "127.0.0.1", 2222).is_err());
}

#[test]
fn lines_for_other_hosts_and_plain_lines_for_the_box_are_read() {
    let text = format!("!other.lan,third.lan {KEY}\n[127.0.0.1]:2222 {KEY}\n# !gpu1 [127.0.0.1]:2222\n");
    assert_eq!(read(&text, "kh", "127.0.0.1", 2222), Ok(Vec::new()));
    // The same name on another port is another host.
    let text = format!("[127.0.0.1]:2223,!x {KEY}\n");
    assert_eq!(read(&text, "kh", "127.0.0.1", 2222), Ok(Vec::new()));
}

/// Every `@revoked` line's key comes back with its line, whatever hosts the line names: the
/// box's, a wildcard, another host's (stricter than OpenSSH: a revoked key is trusted nowhere).
#[test]
fn revoked_keys_come_back_whatever_hosts_their_line_names() {
    let (k1, k2, k3) = (key(1), key(2), key(3));
    let text = format!(
        "[127.0.0.1]:2222 {k1}\n@revoked [127.0.0.1]:2222 {k1}\n  @revoked * {k2} old key\n@revoked other.lan {k3}\n"
    );
    let revoked = read(&text, "kh", "127.0.0.1", 2222).expect("read");
    assert_eq!(lines(&revoked), [(2, k1), (3, k2), (4, k3)]);
}

#[test]
fn a_revoked_line_whose_key_cannot_be_read_refuses_the_file_naming_it() {
    for bad in [
        "@revoked [127.0.0.1]:2222",
        "@revoked * ssh-ed25519 AAAAnot-base64",
        "@revoked * ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    ] {
        let text = format!("[127.0.0.1]:2222 {KEY}\n{bad}\n");
        let (problem, fix) = read(&text, "kh", "127.0.0.1", 2222).expect_err(bad);
        assert!(
            problem.starts_with("kh line 2: a @revoked line whose key cannot be read")
                && problem.ends_with("which key it revokes cannot be told"),
            "{bad}: {problem}"
        );
        assert!(fix.starts_with("correct line 2"), "{fix}");
    }
}

/// A `@cert-authority` line that applies to the box (by name, glob or hash) refuses the file,
/// naming the line and saying why; one for other hosts, or negating the box, is left alone.
#[test]
fn a_cert_authority_line_for_the_box_is_refused_and_one_for_other_hosts_is_not() {
    let hashed = "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|zKYaAqmSav3Qxr2sffNqWFIcbe4=";
    for patterns in [
        "[127.0.0.1]:2222",
        "*",
        "[127.0.0.1]:*",
        "[127.0.0.?]:2222",
        "other.lan,[127.0.0.1]:2222",
        hashed,
    ] {
        let text = format!("[127.0.0.1]:2222 {KEY}\n@cert-authority {patterns} {KEY}\n");
        let (problem, fix) = read(&text, "kh", "127.0.0.1", 2222).expect_err(patterns);
        assert_eq!(
            problem,
            "kh line 2: a @cert-authority line for [127.0.0.1]:2222; the gateway accepts no host certificates, and the line's key is the authority's, not the box's",
            "{patterns}"
        );
        assert!(
            fix.starts_with("pin the box's own key: host_key, or a plain line for [127.0.0.1]:2222"),
            "{fix}"
        );
    }
    let (problem, _) = read(&format!("@cert-authority *.LAN {KEY}\n"), "kh", "gpu1.lan", 22).expect_err("a glob");
    assert!(
        problem.contains("line 1: a @cert-authority line for gpu1.lan"),
        "{problem}"
    );
    for patterns in [
        "other.lan",
        "*.lan",
        "[127.0.0.1]:2223",
        "*,![127.0.0.1]:2222",
        "[127.0.0.1]:22*,![127.0.0.1]:2222",
    ] {
        let text = format!("@cert-authority {patterns} {KEY}\n[127.0.0.1]:2222 {KEY}\n");
        assert_eq!(read(&text, "kh", "127.0.0.1", 2222), Ok(Vec::new()), "{patterns}");
    }
}

#[test]
fn an_unknown_marker_is_refused_naming_it() {
    let text = format!("[127.0.0.1]:2222 {KEY}\n@trusted [127.0.0.1]:2222 {KEY}\n");
    let (problem, _) = read(&text, "kh", "127.0.0.1", 2222).expect_err("refused");
    assert_eq!(
        problem,
        "kh line 2: the marker @trusted is not one OpenSSH defines (@revoked, @cert-authority)"
    );
}

/// The gateway's client key for the box, written (0600) in `dir`.
fn client_key(dir: &std::path::Path) -> std::path::PathBuf {
    let client = russh::keys::PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&[7; 32]));
    let key = dir.join("id_ed25519");
    let pem = client.to_openssh(russh::keys::ssh_key::LineEnding::LF).unwrap();
    crate::support::files::write_private(&key, &pem).unwrap();
    key
}

/// The config a box pinned through a `known_hosts` file holding `text` loads to, or its error.
fn load_with(text: &str) -> Result<crate::config::Settings, String> {
    let dir = tempfile::tempdir().unwrap();
    let key = client_key(dir.path());
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(&known_hosts, text).unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n\
         [[box]]\nname = \"gpu1\"\nssh = \"dev@127.0.0.1:2222\"\nkey = \"{}\"\nknown_hosts = \"{}\"\n",
        key.display(),
        known_hosts.display()
    );
    crate::config::parse(&config, &dir.path().join("gateway.toml"))
        .map_err(|e| e.to_string().replace(&known_hosts.display().to_string(), "KH"))
}

/// The error loading `text` gives; loaded, fails with the box as it was read.
fn refused(text: &str) -> String {
    match load_with(text) {
        Err(e) => e,
        Ok(s) => panic!("loaded: {:?}", s.boxes),
    }
}

/// Through `check`'s validation: the config is refused, naming the box's key, the file,
/// the line and the fix (russh alone would have pinned the line's key).
#[test]
fn a_config_whose_known_hosts_negates_the_box_is_refused() {
    let err = refused(&format!("# hosts\n[127.0.0.1]:2222,!gpu1.lan {KEY}\n"));
    assert!(
        err.contains(
            "box[0] (gpu1).known_hosts: KH line 2: the entry for [127.0.0.1]:2222 has the negated pattern !gpu1.lan"
        ),
        "{err}"
    );
    assert!(err.contains("Fix: write line 2 without `!` patterns"), "{err}");
}

/// A key a `@revoked` line names is not pinned, even where a plain line for the box lists it
/// (russh alone reads the plain line and skips the marker: it would pin it); the box's other
/// key is. Every key revoked: the config loads with none pinned, and `check` says so.
#[test]
fn a_revoked_key_is_never_pinned_even_where_a_plain_line_lists_it() {
    let (old, new) = (key(1), key(2));
    let settings = load_with(&format!(
        "[127.0.0.1]:2222 {old}\n[127.0.0.1]:2222 {new}\n@revoked * {old}\n"
    ))
    .expect("loads");
    let b = &settings.boxes[0];
    assert_eq!(b.host_keys, [new]);
    assert_eq!(b.revoked_host_keys, std::slice::from_ref(&old));
    assert!(super::super::boxes::warnings(&settings).is_empty());
    let settings = load_with(&format!("@revoked [127.0.0.1]:2222 {old}\n[127.0.0.1]:2222 {old}\n")).expect("loads");
    assert!(settings.boxes[0].host_keys.is_empty(), "{:?}", settings.boxes[0]);
    let warnings = super::super::boxes::warnings(&settings);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("box gpu1: its known_hosts file revokes every key it has for the box (@revoked), so the gateway refuses the box"),
        "{warnings:?}"
    );
}

#[test]
fn a_config_whose_known_hosts_has_a_cert_authority_for_the_box_is_refused() {
    let err = refused(&format!(
        "[127.0.0.1]:2222 {KEY}\n@cert-authority [127.0.0.1]:* {}\n",
        key(4)
    ));
    assert!(
        err.contains("box[0] (gpu1).known_hosts: KH line 2: a @cert-authority line for [127.0.0.1]:2222; the gateway accepts no host certificates"),
        "{err}"
    );
    // For other hosts only: read as before.
    let settings = load_with(&format!("@cert-authority *.corp {}\n[127.0.0.1]:2222 {KEY}\n", key(4))).expect("loads");
    assert_eq!(settings.boxes[0].host_keys, [KEY]);
}

/// The config a box pinned with `host_key = '''<text>'''` loads to, or its error.
fn load_host_key(text: &str) -> Result<crate::config::Settings, String> {
    let dir = tempfile::tempdir().unwrap();
    let key = client_key(dir.path());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n\
         [[box]]\nname = \"gpu1\"\nssh = \"dev@127.0.0.1:2222\"\nkey = \"{}\"\nhost_key = '''{text}'''\n",
        key.display(),
    );
    crate::config::parse(&config, &dir.path().join("gateway.toml")).map_err(|e| e.to_string())
}

/// `host_key` pasted as `ssh-keyscan` prints it (issue 38: "Base64 decoding error"): the host
/// field (`host` or `[host]:port`, another name of the box or a hashed one) is not the key and
/// is skipped; its `# host:port SSH-2.0-…` lines and blank ones are skipped; several key lines
/// pin several keys. The `.pub` file's form still reads.
#[test]
fn a_host_key_as_ssh_keyscan_prints_it_is_pinned() {
    let (k1, k2) = (key(1), key(2));
    for (text, want) in [
        (format!("[127.0.0.1]:2222 {k1}"), vec![k1.clone()]),
        (format!("gpu1.lan {k1}\n"), vec![k1.clone()]),
        (format!("{k1} root@gpu1"), vec![k1.clone()]),
        (
            format!(
                "\n# 127.0.0.1:2222 SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\n[127.0.0.1]:2222 {k1}\n[127.0.0.1]:2222 {k2}\n"
            ),
            vec![k1.clone(), k2.clone()],
        ),
        (
            format!("|1|AAECAwQFBgcICQoLDA0ODxAREhM=|zKYaAqmSav3Qxr2sffNqWFIcbe4= {k2}"),
            vec![k2.clone()],
        ),
    ] {
        let settings = load_host_key(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(settings.boxes[0].host_keys, want, "{text:?}");
    }
}

/// What is not a key line is refused with the reason: a known_hosts marker line (a `@revoked`
/// key pinned would trust the very key it revokes), no key at all, a key that does not read, a
/// type that is not the key's.
#[test]
fn a_host_key_that_is_no_key_line_is_refused_with_the_reason() {
    let k1 = key(1);
    for (text, reason) in [
        (format!("@revoked * {k1}"), "a known_hosts marker line (@revoked)"),
        (
            format!("@cert-authority * {k1}"),
            "a known_hosts marker line (@cert-authority)",
        ),
        ("# 127.0.0.1:2222 SSH-2.0-OpenSSH_9.6\n".to_string(), "no key line"),
        (
            "gpu1.lan ssh-ed25519 AAAAnot-base64".to_string(),
            "its key does not read",
        ),
        (
            format!("gpu1.lan {}", k1.replace("ssh-ed25519", "ssh-rsa")),
            "the line says ssh-rsa but the key is ssh-ed25519",
        ),
        ("gpu1.lan".to_string(), "not an OpenSSH public key line"),
    ] {
        let err = load_host_key(&text).map(|s| format!("{:?}", s.boxes)).expect_err(&text);
        assert!(
            err.contains(&format!("box[0] (gpu1).host_key: {reason}")) && err.contains("ssh-keyscan -t ed25519"),
            "{text:?}: {err}"
        );
    }
}
proptest::proptest! {
    /// Any host field ssh-keyscan or a known_hosts file could put before the key (a name, an
    /// address, `[host]:port`, a list of them), and any comment after it: the key pinned is the
    /// line's key.
    #[test]
    fn any_host_field_and_comment_leave_the_key(
        seed in 1u8..=255,
        host in "[a-z0-9.-]{1,20}|\\[[0-9.]{7,15}\\]:[0-9]{1,5}|[a-z0-9.]{1,9},[0-9.]{7,15}",
        comment in "( [a-zA-Z0-9@. -]{0,20})?",
    ) {
        let k = key(seed);
        let keys = parse_host_key_setting(&format!("{host} {k}{comment}")).map_err(proptest::test_runner::TestCaseError::fail)?;
        proptest::prop_assert_eq!(keys.iter().map(|k| k.to_openssh().unwrap()).collect::<Vec<_>>(), vec![k]);
    }
}
