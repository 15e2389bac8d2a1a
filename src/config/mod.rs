//! Configuration: the TOML file ([`file`]), its validation ([`validate`]) into [`Settings`], secrets
//! ([`secret`]) and in-place edits that keep comments ([`edit`]).

pub mod discover;
pub(crate) mod discover_box;
pub mod edit;
pub mod file;
mod folder_entry;
pub mod limits;
pub mod permissions;
pub mod protected;
mod secret;
pub mod settings;
mod shape;
pub mod ssh_key;
pub mod triggers;
pub mod validate;

use std::fmt;
use std::path::{Path, PathBuf};

pub(crate) use protected::ProtectedPaths;
pub(crate) use secret::Secret;
pub use settings::*;

/// The default config path, relative to the working directory (the repository root in dev).
pub(crate) const DEFAULT_PATH: &str = "config/gateway.toml";

/// The system service's config (the Debian package's conffile; `init --system` writes it).
pub(crate) const SYSTEM_PATH: &str = "/etc/opencode-gateway/gateway.toml";

/// The environment variable naming the config file when no `-c` is given.
pub(crate) const CONFIG_ENV: &str = "OPENCODE_GATEWAY_CONFIG";

/// The config file a command uses when it was given no `-c` (its value is the default path):
/// `$OPENCODE_GATEWAY_CONFIG`, else `config/gateway.toml` in the current folder when it exists (the
/// repository's dev config is never shadowed by an `init` made elsewhere), else the one `init`
/// wrote (`$XDG_CONFIG_HOME/opencode-gateway/gateway.toml`) when it exists, else the system
/// service's (`/etc/opencode-gateway/gateway.toml`, the Debian package's) when it exists, else the
/// default path (whose absence the command then reports).
pub(crate) fn find(given: &Path) -> PathBuf {
    if given != Path::new(DEFAULT_PATH) {
        return given.to_path_buf();
    }
    if let Some(env) = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(env);
    }
    if given.exists() {
        return given.to_path_buf();
    }
    config_home()
        .map(|d| d.join("gateway.toml"))
        .into_iter()
        .chain([Path::new(SYSTEM_PATH).to_path_buf()])
        .find(|p| p.exists())
        .unwrap_or_else(|| given.to_path_buf())
}

/// `$XDG_CONFIG_HOME/opencode-gateway` (default `~/.config/opencode-gateway`): the config and keys
/// `init` writes.
pub(crate) fn config_home() -> Option<PathBuf> {
    xdg_home("XDG_CONFIG_HOME", ".config")
}

/// `$XDG_STATE_HOME/opencode-gateway` (default `~/.local/state/opencode-gateway`): the gateway's state.
pub(crate) fn state_home() -> Option<PathBuf> {
    xdg_home("XDG_STATE_HOME", ".local/state")
}

fn xdg_home(var: &str, under_home: &str) -> Option<PathBuf> {
    // The XDG spec: a relative value is invalid and ignored.
    let base = match std::env::var_os(var).map(PathBuf::from) {
        Some(d) if d.is_absolute() => d,
        _ => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(under_home),
    };
    Some(base.join("opencode-gateway"))
}

#[derive(Debug)]
pub struct Problem {
    pub key: String,
    pub message: String,
    pub fix: String,
}

#[derive(Debug)]
pub enum ConfigError {
    Read { file: PathBuf, error: std::io::Error },
    Parse { file: PathBuf, message: String },
    Invalid { file: PathBuf, problems: Vec<Problem> },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { file, error } => write!(
                f,
                "{}: cannot read the config file: {error}. Fix: create it with `opencode-gateway init`, pass -c <file>, or set OPENCODE_GATEWAY_CONFIG",
                file.display()
            ),
            ConfigError::Parse { file, message } => {
                write!(f, "{}: {}", file.display(), message.trim_end())?;
                if message.contains("unknown field") {
                    write!(
                        f,
                        "\nFix: remove the key or correct its spelling (config/gateway.example.toml lists every key)"
                    )?;
                } else if message.contains("missing field") {
                    write!(
                        f,
                        "\nFix: add the key (config/gateway.example.toml shows it with its default)"
                    )?;
                }
                Ok(())
            }
            ConfigError::Invalid { file, problems } => {
                let n = problems.len();
                write!(f, "{}: {n} problem{}", file.display(), if n == 1 { "" } else { "s" })?;
                for p in problems {
                    write!(f, "\n  {}: {}. Fix: {}", p.key, p.message, p.fix)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Read, parse and validate a config file.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        file: path.to_path_buf(),
        error,
    })?;
    parse(&text, path)
}

/// Parse and validate config text as if read from `path` (relative paths resolve against its folder).
pub fn parse(text: &str, path: &Path) -> Result<Settings, ConfigError> {
    parse_with_users(text, path, None)
}

/// [`parse`], with the users file's text given (`Some`) instead of read from disk: how the CLI
/// checks an edit of that file before writing it.
pub(crate) fn parse_with_users(text: &str, path: &Path, users_text: Option<&str>) -> Result<Settings, ConfigError> {
    let mut raw: file::RawConfig = read_shaped(text, path)?;
    raw.own_users = raw.user.len();
    if let Some(users) = users_file(path, raw.server.users_file.as_deref()) {
        // Missing is empty: the first start makes it.
        let text = match users_text {
            Some(t) => t.to_string(),
            None => match std::fs::read_to_string(&users) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(error) => return Err(ConfigError::Read { file: users, error }),
            },
        };
        let more: file::RawUsers = read_shaped(&text, &users)?;
        raw.user.extend(more.user);
    }
    validate::validate(raw, &protected::joined(path))
}

/// `text` in its typed form, or every key of the wrong form at once (`shape`).
fn read_shaped<T: serde::de::DeserializeOwned>(text: &str, file: &Path) -> Result<T, ConfigError> {
    shape::read(text).map_err(|e| match e {
        shape::ReadError::Toml(e) => ConfigError::Parse {
            file: file.to_path_buf(),
            message: e.to_string(),
        },
        shape::ReadError::Problems(problems) => ConfigError::Invalid {
            file: file.to_path_buf(),
            problems,
        },
    })
}

/// The users file a config names (`server.users_file`), resolved against the config's folder.
pub(crate) fn users_file(config: &Path, named: Option<&str>) -> Option<std::path::PathBuf> {
    let named = named?;
    let dir = config
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Some(dir.join(named))
}
