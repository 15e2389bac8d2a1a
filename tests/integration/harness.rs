//! The harness's own promises: a command past its deadline is killed and fails the test with what
//! it printed, and a guarded process is stopped and reaped when its guard goes, even when the test
//! panics while holding it.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::process::{Guarded, output_within};

/// Is `pid` a live (not zombie) process?
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name: "Z" is a zombie, "X" dead.
        Ok(stat) => !matches!(
            stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => false,
    }
}

#[test]
fn a_command_past_its_deadline_is_killed_and_fails_loudly_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; echo started-marker; exec sleep 60", pid_file.display());
    let started = Instant::now();
    let failed = std::panic::catch_unwind(|| {
        output_within(
            Command::new("sh").args(["-c", &script]),
            None,
            Duration::from_millis(700),
        )
    });
    let message = failed.expect_err("a command past its deadline must fail the test");
    let message = message.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("did not finish within") && message.contains("started-marker"),
        "the failure names the deadline and what the command printed: {message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(!alive(pid), "the command {pid} still runs");
    // What it started is stopped with it (a `serve` starts OpenCode servers, a script Chromium).
    let grandchild_file = dir.path().join("grandchild");
    let script = format!("sleep 60 & echo $! > {}; echo spawned; wait", grandchild_file.display());
    let failed = std::panic::catch_unwind(|| {
        output_within(
            Command::new("sh").args(["-c", &script]),
            None,
            Duration::from_millis(700),
        )
    });
    assert!(failed.is_err());
    let grandchild: u32 = std::fs::read_to_string(&grandchild_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Killed; its parent (reaped) leaves it to init, which reaps it soon.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(grandchild) {
        assert!(
            Instant::now() < deadline,
            "the command's own child {grandchild} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // And a command that finishes gives its output and status.
    let out = output_within(
        Command::new("sh").args(["-c", "cat; echo err >&2; exit 3"]),
        Some(b"in"),
        Duration::from_secs(30),
    );
    assert_eq!(
        (out.status.code(), out.stdout.as_slice(), out.stderr.as_slice()),
        (Some(3), b"in".as_slice(), b"err\n".as_slice())
    );
}

#[test]
fn a_guarded_process_is_stopped_and_reaped_when_the_test_panics() {
    let pid = std::sync::Mutex::new(0);
    let result = std::panic::catch_unwind(|| {
        let child = Guarded::spawn(Command::new("sleep").arg("60"), Duration::from_secs(2));
        *pid.lock().unwrap() = child.id();
        panic!("a failing start-up check");
    });
    assert!(result.is_err());
    let pid = *pid.lock().unwrap();
    assert!(pid > 0);
    assert!(!alive(pid), "sleep {pid} outlived the panic");
    // A process that ignores SIGTERM is killed once its grace is over.
    let started = Instant::now();
    let mut stubborn = Guarded::spawn(
        Command::new("sh").args(["-c", "trap '' TERM; exec sleep 60"]),
        Duration::from_millis(300),
    );
    let pid = stubborn.id();
    let status = stubborn.stop();
    assert!(!alive(pid), "sh {pid} survived its guard");
    assert!(status.is_some_and(|s| !s.success()), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Every `#[ignore…]` in the integration tests has the one label form `main.rs` documents, so
/// grepping for it finds every ignored test, and the label says what the test needs.
#[test]
fn every_ignored_test_says_what_it_needs_in_one_form() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration");
    let (mut ignored, mut bad) = (0, Vec::new());
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("main.rs") {
            continue;
        }
        for (n, line) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
            let line = line.trim();
            if !line.starts_with("#[ignore") {
                continue;
            }
            ignored += 1;
            let label = line
                .strip_prefix("#[ignore = \"needs ")
                .and_then(|l| l.strip_suffix(": run scripts/test.sh\"]"));
            if label.is_none_or(|l| l.is_empty() || l.contains('"')) {
                bad.push(format!("{}:{}: {line}", path.display(), n + 1));
            }
        }
    }
    assert!(ignored > 50, "only {ignored} ignored tests found: is the folder right?");
    assert!(
        bad.is_empty(),
        "ignored without the one label form:\n{}",
        bad.join("\n")
    );
}
