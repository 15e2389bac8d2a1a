//! ACME (RFC 8555): obtain a certificate for every name clients use (the public URL's host,
//! `base_domain`, each project's host) and renew it at two thirds of its life, without a restart:
//! the issued pair is written under `state_dir/acme/` (0600, folder 0700) and installed in the
//! cert store, so new handshakes get it and open connections keep theirs. Challenges: TLS-ALPN-01
//! on the HTTPS listener, or HTTP-01 on `server.http_listen` when it is set. A failed order keeps
//! the current certificate, logs why and is retried with backoff (doubling, at most an hour).
//!
//! Account credentials (`account.json`, which holds the account's private key) are never logged.

pub mod challenge;
pub mod client;
pub mod http;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus,
    RetryPolicy,
};
use serde::{Deserialize, Serialize};

use crate::config::{Acme, Settings};
use crate::gateway::Gateway;
use crate::gateway::certs::{CertStore, load_pair};
use crate::support::files::{create_private_dir, write_private};

/// The first retry after a failure; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Even when nothing is due, look again this often (clock changes, files replaced by hand).
const RECHECK: Duration = Duration::from_secs(3600);

/// The names to order: every DNS name clients use. IP addresses are left out (ACME CAs rarely
/// issue for them, and not for private ones).
pub(crate) fn wanted_names(s: &Settings) -> Vec<String> {
    crate::reach::client_names(s)
        .into_iter()
        .filter(|n| n.parse::<std::net::IpAddr>().is_err())
        .collect()
}

/// The store to start with: the pair from an earlier run when there is one, else a placeholder.
pub(crate) fn initial_store(s: &Settings, acme: &Acme) -> anyhow::Result<Arc<CertStore>> {
    create_private_dir(&acme.dir).with_context(|| format!("tls.acme: cannot create {}", acme.dir.display()))?;
    match load_pair(&s.tls.cert, &s.tls.key) {
        Ok(pair) => Ok(CertStore::fixed(pair)),
        Err(_) => Ok(CertStore::fixed(challenge::placeholder(&wanted_names(s))?)),
    }
}

pub(crate) fn start(gw: &Arc<Gateway>) {
    tokio::spawn(run(gw.clone()));
}

/// How long until the pair on disk should be renewed: now when it is missing, broken, or misses
/// a wanted name; else at two thirds of its validity.
fn due_in(s: &Settings, names: &[String]) -> Duration {
    due_in_files(&s.tls.cert, &s.tls.key, names)
}

fn due_in_files(cert: &std::path::Path, key: &std::path::Path, names: &[String]) -> Duration {
    let Ok(pair) = load_pair(cert, key) else {
        return Duration::ZERO;
    };
    let Some(leaf) = pair.cert.first() else {
        return Duration::ZERO;
    };
    if !crate::gateway::certs::uncovered(leaf, names).is_empty() {
        return Duration::ZERO;
    }
    let Some((from, until)) = crate::support::der::validity(leaf) else {
        return Duration::ZERO;
    };
    let life = until.duration_since(from).unwrap_or_default();
    let renew_at = from + life * 2 / 3;
    renew_at.duration_since(SystemTime::now()).unwrap_or_default()
}

async fn run(gw: Arc<Gateway>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let state = gw.state();
        let Some(acme) = state.settings.tls.acme.clone() else {
            return;
        };
        let names = wanted_names(&state.settings);
        let due = due_in(&state.settings, &names);
        if !due.is_zero() {
            tracing::info!(names = ?names, renew_in = %crate::gateway::certs::human(due), "ACME certificate is current");
            tokio::select! {
                _ = tokio::time::sleep(due.min(RECHECK)) => {}
                _ = gw.doors.acme_wake.notified() => {}
                _ = gw.lifecycle.shutdown.cancelled() => return,
            }
            continue;
        }
        if names.is_empty() {
            tracing::error!(
                "tls.acme: no DNS name to order a certificate for; set server.public_url to a host name or server.base_domain"
            );
            tokio::select! {
                _ = gw.doors.acme_wake.notified() => continue,
                _ = gw.lifecycle.shutdown.cancelled() => return,
            }
        }
        tracing::info!(names = ?names, directory = %acme.directory, "ACME: ordering a certificate");
        match order(&gw, &state.settings, &acme, &names).await {
            Ok(()) => {
                backoff = FIRST_BACKOFF;
                tracing::info!(names = ?names, cert = %state.settings.tls.cert.display(), "ACME: certificate issued and serving (no restart)");
            }
            Err(e) => {
                tracing::error!(reason = %format!("{e:#}"), retry_in_s = backoff.as_secs(),
                    "ACME: order failed; the current certificate keeps serving and the order is retried");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = gw.lifecycle.shutdown.cancelled() => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
struct StoredAccount {
    directory: String,
    credentials: AccountCredentials,
}

/// The account for `acme.directory`: the stored one, or a new one (stored 0600).
async fn account(acme: &Acme) -> anyhow::Result<Account> {
    let path = acme.dir.join("account.json");
    let http =
        || client::AcmeHttp::new(acme.ca_bundle.as_deref()).map(|c| Box::new(c) as Box<dyn instant_acme::HttpClient>);
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(stored) = serde_json::from_str::<StoredAccount>(&text)
        && stored.directory == acme.directory
    {
        return Account::builder_with_http(http()?)
            .from_credentials(stored.credentials)
            .await
            .context("ACME: restoring the account");
    }
    let contact = acme.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, credentials) = Account::builder_with_http(http()?)
        .create(
            &NewAccount {
                contact: &contacts,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            acme.directory.clone(),
            None,
        )
        .await
        .with_context(|| format!("ACME: creating an account at {}", acme.directory))?;
    let stored = serde_json::to_string(&StoredAccount {
        directory: acme.directory.clone(),
        credentials,
    })?;
    write_private(&path, &stored).with_context(|| format!("ACME: writing {}", path.display()))?;
    tracing::info!(directory = %acme.directory, "ACME: account created");
    Ok(account)
}

/// Removes the challenge answers set for an order, however it ends.
struct Answers<'a> {
    gw: &'a Gateway,
    tls: Vec<String>,
    http: Vec<String>,
}

impl Drop for Answers<'_> {
    fn drop(&mut self) {
        for n in &self.tls {
            self.gw.doors.certs.set_challenge(n, None);
        }
        for t in &self.http {
            self.gw.doors.http01.set(t, None);
        }
    }
}

async fn order(gw: &Gateway, s: &Settings, acme: &Acme, names: &[String]) -> anyhow::Result<()> {
    let account = account(acme).await?;
    let ids: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let mut order = account
        .new_order(&NewOrder::new(&ids))
        .await
        .context("ACME: new order")?;
    let kind = if s.server.http_listen.is_some() {
        ChallengeType::Http01
    } else {
        ChallengeType::TlsAlpn01
    };
    let mut answers = Answers {
        gw,
        tls: Vec::new(),
        http: Vec::new(),
    };
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.context("ACME: reading an authorization")?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => anyhow::bail!("ACME: an authorization is {other:?}"),
        }
        let mut ch = authz
            .challenge(kind.clone())
            .with_context(|| format!("ACME: the CA offers no {kind:?} challenge"))?;
        let name = ch.identifier().to_string();
        let key_auth = ch.key_authorization();
        match kind {
            ChallengeType::Http01 => {
                let token = ch.token.clone();
                gw.doors.http01.set(&token, Some(key_auth.as_str().to_string()));
                answers.http.push(token);
            }
            _ => {
                gw.doors.certs.set_challenge(
                    &name,
                    Some(
                        challenge::tls_alpn_cert(&name, key_auth.digest().as_ref())
                            .context("ACME: making the TLS-ALPN-01 certificate")?,
                    ),
                );
                answers.tls.push(name.clone());
            }
        }
        ch.set_ready()
            .await
            .with_context(|| format!("ACME: announcing the challenge for {name}"))?;
    }
    let retry = RetryPolicy::default().timeout(Duration::from_secs(90));
    let status = order.poll_ready(&retry).await.context("ACME: waiting for validation")?;
    if status != OrderStatus::Ready {
        let why = order.state().error.as_ref().map(|p| p.to_string()).unwrap_or_default();
        anyhow::bail!("ACME: the order is {status:?} {why}");
    }
    drop(answers);
    let key_pem = order.finalize().await.context("ACME: finalizing the order")?;
    let chain_pem = order
        .poll_certificate(&retry)
        .await
        .context("ACME: fetching the certificate")?;
    store(s, &chain_pem, &key_pem)?;
    let pair = load_pair(&s.tls.cert, &s.tls.key).context("ACME: the issued pair")?;
    gw.doors.certs.install(pair);
    Ok(())
}

/// Write the pair, each file 0600, replacing the old ones by rename (never half-written).
fn store(s: &Settings, chain: &str, key: &str) -> anyhow::Result<()> {
    for (path, text) in [(&s.tls.key, key), (&s.tls.cert, chain)] {
        let tmp = path.with_extension("new");
        write_private(&tmp, text).with_context(|| format!("ACME: writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("ACME: replacing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &std::path::Path, names: &[&str], days: (i64, i64)) -> (std::path::PathBuf, std::path::PathBuf) {
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        crate::support::tls::write_self_signed(&c, &k, names, days);
        (c, k)
    }

    #[test]
    fn renewal_is_due_at_two_thirds_of_the_life_or_when_a_name_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["gw.test".to_string(), "a.gw.test".to_string()];
        assert_eq!(
            due_in_files(&dir.path().join("none"), &dir.path().join("none"), &names),
            Duration::ZERO,
            "no certificate yet"
        );
        // 30 days of life, 1 day gone: due 19 days from now.
        let (c, k) = pair(dir.path(), &["gw.test", "a.gw.test"], (-1, 29));
        let due = due_in_files(&c, &k, &names);
        assert!(
            due > Duration::from_secs(18 * 86_400) && due < Duration::from_secs(20 * 86_400),
            "{due:?}"
        );
        // 21 days of 30 gone: past two thirds.
        let (c, k) = pair(dir.path(), &["gw.test", "a.gw.test"], (-21, 9));
        assert_eq!(due_in_files(&c, &k, &names), Duration::ZERO);
        // Fresh, but a project host is missing.
        let (c, k) = pair(dir.path(), &["gw.test"], (-1, 89));
        assert_eq!(due_in_files(&c, &k, &names), Duration::ZERO);
    }
}
