//! `[[user]]` tables: name, argon2id hash, SSH keys, projects and roles.

use std::collections::{BTreeMap, HashSet};

use argon2::PasswordHash;

use super::{Checker, valid_user_name};
use crate::config::file::{RawGrants, RawUser};
use crate::config::settings::*;

pub(super) fn user(
    c: &mut Checker<'_>,
    key: &str,
    u: &RawUser,
    projects: &HashSet<&str>,
    sets: &[&str],
    sso: bool,
) -> Option<User> {
    let key = format!("{key} ({})", u.name);
    c.valid_name(
        &key,
        "user",
        &u.name,
        valid_user_name,
        "use letters, digits and . _ - @ (at most 64)",
    );
    let password_hash = password_hash(c, &key, u);
    let oidc = sign_in(c, &key, u, sso);
    let role = role(c, &key, u);
    let grants = grants(c, &key, u, role, projects, sets);
    let ssh_keys = ssh_keys(c, &key, u);
    Some(User {
        name: u.name.clone(),
        password_hash,
        ssh_keys,
        oidc: oidc.map(String::from),
        grants,
    })
}

fn password_hash(c: &mut Checker<'_>, key: &str, u: &RawUser) -> Option<(PasswordHash, String)> {
    match &u.password_hash {
        Some(h) => match PasswordHash::new(h) {
            Ok(parsed) if parsed.algorithm.as_str() == "argon2id" => Some((parsed, h.clone())),
            Ok(_) => {
                c.problem(
                    format!("{key}.password_hash"),
                    "the hash is not argon2id",
                    "make one with: opencode-gateway hash-password",
                );
                None
            }
            Err(_) => {
                c.problem(
                    format!("{key}.password_hash"),
                    "the hash is not a PHC string ($argon2id$v=19$…)",
                    "make one with: opencode-gateway hash-password",
                );
                None
            }
        },
        None => None,
    }
}

/// The user can log in some way; their single sign-on identity, if any, is usable.
fn sign_in<'u>(c: &mut Checker<'_>, key: &str, u: &'u RawUser, sso: bool) -> Option<&'u str> {
    if u.password_hash.is_none() && u.ssh_keys.is_empty() && u.oidc.is_none() {
        c.problem(
            format!("{key}.password_hash"),
            "the user has neither a password, an SSH key nor single sign-on and could never log in",
            "set a password with: opencode-gateway user passwd <name>, or name their identity with oidc = \"…\" (needs [oidc])",
        );
    }
    let oidc = u.oidc.as_deref().map(str::trim).filter(|o| !o.is_empty());
    if u.oidc.is_some() && oidc.is_none() {
        c.problem(
            format!("{key}.oidc"),
            "the identity is empty",
            "write the user's email (oidc.match = \"email\") or subject (oidc.match = \"sub\"), or remove oidc",
        );
    } else if oidc.is_some() && !sso {
        c.problem(
            format!("{key}.oidc"),
            "there is no [oidc] table, so nobody can sign in with it",
            "add [oidc] with the provider's issuer and client, or remove oidc from this user",
        );
    }
    oidc
}

/// The one role of `role = …`, for a list of projects.
fn role(c: &mut Checker<'_>, key: &str, u: &RawUser) -> Option<Role> {
    match u.role.as_deref() {
        None => None,
        Some(r) => match Role::parse(r) {
            Some(role) => Some(role),
            None => {
                c.problem(
                    format!("{key}.role"),
                    format!("{r:?} is not a role"),
                    "write role = \"viewer\", \"approver\", \"operator\" or \"admin\"",
                );
                None
            }
        },
    }
}

fn grants(
    c: &mut Checker<'_>,
    key: &str,
    u: &RawUser,
    role: Option<Role>,
    projects: &HashSet<&str>,
    sets: &[&str],
) -> Grants {
    match &u.projects {
        RawGrants::List(list) => {
            let role = role.unwrap_or(Role::Viewer);
            if list.iter().any(|p| p == "*") {
                Grants::All(role)
            } else {
                let mut map = BTreeMap::new();
                for p in list {
                    check_project_ref(c, key, p, projects, sets);
                    map.insert(p.clone(), role);
                }
                Grants::Each(map)
            }
        }
        RawGrants::Map(map) => {
            if u.role.is_some() {
                c.problem(
                    format!("{key}.role"),
                    "role is given per project in projects = { … }",
                    "remove role, or write projects = [\"…\"] with one role",
                );
            }
            let mut out = BTreeMap::new();
            for (p, r) in map {
                check_project_ref(c, key, p, projects, sets);
                match Role::parse(r) {
                    Some(role) => {
                        out.insert(p.clone(), role);
                    }
                    None => c.problem(
                        format!("{key}.projects.{p}"),
                        format!("{r:?} is not a role"),
                        "write \"viewer\", \"approver\", \"operator\" or \"admin\"",
                    ),
                }
            }
            if out.contains_key("*") {
                let role = out["*"];
                Grants::All(role)
            } else {
                Grants::Each(out)
            }
        }
    }
}

fn ssh_keys(c: &mut Checker<'_>, key: &str, u: &RawUser) -> Vec<russh::keys::PublicKey> {
    let mut ssh_keys = Vec::new();
    for (i, line) in u.ssh_keys.iter().enumerate() {
        match crate::config::ssh_key::parse_authorized_key(line) {
            Ok(k) => ssh_keys.push(k),
            Err(e) => c.problem(
                format!("{key}.ssh_keys[{i}]"),
                e,
                "paste the line from the user's ~/.ssh/id_ed25519.pub (type, base64 key, comment)",
            ),
        }
    }
    ssh_keys
}

fn check_project_ref(c: &mut Checker<'_>, key: &str, p: &str, projects: &HashSet<&str>, sets: &[&str]) {
    // `app-*`: a trailing star grants every project whose name starts with `app-` (a set's
    // discovered projects, whose names come and go with their folders).
    if let Some(prefix) = p.strip_suffix('*')
        && !prefix.is_empty()
    {
        if !prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            c.problem(
                format!("{key}.projects"),
                format!("{p:?} is not a project name pattern"),
                "write a project name's beginning followed by *, such as \"app-*\"",
            );
        }
        return;
    }
    // A discovered project may be granted by name before its folder exists.
    if sets
        .iter()
        .any(|s| p.strip_prefix(s).is_some_and(|rest| rest.starts_with('-')))
    {
        return;
    }
    if p != "*" && !projects.contains(p) {
        c.problem(
            format!("{key}.projects"),
            format!("there is no project named {p:?}"),
            "grant a project defined in a [[project]] table, a pattern such as \"app-*\", or \"*\" for all",
        );
    }
}
