//! What `opencode-gateway --version` says: the crate's version, the commit it was built from and
//! the OpenCode version its route table was read from (all three fixed at build time: build.rs).

/// `--version`'s text after the program's name (the OpenCode version is the route table's,
/// `policy::routes::TABLE_VERSION`, from the same build-time variable).
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OCGW_GIT_COMMIT"),
    "; route table of OpenCode ",
    env!("OCGW_OPENCODE_VERSION"),
    ")"
);

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use crate::cli::args::Cli;

    /// What `--version` prints, as clap prints it.
    fn printed() -> String {
        let err = Cli::command()
            .try_get_matches_from(["opencode-gateway", "--version"])
            .expect_err("--version exits early");
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayVersion);
        err.to_string()
    }

    #[test]
    fn version_names_the_release_the_commit_and_the_opencode_of_the_route_table() {
        let out = printed();
        assert!(
            out.starts_with(&format!("opencode-gateway {} (", env!("CARGO_PKG_VERSION"))),
            "{out}"
        );
        let commit = out
            .split("(commit ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .unwrap_or("");
        // A short hash from git, or "unknown" where the tree has no .git (a crate tarball).
        let hash = commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit());
        assert!(hash || commit == "unknown", "commit {commit:?} in {out}");
        // The route table's version is the pin the tests run OpenCode at.
        let package = include_str!("../../package.json");
        assert!(
            package.contains(&format!(
                "\"opencode-ai\": \"{}\"",
                crate::policy::routes::TABLE_VERSION
            )),
            "{package}"
        );
        assert!(
            out.contains(&format!(
                "route table of OpenCode {})",
                crate::policy::routes::TABLE_VERSION
            )),
            "{out}"
        );
    }
}
