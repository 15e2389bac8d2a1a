//! `user add|passwd|remove|list`: edit `[[user]]` tables in place, keeping comments.

use std::path::Path;

use anyhow::Context;

use crate::cli::UserAction;
use crate::config::edit;

pub fn user(path: &Path, action: UserAction) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let updated = match action {
        UserAction::List => {
            let settings = crate::config::load(path)?;
            let summary = super::check::summary(&settings);
            if let Some(users) = summary.split("\nusers:\n").nth(1) {
                print!("{users}");
            }
            return Ok(());
        }
        UserAction::Add { name, projects, role } => {
            if crate::config::Role::parse(&role).is_none() {
                anyhow::bail!("{role:?} is not a role: use viewer, approver, operator or admin");
            }
            if !crate::config::validate::valid_user_name(&name) {
                anyhow::bail!("{name:?} is not a valid user name: use letters, digits and . _ - @");
            }
            let pw = super::password::read_new_password()?;
            let hash = crate::auth::verifier::hash_password(&pw);
            edit::add_user(&text, &name, &hash, &projects, &role)?
        }
        UserAction::Passwd { name } => {
            let pw = super::password::read_new_password()?;
            let hash = crate::auth::verifier::hash_password(&pw);
            edit::set_password(&text, &name, &hash)?
        }
        UserAction::Remove { name } => edit::remove_user(&text, &name)?,
    };
    // Refuse to write a file the gateway would then refuse to load.
    crate::config::parse(&updated, path)?;
    edit::write_atomically(path, &updated)?;
    println!(
        "updated {} (a running gateway applies it on reload: `opencode-gateway reload` or SIGHUP)",
        path.display()
    );
    Ok(())
}
