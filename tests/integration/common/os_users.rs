//! OS users for the `run_as` tests. Creating them needs root: as root they are made (or reused)
//! with `useradd`; as root without `useradd` the test fails saying so; as another user it fails
//! with "needs root to create OS users" unless `OCGW_SKIP_OS_USER_TESTS=1` opts out, so a run that
//! cannot prove isolation never passes silently.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

pub const SKIP_VAR: &str = "OCGW_SKIP_OS_USER_TESTS";

/// A user the test made or reused: name, uid, gid.
#[derive(Clone, Debug)]
pub struct OsUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

fn lookup(name: &str) -> Option<OsUser> {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: getpwnam returns static storage or NULL; copied at once (tests create users serially).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null passwd record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Some(OsUser {
        name: name.to_string(),
        uid,
        gid,
    })
}

/// The OS users `names`, created if missing (system users with a home and bash). `None` only when
/// not root and the skip variable is set (said loudly on stderr).
pub fn ensure(names: &[&str]) -> Option<Vec<OsUser>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        if std::env::var_os(SKIP_VAR).is_some_and(|v| v == "1") {
            eprintln!("SKIPPED: the run_as isolation test needs root to create OS users ({SKIP_VAR}=1)");
            return None;
        }
        panic!(
            "needs root to create OS users {names:?}: run scripts/test.sh as root (CI does), or set {SKIP_VAR}=1 to skip this proof knowingly"
        );
    }
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap();
    let useradd = ["/usr/sbin/useradd", "/sbin/useradd", "/usr/bin/useradd"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let mut users = Vec::new();
    for name in names {
        if let Some(u) = lookup(name) {
            users.push(u);
            continue;
        }
        let Some(useradd) = useradd else {
            panic!(
                "running as root but useradd is not installed: cannot create OS user {name} (apt-get install passwd)"
            );
        };
        let out = Command::new(useradd)
            .args([
                "--system",
                "--create-home",
                "--user-group",
                "--shell",
                "/bin/bash",
                name,
            ])
            .output()
            .unwrap();
        // 9: another run created it meanwhile.
        if !out.status.success() && out.status.code() != Some(9) {
            panic!("useradd {name} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        users.push(lookup(name).unwrap_or_else(|| panic!("useradd made no user {name}")));
    }
    Some(users)
}

/// Give `path` to `user` with `mode`.
pub fn give(path: &Path, user: &OsUser, mode: u32) {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
