//! `audit`: read the audit file and its rotations (the config says where) and print the records
//! that match, oldest first.

use std::path::Path;

use anyhow::{Context, bail};

use crate::audit::reader::{self, Filter};

pub(crate) fn audit(
    config: &Path,
    user: Option<String>,
    project: Option<String>,
    since: Option<String>,
    event: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let settings = crate::config::load(config)?;
    let Some(cfg) = &settings.audit else {
        bail!(
            "the audit log is turned off ([audit] enabled = false in {})",
            config.display()
        );
    };
    let since = since
        .map(|s| {
            reader::since(&s).with_context(|| format!("--since {s:?}: write a number with s, m, h or d (1h, 30m)"))
        })
        .transpose()?;
    let filter = Filter {
        user,
        project,
        event,
        since,
    };
    let records = reader::read(&cfg.file, &filter).with_context(|| format!("reading {}", cfg.file.display()))?;
    for (v, line) in &records {
        if json {
            println!("{line}");
        } else {
            println!("{}", reader::human(v));
        }
    }
    Ok(())
}
