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

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::client::{Https, basic};
use crate::common::newcomer::{ME, Newcomer, commands, one};
use crate::common::opencode::{ANSWER, FakeModel};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, tmux: run scripts/test.sh"]
async fn every_command_the_first_start_and_pair_print_runs_as_printed_in_a_fresh_clone() {
    let began = Instant::now();
    let model = FakeModel::start("true").await;
    let n = Newcomer::clone(&model.config_json());
    // The one edit: the committed dev config's listeners on ephemeral ports (tests take no fixed ones).
    n.edit("config/gateway.toml", crate::common::dev_config::on_ephemeral_ports);
    let cloned = began.elapsed();
    let (run, banner) = n.serve(Path::new("config/gateway.toml"), &[]);
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
