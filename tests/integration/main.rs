//! Integration tests: the real gateway binary on ephemeral loopback ports, driven by real TLS
//! clients. Tests marked `#[ignore = "needs OpenCode…"]` drive the real OpenCode server and its
//! clients; `scripts/test.sh` installs OpenCode and runs them too. Find them with
//! `grep -rn 'needs OpenCode' tests/`.

mod abuse;
mod admin;
mod browser;
mod common;
mod config_cli;
mod connections;
mod drift;
mod lifecycle;
mod pinning;
mod proxy;
mod real_opencode;
mod reload;
mod request_form;
mod roles;
mod secrets;
mod spellings;
mod ssh;
mod streaming;
mod supervise;
