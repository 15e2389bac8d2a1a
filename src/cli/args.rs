//! The command line (clap derive). Each subcommand's work lives in `cli/`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "opencode-gateway",
    version = crate::cli::version::LONG,
    about = "A secure remote-access gateway for OpenCode servers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the gateway (on first start: make dev certificates and a first user).
    Serve {
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Log lines as text (for people) or one JSON object a line (for log shippers); default:
        /// `[server] log_format`, else text.
        #[arg(long, value_enum)]
        log_format: Option<crate::support::telemetry::LogFormat>,
    },
    /// Write a commented config, a dev CA and certificate, and a first user; print how to attach.
    Init {
        /// Folder for gateway.toml, certs/ and state/ (default: $XDG_CONFIG_HOME/opencode-gateway
        /// for the config and keys, $XDG_STATE_HOME/opencode-gateway for state). Never the project.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The project's name (default: the project folder's name).
        #[arg(long)]
        project: Option<String>,
        /// The project's folder (default: the current folder).
        #[arg(long)]
        project_dir: Option<PathBuf>,
        /// For a phone on the same network: listen on every address, the project's web UI on a
        /// port of its own (no wildcard DNS needed), the dev CA offered on plain HTTP (`/ca`).
        #[arg(long)]
        lan: bool,
        /// For the system service (the Debian package): the config in /etc/opencode-gateway (or
        /// --dir), state and keys in /var/lib/opencode-gateway, secrets owned by the service's
        /// user. Replaces the packaged example, never an edited config. Run as root.
        #[arg(long)]
        system: bool,
    },
    /// Validate a config file and print what it would serve.
    Check {
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Print only the SSH front door's known_hosts line, ready for `>> ~/.ssh/known_hosts`.
        #[arg(long)]
        known_hosts: bool,
    },
    /// Check a configured gateway as its clients see it: certificate names and expiry, the OpenCode
    /// binary, secret-file permissions, free listeners, base_domain resolving; prints each fix.
    Doctor {
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Read a password (stdin, or a prompt on a terminal) and print its argon2id PHC hash.
    HashPassword,
    /// Add, change, remove or list users in the config file (comments are kept).
    User {
        #[command(subcommand)]
        action: UserAction,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH, global = true)]
        config: PathBuf,
    },
    /// API tokens for scripts and CI: usable as the Basic password (`-p`) or as `Authorization: Bearer`.
    Token {
        #[command(subcommand)]
        action: TokenAction,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH, global = true)]
        config: PathBuf,
    },
    /// Pair a phone: ask the running gateway for a one-time code for a user and show it as a QR
    /// code (scan it on the phone) and as text to type.
    Pair {
        /// The user the phone logs in as.
        user: String,
        /// A name to recognise the device by in `devices`.
        #[arg(long, default_value = "phone")]
        label: String,
        /// How long the code works: 10m, 90s (at most 15m).
        #[arg(long, default_value = "10m")]
        ttl: String,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Paired devices: list them (of one user, when given), or revoke one.
    Devices {
        #[command(subcommand)]
        action: Option<DevicesAction>,
        /// List only this user's devices.
        user: Option<String>,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH, global = true)]
        config: PathBuf,
    },
    /// Passkeys: list them (of one user, when given), or revoke one.
    Passkeys {
        #[command(subcommand)]
        action: Option<PasskeysAction>,
        /// List only this user's passkeys.
        user: Option<String>,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH, global = true)]
        config: PathBuf,
    },
    /// Certificates.
    Cert {
        #[command(subcommand)]
        action: CertAction,
    },
    /// Ask the running gateway (admin listener) what it serves.
    Status {
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Ask the running gateway to reload its config (same as SIGHUP).
    Reload {
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Triggers (`[[trigger]]`) of the running gateway: list them, fire one now, pause or resume one.
    Trigger {
        #[command(subcommand)]
        action: TriggerAction,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH, global = true)]
        config: PathBuf,
    },
    /// Tasks (issue 41): a branch, a worktree, a server and a prompted session, in one action.
    Task {
        #[command(subcommand)]
        action: TaskAction,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH, global = true)]
        config: PathBuf,
    },
    /// Restart one spawned project's OpenCode server now (it reads an edited opencode.json).
    Restart {
        project: String,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Read the audit log and its rotations, oldest first: one line per record.
    Audit {
        /// Only this user's records.
        #[arg(long)]
        user: Option<String>,
        /// Only this project's records.
        #[arg(long)]
        project: Option<String>,
        /// Only records this recent: 45s, 30m, 1h, 7d.
        #[arg(long)]
        since: Option<String>,
        /// Only this event (login, login_failed, lockout, prompt, permission_answer, …).
        #[arg(long)]
        event: Option<String>,
        /// Print the records as stored (JSON lines).
        #[arg(long)]
        json: bool,
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum UserAction {
    /// Add a user; the password is read from stdin (or prompted for on a terminal).
    Add {
        name: String,
        /// Projects to grant, comma-separated, or "*" for all.
        #[arg(long, default_value = "*", value_delimiter = ',')]
        projects: Vec<String>,
        /// viewer | approver | operator | admin
        #[arg(long, default_value = "operator")]
        role: String,
    },
    /// Set a user's password (read from stdin, or prompted for on a terminal).
    Passwd { name: String },
    /// Remove a user.
    Remove { name: String },
    /// List users, their projects and roles.
    List,
}

#[derive(Subcommand, Debug)]
pub enum TokenAction {
    /// Make a token for a user and print it (once; only its digest is stored).
    Create {
        user: String,
        /// Only these projects, comma-separated (default: all the user's).
        #[arg(long, value_delimiter = ',')]
        projects: Option<Vec<String>>,
        /// At most this role: viewer | approver | operator | admin (default: the user's).
        #[arg(long)]
        role: Option<String>,
        /// A `[[policy]]` of the config: the gateway answers the permission requests of every
        /// session made with this token by it.
        #[arg(long)]
        policy: Option<String>,
        /// Lifetime: 30d, 12h, 90m, 45s.
        #[arg(long, default_value = "30d")]
        ttl: String,
        /// A note to recognise it by in `token list`.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List tokens (of one user, when given): id, label, scope, expiry, last use.
    List { user: Option<String> },
    /// Revoke a token by id; a running gateway refuses it from the next request on.
    Revoke { id: String },
}

#[derive(Subcommand, Debug)]
pub enum DevicesAction {
    /// List devices (of one user, when given): id, user, created, last seen, last address, state, label.
    List { user: Option<String> },
    /// Revoke a device by id: its sessions end at once (on a running gateway) and it stays logged out.
    Revoke { id: String },
}

#[derive(Subcommand, Debug)]
pub enum TriggerAction {
    /// Each trigger: kind, project, user, policy, paused, a schedule's next run, a webhook's endpoint.
    List,
    /// Fire a trigger now, as its user under its policy (no signature: the control socket is the
    /// gateway's own user's); its template reads the payload file's JSON object, if given.
    Fire {
        name: String,
        #[arg(long)]
        payload: Option<PathBuf>,
    },
    /// Pause a trigger on every gateway of the state database: deliveries refused, runs skipped.
    Pause { name: String },
    /// Resume a paused trigger.
    Resume { name: String },
}

#[derive(Subcommand, Debug)]
pub enum TaskAction {
    /// Make a task in a project set: `git worktree add -b <slug of the title>` from the base, the
    /// set's worktree_files copied in, its server started, a session titled TITLE told PROMPT.
    New {
        set: String,
        title: String,
        #[arg(long)]
        prompt: String,
        /// The gateway user the task is made as (roles, budgets, audit).
        #[arg(long = "as")]
        user: String,
        /// The branch to start from (default: the checkout's current branch).
        #[arg(long)]
        base: Option<String>,
        #[arg(long)]
        agent: Option<String>,
        /// provider/model
        #[arg(long)]
        model: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum PasskeysAction {
    /// List passkeys (of one user, when given): id, user, added, last used, state, name.
    List { user: Option<String> },
    /// Revoke a passkey by id: it signs no one in from now on.
    Revoke { id: String },
}

#[derive(Subcommand, Debug)]
pub enum CertAction {
    /// Make a development CA and a server certificate with rcgen.
    Dev {
        /// Where to write them (default: beside the config's tls.cert, else certs-dev).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Read base_domain, listeners and project names from this config, when it exists.
        #[arg(short, long, default_value = crate::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Another name or address the certificate must cover (e.g. 192.168.1.20, mybox.local);
        /// remembered beside the certificate for every later one. Repeat for several.
        #[arg(long = "name", value_name = "DNS-OR-IP")]
        names: Vec<String>,
    },
}

impl Command {
    /// The config file the command names, to be found ([`crate::config::find`]) before it runs.
    pub(crate) fn config_mut(&mut self) -> Option<&mut PathBuf> {
        match self {
            Command::Serve { config, .. }
            | Command::Check { config, .. }
            | Command::Doctor { config }
            | Command::User { config, .. }
            | Command::Token { config, .. }
            | Command::Pair { config, .. }
            | Command::Devices { config, .. }
            | Command::Passkeys { config, .. }
            | Command::Status { config }
            | Command::Reload { config }
            | Command::Restart { config, .. }
            | Command::Trigger { config, .. }
            | Command::Task { config, .. }
            | Command::Audit { config, .. }
            | Command::Cert {
                action: CertAction::Dev { config, .. },
            } => Some(config),
            Command::Init { .. } | Command::HashPassword => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};
    use crate::support::telemetry::LogFormat;

    #[test]
    fn serve_takes_a_log_format_and_defaults_to_the_config() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Serve { log_format, .. }) => Ok(log_format),
            Ok(_) => panic!("not serve"),
            Err(e) => Err(e.kind()),
        };
        assert_eq!(
            parse(&["gw", "serve", "--log-format", "json"]),
            Ok(Some(LogFormat::Json))
        );
        assert_eq!(
            parse(&["gw", "serve", "--log-format", "text"]),
            Ok(Some(LogFormat::Text))
        );
        assert_eq!(parse(&["gw", "serve"]), Ok(None));
        assert_eq!(
            parse(&["gw", "serve", "--log-format", "xml"]),
            Err(clap::error::ErrorKind::InvalidValue)
        );
    }
}
