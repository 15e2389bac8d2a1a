//! Two network namespaces the test makes itself, "box" (the gateway's machine) and "phone", joined
//! by a veth pair addressed from the benchmarking range 198.18.0.0/15 (box 198.18.0.1/30, phone
//! 198.18.0.2/30), loopback up in both and no other link: traffic between them never leaves the
//! pair. Dropping [`Lan`] deletes both namespaces (and with them the veth pair), also when the
//! test panics. Commands run inside one with `ip netns exec` ([`Lan::command`]) under the guards of
//! `process`. Making namespaces needs root (CI runs the suite as root) and iproute2's `ip`: where
//! either is missing, [`Lan::make_or_skip`] skips through `skip` (a failure under CI) and the
//! test returns.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::process::bounded;

pub const BOX_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const PHONE_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// Pairs made by this process so far (a suffix of their names).
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// The two namespaces and the veth pair between them.
pub struct Lan {
    /// The gateway's namespace (198.18.0.1).
    pub box_ns: String,
    /// The phone's namespace (198.18.0.2).
    pub phone_ns: String,
}

/// Through the one skip helper: seen in every run and repeated at the end of scripts/test.sh, and
/// a failure under CI.
fn skipped(what: &str, why: &str) {
    super::skip::skip(
        &format!("{} ({what})", super::skip::this_test()),
        &format!("cannot make network namespaces ({why})"),
        "run scripts/test.sh as root with iproute2 installed (CI does)",
    );
}

fn ip(args: &[&str]) -> std::process::Output {
    bounded(Command::new("ip").args(args))
}

fn check(args: &[&str]) {
    let out = ip(args);
    assert!(
        out.status.success(),
        "ip {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    /// Make the namespaces and the link, or `None` (after saying why on stderr) when this machine
    /// cannot: not root, no `ip`, or the kernel refuses (`ip netns add` fails, as in a container
    /// without CAP_SYS_ADMIN). Any later failure (the veth pair, an address) fails the test.
    pub fn make_or_skip(what: &str) -> Option<Lan> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skipped(what, "not root");
            return None;
        }
        if Command::new("ip").arg("-V").output().is_err() {
            skipped(what, "iproute2's `ip` is not installed: apt-get install iproute2");
            return None;
        }
        let n = RUNS.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}-{n}", std::process::id());
        let lan = Lan {
            box_ns: format!("ocgw-box-{id}"),
            phone_ns: format!("ocgw-phone-{id}"),
        };
        remove_stale();
        let out = ip(&["netns", "add", &lan.box_ns]);
        if !out.status.success() {
            skipped(
                what,
                &format!("`ip netns add` failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
            );
            std::mem::forget(lan); // nothing was made
            return None;
        }
        // From here on the guard deletes what exists, whatever fails next.
        check(&["netns", "add", &lan.phone_ns]);
        // Interface names are at most 15 bytes; these are unique per run, like the namespaces.
        let (box_if, phone_if) = (
            format!("ocb{}", std::process::id()),
            format!("ocp{}", std::process::id()),
        );
        let (box_if, phone_if) = (format!("{box_if}{n}"), format!("{phone_if}{n}"));
        check(&[
            "link",
            "add",
            &box_if,
            "netns",
            &lan.box_ns,
            "type",
            "veth",
            "peer",
            "name",
            &phone_if,
            "netns",
            &lan.phone_ns,
        ]);
        for (ns, dev, addr) in [(&lan.box_ns, &box_if, BOX_ADDR), (&lan.phone_ns, &phone_if, PHONE_ADDR)] {
            check(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev]);
            // No IPv6 link-local address: its duplicate detection ends a second after the link
            // comes up, and Chromium takes that change for a new network (ERR_NETWORK_CHANGED).
            check(&["-n", ns, "link", "set", dev, "addrgenmode", "none"]);
            check(&["-n", ns, "link", "set", dev, "up"]);
            check(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Some(lan)
    }

    /// `program` to be run inside `ns` (`ip netns exec <ns> <program>`): add its arguments and
    /// environment (which `ip netns exec` passes on), then run it with `bounded`,
    /// `output_within` or `Guarded` (`ip` execs the program, so the pid is the program's).
    pub fn command(ns: &str, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).arg(program);
        cmd
    }

    /// A TCP connection to `addr` made from inside `ns` (a client in the box or the phone), as
    /// [`Lan::bind_in`] makes a listener: the socket stays in the namespace it was made in.
    pub fn connect_in(ns: &str, addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
        let path = std::path::Path::new("/run/netns").join(ns);
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let f = std::fs::File::open(&path)?;
            // SAFETY: moves only this short-lived thread into the namespace.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            std::net::TcpStream::connect(addr)
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    /// A listening TCP socket inside `ns` (the fake model the box's OpenCode calls lives in the
    /// box): bound from a thread that enters the namespace and ends, the socket staying there.
    pub fn bind_in(ns: &str, addr: &str) -> std::net::TcpListener {
        let path = std::path::Path::new("/run/netns").join(ns);
        let addr = addr.to_string();
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // SAFETY: moves only this short-lived thread into the namespace.
            let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {}: {}", path.display(), std::io::Error::last_os_error());
            std::net::TcpListener::bind(&addr).unwrap_or_else(|e| panic!("bind {addr} in {}: {e}", path.display()))
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}

/// Namespaces of earlier runs that could not clean up (killed with SIGKILL): those named for a
/// process that no longer runs, or for this one (a pid reused).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    let me = std::process::id();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name
            .strip_prefix("ocgw-box-")
            .or_else(|| name.strip_prefix("ocgw-phone-"))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let ours_now = pid == me && RUNS.load(Ordering::SeqCst) == 1;
        if ours_now || !std::path::Path::new("/proc").join(pid.to_string()).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and so the pair.
        for ns in [&self.box_ns, &self.phone_ns] {
            let out = ip(&["netns", "del", ns]);
            if !out.status.success() {
                eprintln!("ip netns del {ns}: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
        }
    }
}
