//! OS users for the `run_as` tests. Creating them needs root: as root they are made (or reused)
//! with `useradd`; as root without `useradd` the test fails saying so; as another user it fails
//! with "needs root to create OS users" unless `OCGW_SKIP_OS_USER_TESTS=1` opts out, so a run that
//! cannot prove isolation never passes silently (the skip goes through `skip`: written past the
//! harness's capture, repeated at the end of scripts/test.sh, and a failure under CI). As root the
//! variable is ignored: never skipped.

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
            super::skip::skip(
                &super::skip::this_test(),
                &format!(
                    "needs root to create OS users {names:?} ({SKIP_VAR}=1): isolation between OS users is not proved by this run"
                ),
                "run scripts/test.sh as root (CI does)",
            );
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

/// Is this process root (so it can act as another OS user)? When not: `false` after saying so
/// loudly if `OCGW_SKIP_OS_USER_TESTS=1` skips such proofs knowingly, else the test fails.
pub fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var_os(SKIP_VAR).is_some_and(|v| v == "1") {
        super::skip::skip(
            &super::skip::this_test(),
            &format!("{what} needs root to act as another OS user ({SKIP_VAR}=1): not proved by this run"),
            "run scripts/test.sh as root (CI does)",
        );
        return false;
    }
    panic!(
        "{what} needs root to act as another OS user: run scripts/test.sh as root (CI does), or set {SKIP_VAR}=1 to skip this proof knowingly"
    );
}

/// Connect to the Unix socket `path` as OS user `uid`/`gid` (no supplementary groups), from a
/// forked child that changes its user first (needs root): `Ok` if the connection was accepted,
/// else the error the other user got.
pub fn unix_connect_as(uid: u32, gid: u32, path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    // Everything the child needs is made before the fork: it only makes system calls.
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    assert!(
        bytes.len() < addr.sun_path.len(),
        "socket path too long: {}",
        path.display()
    );
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: the child calls only async-signal-safe functions (setgroups, setgid, setuid, socket,
    // connect, _exit) and touches only memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                libc::_exit(200);
            }
            if libc::geteuid() != uid {
                libc::_exit(201);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if fd < 0 {
                libc::_exit(202);
            }
            let r = libc::connect(fd, &addr as *const libc::sockaddr_un as *const libc::sockaddr, len);
            let code = if r == 0 { 0 } else { *libc::__errno_location() };
            libc::_exit(code.clamp(0, 199));
        }
    }
    let mut status = 0;
    // SAFETY: waiting for the child just forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "the probe as uid {uid} died: {status}");
    match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        code @ 200.. => panic!("the probe could not become uid {uid} (exit {code})"),
        errno => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// Let sshd (without PAM) log `user` in with a key: `useradd` leaves the account locked (`!` as
/// its password), which sshd refuses; `*` allows no password either, but is not locked.
pub fn unlock_for_ssh(user: &OsUser) {
    let out = Command::new("usermod").args(["-p", "*", &user.name]).output().unwrap();
    assert!(
        out.status.success(),
        "usermod: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
