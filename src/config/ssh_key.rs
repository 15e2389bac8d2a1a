//! SSH public keys as users write them (`authorized_keys` lines).

use russh::keys::PublicKey;

/// Parse `ssh-ed25519 AAAA… comment` (options before the key type are not accepted).
pub(crate) fn parse_authorized_key(line: &str) -> Result<PublicKey, String> {
    PublicKey::from_openssh(line.trim()).map_err(|e| format!("not an OpenSSH public key line ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_ed25519_line_and_refuses_junk() {
        let line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb8vK3i6aC0W8iU3Z3p6l3HkQ2d9aH1r3k0qkq8Zr2V alice@laptop";
        assert!(parse_authorized_key(line).is_ok());
        assert!(parse_authorized_key("ssh-ed25519 nonsense").is_err());
        assert!(parse_authorized_key("").is_err());
    }
}
