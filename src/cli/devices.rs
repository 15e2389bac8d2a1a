//! `devices [user]`, `devices revoke <id>`: paired devices in the state database. The CLI reads and
//! writes the database itself; after a revoke it tells a running gateway over the control socket
//! so the device's next request is refused (a gateway started later reads the revocation from the
//! database anyway: sessions are checked against it).

use std::path::Path;

use anyhow::bail;

use crate::auth::tokens::now_unix;
use crate::cli::args::DevicesAction;
use crate::support::when::when;

pub(crate) fn devices(config: &Path, action: Option<DevicesAction>, user: Option<String>) -> anyhow::Result<()> {
    let settings = crate::config::load(config)?;
    let store = crate::store::open_for(&settings)?;
    match action {
        None => list(&*store, user.as_deref()),
        Some(DevicesAction::List { user: u }) => list(&*store, u.or(user).as_deref()),
        Some(DevicesAction::Revoke { id }) => {
            if !store.revoke_device(&id, now_unix())? {
                let known = store.list_devices(None)?.into_iter().any(|d| d.id == id);
                if known {
                    bail!("device {id:?} is revoked already");
                }
                bail!("there is no device {id:?} (see `{}`)", super::again(config, "devices"));
            }
            println!("revoked {id}: its sessions are ended");
            let owner = store
                .list_devices(None)?
                .into_iter()
                .find(|d| d.id == id)
                .map(|d| d.user);
            let mut r = crate::audit::Record::new("device_revoke").field("device", id.as_str());
            if let Some(u) = owner {
                r = r.user(u);
            }
            crate::audit::append_from_cli(&settings, r);
            match super::admin_client::request(config, "POST", "/sessions/changed") {
                Ok((200, _)) => println!("the running gateway refuses it from now on"),
                _ => println!(
                    "no running gateway answered on the control socket; the revocation applies when it next starts"
                ),
            }
            Ok(())
        }
    }
}

fn list(store: &dyn crate::store::Store, user: Option<&str>) -> anyhow::Result<()> {
    let rows = store.list_devices(user)?;
    println!(
        "{:<16} {:<12} {:<18} {:<18} {:<40} {:<8} label",
        "id", "user", "paired", "last seen", "last address", "state"
    );
    for d in rows {
        println!(
            "{:<16} {:<12} {:<18} {:<18} {:<40} {:<8} {}",
            d.id,
            d.user,
            when(d.created_at),
            d.last_seen_at.map_or("never".to_string(), when),
            d.last_address.as_deref().unwrap_or("-"),
            if d.revoked_at.is_some() { "revoked" } else { "active" },
            d.label,
        );
    }
    Ok(())
}
