//! The newcomer's path (issue 38): a fresh clone; the README's first command on the committed dev
//! config, which is `target/release/opencode-gateway serve` run from the clone's root (what
//! `cargo run --release -- serve` builds and runs; here the suite's build of the same source is
//! put there, and the config's listeners are moved to ephemeral ports, the one edit); OpenCode
//! on PATH as `npm install -g` puts it; a provider (the fake model) only in the user's global
//! OpenCode config. Then every command line the first start and `pair` print runs verbatim
//! (`sh -c <line>` in the clone, no `opencode-gateway` on PATH): before, each
//! `opencode-gateway …` they printed was "not found". The SSH forward's two lines are checked as
//! printed but not run: the forward binds the fixed port 4096 (SSH forwarding is proven by the
//! `ssh` tests).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::client::{Https, basic};
use crate::common::gateway::{BIN, Launched, serve_program};
use crate::common::opencode::{ANSWER, FakeModel, opencode_bin};
use crate::common::process::output_within;

/// How the README's first command names the gateway in a checkout.
const ME: &str = "target/release/opencode-gateway";

struct Newcomer {
    _root: tempfile::TempDir,
    clone: PathBuf,
    env: Vec<(String, String)>,
}

impl Newcomer {
    /// A fresh clone with the gateway built where `cargo run --release` puts it, and a home whose
    /// global OpenCode config holds `global`.
    fn clone(global: &str) -> Newcomer {
        let root = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let clone = root.path().join("opencode-gateway");
        let out = output_within(
            std::process::Command::new("git")
                .arg("clone")
                .arg("-q")
                .arg(repo)
                .arg(&clone),
            None,
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "git clone: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = clone.join("config/gateway.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, crate::common::dev_config::on_ephemeral_ports(&text)).unwrap();
        let built = clone.join(ME);
        std::fs::create_dir_all(built.parent().unwrap()).unwrap();
        if std::fs::hard_link(BIN, &built).is_err() {
            std::fs::copy(BIN, &built).unwrap();
        }
        let home = root.path().join("home");
        crate::common::opencode::write_user_config(&home, global);
        // OpenCode's folder on PATH (as a global npm install puts it), and the system's.
        let npm_bin = opencode_bin().parent().unwrap().to_path_buf();
        let env = vec![
            (
                "PATH".into(),
                format!("{}:/usr/local/bin:/usr/bin:/bin", npm_bin.display()),
            ),
            ("HOME".into(), home.display().to_string()),
            ("TERM".into(), "xterm-256color".into()),
        ];
        Newcomer {
            _root: root,
            clone,
            env,
        }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    /// The README's first command, until its banner is printed whole (bounded).
    fn serve(&self) -> (Launched, String) {
        let mut env = self.env();
        // The test's own XDG folders must not leak in: a newcomer's are under HOME.
        env.extend(["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"].map(|k| (k, "")));
        let run = serve_program(
            &self.clone.join(ME),
            &self.clone,
            Path::new("config/gateway.toml"),
            &env,
        );
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let out = run.stdout.lock().unwrap().clone();
            if out
                .split_once("shown only this once")
                .is_some_and(|(_, rest)| rest.contains("\n+-"))
            {
                return (run, out);
            }
            assert!(
                Instant::now() < deadline,
                "no whole banner within 90 s\nstdout:\n{out}\nlog:\n{}",
                run.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `line` exactly as printed, through the shell, from the clone's root.
    fn sh(&self, line: &str, stdin: Option<&[u8]>, within: Duration) -> Output {
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg(line)
            .current_dir(&self.clone)
            .env_clear()
            .envs(self.env());
        let out = output_within(&mut cmd, stdin, within);
        assert!(
            out.status.success(),
            "{line}\nexited {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// The lines of `printed` that are commands (inside the password's frame too), as printed.
fn commands(printed: &str) -> Vec<String> {
    printed
        .lines()
        .map(|l| l.trim().trim_matches('|').trim())
        .filter(|l| {
            let programs = [
                "target/",
                "opencode-gateway ",
                "NODE_EXTRA_CA_CERTS=",
                "opencode ",
                "ssh ",
            ];
            // The heading names the program too, but is not a command.
            programs.iter().any(|p| l.starts_with(p)) && !l.contains(" is serving ")
        })
        .map(String::from)
        .collect()
}

/// The one command of `cmds` containing `part`.
fn one<'a>(cmds: &'a [String], part: &str) -> &'a str {
    let found: Vec<&String> = cmds.iter().filter(|c| c.contains(part)).collect();
    assert_eq!(found.len(), 1, "{part:?} in {cmds:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, tmux: run scripts/test.sh"]
async fn every_command_the_first_start_and_pair_print_runs_as_printed_in_a_fresh_clone() {
    let began = Instant::now();
    let model = FakeModel::start("true").await;
    let n = Newcomer::clone(&model.config_json());
    let cloned = began.elapsed();
    let (run, banner) = n.serve();
    let served = began.elapsed();
    let cmds = commands(&banner);
    assert_eq!(
        cmds.len(),
        7,
        "pair, two attach, two over SSH, user passwd, reload: {cmds:#?}\n{banner}"
    );
    assert!(banner.contains("  model: fake/fake-model\n"), "{banner}");
    assert!(!banner.contains("WARNING"), "{banner}");
    let pw = crate::common::dev_config::printed_password(&banner);
    let c = Https::new(run.https, &n.clone.join("certs-dev/ca.crt"));

    // The first prompt, as printed, gets the answer of the model only the user's config names.
    n.sh(one(&cmds, "run --attach"), None, Duration::from_secs(120));
    let dev = basic("dev", &pw);
    let messages = crate::common::opencode::only_session_messages(&c, "demo", &dev).await;
    assert!(messages.to_string().contains(ANSWER), "{messages}");
    // For the README's newcomer timings (the release build itself is not in them).
    eprintln!(
        "newcomer timings: cloned {:.1} s, banner with the model {:.1} s, first answer {:.1} s",
        cloned.as_secs_f64(),
        served.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );

    attach_in_tmux(&n, one(&cmds, " attach https://")).await;
    pair_and_see_the_device(&n, one(&cmds, " pair dev"), &c).await;
    new_password_then_reload(&n, &cmds, &c, &pw).await;
    assert!(one(&cmds, "ssh -N -L 4096:demo:80").starts_with("ssh "));
    assert!(one(&cmds, "attach http://127.0.0.1:4096").starts_with("opencode "));
}

/// The TUI, as printed, in a terminal: it starts and answers.
async fn attach_in_tmux(n: &Newcomer, line: &str) {
    let tmux = crate::common::tmux::Tmux::new("newcomer");
    tmux.start(line, &n.clone, &n.env());
    let screen = tmux.wait_screen("Ask anything", Duration::from_secs(60)).await;
    assert!(
        screen.contains("Ask anything"),
        "{line}: the TUI did not start:\n{screen}"
    );
    tmux.run(&["send-keys", "-t", "tui", "hello from the newcomer", "Enter"]);
    let screen = tmux.wait_screen(ANSWER, Duration::from_secs(60)).await;
    assert!(screen.contains(ANSWER), "no answer on screen:\n{screen}");
}

/// `pair` as printed; its code redeemed as a phone on the login host would; then the command
/// `pair` prints to see devices, as printed, lists that phone.
async fn pair_and_see_the_device(n: &Newcomer, line: &str, c: &Https) {
    let out = n.sh(line, None, Duration::from_secs(30));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(printed.contains("/pair and type the code"), "{printed}");
    let code = printed
        .lines()
        .map(str::trim)
        .find(|l| l.len() == 14 && l.matches('-').count() == 2)
        .unwrap_or_else(|| panic!("no code in:\n{printed}"));
    let paired = crate::common::login::post_code(&c.host("gw.localhost"), code).await;
    assert_eq!(paired.status, 303, "{}", paired.body);
    let cmds = commands(&printed);
    assert_eq!(cmds, [format!("{ME} devices")], "{printed}");
    let out = n.sh(&cmds[0], None, Duration::from_secs(30));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.contains(" dev ") && l.trim_end().ends_with("phone")),
        "the paired phone: {listed}"
    );
}

/// `user passwd` as printed (the new password on stdin, as a script gives it), then `reload` as
/// `user passwd` itself prints it: the new password logs in, the old one no longer.
async fn new_password_then_reload(n: &Newcomer, cmds: &[String], c: &Https, old: &str) {
    let new = "a-new-password-for-dev";
    let out = n.sh(
        one(cmds, " user passwd dev"),
        Some(format!("{new}\n").as_bytes()),
        Duration::from_secs(30),
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let reload = said
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no command in {said:?}"));
    assert_eq!(reload, one(cmds, " reload"), "{said}");
    n.sh(reload, None, Duration::from_secs(30));
    let r = c.get("/p/demo/global/health", Some(&basic("dev", new))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = c.get("/p/demo/global/health", Some(&basic("dev", old))).await;
    assert_eq!(r.status, 401, "{}", r.body);
}
