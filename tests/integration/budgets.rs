//! Budgets (issue 25) against a real OpenCode whose fake model reports token usage and has a
//! price, so OpenCode itself computes each answer's cost ($0.0105 each: 1000 input tokens at
//! $3 and 500 output tokens at $15 per million). The gateway's meter reads the sessions' costs
//! from its one event subscription per server, and refuses a prompt on a spent budget before it
//! reaches OpenCode, however the route is spelled.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, base_config, users_toml};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::stack::ALICE_PW;
use crate::common::webhook::receiver;

/// One answer's cost, as OpenCode computes it for the priced fake model.
pub(crate) const ANSWER_USD: f64 = 0.0105;

pub(crate) const VIC_PW: &str = "vic-password-1";
/// The command the runaway agent runs again and again: it fails the same way each time.
pub(crate) const FAILING: &str = "cat ocgw-runaway-missing-file";

pub(crate) fn alice() -> String {
    basic("alice", ALICE_PW)
}

/// Until the gateway's meter has seen `usd` spent in project demo (bounded).
pub(crate) async fn until_spent(gw: &Gateway, usd: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = metrics_text(gw);
        let spent = spent_in(&body);
        if spent >= usd - 1e-9 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the meter saw ${spent}, not ${usd}:\n{}",
            body.lines()
                .filter(|l| l.contains("spend"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What `/metrics` says project demo spent.
pub(crate) fn spent_in(metrics: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            l.split_once("project_spend_usd_total{project=\"demo\"} ")
                .map(|(_, v)| v)
        })
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

pub(crate) fn metrics_text(gw: &Gateway) -> String {
    gw.admin("GET", "/metrics").1
}

/// A real OpenCode on `model` as project demo with `budget = { <budget> }`; alice operates it.
pub(crate) fn demo_with_budget(model: &FakeModel, budget: &str) -> (OpenCode, Gateway) {
    demo_guarded(model, budget, None)
}

/// Like [`demo_with_budget`], with notifications to the webhook `hook` when given, and vic, who
/// only views the project.
pub(crate) fn demo_guarded(model: &FakeModel, budget: &str, hook: Option<&str>) -> (OpenCode, Gateway) {
    let oc = tokio::task::block_in_place(|| OpenCode::start(model));
    let pw = oc.password.clone();
    let notify = hook.map_or(String::new(), |h| {
        format!("[notify]\nwebhook = \"{h}\"\ndebounce = \"100ms\"\n\n")
    });
    let user = |name, password, role| crate::common::gateway::TestUser {
        name,
        password,
        projects: "[\"*\"]",
        role,
    };
    let config = base_config(&format!(
        "{notify}[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\nbudget = {{ {budget} }}\n\n{}",
        oc.url(),
        users_toml(&[user("alice", ALICE_PW, "operator"), user("vic", VIC_PW, "viewer")])
    ));
    let gw = Gateway::start_with(&config, &[], move |d| crate::common::write_secret(&d.join("pw"), &pw));
    (oc, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_prompt_on_a_spent_session_budget_is_refused_before_opencode_however_it_is_spelled() {
    let model = FakeModel::start("true").await.priced(3.0, 15.0);
    let (oc, mut gw) = demo_with_budget(&model, "session_usd = 0.02");
    let c = Https::new(gw.https, &gw.ca());
    let (status, session) = json(&c, "POST", "/p/demo/session", &alice(), "{}").await;
    assert_eq!(status, 200, "{session}");
    let id = session["id"].as_str().unwrap().to_string();
    let prompt = r#"{"parts":[{"type":"text","text":"hello"}]}"#;
    let message = format!("/p/demo/session/{id}/message");

    // Two answers: $0.0105, then $0.021, over the $0.02 budget (a prompt is judged before it
    // starts; the one that crosses the limit is not cut here).
    for n in 1..=2 {
        let (status, answer) = json(&c, "POST", &message, &alice(), prompt).await;
        assert_eq!(status, 200, "prompt {n}: {answer}");
        assert_eq!(
            answer["info"]["cost"].as_f64(),
            Some(ANSWER_USD),
            "OpenCode priced the answer: {answer}"
        );
        until_spent(&gw, ANSWER_USD * n as f64).await;
    }
    let (status, info) = json(&c, "GET", &format!("/p/demo/session/{id}"), &alice(), "").await;
    assert_eq!(status, 200);
    assert!(
        (info["cost"].as_f64().unwrap() - 2.0 * ANSWER_USD).abs() < 1e-9,
        "{info}"
    );

    // The portal says what the project spent today.
    let cookie = crate::common::login::form_login(&c, "alice", ALICE_PW).await;
    let portal =
        crate::common::login::browser_get(&c.host(crate::common::login::LOGIN_HOST), "/", Some(&cookie), true).await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    assert!(
        portal
            .body
            .contains("Spent today: $0.0210 (UTC day) · this month: $0.0210"),
        "{}",
        portal.body
    );
    assert!(
        portal
            .body
            .contains("You spent today: $0.0210 (UTC day) · this month: $0.0210"),
        "{}",
        portal.body
    );

    // The third prompt, and every spelling and route of it, is refused by the gateway: the
    // model is not asked again.
    let asked = model.requests.load(Ordering::SeqCst);
    let r = c
        .call(
            c.request("POST", &message, Some(&alice()))
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(prompt)))
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body
            .contains("this session's budget is spent (budget.session_usd: $0.0210 of $0.02)"),
        "{}",
        r.body
    );
    let spellings = [
        format!("/p/demo/session/{id}/prompt_async"),
        format!("/p/demo/session/{id}/command"),
        format!("/p/demo/session/{id}/shell"),
        format!("/p/demo/session/{id}/message?directory=%2Ftmp"),
        format!("/p/demo/session/{id}/%6Dessage"),
        format!("/p/demo/session/{id}/message;x=1"),
        format!("/p/demo/session//{id}/message"),
        format!("/p/demo/session/{id}/message/"),
        format!("/p/demo/SESSION/{id}/Message"),
        format!("/p/demo/api/session/{id}/prompt"),
        // Compaction and `/init` ask the model too (round four: both went through).
        format!("/p/demo/session/{id}/summarize"),
        format!("/p/demo/session/{id}/init"),
        format!("/p/demo/api/session/{id}/compact"),
        // The session named with its `_` percent-encoded: the same session to OpenCode and to
        // the meter (both read the decoded id).
        format!("/p/demo/session/{}/message", id.replacen('_', "%5F", 1)),
    ];
    for path in &spellings {
        let body = if path.contains("/command") {
            r#"{"command":"init","arguments":""}"#
        } else if path.contains("/shell") {
            r#"{"agent":"build","command":"true"}"#
        } else if path.contains("/summarize") || path.contains("/init") {
            r#"{"providerID":"fake","modelID":"fake-model","messageID":"msg_x"}"#
        } else if path.contains("/compact") {
            "{}"
        } else {
            prompt
        };
        let (status, answer) = json(&c, "POST", path, &alice(), body).await;
        // Each is the canonical prompt route OpenCode would run: refused for the budget.
        assert_eq!(status, 403, "{path}: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains("budget.session_usd: $0.0210 of $0.02")),
            "{path}: {answer}"
        );
    }
    // Each refusal was answered before anything was forwarded: nothing can reach the model later.
    assert_eq!(
        model.requests.load(Ordering::SeqCst),
        asked,
        "the model was asked again past the budget"
    );
    // A new session starts with its own budget.
    let (status, fresh) = json(&c, "POST", "/p/demo/session", &alice(), "{}").await;
    assert_eq!(status, 200);
    let fresh = fresh["id"].as_str().unwrap().to_string();
    let (status, answer) = json(
        &c,
        "POST",
        &format!("/p/demo/session/{fresh}/message"),
        &alice(),
        prompt,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    until_spent(&gw, 3.0 * ANSWER_USD).await;

    // The gateway stops; meanwhile the session spends once more, straight on OpenCode. After
    // the restart, today's spend is what was kept plus what the session spent in the gap.
    gw.signal(libc::SIGTERM);
    assert!(tokio::task::block_in_place(|| gw.wait_exit(Duration::from_secs(30))).is_some());
    let direct = crate::common::client::direct_call(
        oc.port,
        &oc.password,
        "POST",
        &format!("/session/{id}/message"),
        &[],
        prompt,
    )
    .await;
    assert!(direct.contains("\"cost\""), "{direct}");
    tokio::task::block_in_place(|| gw.restart());
    let c = Https::new(gw.https, &gw.ca());
    let cookie = crate::common::login::form_login(&c, "alice", ALICE_PW).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let portal =
            crate::common::login::browser_get(&c.host(crate::common::login::LOGIN_HOST), "/", Some(&cookie), true)
                .await;
        if portal
            .body
            .contains("Spent today: $0.0420 (UTC day) · this month: $0.0420")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the restart the portal does not say $0.0420 (three answers kept, one in the gap): {}",
            portal
                .body
                .lines()
                .find(|l| l.contains("Spent today"))
                .unwrap_or("no spend line")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, answer) = json(&c, "POST", &message, &alice(), prompt).await;
    assert_eq!(
        status, 403,
        "the spent session is still refused after a restart: {answer}"
    );

    // An operator raises the session's budget from the portal (a viewer may not): the next
    // prompt goes through, and the raise is audited.
    use crate::common::login::{LOGIN_HOST, form_login, portal_post};
    let lh = c.host(LOGIN_HOST);
    let raise = format!("project=demo&scope=session&session={id}&do=raise&usd=0.05");
    let vic = form_login(&c, "vic", VIC_PW).await;
    let refused = portal_post(&lh, &vic, "/_gw/budget", &raise).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("needs the operator role; vic has viewer"),
        "{}",
        refused.body
    );
    for bad in ["usd=-1", "usd=nan", "usd=1e9"] {
        let form = raise.replace("usd=0.05", bad);
        let r = portal_post(&lh, &cookie, "/_gw/budget", &form).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    let (status, _) = json(&c, "POST", &message, &alice(), prompt).await;
    assert_eq!(status, 403, "a refused raise raised nothing");
    let raised = portal_post(&lh, &cookie, "/_gw/budget", &raise).await;
    assert_eq!(raised.status, 303, "{}", raised.body);
    let (status, answer) = json(&c, "POST", &message, &alice(), prompt).await;
    assert_eq!(status, 200, "raised by $0.05: {answer}");
    let r = crate::common::audit::find(&crate::common::audit::file(&gw), "budget_raised", |r| {
        r["session"] == id.as_str()
    })
    .await;
    assert_eq!((&r["user"], &r["added"]), (&"alice".into(), &0.05.into()), "{r}");
    // The raise is kept across a restart: the session may go on (the meter has seen the answer
    // just given before the gateway stops and saves).
    until_spent(&gw, ANSWER_USD).await;
    gw.signal(libc::SIGTERM);
    assert!(tokio::task::block_in_place(|| gw.wait_exit(Duration::from_secs(30))).is_some());
    tokio::task::block_in_place(|| gw.restart());
    let c = Https::new(gw.https, &gw.ca());
    let (status, answer) = json(&c, "POST", &message, &alice(), prompt).await;
    assert_eq!(status, 200, "the raise was lost in the restart: {answer}");
}

/// `check` refuses a budget that is not an amount, a share or an action, and a user's daily
/// limit set in a project, naming the key and the fix.
#[test]
fn check_refuses_budgets_that_are_not_amounts_shares_or_actions() {
    let dir = tempfile::tempdir().unwrap();
    let config = base_config(
        "[budget]\nsession_usd = -1.0\non_exceed = \"explode\"\nwarn_at = 1.5\nsame_failure = 1\nmax_busy_minutes = -3.0\non_runaway = \"panic\"\n\n[[project]]\nname = \"web\"\nupstream = \"http://127.0.0.1:4096\"\nbudget = { project_day_usd = 0.0, user_day_usd = 3.0 }\n",
    );
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, config).unwrap();
    let out = crate::common::process::bounded(
        std::process::Command::new(crate::common::gateway::BIN)
            .args(["check", "-c"])
            .arg(&file),
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{err}");
    for (key, says) in [
        ("budget.session_usd", "-1 is not an amount of US dollars"),
        ("budget.on_exceed", "\"explode\" is not what a budget can do"),
        ("budget.warn_at", "1.5 is not a share of a limit"),
        ("budget.same_failure", "1 is not a number of failures in a row"),
        ("budget.max_busy_minutes", "-3 is not a number of minutes"),
        ("budget.on_runaway", "\"panic\" is not what a budget can do"),
        ("project[0].budget.project_day_usd", "0 is not an amount of US dollars"),
        ("project[0].budget.user_day_usd", "counts across projects"),
    ] {
        assert!(err.contains(key) && err.contains(says), "{key}: {says}\n{err}");
    }
}

/// A runaway agent (the fake model asks for the bash tool after every result, each step $0.0105)
/// is stopped by the gateway with OpenCode's own abort once its session's spend reaches the
/// budget: the model is asked no more, the stop is audited, the team's webhook is told (project,
/// session, figures; not the prompt), and a new prompt on the session is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_session_that_reaches_its_budget_while_it_runs_is_stopped() {
    // A command and output of its own, so an alert that carried either would be seen.
    let model = FakeModel::start("echo BUDGET-OUT-$((6*7))")
        .await
        .priced(3.0, 15.0)
        .allowing_bash();
    let (hook, hooked) = receiver(vec![]).await;
    let (_oc, gw) = demo_guarded(&model, "session_usd = 0.03, warn_at = 0.5", Some(&hook));
    let c = Https::new(gw.https, &gw.ca());
    let id = a_looping_session_stopped_by_the_guard(&c, &gw).await;
    let asked = model.requests.load(Ordering::SeqCst);
    let (_, info) = json(&c, "GET", &format!("/p/demo/session/{id}"), &alice(), "").await;
    let cost = info["cost"].as_f64().unwrap();
    // Reached at the third step ($0.0315); a step already asked for may still finish.
    assert!((0.03..0.0525).contains(&cost), "stopped at ${cost}: {info}");
    // Asked no more: a later request to the model would come within the next step's time.
    let (status, refused) = json(
        &c,
        "POST",
        &format!("/p/demo/session/{id}/message"),
        &alice(),
        r#"{"parts":[{"type":"text","text":"go on"}]}"#,
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(
        model.requests.load(Ordering::SeqCst),
        asked,
        "the model was asked after the stop"
    );
    let audit = gw.dir.path().join("state/audit.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .contains("\"budget_abort\"")
    {
        assert!(Instant::now() < deadline, "the stop is not in the audit trail");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Told twice: at half the budget, then when it was spent and the session stopped.
    let told = alerts_until(&hooked, 2).await;
    assert_eq!(told[0]["kind"], "budget_warning", "{told:?}");
    assert_eq!(told[1]["kind"], "budget_spent", "{told:?}");
    assert_eq!(
        (&told[1]["project"], &told[1]["session"], &told[1]["stopped"]),
        (&"demo".into(), &id.clone().into(), &true.into())
    );
    assert!(
        told[1]["reason"]
            .as_str()
            .unwrap()
            .contains("of this session's budget, $0.03"),
        "{told:?}"
    );
    for t in &told {
        for secret in ["LOOPBASH", "BUDGET-OUT", "echo"] {
            assert!(!t.to_string().contains(secret), "{secret} in a notification: {t}");
        }
    }
    // The output was there to leak: the tool ran and printed it.
    let (_, messages) = json(&c, "GET", &format!("/p/demo/session/{id}/message"), &alice(), "").await;
    assert!(
        messages.to_string().contains("BUDGET-OUT-42"),
        "the tool's output: {messages}"
    );
}

/// The webhook's bodies, parsed, once it has `n` (bounded).
pub(crate) async fn alerts_until(seen: &std::sync::Mutex<Vec<String>>, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: Vec<serde_json::Value> = (seen.lock().unwrap().iter())
            .map(|b| serde_json::from_str(b).unwrap())
            .collect();
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{n} notifications expected, got {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Through the gateway's SSH front door (`ssh -L`, the key is the identity): the same budget,
/// the same refusal, decided in the same admit phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and OpenSSH's client: run scripts/test.sh"]
async fn the_ssh_front_door_meets_the_same_budget() {
    use crate::common::client::plain;
    use crate::common::ssh::{Tunnel, keygen, known_hosts};
    let model = FakeModel::start("true").await.priced(3.0, 15.0);
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let pw = oc.password.clone();
    let keys = tempfile::tempdir().unwrap();
    let alice_key = keygen(keys.path(), "alice_key");
    let config = base_config(&format!(
        "[ssh]\nlisten = \"127.0.0.1:0\"\nhost_key = \"certs/ssh_host_ed25519_key\"\n\n[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\nbudget = {{ session_usd = 0.01 }}\n\n[[user]]\nname = \"alice\"\nssh_keys = [\"{}\"]\nprojects = [\"*\"]\nrole = \"operator\"\n",
        oc.url(),
        alice_key.public_line
    ));
    let gw = Gateway::start_with(&config, &[], move |d| crate::common::write_secret(&d.join("pw"), &pw));
    let kh = known_hosts(&gw, keys.path());
    let t = Tunnel::open(&gw, &kh, &alice_key.private, "alice", "demo");
    let json_headers = [("content-type", "application/json")];
    let created = plain(t.local, "POST", "/session", &json_headers, "{}").await;
    let id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let prompt = r#"{"parts":[{"type":"text","text":"hello"}]}"#;
    let first = plain(
        t.local,
        "POST",
        &format!("/session/{id}/message"),
        &json_headers,
        prompt,
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    until_spent(&gw, ANSWER_USD).await;
    let asked = model.requests.load(Ordering::SeqCst);
    let second = plain(
        t.local,
        "POST",
        &format!("/session/{id}/message"),
        &json_headers,
        prompt,
    )
    .await;
    assert_eq!(second.status, 403, "{}", second.body);
    assert!(
        second.body.contains("budget.session_usd: $0.0105 of $0.01"),
        "{}",
        second.body
    );
    assert_eq!(
        model.requests.load(Ordering::SeqCst),
        asked,
        "the model was asked past the budget"
    );
}

/// Until OpenCode itself says the session is idle (bounded).
/// A session of alice's in demo whose prompt runs bash until the guard stops it, once OpenCode
/// says it is no longer busy (bounded waits): its id.
pub(crate) async fn a_looping_session_stopped_by_the_guard(c: &Https, gw: &Gateway) -> String {
    let (status, session) = json(c, "POST", "/p/demo/session", &alice(), "{}").await;
    assert_eq!(status, 200, "{session}");
    let id = session["id"].as_str().unwrap().to_string();
    let (status, answer) = json(
        c,
        "POST",
        &format!("/p/demo/session/{id}/prompt_async"),
        &alice(),
        r#"{"parts":[{"type":"text","text":"LOOPBASH until stopped"}]}"#,
    )
    .await;
    assert!((200..300).contains(&status), "{status} {answer}");
    assert!(
        gw.wait_log("the guard flagged a session", Duration::from_secs(60))
            .await,
        "{}",
        gw.logs()
    );
    until_idle(c, &id).await;
    id
}

pub(crate) async fn until_idle(c: &Https, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // Only OpenCode's own status map counts: an error answer (a 502, a refusal) is not "idle".
        let (status, busy) = json(c, "GET", "/p/demo/session/status", &alice(), "").await;
        assert!(
            status == 200 && busy.is_object(),
            "GET /session/status: {status} {busy}"
        );
        if busy.get(id).is_none_or(|s| s["type"] == "idle") {
            return;
        }
        assert!(Instant::now() < deadline, "the session still runs: {busy}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
