//! `init`: write a commented config for one spawned project, a dev CA and certificate, and a
//! first user; print how to attach. Everything it writes is a secret (password hashes, keys) and
//! goes outside the project: `$XDG_CONFIG_HOME/opencode-gateway/` and
//! `$XDG_STATE_HOME/opencode-gateway/`, or `--dir`, never the project folder.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::config::protected::{absolute, resolve};

const TEMPLATE: &str = r#"# opencode-gateway configuration, written by `opencode-gateway init`.
# Every key is documented in config/gateway.example.toml of the opencode-gateway repository.
# Paths are relative to this file's folder.

[server]
listen = "127.0.0.1:8443"          # HTTPS; use 0.0.0.0:8443 to reach it from other devices
base_domain = "gw.localhost"       # <project>.gw.localhost serves that project's web UI
state_dir = "{state_dir}"  # private data of the OpenCode servers the gateway runs

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

/// `init --lan`: the same config for a phone on the same network (see `config/gateway.lan.toml`).
fn lan_template() -> String {
    let swaps = [
        (
            "listen = \"127.0.0.1:8443\"          # HTTPS; use 0.0.0.0:8443 to reach it from other devices\nbase_domain = \"gw.localhost\"       # <project>.gw.localhost serves that project's web UI\n",
            "listen = \"0.0.0.0:8443\"            # every address: devices on your network reach it\n# public_url is left out: this machine's LAN address is used (the pairing QR code carries it)\n# passkeys need a name: public_url = \"https://<host>.local:8443\" (they work only there)\nhttp_listen = \"0.0.0.0:8080\"       # http://<LAN address>:8080/ca offers the dev CA to phones\n",
        ),
        ("listen = \"127.0.0.1:2222\"", "listen = \"0.0.0.0:2222\""),
        (
            "spawn = true                       # the gateway runs `opencode serve` here itself\n",
            "spawn = true                       # the gateway runs `opencode serve` here itself\nlisten = \"0.0.0.0:8444\"            # its web UI on a port of its own (a phone has no wildcard DNS)\n",
        ),
    ];
    let mut t = TEMPLATE.to_string();
    for (from, to) in swaps {
        assert!(t.contains(from), "the LAN template swaps {from:?}");
        t = t.replacen(from, to, 1);
    }
    t
}

/// The config template, for this machine only or (`lan`) for a phone on the same network.
pub(super) fn template(lan: bool) -> String {
    if lan { lan_template() } else { TEMPLATE.to_string() }
}

/// The template filled in: the project's name and folder, the state folder (TOML string text).
pub(super) fn render(template: &str, name: &str, project_dir: &Path, state_dir: &str) -> String {
    template
        .replace("{name}", name)
        .replace("{directory}", &toml_string(project_dir))
        .replace("{state_dir}", state_dir)
}

pub(crate) fn init(
    dir: Option<&Path>,
    project: Option<String>,
    project_dir: Option<PathBuf>,
    lan: bool,
) -> anyhow::Result<()> {
    let (project_dir, name) = project_of(project, project_dir)?;
    let (dir, state_dir) = destination(dir, &project_dir)?;
    crate::support::files::create_private_dir(&dir)?;
    let config = dir.join("gateway.toml");
    if config.exists() {
        bail!(
            "{} already exists; edit it (add a [[project]] for {}), or remove it to start over",
            config.display(),
            project_dir.display()
        );
    }
    let state = state_dir.as_deref().map(toml_string).unwrap_or_else(|| "state".into());
    let text = render(&template(lan), &name, &project_dir, &state);
    crate::support::files::write_private(&config, &text)?;
    let settings = crate::config::load(&config)?;
    crate::support::files::create_private_dir(&settings.server.state_dir)?;
    let paths = crate::config::protected::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key);
    let names = crate::front::devcert::names_for(&settings);
    crate::front::devcert::ensure(&paths, &names)?;
    let ssh = settings.ssh.as_ref().expect("the template has [ssh]");
    crate::front::ssh::host_key::load_or_create(&ssh.host_key)?;
    let host_key = crate::front::ssh::host_key::describe(&ssh.host_key, ssh.listen);
    let password = super::password::random_password();
    let hash = crate::auth::verifier::hash_password(&password);
    let updated =
        crate::config::edit::add_user(&std::fs::read_to_string(&config)?, "dev", &hash, &["*".into()], "admin")?;
    crate::config::edit::write_atomically(&config, &updated)?;
    let ca = paths.ca_cert.display();
    let reach = crate::reach::Reach::new(&settings, None);
    let web = reach.web_ui(&name).unwrap_or_default();
    let ssh_cmd = crate::reach::ssh_forward(&name, "dev", ssh.listen, Some(reach.host()));
    let phone = phone_line(&settings, &reach, &paths.ca_cert);
    // ok: the generated password is shown to the operator this once; only its hash is stored.
    println!(
        "wrote (outside the project, owner-only):\n  config  {cfg}\n  keys    {certs} (dev CA, server and SSH host keys)\n  state   {state}\n\nuser \"dev\", password: {password}\n(shown only now; the config holds its argon2id hash)\n\nstart:   opencode-gateway serve -c {cfg}\nattach:  NODE_EXTRA_CA_CERTS={ca} opencode attach {url} -u dev -p '{password}'\nweb UI:  {web}\n{phone}ssh:     {ssh_cmd}   then   opencode attach http://127.0.0.1:4096\nSSH host key:\n{host_key}",
        cfg = config.display(),
        certs = paths.ca_cert.parent().unwrap_or(Path::new(".")).display(),
        state = settings.server.state_dir.display(),
        url = reach.project(&name),
    );
    Ok(())
}

/// The project's folder (the current one by default) and its name (the folder's by default).
pub(super) fn project_of(project: Option<String>, project_dir: Option<PathBuf>) -> anyhow::Result<(PathBuf, String)> {
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
    Ok((project_dir, name))
}

/// Where the config and keys go, and the state folder (`None`: `state` beside the config);
/// never inside the project folder nor above it, where its clients could read them.
fn destination(dir: Option<&Path>, project_dir: &Path) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    let (dir, state_dir) = match dir {
        Some(d) => (absolute(d), None),
        None => {
            let home = "set HOME (or XDG_CONFIG_HOME and XDG_STATE_HOME), or pass --dir <folder outside the project>";
            let config = crate::config::config_home().context(home)?;
            let state = crate::config::state_home().context(home)?;
            (config, Some(state))
        }
    };
    let state_abs = state_dir.clone().unwrap_or_else(|| dir.join("state"));
    outside_project(&[("the config and keys", &dir), ("the state", &state_abs)], project_dir)?;
    Ok((dir, state_dir))
}

/// Refuse a gateway folder inside the project folder or above it, where its clients could read it.
pub(super) fn outside_project(folders: &[(&str, &Path)], project_dir: &Path) -> anyhow::Result<()> {
    for (what, path) in folders {
        let real = resolve(path);
        if real.starts_with(project_dir) || project_dir.starts_with(&real) {
            bail!(
                "{what} would go to {}, {} the project folder {}: the project's clients could read them. Fix: pass --dir <a folder outside the project>, e.g. --dir ~/.config/opencode-gateway",
                path.display(),
                if real.starts_with(project_dir) {
                    "inside"
                } else {
                    "a parent of"
                },
                project_dir.display()
            );
        }
    }
    Ok(())
}

/// With `http_listen`: how a phone trusts the dev CA and pairs.
pub(super) fn phone_line(settings: &crate::config::Settings, reach: &crate::reach::Reach, ca_cert: &Path) -> String {
    match settings.server.http_listen {
        Some(http) => {
            let fp = std::fs::read_to_string(ca_cert)
                .ok()
                .and_then(|p| crate::web::ca_page::der_from_pem(&p))
                .map(|d| crate::web::ca_page::fingerprint(&d))
                .unwrap_or_default();
            format!(
                "phone:   trust the dev CA from http://{}:{}/ca (SHA-256 fingerprint {fp}), then scan the code `opencode-gateway pair dev` prints\n",
                reach.host(),
                http.port()
            )
        }
        None => String::new(),
    }
}

/// A path as the inside of a TOML basic string.
pub(super) fn toml_string(p: &Path) -> String {
    p.display().to_string().replace('\\', "\\\\").replace('"', "\\\"")
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
