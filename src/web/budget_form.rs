//! `POST /_gw/budget`: an operator of a project raises or resets its budget from the portal,
//! for today (`scope=day`: the project's daily limit) or for one session (`scope=session`). A
//! raise adds dollars to the limit; a reset adds what was spent so far, so it no longer counts.
//! Both hold until the day ends (a session's for as long as the session), are saved with the
//! spend, and are audited (`budget_raised`); the sessions the guard stopped for it may be
//! resumed.

use http::Response;
use hyper::body::Incoming;

use super::room::portal_form_fields;
use super::{Ctx, page};
use crate::budget::meter::{project_key, session_key, today};
use crate::config::Role;
use crate::http::body::ProxyBody;
use crate::http::error::HttpError;

/// At most this much may be added at once (a typo's ceiling).
const MAX_RAISE_USD: f64 = 10_000.0;

pub(crate) async fn raise(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    let (live, f, project, role) = portal_form_fields(ctx, body).await?;
    if role < Role::Operator {
        return Err(HttpError::Forbidden(format!(
            "raising or resetting project {project}'s budget needs the operator role; {} has {}",
            live.user,
            role.as_str()
        )));
    }
    let field = |name: &str| f.get(name).map_or("", String::as_str);
    let key = match field("scope") {
        "day" => project_key(&project),
        "session" => {
            let session = field("session");
            if session.is_empty()
                || session.len() > 128
                || !session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(HttpError::BadRequest("session: not a session id".into()));
            }
            session_key(&project, session)
        }
        _ => return Err(HttpError::BadRequest("scope: write day or session".into())),
    };
    let usd = match field("do") {
        "reset" => None,
        "raise" => match field("usd").trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_RAISE_USD => Some(x),
            _ => {
                return Err(HttpError::BadRequest(format!(
                    "usd: write an amount of US dollars above 0 and at most {MAX_RAISE_USD}"
                )));
            }
        },
        _ => return Err(HttpError::BadRequest("do: write raise or reset".into())),
    };
    let Some(raised) = ctx.gw.meter.raise(&project, &key, usd, today()) else {
        return Err(HttpError::BadRequest(
            "too many budgets are raised today; raise the configured limit instead".into(),
        ));
    };
    ctx.gw.audit.record(
        crate::audit::Record::new("budget_raised")
            .project(&*project)
            .user(&*live.user)
            .field("scope", field("scope"))
            .field("session", field("session"))
            .field(
                "added",
                usd.map_or(serde_json::Value::from("reset"), serde_json::Value::from),
            )
            .field("raised_total", raised),
    );
    tracing::info!(target: "security", peer = %ctx.client, user = %live.user, project, scope = field("scope"), raised, "budget raised from the control room");
    // Saved now, and the other gateways on a shared store told, so that their guards do not
    // stop what this raise allows.
    crate::gateway::janitor::save_spend(ctx.gw).await;
    let store = ctx.gw.browser.sessions.store().clone();
    let _ = crate::store::blocking("telling of a budget raise", move || {
        store.tell(crate::store::Changed::Budgets);
        Ok(())
    })
    .await;
    let done = if usd.is_some() { "raised" } else { "reset" };
    Ok(page::redirect(&format!("/?done={done}")))
}
