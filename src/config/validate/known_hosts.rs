//! What in a `known_hosts` file the SSH library's reader (russh's `known_host_keys_path`) would
//! read otherwise than OpenSSH, found before it reads the file: such a file is refused, never
//! half read. It takes a line when one of its host patterns is the box's name (or hashes to it)
//! and ignores everything else on it: a `@revoked` or `@cert-authority` marker, and a `!`
//! negation, which in OpenSSH means "not this host" (`gpu1,!gpu1` trusts nothing; russh would
//! trust its key).

use base64::Engine;

/// The first line of `text` that the reader would misread, as a problem and its fix.
pub(super) fn misread(text: &str, file: &str, host: &str, port: u16) -> Option<(String, String)> {
    if text.lines().any(|l| l.trim_start().starts_with('@')) {
        return Some((
            format!("{file} has @revoked or @cert-authority lines, which the gateway does not read"),
            "pin the box's key with host_key instead".into(),
        ));
    }
    let name = if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    };
    for (i, line) in text.lines().enumerate() {
        let Some(patterns) = line.split_whitespace().next().filter(|p| !p.starts_with('#')) else {
            continue;
        };
        let negated = patterns.split(',').find(|p| p.starts_with('!'));
        let names_the_box = patterns.split(',').any(|p| names(p.trim_start_matches('!'), &name));
        if let (Some(negated), true) = (negated, names_the_box) {
            return Some((
                format!(
                    "{file} line {}: the entry for {name} has the negated pattern {negated}, which the gateway's SSH library does not read (it would trust the line's key for {name} regardless)",
                    i + 1
                ),
                format!(
                    "write line {} without `!` patterns (a line of its own for the box, or none if it must not be trusted), or pin the box's key with host_key",
                    i + 1
                ),
            ));
        }
    }
    None
}

/// Is `pattern` the host `name`: the same name, or a hashed one (`|1|salt|hash`, HMAC-SHA1 of
/// the name as `ssh-keygen -H` writes it)?
fn names(pattern: &str, name: &str) -> bool {
    let Some(hashed) = pattern.strip_prefix("|1|") else {
        return pattern.eq_ignore_ascii_case(name);
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let Some((Ok(salt), Ok(hash))) = hashed.split_once('|').map(|(s, h)| (b64.decode(s), b64.decode(h))) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &salt);
    ring::hmac::verify(&key, name.as_bytes(), &hash).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    #[test]
    fn a_negated_pattern_on_the_boxs_line_is_refused_with_its_line() {
        let text = format!("# the team's hosts\nother.lan {KEY}\n[127.0.0.1]:2222,!gpu1.lan {KEY}\n");
        let (problem, fix) = misread(&text, "/etc/kh", "127.0.0.1", 2222).expect("refused");
        assert!(
            problem.starts_with("/etc/kh line 3: the entry for [127.0.0.1]:2222 has the negated pattern !gpu1.lan"),
            "{problem}"
        );
        assert!(fix.contains("write line 3 without `!` patterns"), "{fix}");
        // Negating the box itself, on port 22 (its bare name).
        let text = format!("*.lan,!gpu1.lan {KEY}\n");
        let (problem, _) = misread(&text, "kh", "gpu1.lan", 22).expect("refused");
        assert!(
            problem.starts_with("kh line 1: the entry for gpu1.lan has the negated pattern !gpu1.lan"),
            "{problem}"
        );
        // A hashed name for the box (`ssh-keygen -H` of "[127.0.0.1]:2222") beside a negation.
        let hashed = "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|zKYaAqmSav3Qxr2sffNqWFIcbe4=";
        assert!(names(hashed, "[127.0.0.1]:2222") && !names(hashed, "[127.0.0.1]:2223"));
        let text = format!("{hashed},!10.0.0.9 {KEY}\n");
        assert!(misread(&text, "kh", "127.0.0.1", 2222).is_some());
    }

    #[test]
    fn lines_for_other_hosts_and_plain_lines_for_the_box_are_read() {
        let text = format!("!other.lan,third.lan {KEY}\n[127.0.0.1]:2222 {KEY}\n# !gpu1 [127.0.0.1]:2222\n");
        assert_eq!(misread(&text, "kh", "127.0.0.1", 2222), None);
        // The same name on another port is another host.
        let text = format!("[127.0.0.1]:2223,!x {KEY}\n");
        assert_eq!(misread(&text, "kh", "127.0.0.1", 2222), None);
    }

    #[test]
    fn markers_are_refused_as_before() {
        let text = format!("@revoked [127.0.0.1]:2222 {KEY}\n");
        let (problem, _) = misread(&text, "kh", "127.0.0.1", 2222).expect("refused");
        assert!(problem.contains("@revoked or @cert-authority"), "{problem}");
    }

    /// Through `check`'s validation: the config is refused, naming the box's key, the file,
    /// the line and the fix (russh alone would have pinned the line's key).
    #[test]
    fn a_config_whose_known_hosts_negates_the_box_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let client = russh::keys::PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&[7; 32]));
        let key = dir.path().join("id_ed25519");
        let text = client.to_openssh(russh::keys::ssh_key::LineEnding::LF).unwrap();
        crate::support::files::write_private(&key, &text).unwrap();
        let known_hosts = dir.path().join("known_hosts");
        std::fs::write(&known_hosts, format!("# hosts\n[127.0.0.1]:2222,!gpu1.lan {KEY}\n")).unwrap();
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n\
             [[box]]\nname = \"gpu1\"\nssh = \"dev@127.0.0.1:2222\"\nkey = \"{}\"\nknown_hosts = \"{}\"\n",
            key.display(),
            known_hosts.display()
        );
        let err = crate::config::parse(&config, &dir.path().join("gateway.toml"))
            .expect_err("the negated entry is refused")
            .to_string();
        assert!(err.contains(&format!(
            "box[0] (gpu1).known_hosts: {} line 2: the entry for [127.0.0.1]:2222 has the negated pattern !gpu1.lan",
            known_hosts.display()
        )), "{err}");
        assert!(err.contains("Fix: write line 2 without `!` patterns"), "{err}");
    }
}
