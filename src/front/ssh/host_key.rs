//! The SSH host key: ed25519, made on first start (private key 0600, public key beside it), and
//! the lines a client needs to trust it.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{HashAlg, PrivateKey};

/// Load the host key, making it first when the file does not exist.
pub(crate) fn load_or_create(path: &Path) -> anyhow::Result<PrivateKey> {
    if path.exists() {
        return russh::keys::load_secret_key(path, None)
            .with_context(|| format!("ssh.host_key: {} is not an OpenSSH private key", path.display()));
    }
    if let Some(dir) = path.parent() {
        crate::support::files::create_private_dir(dir)?;
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the OS random source is available");
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    key.set_comment("opencode-gateway host key");
    let text = key.to_openssh(LineEnding::LF)?;
    crate::support::files::write_private(path, &text)?;
    let public = key.public_key().to_openssh()?;
    std::fs::write(path.with_extension("pub"), format!("{public}\n"))?;
    tracing::info!(host_key = %path.display(), fingerprint = %key.fingerprint(HashAlg::Sha256), "made the SSH host key");
    Ok(key)
}

/// `SHA256:…` and a `known_hosts` line for `listen`, or a note that the key is made on first start.
pub(crate) fn describe(path: &Path, listen: SocketAddr) -> String {
    match (russh::keys::load_secret_key(path, None), known_hosts_line(path, listen)) {
        (Ok(key), Some(line)) => format!(
            "         fingerprint {}\n         known_hosts: {line}\n",
            key.public_key().fingerprint(HashAlg::Sha256)
        ),
        _ => "         (the host key is made on first start)\n".to_string(),
    }
}

/// The line for a client's `~/.ssh/known_hosts`, as is: `[host]:port type key` (the comment left
/// out). `None` before the key is made.
pub(crate) fn known_hosts_line(path: &Path, listen: SocketAddr) -> Option<String> {
    let key = russh::keys::load_secret_key(path, None).ok()?;
    let public = key.public_key();
    // A listener on every address is reached by this machine's name or any of its LAN addresses:
    // one line names them all (comma-separated patterns), so it pastes as is whichever is used.
    let hosts: Vec<String> = if listen.ip().is_unspecified() {
        std::iter::once(crate::support::host::host_name())
            .chain(crate::support::host::lan_addresses().iter().map(|ip| ip.to_string()))
            .collect()
    } else {
        vec![listen.ip().to_string()]
    };
    let entry = hosts
        .iter()
        .map(|host| {
            if listen.port() == 22 {
                host.clone()
            } else {
                format!("[{host}]:{}", listen.port())
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    let full = public.to_openssh().ok()?;
    Some(format!(
        "{entry} {}",
        full.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_key_is_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/ssh_host_ed25519_key");
        let a = load_or_create(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let b = load_or_create(&path).unwrap();
        assert_eq!(a.public_key(), b.public_key(), "the same key on the next start");
        let text = describe(&path, "127.0.0.1:2222".parse().unwrap());
        assert!(
            text.contains("SHA256:") && text.contains("[127.0.0.1]:2222 ssh-ed25519 AAAA"),
            "{text}"
        );
        let line = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("known_hosts: "))
            .unwrap();
        assert_eq!(line.split_whitespace().count(), 3, "host, type, key: {line}");
        assert!(
            std::fs::read_to_string(path.with_extension("pub"))
                .unwrap()
                .starts_with("ssh-ed25519 ")
        );
    }
}
