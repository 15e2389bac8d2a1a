//! How the gateway's pages are sent: server-rendered templates (askama: compiled, autoescaped),
//! a strict CSP of their own, no caching, no referrer, never framed, HSTS; static assets compiled
//! into the binary. OpenCode's own pages are not touched.

use askama::Template;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

/// Scripts and styles only from the gateway itself; forms post only to it (and, after a login,
/// the redirect chain of a handoff goes on to a project host: `form_targets`).
fn csp(form_targets: &str) -> String {
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
         manifest-src 'self'; worker-src 'self'; form-action 'self'{form_targets}; frame-ancestors 'none'; \
         base-uri 'none'"
    )
}

/// The gateway's static files: name, type, bytes (compiled in). The app shell of the control
/// room as an installable web app: the manifest, the service worker, the offline page, icons
/// (made by scripts/make_icons.py).
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/app.js"),
    ),
    (
        "pair.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/pair.js"),
    ),
    (
        "passkey.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/passkey.js"),
    ),
    ("icon.svg", "image/svg+xml", include_bytes!("../../assets/icon.svg")),
    ("icon-192.png", "image/png", include_bytes!("../../assets/icon-192.png")),
    ("icon-512.png", "image/png", include_bytes!("../../assets/icon-512.png")),
    (
        "apple-touch-icon.png",
        "image/png",
        include_bytes!("../../assets/apple-touch-icon.png"),
    ),
    (
        "manifest.webmanifest",
        "application/manifest+json",
        include_bytes!("../../assets/manifest.webmanifest"),
    ),
    (
        "sw.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/sw.js"),
    ),
    (
        "offline.html",
        "text/html; charset=utf-8",
        include_bytes!("../../assets/offline.html"),
    ),
    (
        "offline.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/offline.js"),
    ),
];

/// A static asset's name, if there is one by that name.
pub(crate) fn asset(name: &str) -> Option<&'static str> {
    ASSETS.iter().find(|(n, ..)| *n == name).map(|(n, ..)| *n)
}

/// `probe`: the host name this request came to and the plain-HTTP listener's port, written into
/// the offline page (which a device keeps and opens when the gateway does not answer) for its
/// probe of that port (its policy then allows exactly that origin) and the CA page's address.
pub(crate) fn asset_response(name: &str, probe: Option<(&str, u16)>) -> Response<ProxyBody> {
    let http_port = probe.map(|(_, p)| p);
    let (_, kind, body) = ASSETS.iter().find(|(n, ..)| *n == name).expect("asset() found it");
    let body = match (name, http_port) {
        ("offline.html", Some(port)) => {
            Bytes::from(String::from_utf8_lossy(body).replace("data-http=\"\"", &format!("data-http=\"{port}\"")))
        }
        _ => Bytes::from_static(body),
    };
    let mut r = Response::new(ProxyBody::full(body));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    match name {
        // Served under /_gw/static/, it controls the control room's pages at `/`.
        "sw.js" => {
            h.insert("service-worker-allowed", HeaderValue::from_static("/"));
        }
        // The offline page is the gateway's page too: its own strict policy.
        "offline.html" => {
            secure(&mut r, "");
            let probe = probe.filter(|(h, _)| {
                !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
            });
            if let Some((host, port)) = probe {
                let policy = csp("").replace(
                    "connect-src 'self'",
                    &format!("connect-src 'self' https://{host}:{port}"),
                );
                if let Ok(v) = HeaderValue::from_str(&policy) {
                    r.headers_mut().insert(header::CONTENT_SECURITY_POLICY, v);
                }
            }
        }
        _ => {}
    }
    r
}

/// Let a page's script also connect to `origin` (the pairing page's probe of the named host).
pub(crate) fn allow_connect(r: &mut Response<ProxyBody>, origin: &str) {
    let safe = origin
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-.[]:/".contains(&b));
    let Some(policy) = r
        .headers()
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    let policy = policy.replace("connect-src 'self'", &format!("connect-src 'self' {origin}"));
    if let (true, Ok(v)) = (safe, HeaderValue::from_str(&policy)) {
        r.headers_mut().insert(header::CONTENT_SECURITY_POLICY, v);
    }
}

/// The headers every gateway page carries.
pub(crate) fn secure(r: &mut Response<ProxyBody>, form_targets: &str) {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&csp(form_targets)).unwrap_or(HeaderValue::from_static("default-src 'none'")),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::STRICT_TRANSPORT_SECURITY,
        HeaderValue::from_static("max-age=31536000"),
    );
}

/// A rendered page with its status.
pub(crate) fn html(status: StatusCode, t: &impl Template) -> Result<Response<ProxyBody>, HttpError> {
    html_with(status, t, "")
}

pub(crate) fn html_with(
    status: StatusCode,
    t: &impl Template,
    form_targets: &str,
) -> Result<Response<ProxyBody>, HttpError> {
    let body = t.render().map_err(|e| {
        tracing::error!(error = %e, "a gateway page failed to render");
        HttpError::BadRequest("the page could not be rendered".into())
    })?;
    let mut r = Response::new(ProxyBody::full(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure(&mut r, form_targets);
    Ok(r)
}

/// A JSON answer of a gateway page (for its own script), with the pages' headers.
pub(crate) fn json(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::full(Bytes::from(body)));
    *r.status_mut() = status;
    secure(&mut r, "");
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// 303 to a path or URL the caller built (never one a client supplied unchecked).
pub(crate) fn redirect(to: &str) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    secure(&mut r, "");
    r
}

/// A message as a person reads it: the `code` spans the gateway's messages use (backticks around
/// a command) become `<code>`, every character of the text escaped; a lone backtick is dropped.
/// Rendered with `|safe` (the escaping is done here).
pub(crate) struct Marked<'a>(pub &'a str);

impl std::fmt::Display for Marked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<&str> = self.0.split('`').collect();
        // An odd number of parts pairs every backtick; otherwise the last one is alone.
        let paired = parts.len() % 2 == 1;
        for (i, part) in parts.iter().enumerate() {
            let last_alone = !paired && i == parts.len() - 1;
            let code = i % 2 == 1 && !last_alone;
            if code {
                f.write_str("<code>")?;
            }
            for c in part.chars() {
                match c {
                    '&' => f.write_str("&amp;")?,
                    '<' => f.write_str("&lt;")?,
                    '>' => f.write_str("&gt;")?,
                    '"' => f.write_str("&quot;")?,
                    '\'' => f.write_str("&#39;")?,
                    c => f.write_fmt(format_args!("{c}"))?,
                }
            }
            if code {
                f.write_str("</code>")?;
            }
        }
        Ok(())
    }
}

#[derive(Template)]
#[template(path = "message.html")]
struct Message<'a> {
    title: &'a str,
    text: Marked<'a>,
}

/// An error as a page a person reads (the same status and words as the JSON form).
pub(crate) fn error_page(e: HttpError) -> Response<ProxyBody> {
    let status = StatusCode::from(&e);
    let retry = match &e {
        HttpError::LoginLimited { retry_after, .. } | HttpError::RateLimited { retry_after } => Some(*retry_after),
        _ => None,
    };
    let text = e.to_string();
    let title = status.canonical_reason().unwrap_or("Error");
    let mut r = match html(
        status,
        &Message {
            title,
            text: Marked(&text),
        },
    ) {
        Ok(r) => r,
        Err(_) => e.into_response(),
    };
    if let Some(after) = retry {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(after.as_secs().max(1)));
    }
    r
}

/// A page that says why something did not work, with its status.
pub(crate) fn message(status: StatusCode, title: &str, text: &str) -> Response<ProxyBody> {
    html(
        status,
        &Message {
            title,
            text: Marked(text),
        },
    )
    .unwrap_or_else(|e| e.into_response())
}

/// Does the client want a page rather than JSON (a navigation or a form post)?
pub(crate) fn wants_html(headers: &http::HeaderMap) -> bool {
    headers.get("sec-fetch-mode").is_some_and(|v| v == "navigate")
        || headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"))
}

#[cfg(test)]
mod tests {
    use super::Marked;

    #[test]
    fn code_spans_become_code_and_everything_is_escaped() {
        assert_eq!(
            Marked("Run `opencode-gateway pair <user>` on the host").to_string(),
            "Run <code>opencode-gateway pair &lt;user&gt;</code> on the host"
        );
        assert_eq!(Marked("a `b` c `d").to_string(), "a <code>b</code> c d");
        assert_eq!(Marked("<script>\"'&").to_string(), "&lt;script&gt;&quot;&#39;&amp;");
        assert_eq!(Marked("``").to_string(), "<code></code>");
        assert!(!Marked("x `y` z`").to_string().contains('`'));
    }
}
