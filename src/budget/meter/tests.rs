//! The meter's unit tests.

use super::*;

fn seen(m: &Meter, session: &str, parent: Option<&str>, before: Option<f64>, now: f64, day: u64) {
    m.seen(
        &CostSeen {
            project: "web".into(),
            session: session.into(),
            parent: parent.map(String::from),
            before,
            now,
            inherited: false,
        },
        day,
    );
}

fn budget(session: Option<f64>, day: Option<f64>) -> Budget {
    Budget {
        session_usd: session,
        project_day_usd: day,
        ..Default::default()
    }
}

/// What a session spent before the gateway saw it counts toward the session, not today; a
/// subagent's spend counts toward its parent's session; the first spent budget is named.
#[test]
fn sessions_subagents_projects_and_users_are_metered() {
    let m = Meter::default();
    seen(&m, "s1", None, None, 3.0, 10);
    m.prompted("web", "s1", "ann");
    let b = budget(Some(5.0), Some(1.5));
    assert_eq!(m.check(&b, Some(1.0), "web", "ann", Some("s1"), 10), Ok(()));
    seen(&m, "s1", None, Some(3.0), 3.5, 10);
    seen(&m, "sub", Some("s1"), None, 0.0, 10);
    seen(&m, "sub", Some("s1"), Some(0.0), 1.0, 10);
    assert_eq!(m.session_spend("web", "s1"), 4.5);
    assert_eq!(
        m.session_spend("web", "sub"),
        4.5,
        "a subagent's session is its parent's"
    );
    let e = m.check(&b, Some(10.0), "web", "ann", Some("s1"), 10).unwrap_err();
    assert_eq!((e.budget, e.limit), ("project_day_usd", 1.5));
    assert!((e.spent - 1.5).abs() < 1e-9, "{e:?}");
    assert_eq!(e.resets_day, Some(11));
    let e = m
        .check(&budget(None, None), Some(1.0), "web", "ann", None, 10)
        .unwrap_err();
    assert_eq!(e.budget, "user_day_usd");
    assert_eq!(m.check(&budget(None, None), Some(1.0), "web", "bob", None, 10), Ok(()));
    // A new UTC day: the day totals start again, the session's does not.
    assert_eq!(
        m.check(&budget(None, Some(2.0)), Some(1.0), "web", "ann", None, 11),
        Ok(())
    );
    let e = m
        .check(&budget(Some(4.0), None), None, "web", "ann", Some("sub"), 11)
        .unwrap_err();
    assert_eq!((e.budget, e.resets_day), ("session_usd", None));
    assert!(e.to_string().contains("budget.session_usd: $4.5000 of $4.00"), "{e}");
}

/// A month is its earlier days (kept, or restored) and today; a new month starts again.
#[test]
fn months_add_up_their_days() {
    let m = Meter::default();
    let d1 = 20_788; // 2026-12-01
    assert_eq!(month_start(d1), d1);
    assert_eq!(month_start(d1 + 30), d1, "2026-12-31");
    assert_eq!(month_start(d1 + 31), d1 + 31, "2027-01-01");
    m.restore(d1 + 1, vec![], vec![], vec![("project".into(), "web".into(), 2.0)]);
    seen(&m, "s1", None, Some(0.0), 0.5, d1 + 1);
    m.prompted("web", "s1", "ann");
    seen(&m, "s1", None, Some(0.5), 1.0, d1 + 1);
    assert_eq!(m.spend_of("project", "web", d1 + 1), (1.0, 3.0));
    assert_eq!(m.spend_of("user", "ann", d1 + 1), (0.5, 0.5));
    seen(&m, "s1", None, Some(1.0), 1.25, d1 + 2);
    assert_eq!(m.spend_of("project", "web", d1 + 2), (0.25, 3.25));
    assert_eq!(m.spend_of("user", "ann", d1 + 2), (0.25, 0.75));
    assert_eq!(m.spend_of("project", "web", d1 + 31), (0.0, 0.0), "January");
}

/// A raise another gateway made is merged: the larger figure wins (a raise only grows within
/// its day), and a session stopped for that limit may run (and be stopped) again.
#[test]
fn raises_made_elsewhere_are_merged_by_the_larger() {
    let m = Meter::default();
    seen(&m, "s1", None, Some(0.0), 2.0, 10);
    assert!(m.stop_once("web", "s1"));
    let key = session_key("web", "s1");
    assert_eq!(
        m.merge_raised(10, vec![(key.clone(), 1.5), ("nonsense".into(), 2.0)]),
        2
    );
    assert_eq!(m.raised(&key, 10), 1.5);
    assert!(m.stop_once("web", "s1"), "the raise freed the stopped session");
    assert_eq!(m.raise("web", &key, Some(1.0), 10), Some(2.5));
    assert!(m.stop_once("web", "s1"));
    assert_eq!(
        m.merge_raised(10, vec![(key.clone(), 1.5)]),
        0,
        "an older, smaller figure"
    );
    assert_eq!(m.raised(&key, 10), 2.5);
    assert!(!m.stop_once("web", "s1"), "nothing grew: still stopped once");
}

/// An operator's raise moves a limit; a reset makes what was spent so far not count; both
/// let a stopped session be stopped again later.
#[test]
fn raises_and_resets_move_limits() {
    let m = Meter::default();
    seen(&m, "s1", None, Some(0.0), 2.0, 10);
    let b = budget(Some(1.0), Some(1.5));
    let e = m.check(&b, None, "web", "ann", Some("s1"), 10).unwrap_err();
    assert_eq!(e.budget, "session_usd");
    assert!(m.stop_once("web", "s1"));
    assert!(!m.stop_once("web", "s1"));
    assert_eq!(m.raise("web", &session_key("web", "s1"), Some(1.5), 10), Some(1.5));
    assert!(m.stop_once("web", "s1"), "may be stopped again");
    let e = m.check(&b, None, "web", "ann", Some("s1"), 10).unwrap_err();
    assert_eq!(
        (e.budget, e.limit),
        ("project_day_usd", 1.5),
        "the session's limit is now 2.5"
    );
    assert_eq!(
        m.raise("web", &project_key("web"), None, 10),
        Some(2.0),
        "reset: today's 2.0 no longer counts"
    );
    assert_eq!(m.check(&b, None, "web", "ann", Some("s1"), 10), Ok(()));
    seen(&m, "s1", None, Some(2.0), 3.6, 10);
    let e = m.check(&b, None, "web", "ann", Some("s1"), 10).unwrap_err();
    assert_eq!((e.budget, e.limit), ("session_usd", 2.5));
    assert_eq!(
        m.raised(&project_key("web"), 11),
        0.0,
        "a day's raise ends with the day"
    );
    // Kept: what is saved brings the raises back (a session's under any day).
    let saved = m.to_save().unwrap();
    let again = Meter::default();
    again.restore(saved.day, saved.totals, vec![], vec![]);
    assert_eq!(again.raised(&session_key("web", "s1"), 11), 1.5);
    assert_eq!(again.raised(&project_key("web"), 11), 0.0);
    // Bounded: with MAX_RAISED limits raised, a new one is refused; a raised one may grow.
    for n in 2..=MAX_RAISED {
        assert!(
            m.raise("web", &session_key("web", &format!("s{n}")), Some(1.0), 11)
                .is_some()
        );
    }
    assert_eq!(m.raise("web", &session_key("web", "one-more"), Some(1.0), 11), None);
    assert_eq!(m.raise("web", &session_key("web", "s1"), Some(1.0), 11), Some(2.5));
}

#[test]
fn days_are_dates() {
    assert_eq!(date(0), "1970-01-01");
    assert_eq!(date(20_789), "2026-12-02");
    assert_eq!(date(11_016), "2000-02-29");
}

/// A limit whose rest is no more than the project's largest turn admits one prompt at a time:
/// the next waits until the running turn ends or its request fails, or the hold runs out.
/// Before any turn's cost is known, a limit admits one prompt at a time (round five, item 11: a
/// fresh project let 16 racing prompts past its limit); once a turn was seen, each prompt
/// reserves the largest, and prompts are admitted while spend and reservations leave room.
#[test]
fn every_prompt_reserves_a_turn_and_a_limit_admits_what_its_room_holds() {
    let m = Meter::default();
    let b = Budget {
        project_day_usd: Some(2.0),
        warn_at: 0.8,
        ..Default::default()
    };
    let prompt = |session: &'static str| turns::Prompt {
        budget: &b,
        user_day_usd: None,
        project: "web",
        user: "ann",
        session,
    };
    let t0 = std::time::Instant::now();
    seen(&m, "s1", None, None, 0.0, 10);
    // A fresh project: no turn seen, no turn_usd: one prompt at a time, however far the end.
    let first = m.begin_turn(&prompt("s1"), 10, t0).unwrap().expect("reserves");
    let busy = m.begin_turn(&prompt("s2"), 10, t0).unwrap_err();
    assert_eq!(
        (busy.budget, busy.spent, busy.limit, busy.estimate),
        ("project_day_usd", 0.0, 2.0, None)
    );
    assert!(busy.to_string().contains("one prompt at a time"), "{busy}");
    m.turn_answered(first, true);
    seen(&m, "s1", None, Some(0.0), 1.0, 10);
    m.turn_ended("web", "s1");
    // $1 spent, the largest turn $1: one more fits ($1 + $1 reserved reaches the limit).
    let second = m.begin_turn(&prompt("s2"), 10, t0).unwrap().expect("room for one");
    let busy = m.begin_turn(&prompt("s3"), 10, t0).unwrap_err();
    assert_eq!((busy.reserved, busy.running, busy.estimate), (1.0, 1, Some(1.0)));
    assert!(
        busy.to_string().contains("no room for another turn of about $1.0000"),
        "{busy}"
    );
    // Its request failed: no turn ran, its reservation goes.
    m.turn_answered(second, false);
    let third = m.begin_turn(&prompt("s3"), 10, t0).unwrap().expect("room again");
    m.turn_answered(third, true);
    assert!(
        m.begin_turn(&prompt("s4"), 10, t0).is_err(),
        "reserved until s3's turn ends"
    );
    m.turn_ended("web", "s3");
    assert!(
        m.begin_turn(&prompt("s4"), 10, t0).is_err(),
        "ended, its cost not reported yet"
    );
    // OpenCode reports the cost after the idle event: then the reservation goes.
    seen(&m, "s3", None, Some(0.0), 0.5, 10);
    assert!(m.begin_turn(&prompt("s4"), 10, t0).unwrap().is_some());
    // A reservation whose session never goes idle lapses.
    assert!(m.begin_turn(&prompt("s5"), 10, t0).is_err());
    assert!(m.begin_turn(&prompt("s5"), 10, t0 + turns::HOLD_MAX).unwrap().is_some());
}

/// With a configured turn, a fresh project admits prompts while the reservations leave room:
/// $1 of turns on a $3.5 limit admits four at once, not a fifth.
#[test]
fn a_configured_turn_lets_a_fresh_project_admit_what_fits() {
    let m = Meter::default();
    let b = Budget {
        project_day_usd: Some(3.5),
        turn_usd: Some(1.0),
        ..Default::default()
    };
    let prompt = |session: &'static str| turns::Prompt {
        budget: &b,
        user_day_usd: None,
        project: "web",
        user: "ann",
        session,
    };
    let t0 = std::time::Instant::now();
    for s in ["a", "b", "c", "d"] {
        assert!(m.begin_turn(&prompt(s), 10, t0).unwrap().is_some(), "{s}");
    }
    let busy = m.begin_turn(&prompt("e"), 10, t0).unwrap_err();
    assert_eq!((busy.reserved, busy.running), (4.0, 4));
    // A project without a limit reserves nothing.
    let free = Budget::default();
    let p = turns::Prompt {
        budget: &free,
        user_day_usd: None,
        project: "web",
        user: "ann",
        session: "z",
    };
    assert!(m.begin_turn(&p, 10, t0).unwrap().is_none());
}

/// Days since 1970 read as calendar dates (the `time` crate's reading): the epoch, a leap day,
/// a month's first day.
#[test]
fn days_are_read_as_dates() {
    assert_eq!(date(0), "1970-01-01");
    assert_eq!(date(11_016), "2000-02-29");
    assert_eq!(date(20_791), "2026-12-04");
    assert_eq!(month_start(20_791), 20_791 - 3);
    assert_eq!(month_start(11_016), 11_016 - 28);
}
