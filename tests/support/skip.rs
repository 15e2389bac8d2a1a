//! The one way a test skips itself for want of something this machine lacks (PostgreSQL, network
//! namespaces, root for OS users). A skip proves nothing, so it is never silent:
//!
//! - where CI runs (`CI` set to anything but `false`/`0`, as CI services set it) there is no
//!   skipping: the test fails, naming what is missing and what fixes it;
//! - elsewhere the skip is written straight to the process's stderr (the harness captures
//!   `eprintln!` and shows it only for failing tests) and appended as one line to the file
//!   `OCGW_SKIPPED_FILE` names, which scripts/test.sh sets and repeats at its end.
//!
//! Shared by the integration tests and the crate's own tests (through `postgres_cluster.rs`).

use std::io::Write;

/// The file each skip is appended to, one line each (scripts/test.sh sets it).
pub const FILE_VAR: &str = "OCGW_SKIPPED_FILE";

/// Whether this run is CI's, where a skip fails the test instead.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The running test's name: libtest names each test's thread after it (a tokio test's body runs
/// on that thread too). Call it on the test's thread, not on a blocking pool's.
pub fn this_test() -> String {
    std::thread::current().name().unwrap_or("an unnamed test").to_string()
}

/// Skip `test` because `why` (what it would have proved is not proved by this run); `fix` says
/// what lets it run. Under CI: panics with all three.
pub fn skip(test: &str, why: &str, fix: &str) {
    if in_ci() {
        panic!(
            "{test} cannot run: {why}; {fix}. CI={:?} is set, so a test that cannot prove what it \
             claims fails instead of skipping",
            std::env::var("CI").unwrap_or_default()
        );
    }
    let line = format!("SKIPPED: {test}: {why} ({fix})");
    let _ = writeln!(std::io::stderr(), "{line}");
    if let Some(path) = std::env::var_os(FILE_VAR) {
        // One short write in append mode: lines of tests skipping at once do not mix.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = appended {
            panic!("{test} skipped, but the skip could not be recorded in {path:?} ({FILE_VAR}): {e}");
        }
    }
}
