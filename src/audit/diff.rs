//! What a reload changed, by name: projects and users added, removed or changed. Compared on the
//! validated settings; only names leave this module (never a hash, a key or a password).

use crate::config::{Project, Settings, User};

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    pub projects_added: Vec<String>,
    pub projects_removed: Vec<String>,
    pub projects_changed: Vec<String>,
    pub users_added: Vec<String>,
    pub users_removed: Vec<String>,
    pub users_changed: Vec<String>,
}

fn same_project(a: &Project, b: &Project) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn same_user(a: &User, b: &User) -> bool {
    a.password_hash.as_ref().map(|(_, t)| t) == b.password_hash.as_ref().map(|(_, t)| t)
        && a.grants == b.grants
        && a.ssh_keys == b.ssh_keys
}

fn compare<T>(
    old: &[T],
    new: &[T],
    name: impl Fn(&T) -> &str,
    same: impl Fn(&T, &T) -> bool,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let find = |list: &'_ [T], n: &str| list.iter().position(|x| name(x) == n);
    let mut added = Vec::new();
    let mut changed = Vec::new();
    for x in new {
        match find(old, name(x)) {
            None => added.push(name(x).to_string()),
            Some(i) if !same(&old[i], x) => changed.push(name(x).to_string()),
            Some(_) => {}
        }
    }
    let removed = old
        .iter()
        .filter(|x| find(new, name(x)).is_none())
        .map(|x| name(x).to_string())
        .collect();
    (added, removed, changed)
}

pub(crate) fn changes(old: &Settings, new: &Settings) -> Changes {
    let (projects_added, projects_removed, projects_changed) =
        compare(&old.projects, &new.projects, |p| &p.name, same_project);
    let (users_added, users_removed, users_changed) = compare(&old.users, &new.users, |u| &u.name, same_user);
    Changes {
        projects_added,
        projects_removed,
        projects_changed,
        users_added,
        users_removed,
        users_changed,
    }
}

impl Changes {
    pub(crate) fn into_record(self) -> super::Record {
        super::Record::new("config_reload")
            .field("projects_added", self.projects_added)
            .field("projects_removed", self.projects_removed)
            .field("projects_changed", self.projects_changed)
            .field("users_added", self.users_added)
            .field("users_removed", self.users_removed)
            .field("users_changed", self.users_changed)
    }
}
