//! Port mode (issue 22, LAN): without a base domain, each project's web UI is served on a port of
//! its own, so a phone needs only the gateway's address. The login stays on the main port; the
//! handoff gives each project port a cookie of its own name (browsers share cookies between the
//! ports of one host), accepted only on that project's port. Fake upstreams: what the upstream
//! receives is inspected directly. The browser-level sibling attack is in
//! tests/browser/ports.mjs (tests/integration/browser.rs).

use std::net::SocketAddr;

use http_body_util::Full;

use crate::common::client::{Https, Reply};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::Gateway;
use crate::common::login::location;

/// Two projects on ports of their own, no base domain: alice may use both, bob only "web".
pub async fn port_projects() -> (Gateway, FakeUpstream, FakeUpstream) {
    let own_port = |name: &str, url: &str| {
        crate::common::gateway::external_project(name, url).replace("\n\n", "\nlisten = \"127.0.0.1:0\"\n\n")
    };
    // No base domain: without project hosts, each project's web UI is on its port.
    crate::common::stack::two_projects_as(own_port, "", |config| {
        config.replace("base_domain = \"gw.localhost\"\n", "")
    })
    .await
}

/// The address of `project`'s own listener, from the gateway's log.
pub fn own_port(gw: &Gateway, project: &str) -> SocketAddr {
    let logs = gw.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("project listener ready") && l.contains(&format!("project={project} ")))
        .unwrap_or_else(|| panic!("no listener line for {project}:\n{logs}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("listen="))
        .unwrap()
        .parse()
        .unwrap()
}

fn set_cookies(r: &Reply) -> Vec<String> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// The `name=value` pair of the cookie `name` a response sets.
fn cookie_named(r: &Reply, name: &str) -> Option<String> {
    set_cookies(r)
        .into_iter()
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap().to_string())
}

/// `https://authority/path` → (authority, path).
fn split(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("not https: {url}"));
    let i = rest.find('/').unwrap_or(rest.len());
    (rest[..i].to_string(), rest[i..].to_string())
}

async fn get(c: &Https, path: &str, cookie: Option<&str>, html: bool) -> Reply {
    crate::common::login::browser_get(c, path, cookie, html).await
}

async fn post(c: &Https, path: &str, body: &str, cookie: &str, origin: Option<&str>, site: Option<&str>) -> Reply {
    let mut b = c
        .request("POST", path, None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", cookie);
    if let Some(o) = origin {
        b = b.header("origin", o);
    }
    if let Some(s) = site {
        b = b.header("sec-fetch-site", s);
    }
    c.call(b.body(Full::from(body.to_string())).unwrap()).await
}

/// Log in with the form on the main port; the login cookie pair.
async fn login(main: &Https, user: &str, password: &str) -> String {
    let own = format!("https://{}", main.authority());
    let r = post(
        main,
        "/login",
        &format!("user={user}&password={password}&next=%2F"),
        "",
        Some(&own),
        Some("same-origin"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    cookie_named(&r, "__Host-ocgw").expect("a login sets the cookie")
}

/// The whole handoff to `project`'s port: the cookie pair that port set.
async fn handoff(main: &Https, port: &Https, project: &str, login_cookie: &str) -> String {
    let r = get(port, "/", None, true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let state = cookie_named(&r, &format!("__Host-ocgw-handoff-p-{project}")).expect("the port's own state cookie");
    let (authority, path) = split(&location(&r));
    assert_eq!(
        authority,
        main.authority(),
        "the handoff is on the main port of the same host"
    );
    let r = get(main, &path, Some(login_cookie), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let (authority, callback) = split(&location(&r));
    assert_eq!(
        authority,
        port.authority(),
        "the ticket goes back to the project's port"
    );
    // The browser sends every cookie of the host name to every port: the login's goes along.
    let r = get(port, &callback, Some(&format!("{login_cookie}; {state}")), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    cookie_named(&r, &format!("__Host-ocgw-p-{project}")).expect("the port's own session cookie")
}

#[tokio::test]
async fn each_project_port_gets_a_cookie_of_its_own_through_the_handoff_and_no_other_port_accepts_it() {
    let (gw, web, _api) = port_projects().await;
    let main = Https::new(gw.https, &gw.ca());
    let web_port = Https::new(own_port(&gw, "web"), &gw.ca());
    let api_port = Https::new(own_port(&gw, "api"), &gw.ca());
    let alice = login(&main, "alice", "alice-password-1").await;

    // The portal links each project's web UI on its own port, on the host name the browser used.
    let portal = get(&main, "/", Some(&alice), true).await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    for p in [&web_port, &api_port] {
        assert!(
            portal.body.contains(&format!("https://{}", p.authority())),
            "{}",
            portal.body
        );
    }

    let web_cookie = handoff(&main, &web_port, "web", &alice).await;
    let api_cookie = handoff(&main, &api_port, "api", &alice).await;
    assert_ne!(web_cookie, api_cookie);

    // The port's cookie works there; the upstream sees neither gateway cookie nor the login's,
    // but other cookies pass.
    let all = format!("theme=dark; {alice}; {web_cookie}; {api_cookie}");
    let r = get(&web_port, "/echo", Some(&all), false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = web.seen();
    let last = seen.iter().rev().find(|s| s.target == "/echo").unwrap();
    assert_eq!(
        last.headers.get("cookie").map(|v| v.to_str().unwrap()),
        Some("theme=dark")
    );

    // Every cookie but the port's own is refused there: the login cookie, another port's cookie,
    // and another port's value under this port's name (a page on a sibling port cannot read an
    // HttpOnly value, but be strict: the session names its project).
    let web_value = web_cookie.split_once('=').unwrap().1;
    for wrong in [
        alice.clone(),
        web_cookie.clone(),
        format!("__Host-ocgw-p-api={web_value}"),
        format!("__Host-ocgw={web_value}"),
    ] {
        let r = get(&api_port, "/echo", Some(&wrong), false).await;
        assert_eq!(r.status, 401, "{wrong} on api's port: {}", r.body);
    }
    let api_value = api_cookie.split_once('=').unwrap().1;
    for wrong in [api_cookie.clone(), format!("__Host-ocgw-p-web={api_value}")] {
        let r = get(&web_port, "/echo", Some(&wrong), false).await;
        assert_eq!(r.status, 401, "{wrong} on web's port: {}", r.body);
    }
    let both = format!("{alice}; {api_cookie}");
    assert_eq!(get(&api_port, "/echo", Some(&both), false).await.status, 200);

    // The login cookie on the main port is not a project credential either.
    let r = get(&main, "/p/web/echo", Some(&web_cookie), false).await;
    assert_eq!(r.status, 401, "{}", r.body);
    drop(gw);
}

/// A page on a sibling port is the same site (ports do not separate sites) but not the same
/// origin: the cross-site rule refuses its writes with the port's cookie before OpenCode sees them.
#[tokio::test]
async fn a_sibling_ports_page_cannot_write_with_a_project_ports_cookie() {
    let (gw, web, _api) = port_projects().await;
    let main = Https::new(gw.https, &gw.ca());
    let web_port = Https::new(own_port(&gw, "web"), &gw.ca());
    let api_port = Https::new(own_port(&gw, "api"), &gw.ca());
    let alice = login(&main, "alice", "alice-password-1").await;
    // The browser sends the login cookie to every port of the host beside the port's own.
    let cookie = format!("{alice}; {}", handoff(&main, &web_port, "web", &alice).await);
    let own = format!("https://{}", web_port.authority());
    let sibling = format!("https://{}", api_port.authority());
    let login_origin = format!("https://{}", main.authority());
    let cases: Vec<(Option<&str>, Option<&str>, u16)> = vec![
        (Some(&own), Some("same-origin"), 200),
        (None, Some("same-origin"), 200),
        (Some(&sibling), Some("same-site"), 403),
        (Some(&sibling), None, 403),
        (Some(&login_origin), Some("same-site"), 403),
        (None, Some("same-site"), 403),
        (Some("null"), None, 403),
    ];
    for (origin, site, want) in cases {
        let before = web.seen().len();
        let r = post(&web_port, "/session", "{}", &cookie, origin, site).await;
        assert_eq!(r.status.as_u16(), want, "origin {origin:?} site {site:?}: {}", r.body);
        if want == 403 {
            assert_eq!(web.seen().len(), before, "a refused request never reaches OpenCode");
        }
    }
    drop(gw);
}

#[tokio::test]
async fn a_handoff_goes_only_to_a_bound_port_on_the_same_host_name_for_a_granted_project() {
    let (gw, _web, _api) = port_projects().await;
    let main = Https::new(gw.https, &gw.ca());
    let web_addr = own_port(&gw, "web");
    let api_addr = own_port(&gw, "api");
    let bob = login(&main, "bob", "bob-password-22").await;
    let enc = crate::common::client::encode;
    let to = |authority: String| format!("/_gw/handoff?to={}&state=S", enc(&format!("https://{authority}/")));
    // bob may use web, not api.
    let r = get(&main, &to(format!("127.0.0.1:{}", web_addr.port())), Some(&bob), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let r = get(&main, &to(format!("127.0.0.1:{}", api_addr.port())), Some(&bob), true).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("no access to project api"), "{}", r.body);
    for (authority, why) in [
        (format!("localhost:{}", web_addr.port()), "NotAProjectHost"),
        (format!("evil.example:{}", web_addr.port()), "NotAProjectHost"),
        (format!("127.0.0.1:{}", gw.https.port()), "NotAProjectHost"),
        (format!("127.0.0.1:{}@evil.example", web_addr.port()), "NotAProjectHost"),
    ] {
        let r = get(&main, &to(authority.clone()), Some(&bob), true).await;
        assert_eq!(r.status, 400, "{authority}: {}", r.body);
        assert!(r.body.contains(why), "{authority}: {}", r.body);
    }
    // A project port has no gateway pages but the callback, and the login pages stay on the main port.
    let web_port = Https::new(web_addr, &gw.ca());
    for path in ["/_gw/handoff?to=x&state=S", "/_gw/act", "/_gw/events"] {
        let r = get(&web_port, path, Some(&bob), true).await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
    drop(gw);
}

/// bob's half of a handoff to `project`'s port, stopped before the callback: the state cookie
/// pair his browser got and the callback path with the ticket the login host minted for him.
async fn begin_handoff(main: &Https, port: &Https, project: &str, login_cookie: &str) -> (String, String) {
    let r = get(port, "/", None, true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let state = cookie_named(&r, &format!("__Host-ocgw-handoff-p-{project}")).expect("the port's own state cookie");
    let r = get(main, &split(&location(&r)).1, Some(login_cookie), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    (state, split(&location(&r)).1)
}

/// Login CSRF through a sibling port (hostile round four, item 6): a script on another port of
/// the same host can set cookies for every port (cookies ignore ports), so bob plants the handoff
/// state of his own half-done handoff into alice's browser and sends it to the callback with his
/// ticket. The callback takes a ticket only in the browser holding the login session it was
/// minted in, so alice is not logged in to web as bob (before the fix she was), and the ticket,
/// not burnt, still works in bob's own browser.
#[tokio::test]
async fn a_handoff_state_and_ticket_planted_from_a_sibling_port_do_not_log_a_browser_in_as_their_maker() {
    let (gw, _web, _api) = port_projects().await;
    let main = Https::new(gw.https, &gw.ca());
    let web_port = Https::new(own_port(&gw, "web"), &gw.ca());
    let alice = login(&main, "alice", "alice-password-1").await;
    let bob = login(&main, "bob", "bob-password-22").await;
    let (bobs_state, bobs_callback) = begin_handoff(&main, &web_port, "web", &bob).await;

    // alice's jar: her own login, bob's planted state; or the planted state alone.
    for jar in [format!("{alice}; {bobs_state}"), bobs_state.clone()] {
        let r = get(&web_port, &bobs_callback, Some(&jar), true).await;
        assert_eq!(r.status, 403, "{jar}: {}", r.body);
        assert!(r.body.contains("another login"), "{}", r.body);
        assert_eq!(cookie_named(&r, "__Host-ocgw-p-web"), None, "no session cookie is set");
    }
    assert!(
        gw.wait_log("reason=\"handoff_other_login\"", std::time::Duration::from_secs(5))
            .await,
        "the refusal is logged with its reason"
    );

    // The ticket was left in place: bob's own browser completes his handoff.
    let r = get(&web_port, &bobs_callback, Some(&format!("{bob}; {bobs_state}")), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(cookie_named(&r, "__Host-ocgw-p-web").is_some());
    drop(gw);
}

/// The same attack without a handoff: bob plants his own port cookie (he can read it in his own
/// browser) into alice's browser from a sibling port. A project port's session counts only
/// beside the login cookie it was handed off from, so alice's browser is sent to a handoff of
/// its own instead of being bob on web.
#[tokio::test]
async fn a_port_cookie_planted_from_a_sibling_port_is_refused_beside_another_login() {
    let (gw, web, _api) = port_projects().await;
    let main = Https::new(gw.https, &gw.ca());
    let web_port = Https::new(own_port(&gw, "web"), &gw.ca());
    let alice = login(&main, "alice", "alice-password-1").await;
    let bob = login(&main, "bob", "bob-password-22").await;
    let bobs_cookie = handoff(&main, &web_port, "web", &bob).await;
    let before = web.seen().len();
    for jar in [format!("{alice}; {bobs_cookie}"), bobs_cookie.clone()] {
        let r = get(&web_port, "/echo", Some(&jar), false).await;
        assert_eq!(r.status, 401, "{jar}: {}", r.body);
        let r = get(&web_port, "/", Some(&jar), true).await;
        assert_eq!(r.status, 303, "{jar}: {}", r.body);
        assert!(location(&r).contains("/_gw/handoff?"), "{}", location(&r));
    }
    assert_eq!(web.seen().len(), before, "nothing reached OpenCode as bob");
    assert!(
        gw.wait_log("reason=\"port_session_other_login\"", std::time::Duration::from_secs(5))
            .await,
        "the refusal is logged with its reason"
    );
    // In bob's own browser it works.
    let r = get(&web_port, "/echo", Some(&format!("{bob}; {bobs_cookie}")), false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    drop(gw);
}
