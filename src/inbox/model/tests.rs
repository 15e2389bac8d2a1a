//! The reducer, driven with the payloads OpenCode 1.18.33 sent on `GET /global/event`.

use crate::inbox::parse::{MAX_LINE_CHARS, MAX_LINES};
use serde_json::json;

use super::*;

fn asked(id: &str, session: &str, command: &str) -> Value {
    json!({"type": "permission.asked", "properties": {
        "id": id, "sessionID": session, "permission": "bash",
        "patterns": [command], "metadata": {"command": command}, "always": ["echo *"],
        "tool": {"messageID": "msg_1", "callID": "call_1"}}})
}

fn replied(id: &str) -> Value {
    json!({"type": "permission.replied", "properties": {"sessionID": "ses_1", "requestID": id, "reply": "once"}})
}

fn question(id: &str) -> Value {
    json!({"type": "question.asked", "properties": {"id": id, "sessionID": "ses_1",
        "questions": [{"question": "Which colour?", "header": "Colour",
            "options": [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}]}],
        "tool": {"messageID": "msg_2", "callID": "call_2"}}})
}

fn session(id: &str, parent: Option<&str>, title: &str, updated: u64) -> Value {
    let mut info = json!({"id": id, "title": title, "directory": "/p", "cost": 0.25,
        "tokens": {"input": 10, "output": 5, "reasoning": 1, "cache": {"read": 2, "write": 3}},
        "time": {"created": 1, "updated": updated}});
    if let Some(p) = parent {
        info["parentID"] = p.into();
    }
    json!({"type": "session.updated", "properties": {"sessionID": id, "info": info}})
}

#[test]
fn a_permission_asked_makes_a_card_and_its_reply_resolves_it_elsewhere() {
    let mut m = Model::default();
    let e = m.apply("web", &asked("per_1", "ses_1", "echo hi > f"), 1000);
    assert!(e.changed);
    assert_eq!(
        e.new_cards,
        vec![NewCard {
            project: "web".into(),
            id: "per_1".into(),
            kind: CardKind::Permission,
            tool: "bash".into()
        }]
    );
    let card = &m.projects["web"].permissions["per_1"];
    assert_eq!(card.lines, vec!["echo hi > f"]);
    assert_eq!(card.always, vec!["echo *"]);
    assert_eq!(card.asked_at_ms, 1000);
    // The same event again (a seed raced it) is no new card.
    assert!(
        m.apply("web", &asked("per_1", "ses_1", "echo hi > f"), 1001)
            .new_cards
            .is_empty()
    );
    assert!(m.apply("web", &replied("per_1"), 2000).changed);
    assert!(m.projects["web"].permissions.is_empty());
    assert_eq!(m.resolved.len(), 1);
    assert_eq!(m.resolved[0].how, Resolution::Elsewhere);
    assert_eq!(m.resolved[0].kind, CardKind::Permission);
    // A reply for a card we never had changes nothing.
    assert!(!m.apply("web", &replied("per_9"), 2000).changed);
}

#[test]
fn a_reply_the_gateway_sent_resolves_as_answered_here_by_that_user() {
    let mut m = Model::default();
    m.apply("web", &asked("per_1", "ses_1", "ls"), 1000);
    m.replying("web", "per_1", "alice", "always");
    m.apply("web", &replied("per_1"), 2000);
    assert_eq!(m.resolved[0].how, Resolution::AnsweredHere { by: "alice".into() });
    // It says what was answered, and how: what the gateway sent, not what the event says.
    assert_eq!(
        (
            m.resolved[0].answer.as_deref(),
            m.resolved[0].tool.as_str(),
            m.resolved[0].detail.as_str()
        ),
        (Some("always"), "bash", "ls")
    );
    // A failed reply forgets the claim: someone else's later answer is "elsewhere".
    m.apply("web", &asked("per_2", "ses_1", "ls"), 3000);
    m.replying("web", "per_2", "alice", "once");
    m.reply_failed("web", "per_2");
    m.apply("web", &replied("per_2"), 4000);
    assert_eq!(m.resolved[1].how, Resolution::Elsewhere);
    assert_eq!(m.resolved[1].answer.as_deref(), Some("once"), "the event's reply");
    // Someone else's answer raced ours: their event came while ours was on its way, ours then
    // found the request gone (404): it was answered elsewhere after all.
    m.apply("web", &asked("per_3", "ses_1", "ls"), 5000);
    m.replying("web", "per_3", "alice", "once");
    m.apply("web", &replied("per_3"), 5001);
    assert_eq!(m.resolved[2].how, Resolution::AnsweredHere { by: "alice".into() });
    m.found_answered("web", "per_3");
    assert_eq!(m.resolved[2].how, Resolution::Elsewhere);
}

#[test]
fn questions_are_asked_replied_and_rejected() {
    let mut m = Model::default();
    let e = m.apply("web", &question("que_1"), 10);
    assert_eq!(e.new_cards[0].kind, CardKind::Question);
    let q = &m.projects["web"].questions["que_1"];
    assert_eq!(q.questions[0].options[1].label, "blue");
    m.apply(
        "web",
        &json!({"type": "question.replied", "properties": {"sessionID": "ses_1", "requestID": "que_1", "answers": [["blue"]]}}),
        20,
    );
    assert!(m.projects["web"].questions.is_empty());
    m.apply("web", &question("que_2"), 30);
    m.apply(
        "web",
        &json!({"type": "question.rejected", "properties": {"sessionID": "ses_1", "requestID": "que_2"}}),
        40,
    );
    assert!(m.projects["web"].questions.is_empty());
    assert_eq!(m.resolved.len(), 2);
    assert!(m.resolved.iter().all(|r| r.kind == CardKind::Question));
}

#[test]
fn sessions_follow_updates_status_and_deletion_with_cost_and_tokens() {
    let mut m = Model::default();
    m.apply("web", &session("ses_1", None, "Fix it", 100), 1000);
    m.apply("web", &session("ses_2", Some("ses_1"), "Subagent", 200), 1000);
    let s = &m.projects["web"].sessions["ses_1"];
    assert_eq!((s.title.as_str(), s.cost), ("Fix it", Some(0.25)));
    assert_eq!(s.tokens.as_ref().unwrap().cache_write, 3);
    assert_eq!(m.projects["web"].sessions["ses_2"].parent_id.as_deref(), Some("ses_1"));
    m.apply(
        "web",
        &json!({"type": "session.status", "properties": {"sessionID": "ses_1", "status": {"type": "busy"}}}),
        5000,
    );
    assert_eq!(m.projects["web"].sessions["ses_1"].status, SessionStatus::Busy);
    assert_eq!(m.projects["web"].sessions["ses_1"].last_activity_ms, 5000);
    m.apply(
        "web",
        &json!({"type": "session.status", "properties": {"sessionID": "ses_1", "status": {"type": "retry", "attempt": 2, "message": "rate limited", "next": 9000}}}),
        6000,
    );
    assert_eq!(
        m.projects["web"].sessions["ses_1"].status,
        SessionStatus::Retry {
            attempt: 2,
            message: "rate limited".into(),
            next: 9000
        }
    );
    m.apply(
        "web",
        &json!({"type": "session.idle", "properties": {"sessionID": "ses_1"}}),
        7000,
    );
    assert_eq!(m.projects["web"].sessions["ses_1"].status, SessionStatus::Idle);
    // Deleting a session takes its pending requests with it.
    m.apply("web", &asked("per_1", "ses_2", "ls"), 8000);
    let deleted = json!({"type": "session.deleted", "properties": {"sessionID": "ses_2", "info": {"id": "ses_2"}}});
    assert!(m.apply("web", &deleted, 9000).changed);
    assert!(!m.projects["web"].sessions.contains_key("ses_2"));
    assert!(m.projects["web"].permissions.is_empty());
}

#[test]
fn unknown_and_malformed_events_change_nothing() {
    let mut m = Model::default();
    for ev in [
        json!({"type": "message.part.delta", "properties": {"sessionID": "ses_1", "delta": "x"}}),
        json!({"type": "server.heartbeat", "properties": {}}),
        json!({"type": "plugin.added"}),
        json!({"type": "permission.asked", "properties": {"sessionID": "ses_1"}}),
        json!({"type": "session.status", "properties": {}}),
        json!("nonsense"),
    ] {
        let e = m.apply("web", &ev, 1);
        assert!(!e.changed && e.new_cards.is_empty(), "{ev}");
    }
    assert!(
        m.projects
            .get("web")
            .is_none_or(|p| p.permissions.is_empty() && p.sessions.is_empty())
    );
}

#[test]
fn cards_show_at_most_eight_lines_of_at_most_200_characters() {
    let long = format!("{}\n", "x".repeat(500)).repeat(20);
    let (lines, truncated) = first_lines(&long);
    assert_eq!(lines.len(), MAX_LINES);
    assert!(truncated);
    assert!(lines.iter().all(|l| l.chars().count() <= MAX_LINE_CHARS + 1));
    let (lines, truncated) = first_lines("ä".repeat(300).as_str());
    assert_eq!(
        lines[0].chars().count(),
        MAX_LINE_CHARS + 1,
        "cut on a character, marked"
    );
    assert!(truncated);
    // A diff in the metadata (the edit tool) is shown when there is no command.
    let mut m = Model::default();
    let edit = json!({"type": "permission.asked", "properties": {"id": "per_e", "sessionID": "s",
        "permission": "edit", "patterns": ["a.rs"], "always": ["*"], "metadata": {"filepath": "/p/a.rs", "diff": "--- a\n+++ b\n@@\n-x\n+y"}}});
    m.apply("web", &edit, 1);
    assert_eq!(m.projects["web"].permissions["per_e"].lines[0], "--- a");
}

#[test]
fn everything_is_bounded() {
    let mut m = Model::default();
    for i in 0..MAX_CARDS + 5 {
        m.apply("web", &asked(&format!("per_{i}"), "ses_1", "ls"), i as u64);
    }
    assert_eq!(m.projects["web"].permissions.len(), MAX_CARDS);
    assert_eq!(m.projects["web"].hidden_cards, 5);
    for i in 0..MAX_SESSIONS + 20 {
        m.apply("web", &session(&format!("ses_{i}"), None, "t", i as u64), i as u64);
    }
    assert_eq!(m.projects["web"].sessions.len(), MAX_SESSIONS);
    assert!(
        !m.projects["web"].sessions.contains_key("ses_0"),
        "the least recently active went"
    );
    for i in 0..MAX_CARDS {
        m.apply("web", &replied(&format!("per_{i}")), 1000);
    }
    for i in 0..MAX_CARDS {
        m.apply("web", &asked(&format!("per_x{i}"), "ses_1", "ls"), 1000);
        m.apply("web", &replied(&format!("per_x{i}")), 1000);
    }
    assert_eq!(m.resolved.len(), MAX_RESOLVED);
    // What an event carries is cut to size.
    let huge = json!({"type": "question.asked", "properties": {"id": "que_big", "sessionID": "s",
        "questions": [{"question": "q".repeat(100_000), "header": "h",
            "options": (0..500).map(|i| json!({"label": format!("{i}"), "description": "d".repeat(10_000)})).collect::<Vec<_>>()}]}});
    m.apply("big", &huge, 1000);
    let q = &m.projects["big"].questions["que_big"].questions[0];
    assert!(q.question.len() <= 2000 && q.options.len() <= 50);
    assert!(q.options.iter().all(|o| o.description.len() <= 2000));
    m.prune(1000 + RESOLVED_FOR_MS + 1);
    assert!(m.resolved.is_empty(), "resolved entries expire");
}

#[test]
fn a_seed_after_a_gap_resolves_what_was_answered_meanwhile_and_adds_what_is_new() {
    let mut m = Model::default();
    m.apply("web", &asked("per_old", "ses_1", "ls"), 1);
    m.apply("web", &session("ses_gone", None, "t", 1), 1);
    let seed = Seed {
        sessions: vec![session("ses_1", None, "Now", 50)["properties"]["info"].clone()],
        statuses: json!({"ses_1": {"type": "busy"}, "ses_child": {"type": "busy"}}),
        permissions: vec![asked("per_new", "ses_1", "make")["properties"].clone()],
        questions: vec![question("que_1")["properties"].clone()],
    };
    let e = m.seed("web", &seed, 100);
    assert_eq!(e.new_cards.len(), 2);
    let p = &m.projects["web"];
    assert!(p.permissions.contains_key("per_new") && !p.permissions.contains_key("per_old"));
    assert!(p.questions.contains_key("que_1"));
    assert_eq!(p.sessions["ses_1"].status, SessionStatus::Busy);
    assert_eq!(
        p.sessions["ses_child"].status,
        SessionStatus::Busy,
        "busy but not listed"
    );
    assert!(!p.sessions.contains_key("ses_gone"));
    assert_eq!(m.resolved[0].id, "per_old");
    assert_eq!(m.resolved[0].how, Resolution::Elsewhere);
    // The same seed again is nothing new.
    assert!(m.seed("web", &seed, 200).new_cards.is_empty());
}

#[test]
fn the_view_shows_only_allowed_projects_sorted_with_session_titles() {
    let mut m = Model::default();
    m.apply("b", &session("ses_2", Some("ses_1"), "Helper", 5), 5);
    m.apply("b", &asked("per_b", "ses_2", "ls"), 10);
    m.apply("a", &asked("per_a", "ses_x", "ls"), 10);
    m.apply("c", &question("que_c"), 10);
    let v = crate::inbox::view::build(&m, |p| p != "a", 20);
    let names: Vec<&str> = v.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["b", "c"]);
    let crate::inbox::Card::Permission(card) = &v[0].pending[0] else {
        panic!("a permission card")
    };
    assert_eq!(card.session_title.as_deref(), Some("Helper"));
    assert!(card.subagent);
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json[0]["pending"][0]["kind"], "permission");
    assert_eq!(json[0]["pending"][0]["id"], "per_b");
    assert!(!json.to_string().contains("per_a"));
}

/// The meter's reading: a session's cost when first seen (nothing before), each change (what was
/// known before), nothing when it is the same; and after an event stream broke, the re-seed's
/// list says what was spent meanwhile, against what was known before the gap.
#[test]
fn costs_are_reported_when_new_or_changed_and_after_a_gap_by_the_seed() {
    let mut m = Model::default();
    let cost_of = |e: &Effect| {
        e.costs
            .iter()
            .map(|c| (c.session.clone(), c.before, c.now))
            .collect::<Vec<_>>()
    };
    let e = m.apply("web", &session("ses_1", None, "t", 1), 1);
    assert_eq!(cost_of(&e), vec![("ses_1".to_string(), None, 0.25)]);
    assert!(
        m.apply("web", &session("ses_1", None, "t", 2), 2).costs.is_empty(),
        "unchanged"
    );
    let mut more = session("ses_1", None, "t", 3);
    more["properties"]["info"]["cost"] = json!(0.5);
    assert_eq!(
        cost_of(&m.apply("web", &more, 3)),
        vec![("ses_1".to_string(), Some(0.25), 0.5)]
    );
    // The stream broke; meanwhile the session spent up to 0.9 and a subagent's session began.
    let mut after = session("ses_1", None, "t", 9)["properties"]["info"].clone();
    after["cost"] = json!(0.9);
    let child = session("ses_2", Some("ses_1"), "sub", 9)["properties"]["info"].clone();
    let seed = Seed {
        sessions: vec![after, child],
        statuses: json!({}),
        permissions: vec![],
        questions: vec![],
    };
    let mut seen = cost_of(&m.seed("web", &seed, 10));
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![("ses_1".to_string(), Some(0.5), 0.9), ("ses_2".to_string(), None, 0.25)]
    );
    let e = m.seed("web", &seed, 11);
    assert!(e.costs.is_empty(), "the same list again: {:?}", e.costs);
}

/// A fork (as 1.18.33 sends it): `session.created` at cost 0, then its copies of the other
/// session's messages with their old `time.created`. Their cost is inherited at once (counted
/// toward nobody's day), once per message; an answer made in the session is not a copy.
#[test]
fn a_forks_copied_answers_are_inherited_not_spent() {
    let mut m = Model::default();
    let mut created = session("ses_f", None, "x (fork #1)", 100);
    created["type"] = json!("session.created");
    created["properties"]["info"]["cost"] = json!(0);
    created["properties"]["info"]["time"]["created"] = json!(100);
    m.apply("web", &created, 1);
    let message = |id: &str, made: u64| {
        json!({"type": "message.updated", "properties": {"sessionID": "ses_f", "info": {
            "id": id, "sessionID": "ses_f", "role": "assistant", "cost": 0.25, "time": {"created": made}}}})
    };
    let inherited = |e: &Effect| {
        e.costs
            .iter()
            .map(|c| (c.before, c.now, c.inherited))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        inherited(&m.apply("web", &message("msg_1", 50), 2)),
        vec![(Some(0.0), 0.25, true)]
    );
    assert!(
        m.apply("web", &message("msg_1", 50), 3).costs.is_empty(),
        "the same copy again"
    );
    assert!(
        m.apply("web", &message("msg_2", 150), 4).costs.is_empty(),
        "made in the fork"
    );
    assert_eq!(m.projects["web"].sessions["ses_f"].cost, Some(0.25));
    // The fork's next update says the copy's and its own answer's cost: only its own is new.
    let mut next = session("ses_f", None, "x (fork #1)", 200);
    next["properties"]["info"]["cost"] = json!(0.5);
    let e = m.apply("web", &next, 5);
    assert_eq!(inherited(&e), vec![(Some(0.25), 0.5, false)]);
}

/// A finished tool call as OpenCode 1.18.33 sends it: `read` of a missing file ends "error", a
/// shell command that exits non-zero ends "completed" with `metadata.exit` (seen on the server).
fn tool_done(session: &str, tool: &str, failed: Option<&str>) -> Value {
    let state = match (tool, failed) {
        ("bash", Some(out)) => json!({"status": "completed", "input": {"command": "cat /nope"},
            "output": out, "metadata": {"output": out, "exit": 1, "truncated": false}}),
        ("bash", None) => json!({"status": "completed", "input": {"command": "ls"}, "output": "a\n",
            "metadata": {"exit": 0}}),
        (_, Some(err)) => json!({"status": "error", "input": {"filePath": "/nope"}, "error": err}),
        (_, None) => json!({"status": "completed", "input": {}, "output": "ok"}),
    };
    json!({"type": "message.part.updated", "properties": {"sessionID": session,
        "part": {"type": "tool", "tool": tool, "callID": "call_1", "state": state, "sessionID": session}}})
}

fn status_of(session: &str, status: Value) -> Value {
    json!({"type": "session.status", "properties": {"sessionID": session, "status": status}})
}

/// The runaway count: the same failure again (a tool's, or OpenCode's retry of the same provider
/// error) continues a streak and is announced with its count; a success, another failure or the
/// end of the turn starts over; a running tool's progress is neither.
#[test]
fn the_same_failure_in_a_row_is_counted_and_anything_else_starts_over() {
    let mut m = Model::default();
    m.apply("web", &status_of("ses_1", json!({"type": "busy"})), 1);
    let out = "cat: /nope: No such file or directory\nmore\n";
    assert!(
        m.apply("web", &tool_done("ses_1", "bash", Some(out)), 2)
            .repeats
            .is_empty()
    );
    let running = json!({"type": "message.part.updated", "properties": {"sessionID": "ses_1",
        "part": {"type": "tool", "tool": "bash", "state": {"status": "running", "input": {}}}}});
    let e = m.apply("web", &running, 3);
    assert!(e.repeats.is_empty() && !e.changed, "progress wakes no page");
    let r = m.apply("web", &tool_done("ses_1", "bash", Some(out)), 4).repeats;
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].count, r[0].failure.tool.as_str()), (2, "bash"));
    assert_eq!(r[0].failure.first_line, "exit 1: cat: /nope: No such file or directory");
    assert_eq!(
        m.apply("web", &tool_done("ses_1", "bash", Some(out)), 5).repeats[0].count,
        3
    );
    // Another failure, then a success: each starts over.
    assert!(
        m.apply("web", &tool_done("ses_1", "read", Some("File not found: /nope")), 6)
            .repeats
            .is_empty()
    );
    assert_eq!(
        m.apply("web", &tool_done("ses_1", "read", Some("File not found: /nope")), 7)
            .repeats[0]
            .count,
        2
    );
    assert!(m.apply("web", &tool_done("ses_1", "read", None), 8).repeats.is_empty());
    assert!(
        m.apply("web", &tool_done("ses_1", "read", Some("File not found: /nope")), 9)
            .repeats
            .is_empty()
    );
    // The turn ends: the next turn's first failure is a first.
    m.apply(
        "web",
        &json!({"type": "session.idle", "properties": {"sessionID": "ses_1"}}),
        10,
    );
    m.apply("web", &status_of("ses_1", json!({"type": "busy"})), 11);
    assert!(
        m.apply("web", &tool_done("ses_1", "read", Some("File not found: /nope")), 12)
            .repeats
            .is_empty()
    );
    // OpenCode retrying the same provider error: the second is a repeat; busy between is not news.
    let retry = |n: u64, msg: &str| {
        status_of(
            "ses_2",
            json!({"type": "retry", "attempt": n, "message": msg, "next": 99}),
        )
    };
    assert!(m.apply("web", &retry(1, "overloaded"), 20).repeats.is_empty());
    m.apply("web", &status_of("ses_2", json!({"type": "busy"})), 21);
    let r = m.apply("web", &retry(2, "overloaded"), 22).repeats;
    assert_eq!(
        (r[0].count, r[0].failure.tool.as_str(), r[0].session.as_str()),
        (2, "retry", "ses_2")
    );
    assert!(
        m.apply("web", &retry(3, "rate limited"), 23).repeats.is_empty(),
        "another error"
    );
}

/// The guard's flag shows until the session's next turn starts; silence is measured from the
/// model's last word, for busy, unflagged sessions of watched projects only.
#[test]
fn a_flag_lasts_until_the_next_turn_and_silence_counts_from_the_last_word() {
    let mut m = Model::default();
    m.apply("web", &status_of("ses_1", json!({"type": "busy"})), 1_000);
    m.apply("api", &status_of("ses_9", json!({"type": "busy"})), 1_000);
    let part = json!({"type": "message.part.updated", "properties": {"sessionID": "ses_1",
        "part": {"type": "text", "text": "thinking"}}});
    m.apply("web", &part, 5_000);
    let watched = |p: &str| (p == "web").then_some(10_000);
    assert!(m.silent_since(watched, 14_999).is_empty());
    assert_eq!(
        m.silent_since(watched, 15_000),
        vec![("web".to_string(), "ses_1".to_string(), 10_000)]
    );
    let flag = Flag {
        why: FlagWhy::Silent,
        stopped: true,
        stopping: true,
        says: "busy".into(),
        detail: String::new(),
        at_ms: 15_000,
    };
    assert!(m.flag("web", "ses_1", flag));
    assert!(!m.flag(
        "web",
        "ses_404",
        m.projects["web"].sessions["ses_1"].flag.clone().unwrap()
    ));
    assert!(m.silent_since(watched, 99_000).is_empty(), "flagged once");
    // Aborted: idle, still flagged; the next turn clears it.
    m.apply("web", &status_of("ses_1", json!({"type": "idle"})), 16_000);
    assert!(m.projects["web"].sessions["ses_1"].flag.is_some());
    m.apply("web", &status_of("ses_1", json!({"type": "busy"})), 17_000);
    assert!(m.projects["web"].sessions["ses_1"].flag.is_none());
    assert!(
        m.silent_since(watched, 26_999).is_empty(),
        "the new turn counts from its start"
    );
}
