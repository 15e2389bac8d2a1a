//! The control room's rows as the templates render them.

use askama::Template;

use super::*;

fn project(name: &str, on_box: Option<&str>) -> ProjectRow {
    ProjectRow {
        name: name.into(),
        spend: None,
        on_box: on_box.map(String::from),
        state_class: "running",
        state_text: "running".into(),
        state_reason: None,
        pending: 1,
        sessions: Vec::new(),
        web_ui: None,
        can_answer: true,
        can_create: false,
        can_restart: false,
        can_raise: false,
        origin: None,
        directory: None,
        triggers: Vec::new(),
        accept: None,
        task: None,
    }
}

/// The pages of one project, nothing waiting.
fn room_of(project: ProjectRow) -> Room {
    Room {
        projects: vec![project],
        cards: Vec::new(),
        notes: Vec::new(),
        pending: 0,
        flash: None,
        viewer_only: false,
        my_spend: None,
    }
}

fn flagged(budget: bool) -> SessionRow {
    SessionRow {
        id: "ses_1".into(),
        title: "Fix the login".into(),
        status_class: "idle",
        status_text: "idle".into(),
        status_reason: None,
        ago: "5 s".into(),
        since_ms: 0,
        usage: Some("$0.0315 · 3000 in / 1500 out tokens".into()),
        link: None,
        subagent: false,
        busy: false,
        waiting: None,
        depth: 0,
        queued: None,
        last_words: None,
        running: None,
        flag: Some(FlagRow {
            says: "stopped: retried the same failure twice".into(),
            detail: "exit 1: cat: x: No such file or directory".into(),
            resumable: true,
            budget,
            blocked: None,
        }),
    }
}

/// A project on a box says so on the portal and on its inbox cards; one on this machine
/// says nothing of boxes.
#[test]
fn the_pages_name_the_box_a_project_runs_on() {
    let card = |name: &str, on_box: Option<&str>| CardRow {
        project: name.into(),
        on_box: on_box.map(String::from),
        id: format!("per_{name}"),
        permission: true,
        session_title: "a session".into(),
        subagent: false,
        tool: "bash".into(),
        lines: vec!["ls".into()],
        truncated: false,
        patterns: Vec::new(),
        always: Vec::new(),
        waited: "5 s".into(),
        asked_ms: 0,
        link: None,
        can_answer: true,
        questions: Vec::new(),
    };
    let room = Room {
        projects: vec![project("train", Some("gpu1")), project("web", None)],
        cards: vec![card("train", Some("gpu1")), card("web", None)],
        notes: Vec::new(),
        pending: 2,
        flash: None,
        viewer_only: false,
        my_spend: None,
    };
    let portal = PortalContent { r: &room }.render().unwrap();
    assert_eq!(portal.matches("on gpu1").count(), 1, "{portal}");
    // A session the guard stopped: the flag, the failure's first line, "Resume" for those
    // who may answer; "Reset this session's budget" and "Budget…" for operators only.
    let mut room = room;
    room.my_spend = Some("You spent today: $0.0210 (UTC day) · this month: $1.2000".into());
    room.projects[1].sessions = vec![flagged(true)];
    room.projects[1].spend = Some("Spent today: $0.0315 of $40.00 (UTC day) · this month: $0.0315".into());
    let as_approver = PortalContent { r: &room }.render().unwrap();
    for says in [
        "You spent today: $0.0210",
        "stopped: retried the same failure twice",
        "exit 1: cat: x: No such file",
        "value=\"resume\"",
    ] {
        assert!(as_approver.contains(says), "{says}: {as_approver}");
    }
    assert!(
        !as_approver.contains("/_gw/budget"),
        "no budget controls without the operator role"
    );
    room.projects[1].can_raise = true;
    let as_operator = PortalContent { r: &room }.render().unwrap();
    assert!(as_operator.contains("Reset this session's budget"), "{as_operator}");
    assert!(as_operator.contains("Raise today's budget by $"), "{as_operator}");
    room.projects[1].can_answer = false;
    let as_viewer_like = PortalContent { r: &room }.render().unwrap();
    assert!(!as_viewer_like.contains("value=\"resume\""), "{as_viewer_like}");
    let inbox = InboxContent { r: &room }.render().unwrap();
    assert!(inbox.contains("in train on gpu1"), "{inbox}");
    assert!(inbox.contains("in web</span>"), "{inbox}");
}

#[test]
fn permission_kinds_read_as_words() {
    assert_eq!(super::rows::permission_title("bash"), "Run a command (bash)");
    assert_eq!(
        super::rows::permission_title("external_directory"),
        "Work outside the project's folder (external_directory)"
    );
    assert_eq!(super::rows::permission_title("new_thing"), "New thing");
    assert_eq!(super::rows::permission_title(""), "");
}

/// A spent budget in front of the resume (issue 38): an operator's primary action resets it (on
/// both pages); anyone else gets no button and the reason in words.
#[test]
fn a_spent_budget_offers_each_role_what_it_may_do() {
    let mut web = project("web", None);
    web.sessions = vec![flagged(true)];
    web.can_raise = true;
    let mut room = room_of(web);
    if let Some(f) = room.projects[0].sessions[0].flag.as_mut() {
        f.resumable = false;
        f.blocked = Some(Blocked {
            what: "this session's budget, $2.00, is spent ($2.0100 so far)".into(),
            scope: Some("session"),
        });
    }
    // What a page says about session ses_1: its list item, or its flagged card.
    let about = |page: &str| -> String {
        let after = page.split("data-session=\"ses_1\"").nth(1).unwrap_or_default();
        let item = after.split("</li>").next().unwrap_or_default();
        item.split("</section>").next().unwrap_or_default().to_string()
    };
    for page in [
        PortalContent { r: &room }.render().unwrap(),
        InboxContent { r: &room }.render().unwrap(),
    ] {
        let part = about(&page);
        assert!(!part.contains("value=\"resume\""), "{part}");
        let primary = part.split("class=\"primary\"").nth(1).unwrap_or_default();
        assert!(
            primary
                .split("</button>")
                .next()
                .unwrap_or_default()
                .contains("Reset this session's budget"),
            "{part}"
        );
        // Askama escapes the apostrophe.
        assert!(part.contains("this session&#39;s budget, $2.00, is spent"), "{part}");
    }
    room.projects[0].can_raise = false;
    for page in [
        PortalContent { r: &room }.render().unwrap(),
        InboxContent { r: &room }.render().unwrap(),
    ] {
        let part = about(&page);
        assert!(!part.contains("<button"), "{part}");
        assert!(part.contains("Only an operator of web can raise or reset it"), "{part}");
    }
}

fn run_row(outcome: &'static str, class: &'static str, detail: &str) -> super::trigger_rows::RunRow {
    super::trigger_rows::RunRow {
        ago: "2 min".into(),
        since_ms: 1,
        class,
        outcome,
        session: Some("ses_9".into()),
        link: Some("https://web.example/L3c/session/ses_9".into()),
        cost: Some("$0.0120".into()),
        detail: detail.into(),
    }
}

/// Project web's portal with trigger gh: a failed run and an ok one, steerable or not, paused or not.
fn portal_with_trigger(can_steer: bool, paused: Option<&str>) -> String {
    let mut p = project("web", None);
    p.triggers.push(super::trigger_rows::TriggerRow {
        name: "gh".into(),
        kind: "GitHub webhook: push".into(),
        next: None,
        paused: paused.map(String::from),
        runs: vec![
            run_row("failed", "failed", "stopped by the gateway's guard: <b>twice</b>"),
            run_row("ok", "running", ""),
        ],
        can_steer,
    });
    let room = room_of(p);
    PortalContent { r: &room }.render().unwrap()
}

#[test]
fn a_trigger_card_shows_its_runs_why_it_paused_and_steering_only_to_operators() {
    let operator = portal_with_trigger(true, Some("paused itself: its last 2 runs failed"));
    assert!(operator.contains("GitHub webhook: push"), "{operator}");
    assert!(operator.contains("paused itself: its last 2 runs failed"), "{operator}");
    assert!(
        operator.contains(r#"href="https://web.example/L3c/session/ses_9""#),
        "{operator}"
    );
    assert!(operator.contains("$0.0120"), "{operator}");
    assert!(
        operator.contains("&#60;b&#62;twice&#60;/b&#62;") && !operator.contains("<b>"),
        "a run's words are escaped: {operator}"
    );
    assert!(operator.contains(r#"value="resume""#) && !operator.contains(r#"value="pause""#));
    let active = portal_with_trigger(true, None);
    assert!(active.contains(r#"value="pause""#) && !active.contains(r#"value="resume""#));
    let viewer = portal_with_trigger(false, None);
    assert!(viewer.contains("GitHub webhook: push"), "viewers see the card");
    assert!(!viewer.contains("/_gw/trigger"), "but get no steering form: {viewer}");
}

/// A card says how long its session has run, the agent's last words (escaped), that it waits
/// for you, and why its prompt is queued.
#[test]
fn a_card_says_its_running_time_last_words_waiting_and_queue() {
    let mut web = project("web", None);
    let mut s = flagged(false);
    s.flag = None;
    s.running = Some((1, "3 min".into()));
    s.last_words = Some("Done: <b>all</b> tests pass".into());
    s.waiting = Some(WaitingRow {
        id: "per_1".into(),
        what: "npm test".into(),
    });
    s.queued = Some("queued: 1 session of yours is busy (fleet.max_busy_per_user = 1)".into());
    web.sessions = vec![s];
    web.can_answer = true;
    let page = PortalContent { r: &room_of(web) }.render().unwrap();
    for says in [
        "running for <span data-since=\"1\">3 min</span>",
        "Done: &#60;b&#62;all&#60;/b&#62; tests pass",
        "waiting for you",
        "data-queued=\"ses_1\">queued: 1 session of yours is busy",
    ] {
        assert!(page.contains(says), "{says}: {page}");
    }
}
