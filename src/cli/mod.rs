//! The work behind each CLI subcommand.

pub mod admin_client;
pub mod args;
pub mod audit;
mod banner;
mod banner_ca;
pub mod check;
pub mod devices;
pub mod doctor;
mod doctor_boxes;
mod doctor_report;
mod doctor_running;
pub mod init;
pub mod init_system;
pub mod package_files;
pub mod pair;
pub mod passkeys;
pub mod password;
pub mod serve;
pub mod task;
pub mod token;
pub mod trigger;
pub mod user;
pub mod version;

use std::path::Path;

use crate::cli::args::{CertAction, Cli, Command};

/// `opencode-gateway <args>` as a person types it here to run it (issue 38): this program as
/// typed from the current folder, and `-c <config>` only where that command would not find
/// `config` by itself.
pub(crate) fn again(config: &Path, args: &str) -> String {
    let me = crate::support::invocation::me();
    let found = crate::config::find(Path::new(crate::config::DEFAULT_PATH));
    if found == config || crate::support::invocation::same_file(&found, config) {
        return format!("{me} {args}");
    }
    format!("{me} {args} -c {}", crate::support::invocation::path_here(config))
}

/// Run a parsed command line. `serve` needs the async runtime; the rest are quick and synchronous.
pub fn dispatch(mut cli: Cli) -> anyhow::Result<()> {
    if let Some(config) = cli.command.config_mut() {
        *config = crate::config::find(config);
    }
    match cli.command {
        Command::Serve { config, log_format } => {
            return_large_allocations_to_the_system();
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(serve::serve(&config, log_format))
        }
        Command::Init {
            dir,
            project,
            project_dir,
            lan,
            system: false,
        } => init::init(dir.as_deref(), project, project_dir, lan),
        Command::Init {
            dir,
            project,
            project_dir,
            lan,
            system: true,
        } => init_system::init_system(dir.as_deref(), project, project_dir, lan),
        Command::Check {
            config,
            known_hosts: false,
        } => check::check(&config),
        Command::Check {
            config,
            known_hosts: true,
        } => check::known_hosts(&config),
        Command::Doctor { config } => doctor::doctor(&config),
        Command::HashPassword => {
            let pw = password::read_new_password()?;
            println!("{}", crate::auth::verifier::hash_password(&pw)); // ok: prints the argon2id hash, not the password
            Ok(())
        }
        Command::User { action, config } => user::user(&config, action),
        Command::Token { action, config } => token::token(&config, action),
        Command::Pair {
            user,
            label,
            ttl,
            config,
        } => pair::pair(&config, &user, &label, &ttl),
        Command::Devices { action, user, config } => devices::devices(&config, action, user),
        Command::Passkeys { action, user, config } => passkeys::passkeys(&config, action, user),
        Command::Cert {
            action: CertAction::Dev { out, config, names },
        } => cert_dev(out.as_deref(), &config, &names),
        Command::Status { config } => admin_client::status(&config),
        Command::Reload { config } => admin_client::reload(&config),
        Command::Restart { project, config } => admin_client::restart(&config, &project),
        Command::Trigger { action, config } => trigger::trigger(&config, action),
        Command::Task { action, config } => task::task(&config, action),
        Command::Audit {
            user,
            project,
            since,
            event,
            json,
            config,
        } => audit::audit(&config, user, project, since, event, json),
    }
}

fn cert_dev(out: Option<&Path>, config: &Path, added: &[String]) -> anyhow::Result<()> {
    let settings = crate::config::load(config).ok().filter(|s| s.tls.dev_ca);
    let paths = match (out, &settings) {
        (Some(out), _) => {
            crate::config::protected::DevCertPaths::beside(&out.join("server.crt"), &out.join("server.key"))
        }
        (None, Some(s)) => crate::config::protected::DevCertPaths::beside(&s.tls.cert, &s.tls.key),
        (None, None) => crate::config::protected::DevCertPaths::beside(
            Path::new("certs-dev/server.crt"),
            Path::new("certs-dev/server.key"),
        ),
    };
    for name in added {
        let bare = name.trim_start_matches("*.");
        let ok = name.parse::<std::net::IpAddr>().is_ok()
            || (!bare.is_empty()
                && bare
                    .split('.')
                    .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')));
        if !ok {
            anyhow::bail!("--name {name:?} is neither an IP address nor a DNS name (e.g. 192.168.1.20, mybox.local)");
        }
    }
    let mut names = match &settings {
        Some(s) => crate::front::devcert::names_for(s),
        None => crate::front::devcert::server_names(Some("gw.localhost"), &[]),
    };
    for n in crate::front::devcert::added_names(&paths)
        .into_iter()
        .chain(added.iter().cloned())
    {
        if !names.iter().any(|m| m.eq_ignore_ascii_case(&n)) {
            names.push(n);
        }
    }
    let (names, refused) = crate::front::devcert::vouchable(&paths, &names);
    if !refused.is_empty() {
        anyhow::bail!(
            "the dev CA {} cannot vouch for {}: it was made for other names and its name constraints are fixed. Fix: remove {} and {} and run this again (then trust the new CA)",
            paths.ca_cert.display(),
            refused.join(", "),
            paths.ca_cert.display(),
            paths.ca_key.display()
        );
    }
    for name in added {
        crate::front::devcert::add_name(&paths, name)?;
    }
    if crate::front::devcert::ensure(&paths, &names)?.wrote() {
        println!(
            "wrote {} and {} (CA: {})",
            paths.cert.display(),
            paths.key.display(),
            paths.ca_cert.display()
        );
        println!("names: {}", names.join(", "));
        println!("a running gateway serves the new certificate within seconds (it watches the file)");
    } else {
        println!(
            "{} already covers every name ({}); remove it to make a new one",
            paths.cert.display(),
            names.join(", ")
        );
    }
    Ok(())
}

/// glibc raises its mmap threshold to the size of the largest block freed, so after the first
/// argon2 run (19 MiB) every later one came from the heap and its memory stayed resident: 20 MiB
/// more at idle for ever. A fixed threshold keeps large blocks mapped on demand and returned when
/// freed; the request path allocates nothing near 1 MiB.
fn return_large_allocations_to_the_system() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator tuning; called before any thread is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
