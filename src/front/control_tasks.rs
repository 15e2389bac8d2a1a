//! The control socket's task route (issue 41), for `opencode-gateway task new` (only the
//! gateway's OS user reaches the socket): `POST /task/new` with a JSON body
//! `{"set", "title", "prompt", "as", "base"?, "agent"?, "model"?}` makes the task as the gateway
//! user `as` (their roles, budgets and audit; the operator role in the new project is needed as
//! from the portal), `from: control_socket`. The answer is what was made, or the step that
//! refused or failed, its status and why (`gateway/task.rs`).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};

use crate::audit::{Via, Who};
use crate::gateway::Gateway;
use crate::gateway::task::{NewTask, new_task};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Asked {
    set: String,
    title: String,
    prompt: String,
    #[serde(rename = "as")]
    user: String,
    base: Option<String>,
    agent: Option<String>,
    model: Option<String>,
}

pub(super) async fn new(gw: &Arc<Gateway>, body: &[u8]) -> (StatusCode, Value) {
    let asked: Asked = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                json!({"error": format!("the request is not a task: {e}")}),
            );
        }
    };
    let Some(user) = gw.state().users.get(&asked.user).cloned() else {
        return (
            StatusCode::NOT_FOUND,
            json!({"error": format!("no [[user]] is named {:?}", asked.user)}),
        );
    };
    let t = NewTask {
        set: asked.set,
        title: asked.title,
        prompt: asked.prompt,
        base: asked.base,
        agent: asked.agent,
        model: asked.model,
    };
    // The operator at the socket acts for `as`: the request audit names the gateway as the way in.
    let who = Who {
        via: Via::Gateway,
        id: Some(Arc::from("control_socket")),
    };
    let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let road = crate::pipeline::internal::on_behalf(gw, user.clone(), who, client, "control_socket");
    match new_task(gw, &*road, &user, client, "control_socket", &t).await {
        Ok(made) => (StatusCode::OK, json!(made)),
        Err(r) => (
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            json!({"error": r.why, "step": r.step}),
        ),
    }
}
