//! The control socket: a Unix socket at `<state_dir>/control/gateway.sock` (folder 0700, socket
//! 0600, peers checked to be the gateway's own user or root) on which `opencode-gateway status`,
//! `reload`, `pair` and `trigger` ask the running gateway, and `token revoke` and `devices revoke` tell it
//! that the database changed. Only the gateway's OS user can reach it, so a web page (CSRF, DNS
//! rebinding) or another local user can neither reload the gateway, mint a pairing code nor read
//! its users and directories.

use std::convert::Infallible;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::UnixListener;
use tokio::sync::Semaphore;

use crate::config::Settings;
use crate::front::admin::reply;
use crate::gateway::Gateway;
use crate::gateway::state::Upstream;
use crate::upstream::supervise::Status;

const MAX_CONNECTIONS: usize = 8;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// A reload can start spawned servers; it still ends well within this.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);

/// Where the control socket of a gateway running `settings` lives.
pub(crate) fn socket_path(settings: &Settings) -> PathBuf {
    settings.server.state_dir.join("control").join("gateway.sock")
}

/// Make the private folder and bind the socket in it. A socket left by a gateway that died is
/// replaced; one a running gateway answers on is an error (two gateways, one `state_dir`).
pub(crate) fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    let dir = path.parent().context("the control socket path has no folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("server.state_dir: cannot create {}", dir.display()))?;
    // state_dir itself: nobody else lists or writes it (a project's `run_as` user may only pass
    // through to its own folder, see upstream/supervise/launch.rs).
    if let Some(state_dir) = dir.parent() {
        let mode = std::fs::metadata(state_dir)?.permissions().mode();
        std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let meta = std::fs::metadata(dir)?;
    if meta.uid() != me {
        bail!(
            "server.state_dir: {} belongs to uid {}, not to the gateway's user ({me}); fix: chown it or choose another state_dir",
            dir.display(),
            meta.uid()
        );
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "server.state_dir: another gateway answers on {}; fix: stop it or give this one another state_dir",
                path.display()
            );
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path).with_context(|| {
        format!(
            "server.state_dir: cannot create the control socket {} (a socket path must stay under 108 bytes)",
            path.display()
        )
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The largest request body the socket reads (`POST /pair`'s few fields).
const MAX_BODY: usize = 16 * 1024;

/// `https_port` is the HTTPS port actually bound (for URLs when `public_url` says port 0).
pub(crate) async fn serve(gw: Arc<Gateway>, listener: UnixListener, config_path: PathBuf, https_port: u16) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let config_path: Arc<Path> = config_path.into();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = gw.lifecycle.shutdown.cancelled() => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let uid = stream.peer_cred().map(|c| c.uid()).ok();
        if !uid.is_some_and(|u| u == me || u == 0) {
            tracing::warn!(target: "security", uid = ?uid, reason = "control_foreign_user", "control socket connection from another user refused");
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let (gw, config_path) = (gw.clone(), config_path.clone());
        gw.lifecycle.tasks.clone().spawn(async move {
            let _slot = slot;
            let svc = service_fn(move |req: Request<Incoming>| {
                let (gw, config_path) = (gw.clone(), config_path.clone());
                async move {
                    let (parts, body) = req.into_parts();
                    let body = match Limited::new(body, MAX_BODY).collect().await {
                        Ok(b) => b.to_bytes(),
                        Err(_) => {
                            return Ok::<_, Infallible>(reply(
                                StatusCode::PAYLOAD_TOO_LARGE,
                                "text/plain",
                                "body too large\n".into(),
                            ));
                        }
                    };
                    let req = Request::from_parts(parts, body);
                    Ok::<_, Infallible>(route(&gw, &config_path, https_port, &req).await)
                }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
        });
    }
}

async fn route(gw: &Arc<Gateway>, config: &Path, https_port: u16, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        // The inbox (tests and local tools): every project's cards, and a reply as `control`.
        (&Method::GET, "/inbox") => reply(
            StatusCode::OK,
            "application/json",
            crate::inbox::to_json(
                &gw.inbox,
                crate::policy::query::get(req.uri().query().unwrap_or_default(), "project").as_deref(),
            )
            .to_string(),
        ),
        (&Method::POST, "/inbox/reply") => {
            // The gateway's own road, under the control socket's grant: no side road upstream.
            let road = crate::pipeline::internal::gateway_road(
                gw,
                crate::policy::grants::Holder::ControlSocket,
                Some(&crate::policy::grants::CONTROL_ANSWER),
            );
            let (code, body) =
                crate::inbox::control::reply(&gw.inbox, &*road, req.uri().query().unwrap_or_default()).await;
            reply(
                StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
                "application/json",
                body.to_string(),
            )
        }
        (&Method::GET, "/status") => reply(StatusCode::OK, "application/json", status(gw).to_string()),
        (&Method::POST, "/restart") => {
            let name = crate::policy::query::get(req.uri().query().unwrap_or_default(), "project").unwrap_or_default();
            let (code, body) = restart(gw, &name);
            reply(code, "application/json", body.to_string())
        }
        (&Method::POST, "/reload") => match crate::gateway::reload::reload(gw, config) {
            Ok(later) => reply(
                StatusCode::OK,
                "application/json",
                serde_json::json!({"reloaded": true, "needs_restart": later}).to_string(),
            ),
            Err(why) => reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                "application/json",
                serde_json::json!({"reloaded": false, "error": why}).to_string(),
            ),
        },
        // `token revoke` says so after writing the database: cached verifications end now.
        (&Method::POST, "/tokens/changed") => {
            gw.auth.tokens.invalidate();
            reply(StatusCode::OK, "application/json", r#"{"invalidated":true}"#.into())
        }
        // `devices revoke` says so after writing the database: the device's sessions end now.
        (&Method::POST, "/sessions/changed") => {
            gw.browser.sessions.invalidate();
            reply(StatusCode::OK, "application/json", r#"{"invalidated":true}"#.into())
        }
        (&Method::POST, "/pair") => match pair_off_the_runtime(gw, https_port, req.body()).await {
            Ok(v) => reply(StatusCode::OK, "application/json", v.to_string()),
            Err(why) => reply(
                StatusCode::BAD_REQUEST,
                "application/json",
                serde_json::json!({ "error": why }).to_string(),
            ),
        },
        (&Method::POST, "/task/new") => {
            let (code, v) = super::control_tasks::new(gw, req.body()).await;
            reply(code, "application/json", v.to_string())
        }
        (method, path) => {
            let query = req.uri().query().unwrap_or_default();
            match super::control_triggers::route(gw, method, path, query, req.body()).await {
                Some((code, v)) => reply(code, "application/json", v.to_string()),
                None => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
            }
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PairRequest {
    user: String,
    #[serde(default)]
    label: String,
    ttl_secs: Option<u64>,
}

/// [`pair`] on a blocking thread: issuing a code runs argon2 and writes the state database.
async fn pair_off_the_runtime(gw: &Arc<Gateway>, https_port: u16, body: &Bytes) -> Result<serde_json::Value, String> {
    let (gw, body) = (gw.clone(), body.clone());
    tokio::task::spawn_blocking(move || pair(&gw, https_port, &body))
        .await
        .unwrap_or_else(|e| Err(format!("the pairing code could not be made: {e}")))
}

/// `POST /pair {"user","label","ttl_secs"}` → `{"code","url","expires_at"}`. The code goes back to
/// the CLI only (and in the URL's fragment); it is never logged.
fn pair(gw: &Gateway, https_port: u16, body: &[u8]) -> Result<serde_json::Value, String> {
    let r: PairRequest = serde_json::from_slice(body)
        .map_err(|e| format!("the request is not {{\"user\",\"label\",\"ttl_secs\"}}: {e}"))?;
    let state = gw.state();
    if !state.users.contains_key(&r.user) {
        return Err(format!("there is no user {:?} in the running gateway's config", r.user));
    }
    let label = r.label.trim();
    if label.chars().count() > 100 || label.chars().any(char::is_control) {
        return Err("the label must be at most 100 characters, without control characters".into());
    }
    let label = if label.is_empty() { "phone" } else { label };
    let ttl = r
        .ttl_secs
        .map_or(crate::auth::pairing::DEFAULT_TTL, Duration::from_secs);
    let issued = gw.browser.pairing.issue(&r.user, label, ttl)?;
    let base = crate::reach::Reach::new(&state.settings, Some(https_port))
        .with_named(crate::reach::named_host(|n| gw.doors.certs.covers(n)));
    tracing::info!(target: "security", user = %r.user, label = %label, expires_at = issued.expires_at, "pairing code issued");
    Ok(serde_json::json!({
        "code": issued.code,
        // The login host: pairing, login and the handoff share its one cookie.
        "url": format!("{}/pair#{}", base.login(), issued.code),
        // Where passkeys work when the login host is an address (the QR keeps the address).
        "passkeys": base.named_origin(),
        "expires_at": issued.expires_at,
    }))
}

/// `restart <project>`: a spawned project's server, stopped and started again now.
fn restart(gw: &Gateway, name: &str) -> (StatusCode, serde_json::Value) {
    let state = gw.state();
    let Some(p) = state.projects.get(name) else {
        return (
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": format!("there is no project {name:?}")}),
        );
    };
    let Upstream::Supervised(s) = &p.upstream else {
        return (
            StatusCode::CONFLICT,
            serde_json::json!({"error": format!("project {name} is an OpenCode server the gateway does not run; restart it where it runs")}),
        );
    };
    match s.restart() {
        Ok(()) => (StatusCode::OK, serde_json::json!({"restarting": name})),
        Err(why) => (
            StatusCode::CONFLICT,
            serde_json::json!({"error": format!("project {name}: {why}")}),
        ),
    }
}

fn status(gw: &Gateway) -> serde_json::Value {
    let state = gw.state();
    let mut projects: Vec<_> = state
        .projects
        .values()
        .map(|p| {
            let (kind, status) = match &p.upstream {
                Upstream::Fixed(e) => ("external", format!("upstream {}", e.authority)),
                Upstream::Supervised(s) => (
                    "spawned",
                    match s.status() {
                        Status::Waiting => "waiting for the first request".into(),
                        Status::Starting => "starting".into(),
                        Status::Ready(e) => format!("ready at {}", e.authority),
                        Status::Failed(why) => format!("failed: {why}"),
                        Status::NotRunning(why) => format!("NOT RUNNING: {why}"),
                        Status::Stopped => "stopped".into(),
                    },
                ),
            };
            let api = crate::upstream::api::report(p.api().as_deref(), &state.route_roles);
            let seen = match &p.upstream {
                Upstream::Supervised(s) => s.model.load_full(),
                Upstream::Fixed(_) => None,
            };
            let model = seen.as_ref().and_then(|m| m.model().map(String::from));
            let model_warning = seen.as_ref().and_then(|m| m.warning());
            serde_json::json!({"name": &*p.name, "kind": kind, "status": status, "box": p.config.on_box, "directory": p.config.directory, "api": api, "model": model, "model_warning": model_warning})
        })
        .collect();
    projects.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut users: Vec<&str> = state.users.keys().map(String::as_str).collect();
    users.sort();
    let mut boxes: Vec<_> = state.boxes.values().map(|b| b.report()).collect();
    boxes.sort_by(|a, b| a.name.cmp(&b.name));
    serde_json::json!({
        "listen": state.settings.server.listen.to_string(),
        // What it listens on (bound at start; a reload binds nothing): `doctor` tells its own
        // ports from another process's.
        "listeners": gw.doors.listening.get().map(|all| all.iter().map(|(key, at)| serde_json::json!({"key": key, "address": at.to_string()})).collect::<Vec<_>>()),
        "public_url": state.settings.server.public_url,
        "projects": projects,
        "boxes": boxes,
        "users": users,
        "pairing_codes_pending": gw.browser.pairing.pending().ok(),
        "pid": std::process::id(),
        // What cannot be written right now (a full disk): the proxy keeps serving meanwhile.
        "audit": {"enabled": gw.audit.enabled(), "writing": gw.audit.writing(), "lost": gw.audit.lost()},
        "state_db": gw.browser.sessions.store().health(),
    })
}
