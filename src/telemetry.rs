//! Logging: human-readable lines on stderr, filtered by `RUST_LOG` (default `info`). Security
//! events use the target `security` and access lines the target `access`, with stable field names
//! (`peer`, `user`, `project`, `reason`). Nothing here formats a secret: secrets are a type whose
//! Debug and Display print `<redacted>`, and credential headers are never logged.

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,hyper=warn,russh=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
