//! Logging: lines on stderr, filtered by `RUST_LOG` (default `info`), as human-readable text or,
//! for log shippers, one JSON object a line (`serve --log-format json` or `[server] log_format`)
//! with the same fields at the top level. Security events use the target `security` and access
//! lines the target `access`, with stable field names (`peer`, `user`, `project`, `reason`).
//! Nothing here formats a secret: secrets are a type whose Debug and Display print `<redacted>`,
//! and credential headers are never logged.

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    pub(crate) fn parse(s: &str) -> Option<LogFormat> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

pub(crate) fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,hyper=warn,russh=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        // Fields at the top level, beside timestamp, level and target, as the text line has them.
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
