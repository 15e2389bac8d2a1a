//! Talking to the OpenID Provider: its discovery document and JWKS (fetched on first use, kept
//! for an hour, the JWKS fetched again early when a token names a key it lacks: key rotation),
//! and the authorization code exchange. Every request goes through the gateway's own
//! hyper/rustls client (`notify::send::exchange`), verified against the system's roots.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::Deserialize;

use super::jwks::{Jwk, JwkSet, SUPPORTED};
use crate::config::Oidc;
use crate::config::validate::{acceptable_oidc_url, oidc_endpoint_allowed};
use crate::support::form::encode;

/// How long discovery and keys are trusted before asking again.
const FRESH: Duration = Duration::from_secs(3600);
/// An unknown `kid` fetches the keys again at most this often (a flood of forged tokens must not
/// become a flood of requests to the provider).
const REFETCH_EVERY: Duration = Duration::from_secs(30);
const MAX_DOCUMENT: usize = 256 * 1024;

/// What discovery told us (the fields the gateway uses).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    /// Defaults to `["RS256"]`, as the specification says.
    #[serde(default = "rs256")]
    pub id_token_signing_alg_values_supported: Vec<String>,
}

fn rs256() -> Vec<String> {
    vec!["RS256".into()]
}

/// Discovery and keys for one issuer.
pub(crate) struct Metadata {
    pub discovery: Discovery,
    pub keys: Vec<Jwk>,
    fetched: Instant,
}

/// The cache (one issuer at a time: a reload that changes it starts afresh).
#[derive(Default)]
pub struct Provider {
    cached: Mutex<Option<Arc<Metadata>>>,
    /// Serialises fetches so a burst of logins makes one.
    fetching: tokio::sync::Mutex<()>,
}

async fn get_json<T: for<'de> Deserialize<'de>>(url: &str) -> Result<T, String> {
    let headers = [("accept", "application/json".to_string())];
    let (status, body) = crate::notify::send::exchange(
        http::Method::GET,
        url,
        None,
        &headers,
        Bytes::new(),
        MAX_DOCUMENT,
        Default::default(),
    )
    .await?;
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{url} sent an unreadable document: {e}"))
}

impl Provider {
    /// Discovery and keys for `cfg.issuer`; `refresh_keys`: the keys are missing one a token
    /// names.
    pub(crate) async fn metadata(&self, cfg: &Oidc, refresh_keys: bool) -> Result<Arc<Metadata>, String> {
        let current = |m: &Arc<Metadata>| m.discovery.issuer == cfg.issuer && m.fetched.elapsed() < FRESH;
        let stale = |m: &Arc<Metadata>| !current(m) || (refresh_keys && m.fetched.elapsed() >= REFETCH_EVERY);
        let cached = self.cached.lock().expect("not poisoned").clone();
        if let Some(m) = &cached
            && !stale(m)
        {
            return Ok(m.clone());
        }
        let _one = self.fetching.lock().await;
        let now = self.cached.lock().expect("not poisoned").clone();
        if let Some(m) = &now {
            let fetched_meanwhile = !cached.as_ref().is_some_and(|b| Arc::ptr_eq(b, m));
            if !stale(m) || (current(m) && fetched_meanwhile) {
                return Ok(m.clone());
            }
        }
        let url = format!("{}/.well-known/openid-configuration", cfg.issuer.trim_end_matches('/'));
        let discovery: Discovery = get_json(&url).await?;
        // OpenID Connect Discovery 4.3: the document must name the issuer it was fetched for.
        if discovery.issuer != cfg.issuer {
            return Err(format!(
                "the discovery document names issuer {:?}, not the configured {:?}",
                discovery.issuer, cfg.issuer
            ));
        }
        for (name, url) in [
            ("authorization_endpoint", &discovery.authorization_endpoint),
            ("token_endpoint", &discovery.token_endpoint),
            ("jwks_uri", &discovery.jwks_uri),
        ] {
            acceptable_oidc_url(url).map_err(|why| format!("discovery's {name} {url:?} {why}"))?;
            oidc_endpoint_allowed(&cfg.issuer, &cfg.endpoint_origins, url)
                .map_err(|why| format!("discovery's {name} {url:?} {why}"))?;
        }
        if !discovery
            .id_token_signing_alg_values_supported
            .iter()
            .any(|a| SUPPORTED.contains(&a.as_str()))
        {
            return Err(format!(
                "the provider signs ID tokens with none of the algorithms the gateway verifies ({:?})",
                discovery.id_token_signing_alg_values_supported
            ));
        }
        let set: JwkSet = get_json(&discovery.jwks_uri).await?;
        let m = Arc::new(Metadata {
            discovery,
            keys: set.keys,
            fetched: Instant::now(),
        });
        *self.cached.lock().expect("not poisoned") = Some(m.clone());
        Ok(m)
    }

    /// Trade an authorization code for the ID token (`client_secret_basic`, PKCE verifier).
    pub(crate) async fn exchange_code(
        &self,
        cfg: &Oidc,
        token_endpoint: &str,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<String, String> {
        // RFC 6749 2.3.1: the id and secret are form-encoded before Basic.
        let basic = STANDARD.encode(format!(
            "{}:{}",
            encode(&cfg.client_id),
            encode(cfg.client_secret.expose())
        ));
        let headers = [
            ("authorization", format!("Basic {basic}")),
            ("accept", "application/json".to_string()),
        ];
        let body = format!(
            "grant_type=authorization_code&code={}&redirect_uri={}&code_verifier={}",
            encode(code),
            encode(redirect_uri),
            encode(verifier)
        );
        let (status, answer) = crate::notify::send::exchange(
            http::Method::POST,
            token_endpoint,
            Some("application/x-www-form-urlencoded"),
            &headers,
            Bytes::from(body),
            MAX_DOCUMENT,
            Default::default(),
        )
        .await?;
        #[derive(Deserialize)]
        struct Answer {
            id_token: Option<String>,
            error: Option<String>,
        }
        let a: Answer = serde_json::from_slice(&answer).map_err(|_| format!("the token endpoint answered {status}"))?;
        match (status.is_success(), a.id_token, a.error) {
            (true, Some(t), _) => Ok(t),
            (_, _, Some(e)) => Err(format!("the token endpoint refused the code: {}", printable(&e))),
            _ => Err(format!("the token endpoint answered {status} without an ID token")),
        }
    }
}

/// A provider's error code, fit for a log line or a page (letters, digits, `_`, `-`, `.`).
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || "_-. ".contains(*c))
        .take(80)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::config::{OidcMatch, Secret};

    /// A provider on loopback serving discovery (its own URL as issuer unless `issuer` is given;
    /// `jwks_uri` likewise) and an empty JWKS; the number of requests it answered.
    async fn serve(issuer: Option<&'static str>, jwks_uri: Option<&'static str>) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let (b, h) = (base.clone(), hits.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (b, h) = (b.clone(), h.clone());
                let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    h.fetch_add(1, Ordering::SeqCst);
                    let body = if req.uri().path() == "/jwks" {
                        r#"{"keys":[]}"#.to_string()
                    } else {
                        serde_json::json!({
                            "issuer": issuer.map_or(b.clone(), String::from),
                            "authorization_endpoint": format!("{b}/auth"),
                            "token_endpoint": format!("{b}/token"),
                            "jwks_uri": jwks_uri.map_or(format!("{b}/jwks"), String::from),
                            "id_token_signing_alg_values_supported": ["RS256"],
                        })
                        .to_string()
                    };
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(Bytes::from(
                            body,
                        ))))
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(tcp), svc),
                );
            }
        });
        (base, hits)
    }

    fn cfg(issuer: &str) -> Oidc {
        Oidc {
            issuer: issuer.to_string(),
            client_id: "gateway".into(),
            client_secret: Secret::new("s"),
            match_on: OidcMatch::Email,
            label: "Test".into(),
            scopes: vec!["openid".into()],
            secret_file: None,
            endpoint_origins: Vec::new(),
        }
    }

    #[tokio::test]
    async fn discovery_and_keys_are_fetched_once_then_served_from_the_cache() {
        let (base, hits) = serve(None, None).await;
        let p = Provider::default();
        let m = p.metadata(&cfg(&base), false).await.unwrap();
        assert_eq!(m.discovery.token_endpoint, format!("{base}/token"));
        assert_eq!(hits.load(Ordering::SeqCst), 2, "discovery and the JWKS");
        p.metadata(&cfg(&base), false).await.unwrap();
        // An unknown key asks again, but not more often than every 30 s.
        p.metadata(&cfg(&base), true).await.unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        // Another issuer (a reload changed it) is fetched afresh.
        let (other, other_hits) = serve(None, None).await;
        p.metadata(&cfg(&other), false).await.unwrap();
        assert_eq!(other_hits.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_document_naming_another_issuer_or_plain_http_elsewhere_is_refused() {
        let (base, _) = serve(Some("https://evil.example"), None).await;
        let e = Provider::default().metadata(&cfg(&base), false).await.err().unwrap();
        assert!(e.contains("names issuer \"https://evil.example\""), "{e}");
        let (base, hits) = serve(None, Some("http://keys.example.com/jwks")).await;
        let e = Provider::default().metadata(&cfg(&base), false).await.err().unwrap();
        assert!(e.contains("jwks_uri") && e.contains("plain http"), "{e}");
        assert_eq!(hits.load(Ordering::SeqCst), 1, "the keys were not fetched");
    }

    /// Issue 21, defect 6: discovery could point the key and token endpoints at any loopback
    /// port, and the code exchange (with the client secret) went there.
    #[tokio::test]
    async fn endpoints_on_another_origin_are_refused_unless_the_config_lists_it() {
        let (other, other_hits) = serve(None, None).await;
        let jwks: &'static str = Box::leak(format!("{other}/jwks").into_boxed_str());
        let (base, _) = serve(None, Some(jwks)).await;
        let e = Provider::default().metadata(&cfg(&base), false).await.err().unwrap();
        assert!(
            e.contains("jwks_uri") && e.contains("neither the issuer's origin"),
            "{e}"
        );
        assert_eq!(
            other_hits.load(Ordering::SeqCst),
            0,
            "nothing was asked of the other port"
        );
        let mut listed = cfg(&base);
        listed.endpoint_origins = vec![crate::config::validate::oidc::origin_of(&other).unwrap()];
        let m = Provider::default().metadata(&listed, false).await.unwrap();
        assert_eq!(m.discovery.jwks_uri, jwks);
        assert_eq!(
            other_hits.load(Ordering::SeqCst),
            1,
            "the listed origin's keys were fetched"
        );
    }

    #[test]
    fn origins_compare_by_scheme_host_and_port() {
        use crate::config::validate::oidc::{endpoint_allowed, origin_of};
        assert_eq!(
            origin_of("https://Login.Example.com:443/a").as_deref(),
            Some("https://login.example.com")
        );
        assert_eq!(origin_of("http://127.0.0.1:9/x").as_deref(), Some("http://127.0.0.1:9"));
        let issuer = "https://login.example.com";
        assert!(endpoint_allowed(issuer, &[], "https://login.example.com/token").is_ok());
        for bad in [
            "http://login.example.com/token",
            "https://login.example.com:8443/token",
            "https://login.example.com.evil.net/token",
            "https://127.0.0.1/token",
        ] {
            assert!(endpoint_allowed(issuer, &[], bad).is_err(), "{bad}");
        }
        let listed = ["https://oauth2.example.com".to_string()];
        assert!(endpoint_allowed(issuer, &listed, "https://oauth2.example.com/token").is_ok());
    }
}
