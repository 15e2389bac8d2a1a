//! The newcomer's path with a phone, timed in one chain (issue 38): a fresh clone
//! (`common::newcomer`: the suite's build where `cargo run --release` puts it, OpenCode on PATH, a
//! provider, the fake model, only in the user's global OpenCode config), the README's first command
//! on the committed LAN config `config/gateway.lan.toml` in the "box" network namespace
//! (`common::netns`), the first answer through the gateway with the `opencode run --attach` line
//! as the banner printed it (run in the box: it names the box's LAN address), then `pair` as
//! printed, and a phone (headless Chromium in the "phone" namespace) that gets the dev CA from the
//! page the terminal names, pairs from the QR code `pair` printed, sends a prompt from the
//! project's web UI and taps "Allow once" on the bash permission the agent raises, in /inbox
//! (`tests/browser/lan_phone.mjs` without its passkey steps). Each step's time since the clone
//! began is printed; the README quotes them.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::lan_phone::{
    model_in_the_box, pair_url, phone_home, text, the_phone_answered, trust_the_printed_ca,
};
use crate::common::netns::{BOX_ADDR, Lan};
use crate::common::newcomer::{Newcomer, commands, one};
use crate::common::opencode::ANSWER;

const LAN: &str = "config/gateway.lan.toml";
/// The whole chain's bound: each step has its own, this holds their sum to a newcomer's patience.
const CHAIN: Duration = Duration::from_secs(240);

/// Elapsed times since the clone began, each printed as it is taken.
struct Clock {
    began: Instant,
    wall: SystemTime,
    steps: Vec<(&'static str, Duration)>,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            began: Instant::now(),
            wall: SystemTime::now(),
            steps: Vec::new(),
        }
    }

    /// Every step's time printed on one line (the README's), the steps in order, the whole bounded.
    fn finish(&self) {
        let times: Vec<String> = self
            .steps
            .iter()
            .map(|(s, t)| format!("{s} {:.1} s", t.as_secs_f64()))
            .collect();
        eprintln!("newcomer phone timings: {}", times.join(", "));
        let (_, last) = self.steps.last().unwrap();
        assert!(*last < CHAIN, "the chain took {last:?}, over {CHAIN:?}: {times:?}");
        let ordered = self.steps.windows(2).all(|w| w[0].1 <= w[1].1);
        assert!(ordered, "the steps' times are out of order: {times:?}");
    }

    fn mark(&mut self, step: &'static str) {
        self.mark_at(step, self.began.elapsed());
    }

    fn mark_at(&mut self, step: &'static str, at: Duration) {
        eprintln!("newcomer phone chain: {step} at {:.1} s", at.as_secs_f64());
        self.steps.push((step, at));
    }

    /// The time since the clone began of the wall-clock instant `ms` (since the epoch, as a
    /// script on this machine printed it).
    fn since_began(&self, ms: u64) -> Duration {
        let began = self.wall.duration_since(UNIX_EPOCH).unwrap();
        Duration::from_millis(ms)
            .checked_sub(began)
            .unwrap_or_else(|| panic!("{ms} ms since the epoch is before the clone began ({began:?})"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode, Chromium: run scripts/test.sh"]
async fn a_newcomer_goes_from_a_fresh_clone_to_a_phones_first_allow_once_in_one_timed_chain() {
    let Some(lan) = Lan::make_or_skip("the newcomer's timed phone chain (issue 38)") else {
        return;
    };
    let in_box = ["ip", "netns", "exec", lan.box_ns.as_str()];
    // The provider the newcomer already has (in the box). Not part of the timings.
    let model = model_in_the_box(&lan);

    let mut clock = Clock::start();
    let n = Newcomer::clone(&model.config_json());
    // The one edit: each fixed port of the committed LAN config becomes 0 (tests take no fixed
    // ports); the addresses stay, `0.0.0.0` meaning the box's loopback and its LAN address.
    n.edit(LAN, crate::common::dev_config::lan_on_ephemeral_ports);
    clock.mark("cloned");
    let (run, banner) = n.serve(Path::new(LAN), &in_box);
    clock.mark("banner with the model");
    assert!(banner.contains("  model: fake/fake-model\n"), "{banner}");
    assert!(!banner.contains("WARNING"), "{banner}");
    let port = run.https.port();
    let cmds = commands(&banner);

    first_answer(&lan, &n, &cmds, &banner, port);
    clock.mark("first answer through the gateway");

    let out = n.sh_in(&in_box, one(&cmds, " pair dev"), None, Duration::from_secs(30));
    assert!(!text(&out).contains("WARNING"), "pair warns: {}", text(&out));
    let pair = pair_url(&String::from_utf8_lossy(&out.stdout), port);
    clock.mark("pair printed its QR code");

    let home = phone_home(&lan);
    let context = || {
        format!(
            "gateway output:\n{}\ngateway log:\n{}",
            run.stdout.lock().unwrap(),
            run.log.lock().unwrap()
        )
    };
    let ca = n.clone.join("certs-dev/ca.crt");
    trust_the_printed_ca(&lan, home.path(), &run.stdout, &ca, &context);
    clock.mark("the phone trusts the CA from the printed page");

    let project_dir = n.clone.join("demo").canonicalize().unwrap();
    let allowed = phone_allows_once(&lan, home.path(), &pair, &project_dir, context).await;
    clock.mark_at("first \"Allow once\" from the phone", clock.since_began(allowed));
    let audit = n.clone.join(".gateway-state/audit.jsonl");
    the_phone_answered(&audit, "dev", "demo", &project_dir).await;

    clock.finish();
}

/// The `opencode run --attach` line the banner printed, run as printed in the box (it names the
/// box's LAN address): the session it made holds the answer of the model only the user's global
/// config names, read back through the gateway (`run` prints the model's name, not its answer).
fn first_answer(lan: &Lan, n: &Newcomer, cmds: &[String], banner: &str, port: u16) {
    let attach = one(cmds, "run --attach");
    let project = format!("https://{BOX_ADDR}:{port}/p/demo");
    let named = attach.contains(&format!("{project} "));
    assert!(named, "the printed line names the box's LAN address: {attach}");
    n.sh_in(
        &["ip", "netns", "exec", &lan.box_ns],
        attach,
        None,
        Duration::from_secs(120),
    );
    let pw = crate::common::dev_config::printed_password(banner);
    let sessions = in_the_box(lan, n, &pw, &format!("{project}/session"));
    let id = sessions[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {sessions}"));
    let messages = in_the_box(lan, n, &pw, &format!("{project}/session/{id}/message"));
    assert!(messages.to_string().contains(ANSWER), "{messages}");
}

/// The phone (trusting the CA in `home`) opens `pair`, pairs, opens the project's web UI from the
/// portal, sends a prompt that asks for bash, and taps "Allow once" in /inbox: when it did, in ms
/// since the epoch, as it printed it.
async fn phone_allows_once(
    lan: &Lan,
    home: &Path,
    pair: &str,
    project_dir: &Path,
    context: impl Fn() -> String,
) -> u64 {
    let said = crate::common::browser::run_wrapped(
        &["ip", "netns", "exec", lan.phone_ns.as_str()],
        "lan_phone.mjs",
        &[
            ("HOME", home.as_os_str()),
            ("PAIR_URL", pair.as_ref()),
            ("PROJECT", "demo".as_ref()),
            ("PROJECT_DIR", project_dir.as_os_str()),
            ("SHOT_DIR", crate::common::browser::shots("newcomer_phone").as_os_str()),
        ],
        Duration::from_secs(300),
        context,
    )
    .await;
    said.lines()
        .find_map(|l| l.strip_prefix("allowed once at ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("the phone did not say when it allowed:\n{said}"))
}

/// `url` (a gateway path a printed line names) as JSON, fetched in the box as `dev` with the
/// clone's dev CA: the printed address is the box's.
fn in_the_box(lan: &Lan, n: &Newcomer, password: &str, url: &str) -> serde_json::Value {
    let out = crate::common::process::bounded(
        Lan::command(&lan.box_ns, "curl")
            .args(["-sS", "--fail-with-body", "--max-time", "15", "--cacert"])
            .arg(n.clone.join("certs-dev/ca.crt"))
            .args(["-u", &format!("dev:{password}"), url]),
    );
    assert!(out.status.success(), "{url}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {}", text(&out)))
}
