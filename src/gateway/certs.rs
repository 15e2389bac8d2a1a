//! The certificate the HTTPS listeners serve, swappable while running: a rustls
//! [`ResolvesServerCert`] over an `ArcSwap<CertifiedKey>`. New handshakes get the current pair;
//! open connections keep the one they were made with. A pair is installed only after it was read,
//! parsed, matched against its key and found within its validity period; a broken pair is refused
//! with the reason (the old one keeps serving).
//!
//! The files are followed by polling their mtime and size (cheap, and it sees replacements by
//! rename as well as writes, from any ACME client, Tailscale or an operator). A change is tried
//! once it held still for one poll, so a cert written a moment before its key is not refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::config::Tls;

/// How often the certificate files are looked at.
pub(crate) const POLL_EVERY: Duration = Duration::from_secs(1);

/// The ALPN protocol of ACME's TLS-ALPN-01 challenge (RFC 8737).
pub(crate) const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Modification time and size of the certificate and the key file (`None`: unreadable).
type Stamp = [Option<(SystemTime, u64)>; 2];

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
    };
    [one(cert), one(key)]
}

struct Source {
    cert: PathBuf,
    key: PathBuf,
    /// The files' stamp when the serving pair was read (or last refused).
    tried: Stamp,
    /// What the previous poll saw: a change is tried once it is seen twice.
    seen: Stamp,
}

pub struct CertStore {
    current: ArcSwap<CertifiedKey>,
    /// The files followed; `None` when the pair comes from ACME instead.
    source: Mutex<Option<Source>>,
    /// TLS-ALPN-01 challenge certificates by host name, answered on `acme-tls/1` only.
    challenges: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CertStore")
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // Only a validation server offers acme-tls/1 (alone); everyone else gets the served pair
        // with one atomic load.
        if hello.alpn().is_some_and(|mut a| a.any(|p| p == ACME_TLS_ALPN)) {
            let name = hello.server_name()?.to_ascii_lowercase();
            return self
                .challenges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&name)
                .cloned();
        }
        Some(self.current.load_full())
    }
}

impl CertStore {
    /// A store serving `tls.cert`/`tls.key`, followed for changes.
    pub(crate) fn from_files(tls: &Tls) -> anyhow::Result<Arc<CertStore>> {
        let tried = stamp(&tls.cert, &tls.key);
        let pair = load_pair(&tls.cert, &tls.key)?;
        Ok(Arc::new(CertStore {
            current: ArcSwap::from_pointee(pair),
            source: Mutex::new(Some(Source {
                cert: tls.cert.clone(),
                key: tls.key.clone(),
                tried,
                seen: tried,
            })),
            challenges: Mutex::default(),
        }))
    }

    /// A store serving `pair` (ACME's placeholder or issued certificate), not following files.
    pub(crate) fn fixed(pair: CertifiedKey) -> Arc<CertStore> {
        Arc::new(CertStore {
            current: ArcSwap::from_pointee(pair),
            source: Mutex::new(None),
            challenges: Mutex::default(),
        })
    }

    /// Whether the pair served now covers `name` (the gateway's `<host>.local`: passkeys are
    /// offered there only when a browser can open it without a warning; `reach::named_host`).
    pub(crate) fn covers(&self, name: &str) -> bool {
        let pair = self.current.load();
        pair.cert
            .first()
            .is_some_and(|leaf| uncovered(leaf, &[name.to_string()]).is_empty())
    }

    /// Serve `pair` from now on (ACME issued or renewed it).
    pub(crate) fn install(&self, pair: CertifiedKey) {
        self.current.store(Arc::new(pair));
    }

    /// On reload: serve the pair the (new) config names and follow those files. `pair` was read
    /// by [`load_pair`] before the new state was built, so a broken pair refuses the reload.
    pub(crate) fn replace_from_files(&self, tls: &Tls, pair: CertifiedKey) {
        let mut source = self.source.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = source.as_mut() {
            let now = stamp(&tls.cert, &tls.key);
            *s = Source {
                cert: tls.cert.clone(),
                key: tls.key.clone(),
                tried: now,
                seen: now,
            };
            self.current.store(Arc::new(pair));
        }
    }

    pub(crate) fn set_challenge(&self, name: &str, cert: Option<Arc<CertifiedKey>>) {
        let mut map = self.challenges.lock().unwrap_or_else(|e| e.into_inner());
        match cert {
            Some(c) => map.insert(name.to_ascii_lowercase(), c),
            None => map.remove(&name.to_ascii_lowercase()),
        };
    }

    /// Look at the files once: a change that held still since the last poll is read and, when
    /// sound, served. Returns what happened, for the caller to log.
    pub(crate) fn poll(&self) -> Polled {
        let mut source = self.source.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = source.as_mut() else {
            return Polled::Unchanged;
        };
        let now = stamp(&s.cert, &s.key);
        let settled = now == s.seen;
        s.seen = now;
        if now == s.tried || !settled {
            return Polled::Unchanged;
        }
        s.tried = now;
        match load_pair(&s.cert, &s.key) {
            Ok(pair) => {
                self.current.store(Arc::new(pair));
                Polled::Replaced(s.cert.clone())
            }
            Err(e) => Polled::Refused(s.cert.clone(), format!("{e:#}")),
        }
    }
}

pub(crate) enum Polled {
    Unchanged,
    Replaced(PathBuf),
    Refused(PathBuf, String),
}

/// Follow the certificate files until shutdown (see the module comment).
pub(crate) async fn watch(store: Arc<CertStore>, shutdown: tokio_util::sync::CancellationToken) {
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let s = store.clone();
        match tokio::task::spawn_blocking(move || s.poll()).await {
            Ok(Polled::Unchanged) | Err(_) => {}
            Ok(Polled::Replaced(cert)) => {
                tracing::info!(cert = %cert.display(), "certificate files changed: new connections get the new certificate")
            }
            Ok(Polled::Refused(cert, reason)) => tracing::error!(cert = %cert.display(), reason = %reason,
                "certificate files changed but the new pair is refused; the previous certificate keeps serving"),
        }
    }
}

/// Read a PEM chain and key and check they make a servable pair: they parse, the key matches the
/// first certificate, and that certificate is within its validity period. Errors name the config
/// key and the fix; they never contain key material.
pub(crate) fn load_pair(cert: &Path, key: &Path) -> anyhow::Result<CertifiedKey> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| {
            format!(
                "tls.cert: cannot read {} (check the path and that the gateway's user may read it)",
                cert.display()
            )
        })?
        .collect::<Result<_, _>>()
        .with_context(|| format!("tls.cert: {} is not a PEM certificate chain", cert.display()))?;
    let Some(leaf) = chain.first() else {
        anyhow::bail!(
            "tls.cert: {} holds no certificate (write the PEM chain, leaf first)",
            cert.display()
        );
    };
    check_validity(leaf, cert)?;
    let der = PrivateKeyDer::from_pem_file(key).with_context(|| {
        format!(
            "tls.key: cannot read a PEM private key from {} (check the path and its permissions)",
            key.display()
        )
    })?;
    CertifiedKey::from_der(chain, der, &crate::support::tls::provider()).map_err(|e| {
        anyhow::anyhow!(
            "tls: the key in {} does not belong to the certificate in {} ({e}); write the pair from the same issuance",
            key.display(),
            cert.display()
        )
    })
}

fn check_validity(leaf: &CertificateDer<'_>, path: &Path) -> anyhow::Result<()> {
    let Some((from, until)) = crate::support::der::validity(leaf) else {
        anyhow::bail!("tls.cert: the first certificate in {} cannot be parsed", path.display());
    };
    let now = SystemTime::now();
    if now > until {
        anyhow::bail!(
            "tls.cert: the certificate in {} expired {} ago; renew it (or use [tls] acme)",
            path.display(),
            human(now.duration_since(until).unwrap_or_default())
        );
    }
    if now < from {
        anyhow::bail!(
            "tls.cert: the certificate in {} is not valid for another {} (check this machine's clock)",
            path.display(),
            human(from.duration_since(now).unwrap_or_default())
        );
    }
    Ok(())
}

/// The names in `names` that the certificate `leaf` is not valid for (all of them when it cannot
/// be parsed).
pub fn uncovered(leaf: &CertificateDer<'_>, names: &[String]) -> Vec<String> {
    let Ok(parsed) = rustls::server::ParsedCertificate::try_from(leaf) else {
        return names.to_vec();
    };
    names
        .iter()
        .filter(|n| {
            rustls::pki_types::ServerName::try_from(n.as_str())
                .map_or(true, |name| rustls::client::verify_server_name(&parsed, &name).is_err())
        })
        .cloned()
        .collect()
}

/// `3d 4h`, `5h 2m`, `40s`: for log lines and `doctor`.
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// HTTP-01 key authorizations by token, while an order is being validated.
#[derive(Default)]
pub struct Http01(Mutex<HashMap<String, String>>);

impl Http01 {
    pub(crate) fn set(&self, token: &str, key_authorization: Option<String>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match key_authorization {
            Some(k) => map.insert(token.to_string(), k),
            None => map.remove(token),
        };
    }

    pub(crate) fn get(&self, token: &str) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(token).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str, days: (i64, i64)) -> (PathBuf, PathBuf) {
        let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        crate::support::tls::write_self_signed(&c, &k, &[name], days);
        (c, k)
    }

    #[test]
    fn a_broken_pair_is_refused_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), "a.test", (-1, 30));
        assert!(load_pair(&c, &k).is_ok());
        let (_, other_key) = write_pair(dir.path(), "b.test", (-1, 30));
        let e = format!("{:#}", load_pair(&c, &other_key).unwrap_err());
        assert!(e.contains("does not belong to the certificate"), "{e}");
        let (old, old_key) = write_pair(dir.path(), "old.test", (-30, -2));
        let e = format!("{:#}", load_pair(&old, &old_key).unwrap_err());
        assert!(e.contains("expired 2d"), "{e}");
        let e = format!("{:#}", load_pair(&dir.path().join("none.crt"), &k).unwrap_err());
        assert!(e.contains("tls.cert: cannot read"), "{e}");
        assert!(!e.contains("PRIVATE KEY"));
    }
}
