//! API tokens for scripts and CI: `ocgw_` + 256 random bits (base64url). Shown once; the state
//! database keeps only a keyed BLAKE2b digest (the key is a file beside it, so the database alone
//! is not enough to test guesses offline). A token is usable as the password of Basic (its user's
//! name as the user) or as `Authorization: Bearer`.
//!
//! Checking one costs a digest and, at most once a second per token, a database lookup: no
//! argon2 (256 random bits need no stretching). A token narrows its user's grants, never widens
//! them: at create time a wider scope is refused, and at use time the token's scope is intersected
//! with the user's grants of the moment. A wrong, expired or revoked token is charged to the login
//! limiter like a wrong password; once an address is over its allowance, its uncached tokens get 429
//! before the database is asked (a valid token is not charged: a CI fleet cannot lock itself out).

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use blake2::{Blake2b256, Digest};
use subtle::ConstantTimeEq;

use crate::config::Secret;
use crate::store::{TokenRecord, TokenStore};

/// Every token starts with this, so a token is recognisable (secret scanners, the Basic password
/// path) and never mistaken for a password.
pub(crate) const PREFIX: &str = "ocgw_";
/// 256 bits of randomness.
const RANDOM_BYTES: usize = 32;
/// The digest key's file under `state_dir`.
pub(crate) const KEY_FILE: &str = "token-digest.key";
/// How long a verified token is trusted without asking the database again. Revocation through the
/// CLI also clears the cache at once (over the control socket); this bounds it when that fails.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(1);
const CACHE_ENTRIES: usize = 10_000;

pub(crate) type TokenDigest = [u8; 32];

/// True when `secret` is meant as a token (and so must not go to argon2).
pub(crate) fn is_token(secret: &str) -> bool {
    secret.starts_with(PREFIX)
}

/// A new token and its public id.
pub(crate) fn generate() -> (Secret, String) {
    let mut bytes = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    let token = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let mut id = [0u8; 6];
    getrandom::fill(&mut id).expect("the OS random source is available");
    let id = id.iter().map(|b| format!("{b:02x}")).collect::<String>();
    (Secret::new(token), format!("tok_{id}"))
}

/// The keyed digest a token is stored and looked up by.
pub(crate) fn digest(key: &[u8; 32], token: &str) -> TokenDigest {
    keyed(key, &[token.as_bytes()])
}

/// BLAKE2b-256 of `key` followed by `parts`, each as it is (a caller that names its purpose puts
/// a label ending in NUL first: `b"web-session\0"`).
pub(crate) fn keyed(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Blake2b256::new();
    h.update(key);
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// Digests compared in constant time.
pub(crate) fn same_digest(a: &TokenDigest, b: &TokenDigest) -> bool {
    bool::from(a.ct_eq(b))
}

/// Make a token for `user` with `scope` (already checked) and store only its digest. The token is
/// returned to be shown once.
pub(crate) fn issue(
    store: &dyn TokenStore,
    key: &[u8; 32],
    user: &str,
    scope: &Scope,
    ttl: Duration,
    label: &str,
) -> Result<(Secret, TokenRecord), crate::store::StoreError> {
    let (secret, id) = generate();
    let now = now_unix();
    let record = TokenRecord {
        id,
        digest: digest(key, secret.expose()),
        user: user.to_string(),
        label: label.to_string(),
        role: scope.role.map(|r| r.as_str().to_string()),
        projects: scope.projects.clone(),
        created_at: now,
        expires_at: now.saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)),
        last_used_at: None,
        revoked_at: None,
        policy: scope.policy.clone(),
    };
    store.insert_token(&record)?;
    Ok((secret, record))
}

/// The key that digests tokens and cookie values: the one every gateway on a shared store uses
/// (kept in that store), else this gateway's file in `state_dir` ([`load_or_create_key`]).
pub(crate) fn digest_key(
    settings: &crate::config::Settings,
    store: &dyn crate::store::Store,
) -> anyhow::Result<[u8; 32]> {
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh).expect("the OS random source is available");
    match store.shared_key("digest", &fresh)? {
        Some(key) => Ok(key),
        None => load_or_create_key(&settings.server.state_dir),
    }
}

/// The digest key, made (owner-only) on first use by whichever of the CLI and the gateway comes first.
pub(crate) fn load_or_create_key(state_dir: &Path) -> anyhow::Result<[u8; 32]> {
    use anyhow::Context;
    use std::io::Write;
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("server.state_dir: cannot create {}", state_dir.display()))?;
    let path = state_dir.join(KEY_FILE);
    let mut key = [0u8; 32];
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            getrandom::fill(&mut key).expect("the OS random source is available");
            f.write_all(&key)?;
            f.sync_all()?;
            return Ok(key);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
    // Another process may have just created it: give it a moment to write the key.
    for _ in 0..50 {
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        if let Ok(k) = <[u8; 32]>::try_from(bytes.as_slice()) {
            return Ok(k);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!(
        "{} is not a 32-byte key; fix: remove it (every token is then void)",
        path.display()
    )
}

pub(crate) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `30d`, `12h`, `90m`, `45s`.
pub(crate) fn parse_ttl(text: &str) -> Option<Duration> {
    let text = text.trim();
    let unit = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let n: u64 = text[..text.len() - 1].parse().ok()?;
    let secs = n.checked_mul(unit).filter(|s| *s > 0 && *s <= 100 * 365 * 86_400)?;
    Some(Duration::from_secs(secs))
}

mod scope;
mod verify;

pub(crate) use scope::Scope;
pub use verify::Tokens;
pub(crate) use verify::authenticate;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_256_bit_base64url_and_unique() {
        let (t, id) = generate();
        let text = t.expose();
        assert!(is_token(text));
        let body = text.strip_prefix(PREFIX).unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(body).unwrap().len(), 32);
        assert!(
            body.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert!(id.starts_with("tok_") && id.len() == 16);
        let many: std::collections::HashSet<String> = (0..1000).map(|_| generate().0.expose().to_string()).collect();
        assert_eq!(many.len(), 1000);
        // Each of the 256 bits varies across tokens (no stuck bits from a bad encoding).
        let (mut ones, mut zeros) = ([false; 32 * 8], [false; 32 * 8]);
        for t in &many {
            let bytes = URL_SAFE_NO_PAD.decode(&t[PREFIX.len()..]).unwrap();
            for (i, b) in bytes.iter().enumerate() {
                for bit in 0..8 {
                    if b >> bit & 1 == 1 {
                        ones[i * 8 + bit] = true
                    } else {
                        zeros[i * 8 + bit] = true
                    }
                }
            }
        }
        assert!(ones.iter().chain(&zeros).all(|&x| x));
    }

    #[test]
    fn the_digest_is_keyed() {
        let (t, _) = generate();
        assert_ne!(digest(&[1; 32], t.expose()), digest(&[2; 32], t.expose()));
        assert_eq!(digest(&[1; 32], t.expose()), digest(&[1; 32], t.expose()));
    }

    #[test]
    fn the_key_file_is_made_once_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let k1 = load_or_create_key(dir.path()).unwrap();
        let k2 = load_or_create_key(dir.path()).unwrap();
        assert_eq!(k1, k2);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn ttl_spellings() {
        assert_eq!(parse_ttl("30d"), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_ttl("12h"), Some(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_ttl("5s"), Some(Duration::from_secs(5)));
        for bad in ["", "d", "0d", "-1d", "3w", "1.5h", "99999999999999999999d"] {
            assert_eq!(parse_ttl(bad), None, "{bad}");
        }
    }
}
