//! Integration tests: the real gateway binary on ephemeral loopback ports, driven by real TLS
//! clients. Every test that starts the real OpenCode server (or its clients, or headless Chromium
//! through playwright-core, which `scripts/test.sh` installs with it) is marked exactly
//! `#[ignore = "needs OpenCode: run scripts/test.sh"]`, and no other test is ignored, so:
//!
//! - list them: `cargo test --test integration -- --list --ignored`
//!   (or `grep -rn 'needs OpenCode: run scripts/test.sh' tests/`);
//! - run them too: `scripts/test.sh`, or `cargo test --test integration -- --include-ignored`
//!   with OpenCode at `node_modules/.bin/opencode`.
//!
//! Helpers more than one file uses live in `common/`.

mod abuse;
mod acme;
mod admin;
mod app;
mod audit;
mod boxes;
mod boxes_host_keys;
mod browser;
mod browser_login;
mod budget_races;
mod budgets;
mod certs;
mod common;
mod compression;
mod config_cli;
mod connections;
mod doctor;
mod drift;
mod faults;
mod faults_reload;
mod forwarded_for;
mod harness;
mod inbox;
mod isolation;
mod lan;
mod lan_phone;
mod lifecycle;
mod metrics;
mod one_road;
/// Reference readings of what OpenCode does (shared with tests/properties.rs and fuzz/).
#[path = "../oracle/mod.rs"]
mod oracle;
mod pairing;
mod passkeys;
mod pg_frozen;
mod pg_store;
mod phone;
mod pinning;
mod project_ports;
mod proxy;
mod proxy_protocol;
mod push;
mod real_opencode;
mod refusals;
mod reload;
mod replicas;
mod request_form;
mod roles;
mod secrets;
mod service;
mod spellings;
mod ssh;
mod sso;
mod streaming;
mod supervise;
mod tokens;
mod worktrees;
