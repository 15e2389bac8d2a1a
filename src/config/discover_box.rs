//! A project set on a box (issue 41: tasks on a box's projects): its folder is listed there, by
//! the running gateway over the box's link ([`LIST`], run by `gateway/box_sets.rs`), and read
//! here. The listing says for each entry only what `discover` needs: a real folder or a link.
//! What a hostile folder name could smuggle into the listing is refused: the script skips names
//! with a line break, and a name with a `/` (no real file has one) or `.`/`..` is dropped here,
//! so a listed name is always one folder directly inside the set's folder.

use std::collections::HashMap;
use std::path::PathBuf;

use super::folder_entry::Kind;
use super::settings::ProjectSet;

/// What a box set's folder held when it was last listed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoxListing {
    /// The folder as the box resolves it (`pwd -P`).
    pub real: PathBuf,
    /// Each entry (hidden ones are not listed): its name, a real folder or a link.
    pub entries: Vec<(String, Kind)>,
}

/// The last good listing of each box set, by set name.
pub(crate) type BoxListings = HashMap<String, BoxListing>;

/// Run on the box as `sh -c LIST sh <folder>`: `real <path>`, then `dir <name>` or `link <name>`
/// per entry (a glob's `*` skips hidden names, as the sets do).
pub(crate) const LIST: &str = r#"cd "$1" || exit 66
printf 'real %s\n' "$(pwd -P)"
nl='
'
for f in *; do
  case $f in *"$nl"*) continue ;; esac
  if [ -L "$f" ]; then printf 'link %s\n' "$f"
  elif [ -d "$f" ]; then printf 'dir %s\n' "$f"
  fi
done
"#;

/// Read [`LIST`]'s output.
pub(crate) fn parse(out: &str) -> Result<BoxListing, String> {
    let mut lines = out.lines();
    let real = (lines.next().and_then(|l| l.strip_prefix("real ")))
        .filter(|r| r.starts_with('/'))
        .ok_or("the listing did not say where the folder is")?;
    let entries = lines
        .filter_map(|l| {
            let (kind, name) = l.split_once(' ')?;
            let kind = match kind {
                "dir" => Kind::Dir,
                "link" => Kind::Link("something on the box".into()),
                _ => return None,
            };
            let plain = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
            plain.then(|| (name.to_string(), kind))
        })
        .collect();
    Ok(BoxListing {
        real: PathBuf::from(real),
        entries,
    })
}

/// The entries of `set`'s folder on box `on`, as last listed (`None`: not listed yet, or the
/// folder is reached through a link there, said in `warnings`: its servers would refuse to start).
pub(super) fn folders(
    set: &ProjectSet,
    on: &str,
    listed: Option<&BoxListing>,
    warnings: &mut Vec<String>,
) -> Option<Vec<(String, Kind)>> {
    let listing = listed?;
    if listing.real != set.parent {
        warnings.push(format!(
            "project set {}: {} on box {on} is {} (a link); set directories to {}/{}*",
            set.name,
            set.parent.display(),
            listing.real.display(),
            listing.real.display(),
            set.prefix
        ));
        return None;
    }
    Some(listing.entries.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script run by this machine's `sh` on a folder with a real folder, a link, a file, a
    /// hidden folder and a name with a line break that spells another entry.
    #[test]
    fn the_listing_names_real_folders_and_links_and_nothing_smuggled() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("feat-a")).unwrap();
        std::fs::create_dir(d.join(".hidden")).unwrap();
        std::fs::create_dir(d.join("x\ndir etc")).unwrap();
        std::fs::write(d.join("file"), "").unwrap();
        std::os::unix::fs::symlink("/etc", d.join("feat-etc")).unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", LIST, "sh"])
            .arg(d)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let listing = parse(&String::from_utf8(out.stdout).unwrap()).unwrap();
        assert_eq!(listing.real, d.canonicalize().unwrap());
        let names: Vec<(&str, bool)> = (listing.entries.iter())
            .map(|(n, k)| (n.as_str(), *k == Kind::Dir))
            .collect();
        assert_eq!(names, [("feat-a", true), ("feat-etc", false)]);
        // A name carrying a path (as a forged line would) is dropped.
        let forged = parse("real /srv/wt\ndir /etc\ndir ..\ndir a/b\ndir ok\n").unwrap();
        assert_eq!(forged.entries, [("ok".to_string(), Kind::Dir)]);
        assert!(parse("dir ok\n").is_err(), "no folder line");
    }
}
