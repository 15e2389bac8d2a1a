//! `init --system`: the config of the packaged service (contrib/debian/, scripts/deb.sh). The
//! config goes to /etc/opencode-gateway (root's, readable by the service's group: it holds no
//! secret), the users' hashes to a file beside it and the keys under /var/lib/opencode-gateway,
//! both owner-only and owned by the service's user, who alone needs them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::init::{outside_project, phone_line, project_of, render, template, toml_string};

pub(crate) const SYSTEM_DIR: &str = "/etc/opencode-gateway";
const STATE_DIR: &str = "/var/lib/opencode-gateway";
const SERVICE_USER: &str = "opencode-gateway";
const USERS_FILE: &str = "gateway.users.toml";

/// The example the package ships as the conffile. While unedited, `init --system` replaces it;
/// any other file there is the operator's and is never overwritten.
pub(crate) const PACKAGED_EXAMPLE: &str = include_str!("../../contrib/debian/gateway.toml");

/// Where it writes, and the service's user and group (uid, gid) who must read the secrets.
pub(crate) struct Layout {
    pub dir: PathBuf,
    pub state: PathBuf,
    pub service: (u32, u32),
}

pub(crate) fn init_system(
    dir: Option<&Path>,
    project: Option<String>,
    project_dir: Option<PathBuf>,
    lan: bool,
) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "init --system writes {SYSTEM_DIR} and {STATE_DIR} and gives files to the {SERVICE_USER} user: run it as root (sudo)"
        );
    }
    let (uid, gid, _) = crate::upstream::supervise::launch::lookup_user(SERVICE_USER).map_err(|e| {
        anyhow::anyhow!("{e}: the Debian package makes this user (or: useradd --system --user-group {SERVICE_USER})")
    })?;
    let layout = Layout {
        dir: dir
            .map(crate::config::protected::absolute)
            .unwrap_or_else(|| SYSTEM_DIR.into()),
        state: STATE_DIR.into(),
        service: (uid, gid),
    };
    let (project_dir, name) = project_of(project, project_dir)?;
    let password = write(&layout, &project_dir, &name, lan)?;
    let config = layout.dir.join("gateway.toml");
    let settings = crate::config::load(&config)?;
    let reach = crate::reach::Reach::new(&settings, None);
    let ca = layout.state.join("certs/ca.crt");
    let phone = phone_line(&settings, &reach, &ca);
    let again = |args: &str| format!("sudo -u {SERVICE_USER} opencode-gateway {args} -c {}", config.display());
    // ok: the generated password is shown to the operator this once; only its hash is stored.
    println!(
        "wrote:\n  config  {cfg} (root:{SERVICE_USER} 0640; no secrets)\n  users   {users} ({SERVICE_USER} 0600)\n  keys    {certs} (dev CA, server and SSH host keys; {SERVICE_USER} 0600)\n  state   {state}\n\nuser \"dev\", password: {password}\n(shown only now; the users file holds its argon2id hash)\n\nthe service writes only {state} and the folders in its ReadWritePaths; for the project:\n  sudo systemctl edit opencode-gateway      # [Service] ReadWritePaths={dir}\n  and let the {SERVICE_USER} user write {dir} (chown, an ACL, or run_as: the unit's notes)\nstart:   sudo systemctl enable --now opencode-gateway\nstatus:  {status}\n{phone}pair:    {pair}\nattach:  NODE_EXTRA_CA_CERTS={ca} opencode attach {url} -u dev -p '{password}'",
        cfg = config.display(),
        users = layout.dir.join(USERS_FILE).display(),
        certs = layout.state.join("certs").display(),
        state = layout.state.display(),
        dir = project_dir.display(),
        status = again("status"),
        pair = again("pair dev"),
        ca = ca.display(),
        url = reach.project(&name),
    );
    Ok(())
}

/// Write the config, the users file with a first user ("dev", whose password is returned), the
/// dev CA, certificate and SSH host key, with the owners and modes the module's header names.
pub(crate) fn write(layout: &Layout, project_dir: &Path, name: &str, lan: bool) -> anyhow::Result<String> {
    let config = layout.dir.join("gateway.toml");
    match std::fs::read_to_string(&config) {
        Ok(text) if text != PACKAGED_EXAMPLE => bail!(
            "{} already exists and is not the packaged example: edit it (add a [[project]] for {}), or remove it to start over",
            config.display(),
            project_dir.display()
        ),
        _ => {}
    }
    outside_project(
        &[("the config", &layout.dir), ("the state and keys", &layout.state)],
        project_dir,
    )?;
    let (service_uid, service_gid) = layout.service;
    if !layout.dir.exists() {
        std::fs::create_dir_all(&layout.dir)?;
        std::fs::set_permissions(&layout.dir, std::fs::Permissions::from_mode(0o750))?;
        std::os::unix::fs::chown(&layout.dir, None, Some(service_gid))?;
    }
    let state = toml_string(&layout.state);
    let text = render(&system_template(lan), name, project_dir, &state);
    install(&config, &text, 0o640, None, service_gid)?;
    let users = layout.dir.join(USERS_FILE);
    let password = super::password::random_password();
    let hash = crate::auth::verifier::hash_password(&password);
    let header = "# Users of the gateway (argon2id hashes only): `opencode-gateway user add|passwd|remove`.\n";
    let listed = crate::config::edit::add_user(header, "dev", &hash, &["*".into()], "admin")?;
    install(&users, &listed, 0o600, Some(service_uid), service_gid)?;
    let settings = crate::config::load(&config)?;
    crate::support::files::create_private_dir(&settings.server.state_dir)?;
    let paths = crate::config::protected::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key);
    crate::front::devcert::ensure(&paths, &crate::front::devcert::names_for(&settings))?;
    let ssh = settings.ssh.as_ref().expect("the template has [ssh]");
    crate::front::ssh::host_key::load_or_create(&ssh.host_key)?;
    give(&layout.state, service_uid, service_gid)?;
    Ok(password)
}

/// init's template with the system's places: the keys under state_dir (the service may write
/// only there: a dev certificate is remade when a name is added), the users in a file of theirs.
fn system_template(lan: bool) -> String {
    let t = template(lan);
    let swaps = [
        (
            "written by `opencode-gateway init`.",
            "written by `opencode-gateway init --system`.",
        ),
        ("\"certs/", "\"{state_dir}/certs/"),
        (
            "state_dir = \"{state_dir}\"",
            "state_dir = \"{state_dir}\"\nusers_file = \"gateway.users.toml\"  # the users' hashes, readable by the service's user only",
        ),
    ];
    swaps.into_iter().fold(t, |t, (from, to)| {
        assert!(t.contains(from), "the system template swaps {from:?}");
        t.replace(from, to)
    })
}

/// Write `path` whole (a temporary file renamed over it), with this mode and owner from the
/// first byte a reader could see.
fn install(path: &Path, text: &str, mode: u32, uid: Option<u32>, gid: u32) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    crate::support::files::write_private(&tmp, text)?;
    std::os::unix::fs::chown(&tmp, uid, Some(gid)).with_context(|| format!("chown {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Hand a folder and everything in it to the service's user (modes stay as written: 0700, 0600).
fn give(dir: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid)).with_context(|| format!("chown {}", dir.display()))?;
    if dir.is_dir() && !dir.is_symlink() {
        for entry in std::fs::read_dir(dir)? {
            give(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "init_system_tests.rs"]
mod tests;
