//! The login form, its submission and logout. The password goes through the same cache, login
//! limiter and argon2 queue as Basic ([`crate::auth::password`]); the error text is the same
//! for a wrong name and a wrong password. API tokens are for scripts: the form refuses them
//! (charged to the limiter like a wrong password, without argon2).

use askama::Template;
use http::{HeaderValue, Response, StatusCode, header};
use hyper::body::Incoming;

use super::{Ctx, form, page};
use crate::auth::sessions::{LOGIN, Origin};
use crate::config::Secret;
use crate::http::body::ProxyBody;
use crate::http::cookie;
use crate::http::error::HttpError;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage<'a> {
    next: &'a str,
    user: &'a str,
    error: Option<&'a str>,
    /// `[oidc]`: the button's label and where it goes.
    sso: Option<(&'a str, String)>,
    /// This page is on the login origin and it has a name, so a passkey may be offered (the
    /// script shows it only where the browser has WebAuthn).
    passkeys: bool,
}

fn passkeys_here(ctx: &Ctx<'_>) -> bool {
    super::passkey_form::offered(ctx)
}

fn sso<'a>(ctx: &'a Ctx<'_>, next: &str) -> Option<(&'a str, String)> {
    let o = ctx.state.settings.oidc.as_ref()?;
    Some((o.label.as_str(), format!("/_gw/oidc/start?next={}", form::encode(next))))
}

/// Form posts from this page end in a redirect chain that may go on to a project host (a
/// handoff), which CSP's `form-action` also governs.
fn form_targets(ctx: &Ctx<'_>) -> String {
    match (&ctx.state.settings.server.base_domain, ctx.host) {
        (Some(d), Some(h)) => {
            let port = h.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
            format!(" https://*.{d}{}", port.map_or(String::new(), |p| format!(":{p}")))
        }
        _ => String::new(),
    }
}

pub(super) fn next_of(ctx: &Ctx<'_>) -> String {
    let q = ctx.parts.uri.query().unwrap_or("");
    let next = crate::policy::query::get(q, "next").unwrap_or_default();
    form::local_path(&next).to_string()
}

pub(crate) async fn form(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let next = next_of(ctx);
    if ctx.login_session().await?.is_some() {
        return Ok(page::redirect(&next));
    }
    page::html_with(
        StatusCode::OK,
        &LoginPage {
            next: &next,
            user: "",
            error: None,
            sso: sso(ctx, &next),
            passkeys: passkeys_here(ctx),
        },
        &form_targets(ctx),
    )
}

pub(crate) async fn submit(ctx: &Ctx<'_>, body: Incoming) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    let f = form::read(body, ctx.gw.limits.body_idle_timeout).await?;
    let user = f.get("user").map(|s| s.trim()).unwrap_or("");
    let password = Secret::new(f.get("password").cloned().unwrap_or_default());
    let next = form::local_path(f.get("next").map_or("/", String::as_str)).to_string();
    // A token typed as the password is refused there without argon2, like on SSH.
    let check = crate::auth::Check {
        auth: &ctx.gw.auth,
        metrics: &ctx.gw.metrics,
        audit: &ctx.gw.audit,
        users: &ctx.state.users,
    };
    // Read as the error every other request would get (the same message and limit).
    let verdict = crate::auth::password(&check, ctx.client, user, &password, "form")
        .await
        .map_err(HttpError::from);
    let u = match verdict {
        Ok(u) => u,
        Err(e @ HttpError::LoginLimited { .. }) => {
            let mut r = page::html_with(
                StatusCode::TOO_MANY_REQUESTS,
                &LoginPage {
                    next: &next,
                    user,
                    error: Some(&e.to_string()),
                    sso: sso(ctx, &next),
                    passkeys: passkeys_here(ctx),
                },
                &form_targets(ctx),
            )?;
            if let HttpError::LoginLimited { retry_after, .. } = e {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after.as_secs().max(1)));
            }
            return Ok(r);
        }
        Err(HttpError::BadCredentials) => {
            return page::html_with(
                StatusCode::UNAUTHORIZED,
                &LoginPage {
                    next: &next,
                    user,
                    error: Some("Wrong user name or password."),
                    sso: sso(ctx, &next),
                    passkeys: passkeys_here(ctx),
                },
                &form_targets(ctx),
            );
        }
        Err(e) => return Err(e),
    };
    let (value, live) = ctx.gw.browser.sessions.create(&u.name, Origin::Password, LOGIN).await?;
    tracing::info!(target: "security", peer = %ctx.client, user = %u.name, session = %live.id, method = "form", "browser login");
    let mut r = page::redirect(&next);
    r.headers_mut().append(header::SET_COOKIE, cookie::set(&value, None));
    Ok(r)
}

/// End the login session and every project-host session handed off from it.
pub(crate) async fn logout(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    ctx.check_csrf()?;
    if let Some(live) = ctx.login_session().await? {
        ctx.gw.browser.sessions.revoke(&live.login_id).await?;
        tracing::info!(target: "security", peer = %ctx.client, user = %live.user, session = %live.id, "browser logout");
    }
    let mut r = page::redirect("/login");
    r.headers_mut().append(header::SET_COOKIE, cookie::clear());
    Ok(r)
}
