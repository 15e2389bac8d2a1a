//! Project sets (`directories = "/srv/app/.worktrees/*"`): one project per matching folder, named
//! `<set name>-<folder>`, with the set's settings. Read at load and again by the gateway's watcher
//! (`serve`), which swaps in a new state when the folders change.

use std::collections::HashSet;
use std::path::Path;

use super::settings::{Project, ProjectSet, Settings};
use super::validate::valid_project_name;

/// Does folder `name` match a set whose pattern's last segment is `<prefix>*`? Hidden folders
/// never match (`.git`, editors' folders), even with an empty prefix.
pub fn matches(prefix: &str, name: &str) -> bool {
    name.starts_with(prefix) && name.len() > prefix.len() && !name.starts_with('.')
}

/// The project a set makes of folder `folder`: `<set>-<folder>`.
pub fn project_name(set: &str, folder: &str) -> String {
    format!("{set}-{folder}")
}

/// The projects every set finds now, sorted by name, and why a matching folder was refused.
/// Settings' configured projects (`set == None`) and protected paths must already be final.
pub fn discover(settings: &Settings) -> (Vec<Project>, Vec<String>) {
    let mut found = Vec::new();
    let mut warnings = Vec::new();
    let mut taken: HashSet<String> = settings
        .projects
        .iter()
        .filter(|p| p.set.is_none())
        .map(|p| p.name.clone())
        .collect();
    for set in &settings.project_sets {
        let entries = match std::fs::read_dir(&set.parent) {
            Ok(e) => e,
            Err(e) => {
                warnings.push(format!(
                    "project set {}: cannot read {}: {e}",
                    set.name,
                    set.parent.display()
                ));
                continue;
            }
        };
        let mut folders: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| matches(&set.prefix, n))
            .collect();
        folders.sort();
        for folder in folders {
            if let Some(p) = one(settings, set, &folder, &mut taken, &mut warnings) {
                found.push(p);
            }
        }
    }
    (found, warnings)
}

fn one(
    settings: &Settings,
    set: &ProjectSet,
    folder: &str,
    taken: &mut HashSet<String>,
    warnings: &mut Vec<String>,
) -> Option<Project> {
    let path = set.parent.join(folder);
    let Ok(dir) = path.canonicalize() else { return None };
    if !dir.is_dir() {
        return None;
    }
    let name = project_name(&set.name, folder);
    let refuse = |why: String| {
        format!(
            "project set {}: folder {} is not a project: {why}",
            set.name,
            path.display()
        )
    };
    if !valid_project_name(&name) {
        warnings.push(refuse(format!(
            "{name:?} is not a valid project name (lower-case letters, digits and '-', at most 63)"
        )));
        return None;
    }
    if !taken.insert(name.clone()) {
        warnings.push(refuse(format!("the name {name:?} is already a project")));
        return None;
    }
    if let Some(why) = holds_gateway_files(settings, &dir) {
        warnings.push(refuse(why));
        return None;
    }
    let mut p = set.template.clone();
    p.name = name;
    p.directory = Some(dir);
    p.set = Some(set.name.clone());
    Some(p)
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
pub fn refresh(settings: &Settings) -> (Option<Settings>, Vec<String>) {
    let (found, warnings) = discover(settings);
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
    }

    #[test]
    fn discovered_projects_follow_the_folders_and_refuse_bad_ones() {
        let root = tempfile::tempdir().unwrap();
        let wt = root.path().join("wt");
        for d in ["one", "Two", ".hidden", "state"] {
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
        assert_eq!(names, ["app-one"], "{:?}", s.discovery_warnings);
        assert_eq!(
            s.projects[0].directory.as_deref(),
            Some(wt.join("one").canonicalize().unwrap().as_path())
        );
        assert_eq!(s.projects[0].set.as_deref(), Some("app"));
        let w = s.discovery_warnings.join("\n");
        assert!(w.contains("\"app-Two\" is not a valid project name"), "{w}");
        assert!(
            w.contains("folder") && w.contains("state") && w.contains("server.state_dir"),
            "{w}"
        );
        let summary = crate::commands::check::summary(&s);
        assert!(
            summary.contains("app-one  spawned") && summary.contains("discovered by project set app"),
            "{summary}"
        );
        assert!(summary.contains("app-<folder>  project set"), "{summary}");
        assert!(refresh(&s).0.is_none(), "nothing changed");
        std::fs::create_dir(wt.join("three")).unwrap();
        let next = refresh(&s).0.expect("a new folder");
        let names: Vec<_> = next.projects.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["app-one", "app-three"]);
        std::fs::remove_dir(wt.join("one")).unwrap();
        let next = refresh(&next).0.expect("a removed folder");
        let names: Vec<_> = next.projects.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["app-three"]);
    }
}
