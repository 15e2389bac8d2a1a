//! `token create|list|revoke`: API tokens in the state database. The CLI writes the database
//! itself (the gateway reads it per token at most once a second) and, on revoke, tells a running
//! gateway over the control socket so the very next request is refused.

use std::path::Path;

use anyhow::{Context, bail};

use crate::auth::tokens::{self, Scope};
use crate::cli::args::TokenAction;
use crate::config::Role;
use crate::support::when::when;

pub(crate) fn token(config: &Path, action: TokenAction) -> anyhow::Result<()> {
    let settings = crate::config::load(config)?;
    let store = crate::store::open_for(&settings)?;
    match action {
        TokenAction::Create {
            user,
            projects,
            role,
            policy,
            ttl,
            label,
        } => {
            if let Some(p) = &policy
                && !settings.policies.iter().any(|q| &q.name == p)
            {
                bail!("there is no [[policy]] named {p:?} in {}", config.display());
            }
            let scope = Scope {
                policy,
                ..scope(role, projects)?
            };
            create(config, &settings, &*store, &user, scope, &ttl, &label)
        }
        TokenAction::List { user } => list(&*store, user.as_deref()),
        TokenAction::Revoke { id } => revoke(config, &settings, &*store, &id),
    }
}

/// What `--role` and `--project` narrow a token to.
fn scope(role: Option<String>, projects: Option<Vec<String>>) -> anyhow::Result<Scope> {
    let role = match role.as_deref() {
        None => None,
        Some(r) => Some(
            Role::parse(r).with_context(|| format!("{r:?} is not a role: use viewer, approver, operator or admin"))?,
        ),
    };
    Ok(Scope {
        role,
        projects,
        policy: None,
    })
}

fn create(
    config: &Path,
    settings: &crate::config::Settings,
    store: &dyn crate::store::Store,
    user: &str,
    scope: Scope,
    ttl: &str,
    label: &str,
) -> anyhow::Result<()> {
    let Some(u) = settings.users.iter().find(|u| u.name == user) else {
        bail!("there is no user {user:?} in {}", config.display());
    };
    let ttl =
        tokens::parse_ttl(ttl).with_context(|| format!("--ttl {ttl:?}: use a number and d, h, m or s, as in 30d"))?;
    scope
        .check_within(&u.grants, |p| settings.projects.iter().any(|q| q.name == p))
        .map_err(|why| anyhow::anyhow!("refused: {why} (a token can only narrow its user's grants)"))?;
    let key = tokens::digest_key(settings, store)?;
    let (secret, record) = tokens::issue(store, &key, user, &scope, ttl, label)?;
    eprintln!(
        "token {} for {user} ({}), expires {}; it is shown only this once:",
        record.id,
        describe(&scope),
        when(record.expires_at)
    );
    println!("{}", secret.expose()); // ok: printing the new token once is this command's purpose
    Ok(())
}

fn list(store: &dyn crate::store::Store, user: Option<&str>) -> anyhow::Result<()> {
    let rows = store.list_tokens(user)?;
    println!(
        "{:<16} {:<12} {:<10} {:<28} {:<20} {:<20} state",
        "id", "user", "label", "scope", "expires", "last use"
    );
    let now = tokens::now_unix();
    for t in rows {
        let state = if t.revoked_at.is_some() {
            "revoked"
        } else if t.expires_at <= now {
            "expired"
        } else {
            "active"
        };
        println!(
            "{:<16} {:<12} {:<10} {:<28} {:<20} {:<20} {state}",
            t.id,
            t.user,
            if t.label.is_empty() { "-" } else { &t.label },
            describe(&Scope::of(&t)),
            when(t.expires_at),
            t.last_used_at.map_or("never".to_string(), when),
        );
    }
    Ok(())
}

fn revoke(
    config: &Path,
    settings: &crate::config::Settings,
    store: &dyn crate::store::Store,
    id: &str,
) -> anyhow::Result<()> {
    if !store.revoke_token(id, tokens::now_unix())? {
        bail!("no active token {id:?} (see `{}`)", super::again(config, "token list"));
    }
    println!("revoked {id}");
    crate::audit::append_from_cli(settings, crate::audit::Record::new("token_revoke").field("token", id));
    match super::admin_client::request(config, "POST", "/tokens/changed") {
        Ok((200, _)) => println!("the running gateway refuses it from now on"),
        _ => println!(
            "no running gateway answered on the control socket; a gateway refuses it within {} s of its next use",
            tokens::CACHE_TTL.as_secs()
        ),
    }
    Ok(())
}

fn describe(scope: &Scope) -> String {
    let policy = scope.policy.as_ref().map_or(String::new(), |p| format!(", policy {p}"));
    format!(
        "{} in {}{policy}",
        scope.role.map_or("user's role", Role::as_str),
        scope
            .projects
            .as_ref()
            .map_or("user's projects".to_string(), |p| p.join(","))
    )
}
