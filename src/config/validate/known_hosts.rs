//! What a `known_hosts` file says about a box beyond the plain lines the SSH library's reader
//! (russh's `known_host_keys_path`) takes. That reader takes a line when one of its host patterns
//! is the box's name (or hashes to it), skips every line that starts with a marker, and ignores a
//! `!` negation; OpenSSH reads all three. So, before russh reads the file:
//!
//! - `@revoked`: the line's key is never trusted for the box, even where a plain line lists it.
//!   Whatever hosts the line names: stricter than OpenSSH (which applies it to those hosts), as a
//!   key someone revoked is not one to trust for a box. Its keys are returned; `boxes.rs` takes
//!   them out of what russh read, and the link names a revoked key when a box presents one.
//! - `@cert-authority` for the box: refused, naming the line. The gateway accepts no host
//!   certificate, and the line's key is a certificate authority's, not the box's: trusted as a
//!   plain key it would let the CA's own key answer for the box. Lines for other hosts are left
//!   alone (russh skips them; they trust nothing for the box).
//! - any other marker: refused, naming the line (what it means cannot be told).
//! - a `!` negation on the box's line (`gpu1,!gpu1` trusts nothing in OpenSSH; russh would trust
//!   its key): refused, naming the line.

use base64::Engine;
use russh::keys::PublicKey;

/// A key the file revokes, and the line (from 1) that says so.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Revoked {
    pub line: usize,
    pub key: PublicKey,
}

/// A problem with the file and its fix.
type Refusal = (String, String);

/// The keys `text` revokes, or the first line that cannot be read the way OpenSSH reads it.
pub(super) fn read(text: &str, file: &str, host: &str, port: u16) -> Result<Vec<Revoked>, Refusal> {
    let name = if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    };
    let mut revoked = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let mut words = line.split_whitespace();
        let Some(first) = words.next().filter(|w| !w.starts_with('#')) else {
            continue;
        };
        match first {
            "@revoked" => revoked.push(revocation(words, file, n)?),
            "@cert-authority" => {
                let patterns = words.next().unwrap_or_default();
                if applies(patterns, &name) {
                    return Err(certificate_authority(file, n, &name));
                }
            }
            marker if marker.starts_with('@') => {
                return Err((
                    format!(
                        "{file} line {n}: the marker {marker} is not one OpenSSH defines (@revoked, @cert-authority)"
                    ),
                    format!("correct or remove line {n}"),
                ));
            }
            patterns => negated(patterns, &name, file, n)?,
        }
    }
    Ok(revoked)
}

/// The key of a `@revoked` line (after the marker: patterns, key type, key): a key that does not
/// read refuses the file, as what it revokes cannot be told.
fn revocation<'a>(mut words: impl Iterator<Item = &'a str>, file: &str, n: usize) -> Result<Revoked, Refusal> {
    let _patterns = words.next();
    let line = words.collect::<Vec<_>>().join(" ");
    match parse_host_key(&line) {
        Ok(key) => Ok(Revoked { line: n, key }),
        Err(why) => Err((
            format!(
                "{file} line {n}: a @revoked line whose key cannot be read ({why}): which key it revokes cannot be told"
            ),
            format!("correct line {n} (\"@revoked <hosts> ssh-ed25519 AAAA…\") or remove it"),
        )),
    }
}

fn certificate_authority(file: &str, n: usize, name: &str) -> Refusal {
    (
        format!(
            "{file} line {n}: a @cert-authority line for {name}; the gateway accepts no host certificates, and the line's key is the authority's, not the box's"
        ),
        format!(
            "pin the box's own key: host_key, or a plain line for {name} in a known_hosts file without a @cert-authority line for it (ssh-keyscan prints it; check its fingerprint)"
        ),
    )
}

/// A plain line whose patterns name the box beside a `!` negation: OpenSSH reads the negation,
/// russh does not.
fn negated(patterns: &str, name: &str, file: &str, n: usize) -> Result<(), Refusal> {
    let negated = patterns.split(',').find(|p| p.starts_with('!'));
    let names_the_box = patterns.split(',').any(|p| names(p.trim_start_matches('!'), name));
    match (negated, names_the_box) {
        (Some(negated), true) => Err((
            format!(
                "{file} line {n}: the entry for {name} has the negated pattern {negated}, which the gateway's SSH library does not read (it would trust the line's key for {name} regardless)"
            ),
            format!(
                "write line {n} without `!` patterns (a line of its own for the box, or none if it must not be trusted), or pin the box's key with host_key"
            ),
        )),
        _ => Ok(()),
    }
}

/// Does a line with `patterns` apply to `name`, as OpenSSH reads it: a pattern (a glob, or a
/// hashed name) matches and no negated one does.
fn applies(patterns: &str, name: &str) -> bool {
    let mut hit = false;
    for p in patterns.split(',') {
        match p.strip_prefix('!') {
            Some(p) if matches(p, name) => return false,
            Some(_) => {}
            None => hit |= matches(p, name),
        }
    }
    hit
}

/// A hashed name, or a glob (`*`, `?`) compared without case, as OpenSSH's `match_pattern`.
fn matches(pattern: &str, name: &str) -> bool {
    if pattern.starts_with("|1|") {
        return names(pattern, name);
    }
    fn glob(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
            (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(b) => glob(&p[1..], &s[1..]),
            _ => false,
        }
    }
    glob(pattern.as_bytes(), name.as_bytes())
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

/// A `host_key` setting → the keys it pins. Each line as the box's `.pub` file has it
/// (`ssh-ed25519 AAAA… [comment]`) or as `ssh-keyscan` prints it (`host ssh-ed25519 AAAA…`,
/// `[host]:port ssh-ed25519 AAAA…`); `#` lines (ssh-keyscan's `# host:port SSH-2.0-…`) and blank
/// ones are skipped, so its whole output may be pasted. The host field is not checked against
/// the box's address: a box scanned by its IP address and configured by its name is the same
/// box, and a line of another host pins a key the box does not present, which refuses the
/// connection (the key, not the name, is what is pinned). A marker line (`@revoked …`) is
/// refused: pinned, a revoked key would be trusted.
pub(crate) fn parse_host_key_setting(text: &str) -> Result<Vec<PublicKey>, String> {
    let mut keys = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let first = line.split_whitespace().next().unwrap_or_default();
        if first.starts_with('@') {
            return Err(format!("a known_hosts marker line ({first}), not the box's key"));
        }
        // A key line starts with its algorithm; anything else there is ssh-keyscan's host field.
        let has_host = russh::keys::Algorithm::new(first).is_err() && line.split_whitespace().nth(2).is_some();
        let key_part = if has_host {
            line[first.len()..].trim_start()
        } else {
            line
        };
        keys.push(parse_host_key(key_part)?);
    }
    if keys.is_empty() {
        return Err("no key line (\"ssh-ed25519 AAAA…\")".into());
    }
    Ok(keys)
}

/// `ssh-ed25519 AAAA… [comment]` → the public key (its algorithm must be the one the line says).
pub(crate) fn parse_host_key(line: &str) -> Result<russh::keys::PublicKey, String> {
    let mut words = line.split_whitespace();
    let (Some(algorithm), Some(b64)) = (words.next(), words.next()) else {
        return Err("not an OpenSSH public key line (\"ssh-ed25519 AAAA…\")".into());
    };
    let key = russh::keys::parse_public_key_base64(b64).map_err(|e| format!("its key does not read: {e}"))?;
    if key.algorithm().as_str() != algorithm {
        return Err(format!(
            "the line says {algorithm} but the key is {}",
            key.algorithm().as_str()
        ));
    }
    Ok(key)
}

#[cfg(test)]
#[path = "known_hosts_tests.rs"]
mod tests;
