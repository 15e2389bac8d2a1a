//! A session stopped by its budget, on the control room's pages (issue 38, item 8): the primary
//! action is what the viewer may do. "Resume" on a spent budget was refused with a bare
//! "Forbidden" even for an operator; now an operator's primary action raises or resets the
//! budget (and the form goes through), Resume comes back once the budget allows it, a viewer
//! gets no button and the reason in words, and no page names a config key. The stack and
//! helpers are `budgets.rs`'s.

use crate::budgets::{VIC_PW, demo_guarded};
use crate::common::client::Https;
use crate::common::login::{LOGIN_HOST, act, browser_get, form_login, location, portal_post};
use crate::common::opencode::FakeModel;
use crate::common::stack::ALICE_PW;

/// The part of a page about session `id`: the portal's list item, or the inbox's flagged card.
fn about<'a>(page: &'a str, id: &str, end: &str) -> &'a str {
    let at = page
        .find(&format!("data-session=\"{id}\""))
        .unwrap_or_else(|| panic!("no {id} in {page}"));
    let rest = &page[at..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// The first `<button …>` of `html`, tag and label.
fn first_button(html: &str) -> &str {
    let at = html.find("<button").unwrap_or_else(|| panic!("no button in {html}"));
    let rest = &html[at..];
    &rest[..rest.find("</button>").unwrap_or(rest.len())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_session_stopped_by_its_budget_offers_each_role_what_it_may_do() {
    let model = FakeModel::start("echo BUDGET-PAGES")
        .await
        .priced(3.0, 15.0)
        .allowing_bash();
    let (_oc, gw) = demo_guarded(&model, "session_usd = 0.03", None);
    let c = Https::new(gw.https, &gw.ca());
    let id = crate::budgets::a_looping_session_stopped_by_the_guard(&c, &gw).await;
    let lh = c.host(LOGIN_HOST);
    let alice_cookie = form_login(&c, "alice", ALICE_PW).await;
    let vic_cookie = form_login(&c, "vic", VIC_PW).await;

    // Every page, for either role: the budget in words, never its config key.
    for (who, cookie) in [("alice", &alice_cookie), ("vic", &vic_cookie)] {
        for page in ["/", "/inbox"] {
            let mut p = browser_get(&lh, page, Some(cookie), true).await;
            assert_eq!(p.status, 200, "{who} {page}: {}", p.body);
            p.body = p.body.replace("&#39;", "'");
            assert!(
                !p.body.contains("budget.session_usd"),
                "{who} {page} names the key: {}",
                p.body
            );
            assert!(
                p.body.contains("this session's budget, $0.03"),
                "{who} {page}: {}",
                p.body
            );
        }
    }
    // The operator: the first button about the session raises or resets its budget; no Resume
    // while the budget is spent.
    for (page, end) in [("/", "</li>"), ("/inbox", "</section>")] {
        let p = browser_get(&lh, page, Some(&alice_cookie), true).await;
        let part = about(&p.body, &id, end);
        let first = first_button(part);
        assert!(
            first.contains("class=\"primary\"") && first.contains("value=\"reset\""),
            "alice's primary action on {page}: {first}\n{part}"
        );
        assert!(
            !part.contains("value=\"resume\""),
            "Resume on a spent budget on {page}: {part}"
        );
    }
    // The viewer: no button about the session, and the reason in words.
    for (page, end) in [("/", "</li>"), ("/inbox", "</section>")] {
        let p = browser_get(&lh, page, Some(&vic_cookie), true).await;
        let part = about(&p.body, &id, end);
        assert!(!part.contains("<button"), "a button for vic on {page}: {part}");
        assert!(
            part.contains("an operator of demo can raise or reset it"),
            "vic is not told why on {page}: {part}"
        );
    }
    // The operator's reset goes through; then Resume is the primary action, and it works.
    let reset = format!("project=demo&scope=session&session={id}&do=reset");
    let r = portal_post(&lh, &alice_cookie, "/_gw/budget", &reset).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let p = browser_get(&lh, "/", Some(&alice_cookie), true).await;
    let first = first_button(about(&p.body, &id, "</li>")).to_string();
    assert!(first.contains("value=\"resume\""), "after the reset: {first}");
    let resumed = act(
        &lh,
        &alice_cookie,
        &format!("project=demo&id={id}&do=resume&from=portal"),
    )
    .await;
    assert_eq!(resumed.status, 303, "{}", resumed.body);
    assert!(location(&resumed).ends_with("done=resumed"), "{:?}", resumed.headers);
}
