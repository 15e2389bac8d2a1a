//! Single sign-on pages on the login host (`[oidc]`; the provider side is [`crate::oidc`]).
//!
//! `GET /_gw/oidc/start?next=<path>` makes a flow: `state`, `nonce` and a PKCE verifier (S256),
//! all random; the flow is kept in memory for ten minutes under the digest of its `state`, with
//! the digest of the nonce and of a browser binding that goes to this browser only, in a
//! short-lived `__Host-` cookie. `GET /_gw/oidc/callback?code&state` takes the flow once, only
//! in the browser that started it (a callback URL seen elsewhere is useless there and is not
//! burnt by that attempt), exchanges the code with the client secret and the verifier, checks
//! the ID token ([`crate::oidc::idtoken::verify`]) and maps it to a `[[user]]` by `oidc`
//! (`match = "email"` needs `email_verified`). Anyone the config does not name is refused with a
//! page and a `security` log line giving the reason. Then the session is made as for the password
//! form, and the project-host handoff works as before.

use crate::auth::once::Seen;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use blake2::{Blake2b256, Digest};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use super::{Ctx, form, page};
use crate::auth::sessions::{LOGIN, Origin, random};
use crate::config::{Oidc, OidcMatch};
use crate::http::body::ProxyBody;
use crate::http::cookie;
use crate::http::error::HttpError;
use crate::oidc::flows::{FLOW_TTL, Flow};
use crate::oidc::idtoken::{self, Expect};
use crate::oidc::provider::printable;

/// The browser binding's cookie (`__Host-`: this exact host only; Lax, so the provider's
/// top-level redirect back carries it).
const BINDING: &str = "__Host-ocgw-sso";

fn digest(domain: &str, value: &str) -> [u8; 32] {
    let mut h = Blake2b256::new();
    h.update(domain.as_bytes());
    h.update(b"\0");
    h.update(value.as_bytes());
    h.finalize().into()
}

fn binding_cookie(value: &str, max_age: u64) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{BINDING}={value}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age={max_age}"
    ))
    .expect("URL-safe characters make a valid header")
}

fn binding_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|p| p.trim().split_once('='))
        .find(|(n, _)| *n == BINDING)
        .map(|(_, v)| v.trim())
}

fn config<'a>(ctx: &'a Ctx<'_>) -> Result<&'a Oidc, HttpError> {
    ctx.state
        .settings
        .oidc
        .as_ref()
        .ok_or_else(|| HttpError::NotFound("single sign-on is not configured on this gateway".into()))
}

/// A page saying why, that also ends the flow's cookie.
fn refused(status: StatusCode, title: &str, text: &str) -> Response<ProxyBody> {
    let mut r = page::message(status, title, text);
    r.headers_mut().append(header::SET_COOKIE, binding_cookie("", 0));
    r
}

fn unavailable(ctx: &Ctx<'_>, error: &str) -> Response<ProxyBody> {
    tracing::warn!(target: "security", peer = %ctx.client, reason = "oidc_provider_unavailable", error, "single sign-on: the identity provider could not be used");
    refused(
        StatusCode::BAD_GATEWAY,
        "Sign-in unavailable",
        "The identity provider could not be reached or answered something unusable. Try again later, or log in with a password.",
    )
}

/// `GET /_gw/oidc/start?next=…`: off to the provider.
pub(crate) async fn start(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let cfg = config(ctx)?;
    let next = super::login::next_of(ctx);
    if ctx.login_session().await?.is_some() {
        return Ok(page::redirect(&next));
    }
    // Each start holds a flow in memory for ten minutes: an address gets the login allowance.
    ctx.gw.auth.limiters.attempt(ctx.client, None).await.map_err(|d| {
        tracing::warn!(target: "security", peer = %ctx.client, reason = "oidc_start_limited", "single sign-on: too many sign-ins begun from one address");
        ctx.gw.audit.record(sso_record(ctx, "lockout", None).field("reason", d.reason));
        HttpError::LoginLimited {
            retry_after: d.retry_after,
            reason: d.reason,
        }
    })?;
    let meta = match ctx.gw.browser.sso.provider.metadata(cfg, false).await {
        Ok(m) => m,
        Err(e) => return Ok(unavailable(ctx, &e)),
    };
    let (state, nonce, verifier) = (random(32), random(32), random(32));
    // A sign-in begun in a second tab keeps the browser's binding, so the first tab's still
    // completes. Only this host can have set a `__Host-` cookie (a project host cannot toss one).
    let binding = binding_of(&ctx.parts.headers)
        .filter(|b| b.len() == 43 && b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'))
        .map_or_else(|| random(32), String::from);
    let challenge = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()));
    let redirect_uri = format!("{}/_gw/oidc/callback", ctx.own_origin());
    let endpoint = &meta.discovery.authorization_endpoint;
    let url = format!(
        "{endpoint}{}response_type=code&client_id={}&redirect_uri={}&scope={}&state={state}&nonce={nonce}&code_challenge={challenge}&code_challenge_method=S256",
        if endpoint.contains('?') { '&' } else { '?' },
        form::encode(&cfg.client_id),
        form::encode(&redirect_uri),
        form::encode(&cfg.scopes.join(" ")),
    );
    let flow = Flow {
        nonce: idtoken::nonce_digest(&nonce),
        binding: digest("binding", &binding),
        verifier,
        redirect_uri,
        next,
    };
    match ctx.gw.browser.sso.flows.put(digest("state", &state), flow).await {
        Ok(crate::store::PutOnce::Kept) => {}
        // 10 000 flows in ten minutes: a flood (each start was charged to its address).
        Ok(_) => {
            return Err(HttpError::RateLimited {
                retry_after: std::time::Duration::from_secs(60),
            });
        }
        Err(e) => return Err(e.into()),
    }
    let mut r = page::redirect(&url);
    r.headers_mut()
        .append(header::SET_COOKIE, binding_cookie(&binding, FLOW_TTL.as_secs()));
    Ok(r)
}

/// `GET /_gw/oidc/callback?code&state` (or `?error&state`): back from the provider. Each step
/// answers the browser itself when it refuses (`Err` holds that page).
pub(crate) async fn callback(ctx: &Ctx<'_>) -> Result<Response<ProxyBody>, HttpError> {
    let cfg = config(ctx)?;
    let q = ctx.parts.uri.query().unwrap_or("");
    let get = |name| crate::policy::query::get(q, name).unwrap_or_default();
    let flow = match take_flow(ctx, &get("state")).await {
        Ok(f) => f,
        Err(page) => return Ok(*page),
    };
    let error = get("error");
    if !error.is_empty() {
        let error = printable(&error);
        tracing::warn!(target: "security", peer = %ctx.client, reason = "oidc_provider_error", error = %error, "single sign-on: the identity provider did not sign the person in");
        return Ok(refused(
            StatusCode::FORBIDDEN,
            "Not signed in",
            &format!("The identity provider did not sign you in ({error})."),
        ));
    }
    let code = get("code");
    if code.is_empty() {
        return Ok(refused(
            StatusCode::BAD_REQUEST,
            "Not signed in",
            "The identity provider sent no authorization code.",
        ));
    }
    let user = match identify(ctx, cfg, &flow, &code).await {
        Ok(identity) => match user_of(ctx, cfg, &identity) {
            Ok(u) => u,
            Err(page) => return Ok(*page),
        },
        Err(page) => return Ok(*page),
    };
    let (value, live) = ctx.gw.browser.sessions.create(&user, Origin::Password, LOGIN).await?;
    tracing::info!(target: "security", peer = %ctx.client, user = %user, session = %live.id, method = "oidc", "browser login");
    ctx.gw.audit.record(sso_record(ctx, "login", Some(&user)));
    let mut r = page::redirect(&flow.next);
    r.headers_mut().append(header::SET_COOKIE, cookie::set(&value, None));
    r.headers_mut().append(header::SET_COOKIE, binding_cookie("", 0));
    Ok(r)
}

/// The flow this callback's `state` names, taken once, only by the browser holding its binding
/// cookie (another browser's attempt is refused without burning it).
async fn take_flow(ctx: &Ctx<'_>, state: &str) -> Result<Flow, Box<Response<ProxyBody>>> {
    let key = digest("state", state);
    let binding = binding_of(&ctx.parts.headers).map(|b| digest("binding", b));
    let ours =
        move |f: &Flow| binding.is_some_and(|b| bool::from(subtle::ConstantTimeEq::ct_eq(&b[..], &f.binding[..])));
    let seen = ctx.gw.browser.sso.flows.take_if(key, ours).await;
    let reason = match seen {
        Ok(Seen::Live(f)) if ours(&f) => return Ok(f),
        Ok(Seen::Live(_)) => "oidc_other_browser",
        Ok(_) => "oidc_unknown_state",
        Err(_) => "state_unavailable",
    };
    tracing::warn!(target: "security", peer = %ctx.client, reason, "single sign-on: a callback refused");
    Err(Box::new(refused(
        StatusCode::FORBIDDEN,
        "Sign-in link not valid",
        "This sign-in has expired, was finished already, or was started in another browser. Sign in again.",
    )))
}

/// The person the provider vouches for: the code exchanged (PKCE), the ID token verified against
/// the provider's keys (fetched again once when the token names a key not yet known).
async fn identify(
    ctx: &Ctx<'_>,
    cfg: &Oidc,
    flow: &Flow,
    code: &str,
) -> Result<idtoken::Identity, Box<Response<ProxyBody>>> {
    let provider = &ctx.gw.browser.sso.provider;
    let meta = provider
        .metadata(cfg, false)
        .await
        .map_err(|e| Box::new(unavailable(ctx, &e)))?;
    let token = provider
        .exchange_code(
            cfg,
            &meta.discovery.token_endpoint,
            code,
            &flow.redirect_uri,
            &flow.verifier,
        )
        .await
        .map_err(|e| Box::new(unavailable(ctx, &e)))?;
    let meta = if idtoken::names_unknown_key(&token, &meta.keys) {
        provider
            .metadata(cfg, true)
            .await
            .map_err(|e| Box::new(unavailable(ctx, &e)))?
    } else {
        meta
    };
    let expect = Expect {
        issuer: &cfg.issuer,
        client_id: &cfg.client_id,
        nonce_digest: &flow.nonce,
        algs: &meta.discovery.id_token_signing_alg_values_supported,
        now: crate::auth::tokens::now_unix(),
    };
    idtoken::verify(&token, &meta.keys, &expect).map_err(|r| {
        tracing::warn!(target: "security", peer = %ctx.client, reason = r.code(), "single sign-on: an ID token refused");
        ctx.gw
            .audit
            .record(sso_record(ctx, "login_failed", None).field("reason", r.code()));
        Box::new(refused(
            StatusCode::FORBIDDEN,
            "Not signed in",
            &format!(
                "The identity provider's answer failed a check ({}). Sign in again.",
                r.code()
            ),
        ))
    })
}

/// The gateway user an identity names (`oidc.match`: the subject, or a verified email); anyone
/// else is refused with a page.
fn user_of(ctx: &Ctx<'_>, cfg: &Oidc, identity: &idtoken::Identity) -> Result<String, Box<Response<ProxyBody>>> {
    let (claim, found) = match cfg.match_on {
        OidcMatch::Subject => (identity.sub.as_str(), find_user(ctx, |id| id == identity.sub)),
        OidcMatch::Email => {
            let email = identity.email.as_deref().unwrap_or("");
            let found = if identity.email_verified && !email.is_empty() {
                find_user(ctx, |id| id.eq_ignore_ascii_case(email))
            } else {
                Err("oidc_email_unverified")
            };
            (email, found)
        }
    };
    found.map_err(|reason| {
        // The claims are the provider's (or its users') text: quoted and escaped, so a newline
        // in an email or subject cannot forge a log line.
        tracing::warn!(target: "security", peer = %ctx.client, reason, identity = %quoted(claim), subject = %quoted(&identity.sub), "single sign-on: an account that is not a user of this gateway refused");
        ctx.gw
            .audit
            .record(sso_record(ctx, "login_failed", None).field("reason", reason));
        Box::new(refused(
            StatusCode::FORBIDDEN,
            "Not a user here",
            "You signed in at the identity provider, but this account is not a user of this gateway. Ask its administrator to add it.",
        ))
    })
}

/// An audit record of a sign-in: the user once known (never the provider's identity or token).
fn sso_record(ctx: &Ctx<'_>, event: &'static str, user: Option<&str>) -> crate::audit::Record {
    let r = crate::audit::Record::new(event)
        .address(ctx.client)
        .via(crate::audit::Via::Oidc, None)
        .field("method", "oidc");
    match user {
        Some(u) => r.user(u),
        None => r,
    }
}

/// The one user whose `oidc` identity `matches`, by name.
fn find_user(ctx: &Ctx<'_>, matches: impl Fn(&str) -> bool) -> Result<String, &'static str> {
    ctx.state
        .settings
        .users
        .iter()
        .find(|u| u.oidc.as_deref().is_some_and(&matches) && ctx.state.users.contains_key(u.name.as_str()))
        .map(|u| u.name.clone())
        .ok_or("oidc_unknown_user")
}

/// Text from outside (a claim) fit for one log field: quoted, control characters escaped, at most
/// 200 characters.
fn quoted(text: &str) -> String {
    let cut: String = text.chars().take(200).collect();
    format!("{cut:?}")
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn a_claim_cannot_forge_a_log_line() {
        let forged = "eve@example.com\n2026-12-01T00:00:00Z INFO security: browser login user=alice";
        let shown = quoted(forged);
        assert!(!shown.contains('\n'), "{shown}");
        assert!(
            shown.starts_with('"') && shown.ends_with('"') && shown.contains("\\n2026"),
            "{shown}"
        );
        assert_eq!(quoted(&"a".repeat(500)).len(), 202, "bounded");
    }
}
