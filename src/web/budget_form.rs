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
    let key = budget_key(&project, field("scope"), field("session"))?;
    let usd = amount(field("do"), field("usd"))?;
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

/// The budget the form names: the project's day, or one of its sessions (a session id as
/// OpenCode writes them, so the key holds nothing else).
fn budget_key(project: &str, scope: &str, session: &str) -> Result<String, HttpError> {
    match scope {
        "day" => Ok(project_key(project)),
        "session" => {
            if session.is_empty()
                || session.len() > 128
                || !session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(HttpError::BadRequest("session: not a session id".into()));
            }
            Ok(session_key(project, session))
        }
        _ => Err(HttpError::BadRequest("scope: write day or session".into())),
    }
}

/// What the form adds: dollars for a raise (above 0, at most [`MAX_RAISE_USD`]), `None` for a
/// reset (what was spent so far).
fn amount(act: &str, usd: &str) -> Result<Option<f64>, HttpError> {
    match act {
        "reset" => Ok(None),
        "raise" => match usd.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_RAISE_USD => Ok(Some(x)),
            _ => Err(HttpError::BadRequest(format!(
                "usd: write an amount of US dollars above 0 and at most {MAX_RAISE_USD}"
            ))),
        },
        _ => Err(HttpError::BadRequest("do: write raise or reset".into())),
    }
}
