//! `init`: write a commented config for one spawned project, a dev CA and certificate, and a
//! first user; print how to attach.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const TEMPLATE: &str = r#"# opencode-gateway configuration, written by `opencode-gateway init`.
# Every key is documented in config/gateway.example.toml of the opencode-gateway repository.
# Paths are relative to this file's folder.

[server]
listen = "127.0.0.1:8443"          # HTTPS; use 0.0.0.0:8443 to reach it from other devices
base_domain = "gw.localhost"       # <project>.gw.localhost serves that project's web UI
state_dir = "state"                # private data of the OpenCode servers the gateway runs

[tls]
cert = "certs/server.crt"
key = "certs/server.key"
dev_ca = true                      # made with a local CA (certs/ca.crt) when missing

[admin]                            # loopback only: /healthz, /metrics (status and reload use the control socket in state_dir)
listen = "127.0.0.1:9090"

[ssh]                              # ssh -N -L 4096:<project>:80 -p 2222 dev@<host>
listen = "127.0.0.1:2222"
host_key = "certs/ssh_host_ed25519_key"

[[project]]
name = "{name}"
directory = "{directory}"
spawn = true                       # the gateway runs `opencode serve` here itself
"#;

pub fn init(dir: &Path, project: Option<String>, project_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let project_dir = match project_dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let project_dir = project_dir
        .canonicalize()
        .with_context(|| format!("the project folder {} does not exist", project_dir.display()))?;
    let name = match project {
        Some(n) => n,
        None => sanitize(
            &project_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    };
    if !crate::config::validate::valid_project_name(&name) {
        bail!("{name:?} is not a valid project name: pass --project with lower-case letters, digits and '-'");
    }
    std::fs::create_dir_all(dir)?;
    let config = dir.join("gateway.toml");
    if config.exists() {
        bail!(
            "{} already exists; edit it, or remove it to start over",
            config.display()
        );
    }
    let text = TEMPLATE.replace("{name}", &name).replace(
        "{directory}",
        &project_dir
            .display()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\""),
    );
    std::fs::write(&config, text)?;
    let settings = crate::config::load(&config)?;
    let paths = crate::devcert::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key);
    let names = crate::devcert::server_names(settings.server.base_domain.as_deref(), std::slice::from_ref(&name));
    crate::devcert::ensure(&paths, &names)?;
    let ssh = settings.ssh.as_ref().expect("the template has [ssh]");
    crate::ssh::host_key::load_or_create(&ssh.host_key)?;
    let host_key = crate::ssh::host_key::describe(&ssh.host_key, ssh.listen);
    let password = super::password::random_password();
    let hash = crate::auth::verifier::hash_password(&password);
    let updated =
        crate::config::edit::add_user(&std::fs::read_to_string(&config)?, "dev", &hash, &["*".into()], "admin")?;
    crate::config::edit::write_atomically(&config, &updated)?;
    let ca = paths.ca_cert.display();
    // ok: the generated password is shown to the operator this once; only its hash is stored.
    println!(
        "wrote {cfg}, {cert} and {ca}\n\nuser \"dev\", password: {password}\n(shown only now; the config holds its argon2id hash)\n\nstart:   opencode-gateway serve -c {cfg}\nattach:  NODE_EXTRA_CA_CERTS={ca} opencode attach https://127.0.0.1:8443/p/{name} -u dev -p '{password}'\nweb UI:  https://{name}.gw.localhost:8443/\nssh:     ssh -N -L 4096:{name}:80 -p 2222 dev@127.0.0.1   then   opencode attach http://127.0.0.1:4096\nSSH host key:\n{host_key}",
        cfg = config.display(),
        cert = paths.cert.display(),
    );
    Ok(())
}

/// A folder name as a project name: lower-case, other characters as '-'.
fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    out = out.trim_matches('-').chars().take(63).collect();
    if out.is_empty() { "project".into() } else { out }
}
