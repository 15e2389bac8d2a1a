//! The inbox on the control socket (the gateway's own OS user only, see `front/control.rs`):
//! `GET /inbox` (every project's view as JSON) and
//! `POST /inbox/reply?project=P&id=ID&reply=once|always|reject[&message=M]` for a permission,
//! `…&reply=answer&answer=LABEL` or `…&reply=reject` for a question (id `que_…`), or
//! `…&reply=abort` with a session id. Replies are recorded as by `control`; each is sent, and
//! audited once, by `road`: the gateway's own, under the control socket's grant
//! (`policy/grants.rs::CONTROL_ANSWER`).

use crate::policy::query;

use super::{Inbox, InboxError, Outcome, Reply, Road};

/// The status code and JSON answer of `POST /inbox/reply`.
pub(crate) async fn reply(inbox: &Inbox, road: &dyn Road, query_string: &str) -> (u16, serde_json::Value) {
    let get = |name: &str| query::get(query_string, name).map(|v| v.into_owned());
    let (Some(project), Some(id), Some(how)) = (get("project"), get("id"), get("reply")) else {
        return (400, serde_json::json!({"error": "project, id and reply are required"}));
    };
    let by = road;
    let result: Result<Outcome, InboxError> = match (id.starts_with("que_"), how.as_str()) {
        (_, "abort") => inbox.abort_session(by, &project, &id).await,
        (true, "reject") => inbox.reject_question(&project, &id, by).await,
        (true, "answer") => {
            let answer = get("answer").unwrap_or_default();
            inbox.reply_question(&project, &id, vec![vec![answer]], by).await
        }
        (false, how) => match Reply::parse(how) {
            Some(r) => inbox.reply_permission(&project, &id, r, get("message"), by).await,
            None => {
                return (
                    400,
                    serde_json::json!({"error": "reply must be once, always or reject"}),
                );
            }
        },
        _ => {
            return (
                400,
                serde_json::json!({"error": "a question takes reply=answer or reply=reject"}),
            );
        }
    };
    match result {
        Ok(o) => (200, serde_json::json!({"outcome": format!("{o:?}")})),
        Err(e) => (e.status(), serde_json::json!({"error": e.to_string()})),
    }
}
