//! `user add|passwd|remove|list`: edit `[[user]]` tables in place, keeping comments.

use std::path::Path;

use anyhow::Context;

use crate::cli::args::UserAction;
use crate::config::edit;

pub(crate) fn user(path: &Path, action: UserAction) -> anyhow::Result<()> {
    let config = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let named = match &action {
        UserAction::Add { name, .. } | UserAction::Passwd { name } | UserAction::Remove { name } => Some(name.as_str()),
        UserAction::List => None,
    };
    let target = file_for(path, &config, named)?;
    let text = if target == path {
        config.clone()
    } else {
        match std::fs::read_to_string(&target) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", target.display())),
        }
    };
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
    if target == path {
        crate::config::parse(&updated, path)?;
    } else {
        crate::config::parse_with_users(&config, path, Some(&updated))?;
    }
    edit::write_atomically(&target, &updated)?;
    println!(
        "updated {} (a running gateway applies it on reload: `{}` or SIGHUP)",
        target.display(),
        super::again(path, "reload")
    );
    Ok(())
}

/// The file a user edit changes: the config when it defines `name` itself or names no users
/// file, else the users file (`server.users_file`), where new users go.
fn file_for(config_path: &Path, config: &str, name: Option<&str>) -> anyhow::Result<std::path::PathBuf> {
    let doc: toml::Value = toml::from_str(config).with_context(|| format!("{} is not TOML", config_path.display()))?;
    let users_file = doc
        .get("server")
        .and_then(|s| s.get("users_file"))
        .and_then(toml::Value::as_str);
    let in_config = name.is_some_and(|n| {
        doc.get("user").and_then(toml::Value::as_array).is_some_and(|users| {
            users
                .iter()
                .any(|u| u.get("name").and_then(toml::Value::as_str) == Some(n))
        })
    });
    Ok(match crate::config::users_file(config_path, users_file) {
        Some(file) if !in_config => file,
        _ => config_path.to_path_buf(),
    })
}
