//! Shell completions and the man page, made from the command line's own clap definition so they
//! cannot drift from it. `opencode-gateway package-files <dir>` writes them for the Debian package
//! (scripts/deb.sh); generating them in the binary keeps `cargo install` free of a build step. It
//! is read before clap ([`requested`]), not a subcommand: clap's generators would offer even a
//! hidden one (as `help package-files`, and in zsh).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::args::Cli;

const NAME: &str = "opencode-gateway";

/// Each file and its text, at the path (under `dir`) the package takes it from.
pub(crate) fn files() -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut out = Vec::new();
    for (shell, file) in [
        (Shell::Bash, format!("{NAME}.bash")),
        (Shell::Zsh, format!("_{NAME}")),
        (Shell::Fish, format!("{NAME}.fish")),
    ] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), NAME, &mut text);
        out.push((Path::new("completions").join(file), text));
    }
    // A page per command, as clap_mangen::generate_to makes them (the top page refers to each
    // subcommand's as opencode-gateway-<name>(1)), kept in memory for the test.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    man_pages(cmd, &mut out)?;
    Ok(out)
}

fn man_pages(cmd: clap::Command, out: &mut Vec<(PathBuf, Vec<u8>)>) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub.clone(), out)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let mut text = Vec::new();
    man.render(&mut text).context("rendering a man page")?;
    out.push((Path::new("man").join(man.get_filename()), text));
    Ok(())
}

/// The folder of `opencode-gateway package-files <dir>`, when that is the command line.
pub fn requested(args: &[std::ffi::OsString]) -> Option<PathBuf> {
    match args {
        [_, cmd, dir] if cmd == "package-files" => Some(PathBuf::from(dir)),
        _ => None,
    }
}

/// `package-files <dir>`: write them all under `dir`.
pub fn write(dir: &Path) -> anyhow::Result<()> {
    for (path, text) in files()? {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str) -> String {
        let files = files().unwrap();
        let (_, bytes) = files
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .unwrap_or_else(|| panic!("{name} among {:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>()));
        String::from_utf8(bytes.clone()).unwrap()
    }

    #[test]
    fn only_package_files_with_one_folder_is_read_before_clap() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(
            requested(&args(&["gw", "package-files", "out"])),
            Some(PathBuf::from("out"))
        );
        assert_eq!(requested(&args(&["gw", "package-files"])), None);
        assert_eq!(requested(&args(&["gw", "serve", "out"])), None);
        assert_eq!(requested(&args(&["gw", "package-files", "a", "b"])), None);
    }

    #[test]
    fn completions_and_the_man_page_name_the_real_subcommands() {
        let bash = text("opencode-gateway.bash");
        let zsh = text("_opencode-gateway");
        let fish = text("opencode-gateway.fish");
        let man = text("man/opencode-gateway.1");
        for sub in ["token", "pair", "init", "serve", "devices"] {
            assert!(
                bash.contains(&format!(" {sub} ")) || bash.contains(&format!(" {sub}\"")),
                "bash lacks {sub}"
            );
            assert!(zsh.contains(&format!("'{sub}:")), "zsh lacks {sub}");
            assert!(fish.contains(&format!("-a \"{sub}\"")), "fish lacks {sub}");
            assert!(
                man.contains(&format!("opencode\\-gateway\\-{sub}")),
                "the man page lacks {sub}"
            );
        }
        // Each subcommand the top page refers to has a page of its own.
        let pages: Vec<String> = files()
            .unwrap()
            .into_iter()
            .filter_map(|(p, _)| p.strip_prefix("man").ok().map(|n| n.display().to_string()))
            .collect();
        for sub in ["token", "token-create", "pair", "init"] {
            assert!(pages.contains(&format!("opencode-gateway-{sub}.1")), "{pages:?}");
        }
        assert!(text("opencode-gateway-token-create.1").contains("\\-\\-ttl"));
        // A nested subcommand and an option reach the completions too.
        assert!(bash.contains("revoke") && bash.contains("--label"), "{bash}");
        assert!(
            man.starts_with(".ie \\n(.g .ds Aq") || man.contains(".TH opencode-gateway 1"),
            "{man}"
        );
        // The command that writes these files is not offered to people.
        for (name, t) in [("bash", &bash), ("zsh", &zsh), ("fish", &fish), ("man", &man)] {
            assert!(!t.contains("package-files"), "{name} offers package-files");
        }
    }
}
