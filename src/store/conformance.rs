//! The store's behaviour, written once and run against each backend: SQLite on a file, and
//! PostgreSQL on a throwaway cluster (`postgres_cluster.rs`) when its programs are installed.

use crate::store::*;

/// Push subscriptions: one per user and endpoint (subscribing again replaces it), listed only while
/// the login they were made in is live, deleted only by their own user when one is named,
/// and with the paired device they were made on.
pub(super) fn push_subscriptions_live_with_their_login_and_go_with_their_device(store: &dyn Store) {
    store
        .insert_device(&DeviceRecord {
            id: "dev_1".into(),
            user: "ann".into(),
            label: "phone".into(),
            created_at: 1,
            last_seen_at: None,
            last_address: None,
            revoked_at: None,
        })
        .unwrap();
    store
        .insert_web_session(&login("ws_ann", "ann", Some("dev_1"), 1))
        .unwrap();
    store.insert_web_session(&login("ws_bob", "bob", None, 2)).unwrap();
    store.insert_web_session(&login("ws_cat", "cat", None, 3)).unwrap();
    let sub = |endpoint: &str, user: &str, session: &str, device: Option<&str>| {
        subscription(endpoint, user, session, device, 4)
    };
    store.save_push(&sub("https://p/1", "ann", "ws_ann", None)).unwrap();
    store
        .save_push(&sub("https://p/1", "ann", "ws_ann", Some("dev_1")))
        .unwrap();
    store.save_push(&sub("https://p/2", "bob", "ws_bob", None)).unwrap();
    store.save_push(&sub("https://p/3", "cat", "ws_cat", None)).unwrap();
    let listed = |now| {
        let mut all: Vec<String> = store
            .push_subscriptions(now)
            .unwrap()
            .into_iter()
            .map(|s| s.endpoint)
            .collect();
        all.sort();
        all
    };
    assert_eq!(listed(10), ["https://p/1", "https://p/2", "https://p/3"]);
    assert_eq!(
        store
            .push_subscriptions(10)
            .unwrap()
            .iter()
            .find(|s| s.user == "ann")
            .unwrap()
            .device_id
            .as_deref(),
        Some("dev_1"),
        "replaced"
    );
    assert!(listed(1000).is_empty(), "expired logins push nothing");
    assert_eq!(store.push_endpoints_of("bob").unwrap(), ["https://p/2"]);
    assert!(!store.delete_push("https://p/2", Some("ann")).unwrap(), "not ann's");
    assert!(store.delete_push("https://p/2", Some("bob")).unwrap());
    // cat logs out; ann's device is revoked (and its sessions with it).
    assert!(store.revoke_web_session("ws_cat", 20).unwrap());
    assert_eq!(listed(30), ["https://p/1"]);
    assert!(store.revoke_device("dev_1", 20).unwrap());
    assert!(listed(30).is_empty());
    assert_eq!(
        store.push_endpoints_of("cat").unwrap(),
        ["https://p/3"],
        "kept until pruned"
    );
    store.prune_web_sessions(1000).unwrap();
    assert!(
        store.push_endpoints_of("cat").unwrap().is_empty(),
        "pruned with their login"
    );
}

/// One endpoint URL subscribed by two users is two subscriptions: bob naming alice's endpoint
/// (a URL he learnt) makes one of his own and leaves hers (her keys, her login) alone, and his
/// removal deletes only his.
pub(super) fn a_push_endpoint_is_kept_per_user(store: &dyn Store) {
    for (id, user, n) in [("ws_alice", "alice", 1), ("ws_bob", "bob", 2)] {
        store.insert_web_session(&login(id, user, None, n)).unwrap();
    }
    let sub =
        |user: &str, session: &str, key: u8| subscription("https://push.example/alice-phone", user, session, None, key);
    let alices = |store: &dyn Store| {
        store
            .push_subscriptions(10)
            .unwrap()
            .into_iter()
            .filter(|s| s.user == "alice")
            .map(|s| (s.session_id, s.p256dh[0]))
            .collect::<Vec<_>>()
    };
    store.save_push(&sub("alice", "ws_alice", 4)).unwrap();
    store.save_push(&sub("bob", "ws_bob", 9)).unwrap();
    assert_eq!(
        alices(store),
        [("ws_alice".to_string(), 4)],
        "bob's subscribe left alice's alone"
    );
    assert_eq!(store.push_subscriptions(10).unwrap().len(), 2, "and made his own");
    assert_eq!(
        store.push_endpoints_of("bob").unwrap(),
        ["https://push.example/alice-phone"]
    );
    assert!(
        store
            .delete_push("https://push.example/alice-phone", Some("bob"))
            .unwrap()
    );
    assert_eq!(
        alices(store),
        [("ws_alice".to_string(), 4)],
        "bob's removal left alice's alone"
    );
    assert!(store.push_endpoints_of("bob").unwrap().is_empty());
    store.save_push(&sub("alice", "ws_alice", 5)).unwrap();
    assert_eq!(
        alices(store),
        [("ws_alice".to_string(), 5)],
        "her own subscribing again replaces"
    );
}

/// The meter's rows: a day's totals and sessions' costs replace what was there, and another
/// day's totals are another day's.
pub(super) fn spend_is_kept_by_day_and_session(store: &dyn Store) {
    let session = |usd| SessionCost {
        project: "web".into(),
        session: "ses_1".into(),
        parent: None,
        prompter: Some("ann".into()),
        usd,
    };
    let totals = |usd| {
        vec![
            ("project".to_string(), "web".to_string(), usd),
            ("user".into(), "ann".into(), usd),
        ]
    };
    store.save_spend(10, &totals(1.0), &[session(1.0)], &[]).unwrap();
    store.save_spend(10, &totals(1.5), &[session(1.5)], &[]).unwrap();
    store.save_spend(11, &totals(0.25), &[], &[]).unwrap();
    let mut day = store.spend_of_day(10).unwrap();
    day.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(day, totals(1.5));
    assert_eq!(store.spend_of_day(11).unwrap().len(), 2);
    assert!(store.spend_of_day(12).unwrap().is_empty());
    assert_eq!(store.session_costs().unwrap(), vec![session(1.5)]);
    // Raises: a project's today's, a session's under day 0 (it outlives the day).
    let raised = vec![
        ("raised".to_string(), "project web".to_string(), 2.0),
        ("raised".to_string(), "session web ses_1".to_string(), 1.0),
    ];
    store.save_spend(12, &raised, &[], &[]).unwrap();
    assert_eq!(store.spend_of_day(12).unwrap(), raised[..1].to_vec());
    assert_eq!(
        store.spend_of_day(crate::store::SESSION_RAISES_DAY).unwrap(),
        raised[1..].to_vec()
    );
    // A month so far: the sum of its days, today's not included.
    let mut month = store.spend_between(9, 12).unwrap();
    month.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(month, totals(1.75));
    assert_eq!(store.spend_between(9, 11).unwrap().len(), 2);
    assert!(store.spend_between(11, 11).unwrap().is_empty());
    // A session the meter forgot is deleted; another stays.
    let other = SessionCost {
        session: "ses_2".into(),
        ..session(0.5)
    };
    store.save_spend(12, &[], std::slice::from_ref(&other), &[]).unwrap();
    store
        .save_spend(12, &[], &[], &[("web".into(), "ses_1".into())])
        .unwrap();
    assert_eq!(store.session_costs().unwrap(), vec![other]);
}

pub(super) fn a_child_session_dies_with_its_parent_and_a_device_with_its_sessions(store: &dyn Store) {
    let s = store;
    s.insert_web_session(&session("login", 1, None, None)).unwrap();
    s.insert_web_session(&session("child", 2, Some("login"), None)).unwrap();
    let child = s.web_session_by_digest(&[2; 32]).unwrap().unwrap();
    assert!(child.live_at(120));
    assert!(!child.live_at(151), "idle past 50 s");
    // Using the child keeps the parent alive too.
    s.touch_web_session("child", 140).unwrap();
    let child = s.web_session_by_digest(&[2; 32]).unwrap().unwrap();
    assert!(child.live_at(180), "touched at 140");
    assert_eq!(child.parent.as_ref().unwrap().last_seen_at, 140);
    assert!(!child.live_at(1000), "absolute expiry");
    assert!(s.revoke_web_session("login", 150).unwrap());
    assert!(
        !s.web_session_by_digest(&[2; 32]).unwrap().unwrap().live_at(151),
        "logout ends the child"
    );
    assert_eq!(s.web_session_by_digest(&[9; 32]).unwrap(), None);

    let phone = DeviceRecord {
        id: "dev_1".into(),
        user: "alice".into(),
        label: "phone".into(),
        created_at: 100,
        last_seen_at: None,
        last_address: None,
        revoked_at: None,
    };
    s.insert_device(&phone).unwrap();
    s.insert_device(&DeviceRecord {
        id: "dev_2".into(),
        ..phone.clone()
    })
    .unwrap();
    s.insert_web_session(&session("p1", 3, None, Some("dev_1"))).unwrap();
    s.insert_web_session(&session("p1c", 4, Some("p1"), None)).unwrap();
    s.insert_web_session(&session("p2", 5, None, Some("dev_2"))).unwrap();
    s.touch_device("dev_1", 120, "10.0.0.9").unwrap();
    let listed = s.list_devices(Some("alice")).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().any(|d| d.last_address.as_deref() == Some("10.0.0.9")));
    assert!(s.revoke_device("dev_1", 130).unwrap());
    assert!(!s.revoke_device("dev_1", 131).unwrap(), "once");
    for (digest, live) in [(3u8, false), (4, false), (5, true)] {
        let l = s.web_session_by_digest(&[digest; 32]).unwrap().unwrap();
        assert_eq!(l.live_at(132), live, "session {digest}");
    }
    assert_eq!(
        s.prune_web_sessions(140).unwrap(),
        2,
        "p1 and p1c were revoked before 140; login and child at 150"
    );
}

pub(super) fn tokens_round_trip_revoke_and_touch(store: &dyn Store) {
    let s = store;
    s.insert_token(&sample("a", 1, "alice")).unwrap();
    s.insert_token(&sample("b", 2, "bob")).unwrap();
    assert!(s.insert_token(&sample("c", 1, "x")).is_err(), "digests are unique");
    assert_eq!(s.token_by_digest(&[1; 32]).unwrap().unwrap(), sample("a", 1, "alice"));
    assert_eq!(s.token_by_digest(&[9; 32]).unwrap(), None);
    assert_eq!(s.list_tokens(Some("bob")).unwrap().len(), 1);
    s.touch_token("a", 150).unwrap();
    assert_eq!(s.token_by_digest(&[1; 32]).unwrap().unwrap().last_used_at, Some(150));
    assert!(s.revoke_token("a", 160).unwrap());
    assert!(!s.revoke_token("a", 170).unwrap(), "once");
    assert!(!s.revoke_token("nope", 170).unwrap());
    assert_eq!(s.token_by_digest(&[1; 32]).unwrap().unwrap().revoked_at, Some(160));
    // A session's policy (issue 40): kept, the first word stands, read back oldest first.
    let sp = |session: &str, policy: &str| super::SessionPolicy {
        session: session.into(),
        project: "web".into(),
        policy: policy.into(),
    };
    s.set_session_policy(&sp("ses_b", "ci"), 20).unwrap();
    s.set_session_policy(&sp("ses_a", "nightly"), 10).unwrap();
    s.set_session_policy(&sp("ses_b", "other"), 30).unwrap();
    assert_eq!(
        s.session_policies().unwrap(),
        vec![sp("ses_a", "nightly"), sp("ses_b", "ci")]
    );
}

fn key(id: &str, cred: u8, user: &str) -> PasskeyRecord {
    PasskeyRecord {
        id: id.into(),
        credential_id: vec![cred; 16],
        user: user.into(),
        handle: vec![cred; 16],
        static_state: vec![1, 2, 3],
        dynamic_state: vec![0; 7],
        label: "phone".into(),
        created_at: 100,
        last_used_at: None,
        revoked_at: None,
    }
}

/// A user's handle is made once; a credential id is unique; a revoke is once, and only by the
/// passkey's own user when one is named; a sign-in writes its state back.
pub(super) fn passkeys_round_trip_revoke_and_keep_one_handle_per_user(store: &dyn Store) {
    let s = store;
    assert_eq!(s.passkey_handle("ann", &[1; 16]).unwrap(), vec![1; 16]);
    assert_eq!(s.passkey_handle("ann", &[2; 16]).unwrap(), vec![1; 16], "kept");
    assert!(s.passkey_handle("bob", &[1; 16]).is_err(), "handles are unique");
    s.save_passkey(&key("pk_a", 7, "ann")).unwrap();
    s.save_passkey(&key("pk_b", 8, "bob")).unwrap();
    assert!(
        s.save_passkey(&key("pk_c", 7, "bob")).is_err(),
        "credential ids are unique"
    );
    assert_eq!(
        s.passkey_by_credential(&[7; 16]).unwrap().unwrap(),
        key("pk_a", 7, "ann")
    );
    assert_eq!(s.passkey_by_credential(&[9; 16]).unwrap(), None);
    assert_eq!(s.list_passkeys(Some("ann")).unwrap().len(), 1);
    assert_eq!(s.list_passkeys(None).unwrap().len(), 2);
    s.passkey_used("pk_a", &[1; 7], 150).unwrap();
    let used = s.passkey_by_credential(&[7; 16]).unwrap().unwrap();
    assert_eq!((used.dynamic_state, used.last_used_at), (vec![1; 7], Some(150)));
    assert!(!s.revoke_passkey("pk_a", Some("bob"), 160).unwrap(), "not bob's");
    assert!(s.revoke_passkey("pk_a", Some("ann"), 160).unwrap());
    assert!(!s.revoke_passkey("pk_a", None, 170).unwrap(), "once");
    assert_eq!(
        s.passkey_by_credential(&[7; 16]).unwrap().unwrap().revoked_at,
        Some(160)
    );
}

pub(super) fn sample(id: &str, digest: u8, user: &str) -> TokenRecord {
    TokenRecord {
        id: id.into(),
        digest: [digest; 32],
        user: user.into(),
        label: "ci".into(),
        role: Some("viewer".into()),
        projects: Some(vec!["web".into(), "api".into()]),
        created_at: 100,
        expires_at: 200,
        last_used_at: None,
        revoked_at: None,
        policy: Some("ci".into()),
    }
}

/// A login of `user`'s, live from 1 to 1000.
fn login(id: &str, user: &str, device: Option<&str>, n: u8) -> WebSessionRecord {
    WebSessionRecord {
        id: id.into(),
        digest: [n; 32],
        user: user.into(),
        device_id: device.map(String::from),
        parent: None,
        host: None,
        created_at: 1,
        last_seen_at: 1,
        idle_secs: 3600,
        expires_at: 1000,
        revoked_at: None,
    }
}

/// A Web Push subscription made in login `session`, with keys of byte `key`.
fn subscription(endpoint: &str, user: &str, session: &str, device: Option<&str>, key: u8) -> PushSubscription {
    PushSubscription {
        endpoint: endpoint.into(),
        user: user.into(),
        session_id: session.into(),
        device_id: device.map(String::from),
        p256dh: vec![key; 65],
        auth: vec![key; 16],
        created_at: 10,
    }
}

fn session(id: &str, digest: u8, parent: Option<&str>, device: Option<&str>) -> WebSessionRecord {
    WebSessionRecord {
        id: id.into(),
        digest: [digest; 32],
        user: "alice".into(),
        device_id: device.map(String::from),
        parent: parent.map(String::from),
        host: parent.map(|_| "web".to_string()),
        created_at: 100,
        last_seen_at: 100,
        idle_secs: 50,
        expires_at: 1000,
        revoked_at: None,
    }
}

/// Single-use records: kept until they expire, one per key, at most `max` live of a kind,
/// settled in one go (taken once, kept, or replaced), and an expired one is seen as expired.
pub(super) fn single_use_records_are_taken_once(store: &dyn Store) {
    let far = now_millis() + 60_000;
    let k = |n: u8| [n; 32];
    assert_eq!(store.once_put("t", &k(1), b"one", far, 2).unwrap(), PutOnce::Kept);
    assert_eq!(store.once_put("t", &k(1), b"again", far, 2).unwrap(), PutOnce::KeyInUse);
    assert_eq!(
        store.once_put("u", &k(1), b"other kind", far, 2).unwrap(),
        PutOnce::Kept
    );
    assert_eq!(store.once_put("t", &k(2), b"two", far, 2).unwrap(), PutOnce::Kept);
    assert_eq!(store.once_put("t", &k(3), b"three", far, 2).unwrap(), PutOnce::Full);
    assert_eq!(store.once_live("t", now_millis()).unwrap(), 2);
    let now = now_millis();
    let keep = store.once_settle("t", &k(1), now, &mut |_, _| Settle::Keep).unwrap();
    assert_eq!(keep.as_deref(), Some(&b"one"[..]));
    let replaced = store
        .once_settle("t", &k(1), now, &mut |_, _| Settle::Replace(b"one'".to_vec()))
        .unwrap();
    assert_eq!(replaced.as_deref(), Some(&b"one"[..]));
    let mut expired_seen = None;
    let taken = store
        .once_settle("t", &k(1), now, &mut |_, expired| {
            expired_seen = Some(expired);
            Settle::Take
        })
        .unwrap();
    assert_eq!(taken.as_deref(), Some(&b"one'"[..]), "the replaced value");
    assert_eq!(expired_seen, Some(false));
    assert_eq!(
        store.once_settle("t", &k(1), now, &mut |_, _| Settle::Take).unwrap(),
        None,
        "taken once"
    );
    assert_eq!(store.once_live("u", now).unwrap(), 1, "another kind is untouched");
    // Expired: seen as such by a settle, gone at the next put, and not counted as live.
    let past = now_millis() - 1;
    assert_eq!(store.once_put("e", &k(9), b"old", past, 5).unwrap(), PutOnce::Kept);
    assert_eq!(store.once_live("e", now_millis()).unwrap(), 0);
    let mut expired_seen = None;
    store
        .once_settle("e", &k(9), now_millis(), &mut |_, expired| {
            expired_seen = Some(expired);
            Settle::Keep
        })
        .unwrap();
    assert_eq!(expired_seen, Some(true));
    assert_eq!(
        store.once_put("e", &k(9), b"new", far, 5).unwrap(),
        PutOnce::Kept,
        "the expired one went first"
    );
}

/// A trigger's runs: begun running, ended once, read newest first, the oldest past the kept
/// number gone.
fn trigger_runs_end_once_and_the_newest_are_kept(s: &dyn Store) {
    use super::runs::KEPT_PER_TRIGGER;
    let run = |n: i64, session: Option<&str>| TriggerRun {
        id: format!("run_{n:03}"),
        trigger_name: "gh".into(),
        project: "web".into(),
        session: session.map(String::from),
        delivery: format!("d{n}"),
        started_at: 1_000 + n,
        ended_at: None,
        outcome: "running".into(),
        detail: String::new(),
        usd: None,
    };
    s.add_trigger_run(&run(1, Some("ses_a"))).unwrap();
    s.add_trigger_run(&run(2, Some("ses_a"))).unwrap();
    let other = TriggerRun {
        trigger_name: "nightly".into(),
        ..run(3, Some("ses_b"))
    };
    s.add_trigger_run(&other).unwrap();
    let running: Vec<String> = s.running_in("ses_a").unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(running, ["run_001", "run_002"], "oldest first");
    assert!(
        s.end_trigger_run("run_001", 5_000, "failed", "stopped", Some(0.25))
            .unwrap()
    );
    assert!(
        !s.end_trigger_run("run_001", 6_000, "ok", "", None).unwrap(),
        "a run ends once"
    );
    let ended = &s.trigger_runs("gh", 10).unwrap()[1];
    assert_eq!(
        (ended.outcome.as_str(), ended.detail.as_str(), ended.ended_at, ended.usd),
        ("failed", "stopped", Some(5_000), Some(0.25))
    );
    assert_eq!(s.running_in("ses_a").unwrap().len(), 1);
    for n in 10..10 + KEPT_PER_TRIGGER {
        s.add_trigger_run(&run(n, None)).unwrap();
    }
    let kept = s.trigger_runs("gh", 1_000).unwrap();
    assert_eq!(kept.len() as i64, KEPT_PER_TRIGGER);
    assert_eq!(kept[0].id, format!("run_{:03}", 9 + KEPT_PER_TRIGGER), "newest first");
    assert!(
        kept.iter().all(|r| r.id != "run_001" && r.id != "run_002"),
        "the oldest went"
    );
    assert_eq!(
        s.trigger_runs("nightly", 10).unwrap(),
        [other],
        "another trigger's are untouched"
    );
}

/// One case of the store's behaviour.
type Case = fn(&dyn Store);

/// Every case, each on a fresh store `fresh` makes.
pub(super) fn every_case(fresh: &mut dyn FnMut(&str) -> std::sync::Arc<dyn Store>) {
    let cases: [(&str, Case); 8] = [
        (
            "push",
            push_subscriptions_live_with_their_login_and_go_with_their_device,
        ),
        ("push_per_user", a_push_endpoint_is_kept_per_user),
        ("spend", spend_is_kept_by_day_and_session),
        (
            "sessions",
            a_child_session_dies_with_its_parent_and_a_device_with_its_sessions,
        ),
        ("tokens", tokens_round_trip_revoke_and_touch),
        ("passkeys", passkeys_round_trip_revoke_and_keep_one_handle_per_user),
        ("once", single_use_records_are_taken_once),
        ("trigger_runs", trigger_runs_end_once_and_the_newest_are_kept),
    ];
    for (name, case) in cases {
        case(&*fresh(name));
    }
}
