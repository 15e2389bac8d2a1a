//! The admin listener, loopback only: `GET /healthz`, `GET /metrics` (Prometheus), `GET /status`
//! (what the gateway serves, as JSON) and `POST /reload`. Plain HTTP: it never leaves the machine.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::gateway::Gateway;
use crate::state::Upstream;
use crate::upstream::supervise::Status;

pub async fn serve(gw: Arc<Gateway>, listener: TcpListener, config_path: PathBuf) {
    let tasks = gw.tasks.clone();
    let gw2 = gw.clone();
    crate::listen::accept_loop(gw, listener, "admin", move |tcp, peer, slot| {
        if !peer.ip().is_loopback() {
            return;
        }
        let gw = gw2.clone();
        let path = config_path.clone();
        tasks.spawn(async move {
            let _slot = slot;
            let svc = service_fn(move |req| {
                let gw = gw.clone();
                let path = path.clone();
                async move { Ok::<_, Infallible>(route(&gw, &path, req)) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(tcp), svc);
            let _ = conn.await;
        });
    })
    .await;
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, content_type.parse().expect("static header"));
    r
}

fn route(gw: &Arc<Gateway>, config: &std::path::Path, req: Request<Incoming>) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, "/metrics") => reply(StatusCode::OK, "text/plain; version=0.0.4", gw.render_metrics()),
        (&Method::GET, "/status") => reply(StatusCode::OK, "application/json", status(gw).to_string()),
        (&Method::POST, "/reload") => match crate::reload::reload(gw, config) {
            Ok(()) => reply(StatusCode::OK, "application/json", r#"{"reloaded":true}"#.into()),
            Err(why) => reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                "application/json",
                serde_json::json!({"reloaded": false, "error": why}).to_string(),
            ),
        },
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
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
                        Status::Stopped => "stopped".into(),
                    },
                ),
            };
            let api = crate::upstream::api::report(p.api().as_deref(), &state.settings.route_roles);
            serde_json::json!({"name": &*p.name, "kind": kind, "status": status, "directory": p.config.directory, "api": api})
        })
        .collect();
    projects.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut users: Vec<&str> = state.users.keys().map(String::as_str).collect();
    users.sort();
    serde_json::json!({
        "listen": state.settings.server.listen.to_string(),
        "public_url": state.settings.server.public_url,
        "projects": projects,
        "users": users,
    })
}
