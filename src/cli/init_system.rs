//! `init --system`: the config of the packaged service (contrib/debian/, scripts/deb.sh). The
//! service runs as root with a bounded set of capabilities, so that every spawned project runs as
//! an OS user of its own, never as the user that owns the gateway's secrets (hostile round five,
//! item 2): the config (no secret) and the users' hashes go to /etc/opencode-gateway, the keys
//! and the state database under /var/lib/opencode-gateway, all root's, owner-only where secret;
//! the project runs as its folder's owner, or as the package's unprivileged `opencode-gateway`
//! user when root owns the folder.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::init::{outside_project, phone_line, project_of, render, template, toml_string};

pub(crate) const SYSTEM_DIR: &str = "/etc/opencode-gateway";
const STATE_DIR: &str = "/var/lib/opencode-gateway";
/// The package's unprivileged user: a project in a folder root owns runs as it. It owns none of
/// the gateway's files.
const PROJECT_USER: &str = "opencode-gateway";
const USERS_FILE: &str = "gateway.users.toml";

/// The example the package ships as the conffile. While unedited, `init --system` replaces it;
/// any other file there is the operator's and is never overwritten.
pub(crate) const PACKAGED_EXAMPLE: &str = include_str!("../../contrib/debian/gateway.toml");

/// Where it writes, who owns the secrets (uid, gid: root), and the OS user the project runs as.
pub(crate) struct Layout {
    pub dir: PathBuf,
    pub state: PathBuf,
    pub owner: (u32, u32),
    pub run_as: String,
}

pub(crate) fn init_system(
    dir: Option<&Path>,
    project: Option<String>,
    project_dir: Option<PathBuf>,
    lan: bool,
) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("init --system writes {SYSTEM_DIR} and {STATE_DIR}, owned by root: run it as root (sudo)");
    }
    let (project_dir, name) = project_of(project, project_dir)?;
    let run_as = project_user(&project_dir)?;
    let layout = Layout {
        dir: dir
            .map(crate::config::protected::absolute)
            .unwrap_or_else(|| SYSTEM_DIR.into()),
        state: STATE_DIR.into(),
        owner: (0, 0),
        run_as,
    };
    let password = write(&layout, &project_dir, &name, lan)?;
    let config = layout.dir.join("gateway.toml");
    let settings = crate::config::load(&config)?;
    let reach = crate::reach::Reach::new(&settings, None);
    let ca = layout.state.join("certs/ca.crt");
    let phone = phone_line(&settings, &reach, &ca);
    let again = |args: &str| format!("sudo opencode-gateway {args} -c {}", config.display());
    // ok: the generated password is shown to the operator this once; only its hash is stored.
    println!(
        "wrote:\n  config  {cfg} (root 0640; no secrets)\n  users   {users} (root 0600)\n  keys    {certs} (dev CA, server and SSH host keys; root 0600)\n  state   {state} (root 0711)\n  project {name} runs as the OS user {run_as}, never as root\n\nuser \"dev\", password: {password}\n(shown only now; the users file holds its argon2id hash)\n\nthe service writes only {state} and the folders in its ReadWritePaths; for the project:\n  sudo systemctl edit opencode-gateway      # [Service] ReadWritePaths={dir}\n  and {run_as} must be able to write {dir}\nstart:   sudo systemctl enable --now opencode-gateway\nstatus:  {status}\n{phone}pair:    {pair}\nattach:  NODE_EXTRA_CA_CERTS={ca} opencode attach {url} -u dev -p '{password}'",
        cfg = config.display(),
        users = layout.dir.join(USERS_FILE).display(),
        certs = layout.state.join("certs").display(),
        state = layout.state.display(),
        run_as = layout.run_as,
        dir = project_dir.display(),
        status = again("status"),
        pair = again("pair dev"),
        ca = ca.display(),
        url = reach.project(&name),
    );
    Ok(())
}

/// The OS user the project runs as: its folder's owner, unless that is root (then the package's
/// unprivileged user, which must exist).
fn project_user(project_dir: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(project_dir)
        .with_context(|| format!("cannot read {}", project_dir.display()))?
        .uid();
    if uid != 0 {
        // SAFETY: getpwuid returns static storage or NULL; the name is copied at once.
        let pw = unsafe { libc::getpwuid(uid) };
        if !pw.is_null() {
            // SAFETY: pw is non-null and points to a valid passwd record.
            let name = unsafe { std::ffi::CStr::from_ptr((*pw).pw_name) };
            return Ok(name.to_string_lossy().into_owned());
        }
        bail!(
            "{} belongs to uid {uid}, which has no user name: give it to an OS user the project may run as",
            project_dir.display()
        );
    }
    crate::upstream::supervise::launch::lookup_user(PROJECT_USER).map_err(|e| {
        anyhow::anyhow!(
            "{e}: root owns {}, so the project would run as {PROJECT_USER}, which the Debian package makes (or: useradd --system --user-group {PROJECT_USER}); or give the folder to the person whose project it is",
            project_dir.display()
        )
    })?;
    Ok(PROJECT_USER.to_string())
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
    let (uid, gid) = layout.owner;
    if !layout.dir.exists() {
        std::fs::create_dir_all(&layout.dir)?;
        std::fs::set_permissions(&layout.dir, std::fs::Permissions::from_mode(0o750))?;
        std::os::unix::fs::chown(&layout.dir, Some(uid), Some(gid))?;
    }
    let state = toml_string(&layout.state);
    let text = render(&system_template(lan, &layout.run_as), name, project_dir, &state);
    install(&config, &text, 0o640, uid, gid)?;
    let users = layout.dir.join(USERS_FILE);
    let password = super::password::random_password();
    let hash = crate::auth::verifier::hash_password(&password);
    let header = "# Users of the gateway (argon2id hashes only): `opencode-gateway user add|passwd|remove`.\n";
    let listed = crate::config::edit::add_user(header, "dev", &hash, &["*".into()], "admin")?;
    install(&users, &listed, 0o600, uid, gid)?;
    let settings = crate::config::load(&config)?;
    crate::support::files::create_private_dir(&settings.server.state_dir)?;
    let paths = crate::config::protected::DevCertPaths::beside(&settings.tls.cert, &settings.tls.key);
    crate::front::devcert::ensure(&paths, &crate::front::devcert::names_for(&settings))?;
    let ssh = settings.ssh.as_ref().expect("the template has [ssh]");
    crate::front::ssh::host_key::load_or_create(&ssh.host_key)?;
    give(&layout.state, uid, gid)?;
    // The project's user passes through to its own folder under it, never lists it.
    std::fs::set_permissions(&layout.state, std::fs::Permissions::from_mode(0o711))?;
    Ok(password)
}

/// init's template with the system's places: the keys under state_dir (the service may write
/// only there: a dev certificate is remade when a name is added), the users in a file of theirs,
/// the project run as `run_as`.
fn system_template(lan: bool, run_as: &str) -> String {
    let t = template(lan);
    let run_as_line = format!(
        "spawn = true                       # the gateway runs `opencode serve` here itself\nrun_as = \"{run_as}\"                # as this OS user, never as the gateway's own (root)"
    );
    let swaps = [
        (
            "spawn = true                       # the gateway runs `opencode serve` here itself",
            run_as_line.as_str(),
        ),
        (
            "written by `opencode-gateway init`.",
            "written by `opencode-gateway init --system`.",
        ),
        ("\"certs/", "\"{state_dir}/certs/"),
        (
            "state_dir = \"{state_dir}\"",
            "state_dir = \"{state_dir}\"\nusers_file = \"gateway.users.toml\"  # the users' hashes, root's only",
        ),
    ];
    swaps.into_iter().fold(t, |t, (from, to)| {
        assert!(t.contains(from), "the system template swaps {from:?}");
        t.replace(from, to)
    })
}

/// Write `path` whole (a temporary file renamed over it), with this mode and owner from the
/// first byte a reader could see.
fn install(path: &Path, text: &str, mode: u32, uid: u32, gid: u32) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    crate::support::files::write_private(&tmp, text)?;
    std::os::unix::fs::chown(&tmp, Some(uid), Some(gid)).with_context(|| format!("chown {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Hand a folder and everything in it to the secrets' owner (modes stay as written: 0700, 0600).
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
