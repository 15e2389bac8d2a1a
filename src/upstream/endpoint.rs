//! Where a project's OpenCode server is and how the gateway proves itself to it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use crate::config::Secret;
use crate::policy::drift::UpstreamApi;
use crate::upstream::pool::{Dial, Leased, Pool};
use crate::upstream::redact::Redactor;
use crate::upstream::{BoxError, UpstreamBody};

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
    /// One read of `api` at a time, and when the last one was tried (an external server that was
    /// down is asked again on a later request, not more than once per [`API_RETRY`]).
    api_read: tokio::sync::Mutex<Option<Instant>>,
    /// Milliseconds after `created` (plus one; 0: never) of the last finished read.
    api_tried_at: AtomicU64,
    created: Instant,
}

/// How soon an external server whose API document could not be read is asked again.
pub(crate) const API_RETRY: Duration = Duration::from_secs(10);

impl Endpoint {
    pub(crate) fn new(authority: String, username: &str, password: Option<&Secret>) -> Self {
        Self::with_dial(authority, username, password, Dial::Tcp)
    }

    /// A server reached by `dial`: over TCP, or over a box's SSH connection (`authority` is then
    /// the server's address as the box sees it).
    pub(crate) fn with_dial(authority: String, username: &str, password: Option<&Secret>, dial: Dial) -> Self {
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
            pool: Pool::with_dial(authority.clone(), dial),
            authority,
            auth,
            redactor,
            api: ArcSwapOption::empty(),
            api_read: tokio::sync::Mutex::new(None),
            api_tried_at: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    /// A bodiless `GET path` to this server carrying the gateway's credential (health checks,
    /// version and document reads, session lookups, the inbox's lists).
    pub(crate) fn get(&self, path: &str) -> Result<http::Request<UpstreamBody>, String> {
        self.request(http::Method::GET, path, UpstreamBody::Empty)
    }

    /// `method path` to this server with `body`, in origin form, naming the server as its host
    /// and carrying the gateway's credential (the gateway's own requests; a proxied request is
    /// rewritten by the forward).
    pub(crate) fn request(
        &self,
        method: http::Method,
        path: &str,
        body: UpstreamBody,
    ) -> Result<http::Request<UpstreamBody>, String> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, self.host_header.clone())
            .body(body)
            .map_err(|e| e.to_string())?;
        if let Some(auth) = &self.auth {
            req.headers_mut().insert(http::header::AUTHORIZATION, auth.clone());
        }
        Ok(req)
    }

    /// The same server, reached the same way, with no credential (to see whether it answers
    /// without a password).
    pub(crate) fn without_credential(&self) -> Endpoint {
        Endpoint::with_dial(self.authority.clone(), "", None, self.pool.dial().clone())
    }

    /// Send one of the gateway's own requests on this server's pool, the one road proxied
    /// requests take too: its connection comes back to the pool when the answer's body ends.
    pub(crate) async fn send(
        &self,
        req: http::Request<UpstreamBody>,
        connect_timeout: Duration,
    ) -> Result<http::Response<Leased>, BoxError> {
        let owner = crate::upstream::pool::Owner::GATEWAY;
        let (response, lease) = self.pool.send(req, owner, connect_timeout).await?;
        let (parts, body) = response.into_parts();
        Ok(http::Response::from_parts(parts, Leased::new(body, lease)))
    }

    /// This server's dialect, version and API document, read with the gateway's credential: the
    /// first dialect whose health endpoint names a version of its own is the server's, and its
    /// document is read from where that dialect keeps it; what they mean is `api`'s to say.
    pub(crate) async fn read_api(&self, connect_timeout: Duration) -> Result<UpstreamApi, String> {
        let mut tried = Vec::new();
        for dialect in crate::policy::dialect::ALL {
            let path = dialect.health_path();
            let version = match self.read_whole(path, connect_timeout).await {
                Ok(answer) => dialect.version_in_health(&answer),
                Err(why) => {
                    tried.push(why);
                    continue;
                }
            };
            let Some(version) = version else {
                tried.push(format!("GET {path} named no OpenCode {} version", dialect.family()));
                continue;
            };
            let doc = self.read_whole(dialect.doc_path(), connect_timeout).await?;
            return crate::upstream::api::from_answers(*dialect, version, &doc);
        }
        Err(tried.join("; "))
    }

    /// `GET path` answered 200, its body read whole (at most `api::DOC_MAX`), within
    /// `api::FETCH_TIMEOUT`.
    pub(crate) async fn read_whole(&self, path: &str, connect_timeout: Duration) -> Result<bytes::Bytes, String> {
        use crate::upstream::api::{DOC_MAX, FETCH_TIMEOUT, HEALTH_AGENT};
        use http_body_util::BodyExt;
        let mut req = self.get(path)?;
        req.headers_mut()
            .insert(http::header::USER_AGENT, HeaderValue::from_static(HEALTH_AGENT));
        let fetch = async {
            let resp = self
                .send(req, connect_timeout)
                .await
                .map_err(|e| crate::upstream::describe(&*e))?;
            if resp.status() != http::StatusCode::OK {
                return Err(format!("GET {path} answered {}", resp.status()));
            }
            http_body_util::Limited::new(resp.into_body(), DOC_MAX)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| format!("GET {path}: {e}"))
        };
        tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| format!("GET {path}: no answer within {} s", FETCH_TIMEOUT.as_secs()))?
    }

    /// Make sure this external server's API document has been read, or tried recently: requests
    /// that come while a read is under way wait for it (up to `wait`), so a route the server added
    /// is never judged by the table alone in the moment after start or reload.
    /// Nothing for [`Self::ensure_api`] to do: the document is known, or was tried recently.
    pub(crate) fn api_settled(&self) -> bool {
        self.api.load().is_some() || self.api_tried_recently()
    }

    pub(crate) async fn ensure_api(&self, connect_timeout: Duration, project: &str, wait: Duration) {
        if self.api_settled() {
            return;
        }
        let Ok(mut tried) = tokio::time::timeout(wait, self.api_read.lock()).await else {
            return;
        };
        if self.api.load().is_some() || tried.is_some_and(|t| t.elapsed() < API_RETRY) {
            return;
        }
        *tried = Some(Instant::now());
        // Stored, then logged: once the log says which routes apply, `status` and requests see
        // them (a test read `status` between a log-then-store and found nothing).
        match self.read_api(connect_timeout).await {
            Ok(api) => {
                let api = Arc::new(api);
                self.api.store(Some(api.clone()));
                crate::upstream::api::log(project, &api);
            }
            Err(why) => crate::upstream::api::unreadable(project, &self.authority, &why),
        }
        self.api_tried_at.store(
            tried.map_or(0, |t| t.duration_since(self.created).as_millis() as u64 + 1),
            Ordering::Relaxed,
        );
    }

    /// A read failed less than [`API_RETRY`] ago (no lock: a server without a document, such as a
    /// stand-in, would otherwise take the read lock on every request).
    fn api_tried_recently(&self) -> bool {
        let at = self.api_tried_at.load(Ordering::Relaxed);
        at != 0 && self.created.elapsed().as_millis() as u64 + 1 < at + API_RETRY.as_millis() as u64
    }
}
