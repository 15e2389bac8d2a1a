//! Scheduled triggers (issue 40, item 2) against the real OpenCode and the fake model: a schedule
//! due within seconds (added by a reload) fires once, as the trigger's user under its policy; with
//! two gateways on one PostgreSQL database it fires once in all, and a webhook delivery one
//! gateway took is refused as a replay by the other.

use std::time::{Duration, Instant};

use crate::common::client::Https;
use crate::common::gateway::Gateway;
use crate::common::opencode::{FakeModel, OpenCode};
use crate::triggers::{SECRET, deliver, demo, push_payload, saw, signature};

/// Add a `[[trigger]]` named `name` due `secs` from now (UTC, seconds field) and reload; the due
/// time as the audit trail writes it.
fn schedule_in(gws: &[&Gateway], name: &str, secs: u64) -> String {
    let due = std::time::SystemTime::now() + Duration::from_secs(secs);
    let unix = due.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (h, m, s) = ((unix / 3600) % 24, (unix / 60) % 60, unix % 60);
    let table = format!(
        "\n[[trigger]]\nname = \"{name}\"\nproject = \"demo\"\nschedule = \"{s} {m} {h} * * *\"\ntime_zone = \"UTC\"\nprompt = \"Nightly.\\nRUNCMD: echo allowed > {name}-marker\"\npolicy = \"ci\"\nrun_as_user = \"ci-bot\"\n"
    );
    for gw in gws {
        let mut config = std::fs::read_to_string(&gw.config).unwrap();
        config.push_str(&table);
        std::fs::write(&gw.config, config).unwrap();
        let (status, body) = tokio::task::block_in_place(|| gw.control("POST", "/reload"));
        assert_eq!(status, 200, "{body}");
    }
    // The expected delivery id, from the `time` crate, not from the gateway's own formatting.
    let at = time::OffsetDateTime::from_unix_timestamp(unix as i64).unwrap();
    let (year, month, d) = (at.year(), u8::from(at.month()), at.day());
    format!("schedule:{year:04}-{month:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

fn fired(gw: &Gateway, trigger: &str) -> Vec<serde_json::Value> {
    crate::common::audit::records(&crate::common::audit::file(gw))
        .into_iter()
        .filter(|r| r["event"] == "trigger_fired" && r["trigger"] == trigger)
        .collect()
}

/// Wait (bounded) until the gateways have `trigger_fired` records of `trigger`; all of them.
async fn until_fired(gws: &[&Gateway], trigger: &str) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let all: Vec<_> = gws.iter().flat_map(|g| fired(g, trigger)).collect();
        if !all.is_empty() {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "{trigger} never fired:\n{}",
            gws.iter().map(|g| g.logs()).collect::<Vec<_>>().join("\n----\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_schedule_due_within_seconds_fires_once_under_its_policy() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let gw = demo(&oc.url(), &oc.password, "");
    let delivery = schedule_in(&[&gw], "soon", 4);
    let records = until_fired(&[&gw], "soon").await;
    let r = &records[0];
    assert_eq!(
        (
            &r["delivery"],
            &r["user"],
            &r["policy"],
            &r["hook_event"],
            &r["address"]
        ),
        (
            &delivery.as_str().into(),
            &"ci-bot".into(),
            &"ci".into(),
            &"schedule".into(),
            &"127.0.0.1".into()
        ),
        "{r}"
    );
    let c = Https::new(gw.https, &gw.ca());
    let session = r["session"].as_str().unwrap().to_string();
    let said = saw(&c, &session).await;
    assert!(
        oc.project.join("soon-marker").exists(),
        "the allowed command did not run: {said}"
    );
    // Its policy answered the request (no person), and the run is not repeated.
    let audit = crate::common::audit::file(&gw);
    let a = crate::common::audit::find(&audit, "policy_answer", |r| r["session"] == session.as_str()).await;
    assert_eq!(a["rule"], "allow: bash: echo allowed > *", "{a}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(fired(&gw, "soon").len(), 1, "{:#?}", fired(&gw, "soon"));
    // Its due time is kept apart from webhook deliveries and for an hour, not their week: a
    // schedule with a seconds field cannot fill the records every webhook needs.
    let db = rusqlite::Connection::open(gw.dir.path().join("state/gateway.db")).unwrap();
    let kept: Vec<(String, i64)> = db
        .prepare("SELECT kind, expires_at FROM once_records WHERE kind IN ('hook-delivery', 'schedule-run')")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        kept.len() == 1 && kept[0].0 == "schedule-run" && kept[0].1 - now <= 3_600_000,
        "{kept:?} (now {now})"
    );
}

/// Two gateways on one PostgreSQL database in front of one server: the schedule fires once in
/// all, and a delivery one gateway fired is a replay at the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn on_one_postgresql_database_a_schedule_and_a_delivery_fire_once_in_all() {
    let Some((_cluster, url)) = crate::common::pg_config::cluster().await else {
        return;
    };
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let store = format!("[store]\nurl = \"{url}\"\n\n");
    let (a, b) = (
        demo(&oc.url(), &oc.password, &store),
        demo(&oc.url(), &oc.password, &store),
    );
    let delivery = schedule_in(&[&a, &b], "shared", 5);
    let records = until_fired(&[&a, &b], "shared").await;
    assert_eq!(records[0]["delivery"], delivery.as_str());
    // Past the due time and the other gateway's look: still one firing in all, and the other
    // gateway says it was fired elsewhere.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(a.logs() + &b.logs()).contains("a scheduled run was fired by another gateway") {
        assert!(Instant::now() < deadline, "{}\n----\n{}", a.logs(), b.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let all: Vec<_> = [&a, &b].iter().flat_map(|g| fired(g, "shared")).collect();
    assert_eq!(all.len(), 1, "{all:#?}");
    // A webhook delivery: fired by a, refused as a replay by b.
    let (ca, cb) = (Https::new(a.https, &a.ca()), Https::new(b.https, &b.ca()));
    let body = push_payload("mona");
    let sig = signature(SECRET, body.as_bytes());
    let r = deliver(&ca, "gh", "push", "pg-1", &body, Some(sig.clone())).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = deliver(&cb, "gh", "push", "pg-1", &body, Some(sig)).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("delivery_replayed"), "{}", r.body);
}
