//! Where a project's OpenCode server is and how the gateway proves itself to it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::config::Secret;
use crate::policy::drift::UpstreamApi;
use crate::upstream::pool::Pool;
use crate::upstream::redact::Redactor;

#[derive(Debug)]
pub struct Endpoint {
    /// `127.0.0.1:4096`.
    pub authority: String,
    /// `Host` and `Origin` values naming the upstream itself, made once rather than per request.
    pub host_header: HeaderValue,
    pub origin_header: HeaderValue,
    /// `Basic base64(user:password)`, marked sensitive so hyper never logs it.
    pub auth: Option<HeaderValue>,
    /// Finds the credential if the upstream ever sends it back.
    pub redactor: Option<Arc<Redactor>>,
    /// Keep-alive connections to this server, for proxied requests.
    pub pool: Arc<Pool>,
    /// An external server's version and API document, once read (spawned servers keep theirs in
    /// their `Supervised`, across restarts).
    pub api: ArcSwapOption<UpstreamApi>,
}

impl Endpoint {
    pub fn new(authority: String, username: &str, password: Option<&Secret>) -> Self {
        let token = password.map(|p| STANDARD.encode(format!("{username}:{}", p.expose())));
        let auth = token.as_ref().map(|t| {
            let mut v = HeaderValue::from_str(&format!("Basic {t}")).expect("base64 is a valid header value");
            v.set_sensitive(true);
            v
        });
        let redactor = match (password, &token) {
            (Some(p), Some(t)) => Redactor::new(&[p.expose().as_bytes(), t.as_bytes()]).map(Arc::new),
            _ => None,
        };
        Endpoint {
            host_header: HeaderValue::from_str(&authority).expect("validated as host:port"),
            origin_header: HeaderValue::from_str(&format!("http://{authority}")).expect("validated as host:port"),
            pool: Pool::new(authority.clone()),
            authority,
            auth,
            redactor,
            api: ArcSwapOption::empty(),
        }
    }
}
