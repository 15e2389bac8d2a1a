//! `passkeys [user]`, `passkeys revoke <id>`: passkeys in the state database. A sign-in reads its
//! passkey from the database each time, so a revocation here holds for a running gateway at once,
//! without telling it. Sessions a passkey already opened are not ended (`devices revoke` or
//! logging out ends those).

use std::path::Path;

use anyhow::bail;

use crate::auth::tokens::now_unix;
use crate::cli::args::PasskeysAction;
use crate::support::when::when;

pub(crate) fn passkeys(config: &Path, action: Option<PasskeysAction>, user: Option<String>) -> anyhow::Result<()> {
    let settings = crate::config::load(config)?;
    let store = crate::store::open_for(&settings)?;
    match action {
        None => list(&*store, user.as_deref()),
        Some(PasskeysAction::List { user: u }) => list(&*store, u.or(user).as_deref()),
        Some(PasskeysAction::Revoke { id }) => {
            if !store.revoke_passkey(&id, None, now_unix())? {
                if let Some(p) = store.list_passkeys(None)?.into_iter().find(|p| p.id == id) {
                    bail!("passkey {id:?} of {} is revoked already", p.user);
                }
                bail!(
                    "there is no passkey {id:?} (see `{}`)",
                    super::again(config, "passkeys")
                );
            }
            let owner = store
                .list_passkeys(None)?
                .into_iter()
                .find(|p| p.id == id)
                .map(|p| p.user);
            let mut r = crate::audit::Record::new("passkey_revoked").field("passkey", id.as_str());
            if let Some(u) = &owner {
                r = r.user(u.as_str());
            }
            crate::audit::append_from_cli(&settings, r);
            println!("revoked {id}: it signs no one in from now on");
            Ok(())
        }
    }
}

fn list(store: &dyn crate::store::Store, user: Option<&str>) -> anyhow::Result<()> {
    let rows = store.list_passkeys(user)?;
    println!(
        "{:<16} {:<12} {:<18} {:<18} {:<8} name",
        "id", "user", "added", "last used", "state"
    );
    for p in rows {
        println!(
            "{:<16} {:<12} {:<18} {:<18} {:<8} {}",
            p.id,
            p.user,
            when(p.created_at),
            p.last_used_at.map_or("never".to_string(), when),
            if p.revoked_at.is_some() { "revoked" } else { "active" },
            p.label,
        );
    }
    Ok(())
}
