//! Child processes a test starts. [`Guarded`] owns a long-running one (the gateway, OpenCode, an
//! SSH tunnel, pebble…) and stops and reaps it when dropped, however the test ends, including a
//! panic in its own start-up check. [`output_within`] runs a command that should finish, and
//! fails loudly, with everything it printed, if it does not finish in time.

use std::io::{Read, Write};
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process that is signalled and reaped on drop: SIGTERM first (to its process group
/// when it leads one, so what it spawned stops too), `grace` to exit, then SIGKILL.
pub struct Guarded {
    child: Option<Child>,
    grace: Duration,
    group: bool,
}

impl Guarded {
    /// Guard `child`, giving it `grace` after SIGTERM before it is killed.
    pub fn new(child: Child, grace: Duration) -> Guarded {
        Guarded {
            child: Some(child),
            grace,
            group: false,
        }
    }

    /// Guard `child`, which was spawned as the leader of its own process group
    /// (`CommandExt::process_group(0)`): the whole group is signalled.
    pub fn group(child: Child, grace: Duration) -> Guarded {
        Guarded {
            child: Some(child),
            grace,
            group: true,
        }
    }

    /// Spawn `cmd` and guard it.
    pub fn spawn(cmd: &mut Command, grace: Duration) -> Guarded {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
        Guarded::new(child, grace)
    }

    /// Its process id (0 once stopped).
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Stop it now (as on drop) and return its exit status, if it ran.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let target = if self.group {
            -(child.id() as i32)
        } else {
            child.id() as i32
        };
        let mut status = None;
        if let Ok(None) = child.try_wait() {
            // SAFETY: signalling our own, unreaped child (or its process group).
            unsafe { libc::kill(target, libc::SIGTERM) };
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline {
                if let Ok(Some(s)) = child.try_wait() {
                    status = Some(s);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if self.group {
            // What the leader spawned may outlive it.
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(target, libc::SIGKILL) };
        }
        if status.is_none() {
            let _ = child.kill();
        }
        child.wait().ok().or(status)
    }
}

impl Deref for Guarded {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.child.as_ref().expect("the guarded process was stopped")
    }
}

impl DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the guarded process was stopped")
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Run `cmd` (stdout and stderr captured, `stdin` written to its standard input, or none) and
/// return its output; if it has not exited within `within`, kill it and panic with what it printed.
pub fn output_within(cmd: &mut Command, stdin: Option<&[u8]>, within: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    // Its own process group, so a deadline stops what it started too (a `serve` that should
    // have refused its config starts OpenCode servers; a browser script starts Chromium).
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
    }
    let out = Arc::new(Mutex::new(Vec::new()));
    let err = Arc::new(Mutex::new(Vec::new()));
    let readers = [
        collect(child.stdout.take().unwrap(), out.clone()),
        collect(child.stderr.take().unwrap(), err.clone()),
    ];
    let mut child = Guarded::group(child, Duration::from_millis(500));
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            child.stop();
            panic!(
                "{cmd:?} did not finish within {within:?} (killed); it printed:\n{}{}",
                String::from_utf8_lossy(&out.lock().unwrap()),
                String::from_utf8_lossy(&err.lock().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The pipes close when the process exits, unless something it started holds them: wait a
    // little for the last bytes, no longer.
    let drained = Instant::now() + Duration::from_secs(2);
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < drained {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stdout = out.lock().unwrap().clone();
    let stderr = err.lock().unwrap().clone();
    Output { status, stdout, stderr }
}

/// A command that should end at once (the gateway's CLI: `status`, `reload`, `token`…), run as
/// [`output_within`] with a minute's deadline.
pub fn bounded(cmd: &mut Command) -> Output {
    output_within(cmd, None, Duration::from_secs(60))
}

/// [`output_within`] from async code: on a blocking thread, its panic the caller's.
pub async fn output_within_async(mut cmd: Command, within: Duration) -> Output {
    match tokio::task::spawn_blocking(move || output_within(&mut cmd, None, within)).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("{e}"),
    }
}

fn collect(mut stream: impl Read + Send + 'static, sink: Arc<Mutex<Vec<u8>>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    })
}

/// Wait, bounded, until `ready` holds for what the process logged (true) or it has exited
/// (false: the caller may try again, say on another port); neither within `within` fails the
/// test with the log.
pub fn ready_or_exited(
    child: &mut Guarded,
    log: &Mutex<String>,
    within: Duration,
    what: &str,
    ready: impl Fn(&str) -> bool,
) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if ready(&log.lock().unwrap()) {
            return true;
        }
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "{what} was not ready in {within:?}:\n{}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
