//! `[audit]`: where the audit trail goes and how it rotates. On by default.

use std::path::Path;

use super::super::file::RawAudit;
use super::Checker;
use crate::config::AuditConfig;

pub(crate) const DEFAULT_MAX_BYTES: u64 = 10 * 1024 * 1024;
pub(crate) const DEFAULT_KEEP: u32 = 5;
/// Below this a file would hold a handful of records and rotate constantly.
const MIN_MAX_BYTES: u64 = 4096;

pub(super) fn audit(c: &mut Checker<'_>, raw: Option<&RawAudit>, state_dir: &Path) -> Option<AuditConfig> {
    let default = || AuditConfig {
        file: state_dir.join("audit.jsonl"),
        max_bytes: DEFAULT_MAX_BYTES,
        keep: DEFAULT_KEEP,
    };
    let Some(raw) = raw else { return Some(default()) };
    if !raw.enabled {
        return None;
    }
    let max_bytes = raw.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    if max_bytes < MIN_MAX_BYTES {
        c.problem(
            "audit.max_bytes",
            format!("{max_bytes} is too small for an audit file"),
            format!("write max_bytes = {DEFAULT_MAX_BYTES} (10 MiB; at least {MIN_MAX_BYTES})"),
        );
    }
    let keep = raw.keep.unwrap_or(DEFAULT_KEEP);
    if keep > 1000 {
        c.problem(
            "audit.keep",
            format!("{keep} rotated files is more than the gateway keeps"),
            "write keep = 5 (at most 1000)",
        );
    }
    Some(AuditConfig {
        file: raw.file.as_deref().map_or_else(|| default().file, |f| c.path(f)),
        max_bytes,
        keep,
    })
}
