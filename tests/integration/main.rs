//! Integration tests: the real gateway binary on ephemeral loopback ports, driven by real TLS
//! clients. Every test that needs a real part besides the gateway (the real OpenCode server or its
//! clients, headless Chromium through playwright-core, OpenSSH, PostgreSQL, HAProxy, pebble,
//! root) is ignored with one label that names what it needs and ends the same way,
//! `#[ignore = "needs <parts>: run scripts/test.sh"]`, and no other test is ignored
//! (`harness::every_ignored_test_says_what_it_needs_in_one_form` holds this), so:
//!
//! - list them: `cargo test --test integration -- --list --ignored`
//!   (or `grep -rn ': run scripts/test.sh"]' tests/integration/`);
//! - run them too: `scripts/test.sh`, or `cargo test --test integration -- --include-ignored`
//!   with OpenCode at `node_modules/.bin/opencode` and the parts installed.
//!
//! Helpers more than one file uses live in `common/`.

mod abuse;
mod acme;
mod admin;
mod app;
mod audit;
mod box_tasks;
mod boxes;
mod boxes_by_the_docs;
mod boxes_host_keys;
mod browser;
mod browser_login;
mod budget_pages;
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
mod fleet_board;
mod fleet_caps;
mod fleet_tree;
mod forwarded_for;
mod harness;
mod hook_bodies;
mod inbox;
mod inbox_redact;
mod isolation;
mod lan;
mod lan_phone;
mod lifecycle;
mod metrics;
mod named_host;
mod newcomer;
mod newcomer_phone;
mod one_road;
mod opencode_v2;
mod opencode_v2_shared;
mod opencode_v2_web;
/// Reference readings of what OpenCode does (shared with tests/properties.rs and fuzz/).
#[path = "../oracle/mod.rs"]
mod oracle;
mod own_opencode;
mod pairing;
mod passkeys;
mod pg_frozen;
mod pg_inbox;
mod pg_races;
mod pg_store;
mod phone;
mod pinning;
mod policies;
mod policy_readings;
mod project_ports;
mod provider_secrets;
mod proxy;
mod proxy_protocol;
mod push;
mod push_guarded;
mod readme_trigger;
mod real_opencode;
mod refusals;
mod reload;
mod replicas;
mod request_form;
mod roles;
mod runaway;
mod secrets;
mod service;
mod spellings;
mod ssh;
mod sso;
mod streaming;
mod supervise;
mod tasks;
mod tokens;
mod trigger_adoption;
mod trigger_runs;
mod trigger_schedule;
mod triggers;
mod worktrees;
