//! Project sets (`directories = "/srv/app/.worktrees/*"`): one project per matching folder, named
//! `<set name>-<folder>`, with the set's settings. Read at load and again by the gateway's watcher
//! (`serve`), which swaps in a new state when the folders change.
//!
//! Anyone who can write the set's folder (a developer, the agent of any project in the set) can
//! put an entry there, so an entry becomes a project only when it is a real directory whose
//! canonical path is that folder's child: a symbolic link (to another project, to `/etc`) would
//! otherwise serve its target to everyone granted the set's pattern.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

pub(crate) use super::discover_box::{BoxListing, BoxListings};
use super::folder_entry::Kind;
use super::settings::{Project, ProjectSet, Settings};
use super::validate::names::valid_project_name;

/// Does folder `name` match a set whose pattern's last segment is `<prefix>*`? Hidden folders
/// never match (`.git`, editors' folders), even with an empty prefix.
pub(crate) fn matches(prefix: &str, name: &str) -> bool {
    name.starts_with(prefix) && name.len() > prefix.len() && !name.starts_with('.')
}

/// The project a set makes of folder `folder`: `<set>-<folder>`, the folder's name spelled as a
/// project name (lower case; every run of other characters, `_` and `.` included, becomes one
/// `-`), so `Feat_Login.v2` serves as `<set>-feat-login-v2`.
pub fn project_name(set: &str, folder: &str) -> String {
    let mut name = format!("{set}-");
    for c in folder.chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_lowercase());
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    name.trim_end_matches('-').to_string()
}

/// The projects every set finds now, sorted by name, and why a matching folder was refused.
/// Settings' configured projects (`set == None`) and protected paths must already be final. A
/// set on a box finds what `listed` holds for it (the running gateway lists its folder over the
/// box's link: `gateway/box_sets.rs`), nothing before the first listing.
pub(crate) fn discover(settings: &Settings, listed: &BoxListings) -> (Vec<Project>, Vec<String>) {
    let mut found = Vec::new();
    let mut warnings = Vec::new();
    let mut taken: HashSet<String> = settings
        .projects
        .iter()
        .filter(|p| p.set.is_none())
        .map(|p| p.name.clone())
        .collect();
    for set in &settings.project_sets {
        let folders = match &set.template.on_box {
            None => local_folders(set, &mut warnings),
            Some(b) => super::discover_box::folders(set, b, listed.get(&set.name), &mut warnings),
        };
        let Some(mut folders) = folders else { continue };
        folders.retain(|(n, _)| matches(&set.prefix, n));
        folders.sort_by(|a, b| a.0.cmp(&b.0));
        // Two folders whose names spell one project name: neither is served, so which one a
        // name means never depends on the order the folders were made in.
        let mut spelled: HashMap<String, Vec<&str>> = HashMap::new();
        for (folder, _) in &folders {
            spelled.entry(project_name(&set.name, folder)).or_default().push(folder);
        }
        for (folder, kind) in &folders {
            let name = project_name(&set.name, folder);
            if let Some(all) = spelled.get(&name).filter(|f| f.len() > 1) {
                if all[0] == folder {
                    warnings.push(format!(
                        "project set {}: folders {} all spell the project name {name:?}; rename all but one",
                        set.name,
                        all.join(", ")
                    ));
                }
                continue;
            }
            if let Some(p) = one(settings, set, folder, kind, name, &mut taken, &mut warnings) {
                found.push(p);
            }
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    (found, warnings)
}

/// The entries of a set's folder on this machine (`None`: it cannot be read, said in `warnings`).
fn local_folders(set: &ProjectSet, warnings: &mut Vec<String>) -> Option<Vec<(String, Kind)>> {
    let entries = match std::fs::read_dir(&set.parent) {
        Ok(e) => e,
        Err(e) => {
            warnings.push(format!(
                "project set {}: cannot read {}: {e}",
                set.name,
                set.parent.display()
            ));
            return None;
        }
    };
    let kind = |e: &std::fs::DirEntry| {
        let t = e.file_type().ok()?;
        Some(if t.is_symlink() {
            Kind::Link(std::fs::read_link(e.path()).map_or_else(|_| "?".into(), |t| t.display().to_string()))
        } else if t.is_dir() {
            Kind::Dir
        } else {
            Kind::Other
        })
    };
    Some(
        entries
            .flatten()
            .filter_map(|e| Some((e.file_name().into_string().ok()?, kind(&e)?)))
            .collect(),
    )
}

fn one(
    settings: &Settings,
    set: &ProjectSet,
    folder: &str,
    kind: &Kind,
    name: String,
    taken: &mut HashSet<String>,
    warnings: &mut Vec<String>,
) -> Option<Project> {
    let path = set.parent.join(folder);
    let refuse = |why: String| {
        format!(
            "project set {}: folder {} is not a project: {why}",
            set.name,
            path.display()
        )
    };
    match kind {
        Kind::Link(target) => {
            warnings.push(refuse(format!(
                "it is a symbolic link (to {target}); a set serves only real folders inside {}",
                set.parent.display()
            )));
            return None;
        }
        Kind::Other => return None,
        Kind::Dir => {}
    }
    // On a box the listing said so already (a real folder, in the folder `pwd -P` gave).
    let dir = match set.template.on_box {
        Some(_) => path.clone(),
        None => match real_child(&set.parent, &path) {
            Ok(dir) => dir,
            Err(why) => {
                warnings.push(refuse(why));
                return None;
            }
        },
    };
    if !valid_project_name(&name) {
        warnings.push(refuse(format!(
            "its name spells {name:?}, not a valid project name (lower-case letters, digits and '-', at most 63); rename the folder"
        )));
        return None;
    }
    if !taken.insert(name.clone()) {
        warnings.push(refuse(format!("the name {name:?} is already a project")));
        return None;
    }
    if let Some(why) = holds_gateway_files(settings, &dir).filter(|_| set.template.on_box.is_none()) {
        warnings.push(refuse(why));
        return None;
    }
    let mut p = set.template.clone();
    p.name = name;
    p.directory = Some(dir);
    p.set = Some(set.name.clone());
    Some(p)
}

/// The canonical path of `path`, when it is a directory directly inside the set's folder once
/// every link is resolved (a link higher up, or a folder swapped for one since it was listed,
/// is caught here).
fn real_child(parent: &Path, path: &Path) -> Result<PathBuf, String> {
    let parent = parent
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", parent.display()))?;
    let dir = path.canonicalize().map_err(|e| format!("cannot resolve it: {e}"))?;
    if !dir.is_dir() {
        return Err("it is not a directory".into());
    }
    if dir.parent() != Some(parent.as_path()) {
        return Err(format!(
            "it resolves to {}, outside {}; a set serves only real folders inside it",
            dir.display(),
            parent.display()
        ));
    }
    Ok(dir)
}

/// The same rule as for configured projects: no gateway secret inside a project's directory, and
/// no project inside a folder the gateway owns.
fn holds_gateway_files(settings: &Settings, dir: &Path) -> Option<String> {
    for e in settings.protected.entries() {
        if e.key.starts_with("tls.cert") || e.key.ends_with("(CA certificate)") {
            continue;
        }
        if e.canonical.starts_with(dir) || e.path.starts_with(dir) {
            return Some(format!("it holds the gateway's {} ({})", e.key, e.path.display()));
        }
        if e.dir && (dir.starts_with(&e.canonical) || dir.starts_with(&e.path)) {
            return Some(format!("it is inside {} ({})", e.key, e.path.display()));
        }
    }
    None
}

/// The settings with the sets' projects found again (`None` when they are the same), and the
/// folders refused now.
pub(crate) fn refresh(settings: &Settings, listed: &BoxListings) -> (Option<Settings>, Vec<String>) {
    let (found, warnings) = discover(settings, listed);
    let key = |p: &Project| (p.name.clone(), p.directory.clone());
    let before: Vec<_> = settings.projects.iter().filter(|p| p.set.is_some()).map(key).collect();
    let after: Vec<_> = found.iter().map(key).collect();
    if before == after {
        return (None, warnings);
    }
    let mut next = settings.clone();
    next.projects.retain(|p| p.set.is_none());
    next.projects.extend(found);
    next.discovery_warnings = warnings.clone();
    (Some(next), warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::validate::split_pattern;

    #[test]
    fn a_set_matches_folders_by_the_last_segment_only() {
        assert_eq!(
            split_pattern("/srv/app/.worktrees/*"),
            Some(("/srv/app/.worktrees", ""))
        );
        assert_eq!(split_pattern("wt/feat-*"), Some(("wt", "feat-")));
        assert_eq!(split_pattern("/srv/*/x*"), None, "a star only in the last segment");
        assert_eq!(split_pattern("/srv/a*b"), None, "only a trailing star");
        assert_eq!(split_pattern("/srv/app"), None);
        assert_eq!(split_pattern("*"), None);
        assert!(matches("", "feature"));
        assert!(!matches("", ".git"), "hidden folders never match");
        assert!(matches("feat-", "feat-login"));
        assert!(!matches("feat-", "feat-"), "the prefix alone is not a match");
        assert!(!matches("feat-", "fix-login"));
        assert_eq!(project_name("app", "feat-login"), "app-feat-login");
        assert_eq!(project_name("app", "Feat_Login.v2"), "app-feat-login-v2");
        assert_eq!(project_name("app", "a__b--c."), "app-a-b-c");
        assert_eq!(
            project_name("app", "über"),
            "app-ber",
            "non-ASCII letters are separators"
        );
    }

    #[test]
    fn discovered_projects_follow_the_folders_and_refuse_bad_ones() {
        let root = tempfile::tempdir().unwrap();
        let wt = root.path().join("wt");
        for d in ["one", "Two", ".hidden", "state", "x_y", "x.y"] {
            std::fs::create_dir_all(wt.join(d)).unwrap();
        }
        std::fs::write(wt.join("file"), "").unwrap();
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"{}\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n\
             [[project]]\nname = \"app\"\ndirectories = \"{}/*\"\nspawn = true\nstart = \"on-demand\"\n",
            wt.join("state/gw").display(),
            wt.display()
        );
        let s = crate::config::parse(&config, &root.path().join("gateway.toml")).unwrap();
        let names: Vec<_> = s.projects.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["app-one", "app-two"], "{:?}", s.discovery_warnings);
        assert_eq!(
            s.projects[0].directory.as_deref(),
            Some(wt.join("one").canonicalize().unwrap().as_path())
        );
        assert_eq!(s.projects[0].set.as_deref(), Some("app"));
        let w = s.discovery_warnings.join("\n");
        assert!(
            w.contains("folders x.y, x_y all spell the project name \"app-x-y\"; rename all but one"),
            "two folders, one name: neither is served: {w}"
        );
        assert!(
            w.contains("folder") && w.contains("state") && w.contains("server.state_dir"),
            "{w}"
        );
        // What `check` prints of these projects: cli/check.rs's tests.
        assert!(refresh(&s, &BoxListings::new()).0.is_none(), "nothing changed");
        std::fs::create_dir(wt.join("three")).unwrap();
        let next = refresh(&s, &BoxListings::new()).0.expect("a new folder");
        let names: Vec<_> = next.projects.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["app-one", "app-three", "app-two"]);
        std::fs::remove_dir(wt.join("one")).unwrap();
        let next = refresh(&next, &BoxListings::new()).0.expect("a removed folder");
        let names: Vec<_> = next.projects.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["app-three", "app-two"]);
    }

    /// Issue 21, defect 2: a link in a set's folder served its target (another project's folder,
    /// `/etc`) to everyone granted the set's pattern.
    #[test]
    fn links_in_a_set_folder_never_become_projects() {
        let root = tempfile::tempdir().unwrap();
        let wt = root.path().join("wt");
        let other = root.path().join("other-project");
        std::fs::create_dir_all(wt.join("real")).unwrap();
        std::fs::create_dir_all(other.join("inner")).unwrap();
        std::os::unix::fs::symlink(&other, wt.join("o")).unwrap();
        std::os::unix::fs::symlink("/etc", wt.join("etc")).unwrap();
        std::os::unix::fs::symlink(wt.join("real"), wt.join("alias")).unwrap();
        std::os::unix::fs::symlink(wt.join("missing"), wt.join("dangling")).unwrap();
        // A set folder reached through a link is fine: its real children are still its children.
        let via = root.path().join("via");
        std::os::unix::fs::symlink(&wt, &via).unwrap();
        let config = |parent: &Path| {
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"{}\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n\
                 [[project]]\nname = \"app\"\ndirectories = \"{}/*\"\nspawn = true\nstart = \"on-demand\"\n",
                root.path().join("state").display(),
                parent.display()
            )
        };
        let shown = wt.canonicalize().unwrap();
        for parent in [&wt, &via] {
            let s = crate::config::parse(&config(parent), &root.path().join("gateway.toml")).unwrap();
            let found: Vec<_> = s
                .projects
                .iter()
                .map(|p| (p.name.as_str(), p.directory.clone().unwrap()))
                .collect();
            assert_eq!(
                found,
                [("app-real", wt.join("real").canonicalize().unwrap())],
                "{:?}",
                s.discovery_warnings
            );
            let w = s.discovery_warnings.join("\n");
            for (link, target) in [("o", other.display().to_string()), ("etc", "/etc".into())] {
                assert!(
                    w.contains(&format!(
                        "{}/{link} is not a project: it is a symbolic link (to {target})",
                        shown.display()
                    )),
                    "{link}: {w}"
                );
            }
            assert!(w.contains("alias is not a project: it is a symbolic link"), "{w}");
            assert!(w.contains("dangling is not a project: it is a symbolic link"), "{w}");
        }
        // The check that resolves every link catches what a listing cannot see.
        assert!(real_child(&wt, &wt.join("real")).is_ok());
        let why = real_child(&wt, &wt.join("o")).unwrap_err();
        assert!(why.contains("outside") && why.contains("other-project"), "{why}");
        let why = real_child(&wt, &wt.join("real/../o/inner")).unwrap_err();
        assert!(why.contains("outside"), "{why}");
    }
}
