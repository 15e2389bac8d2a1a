//! The browser login (issue 11): the form on the login host, server-side sessions in a
//! `__Host-` cookie, the project-host handoff (single use, host-bound, expiring), the cookie
//! CSRF rule, logout ending the project cookies too, and Basic still working for OpenCode's
//! clients. Fake upstreams: what the upstream receives is inspected directly.

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, Reply, basic};
use crate::common::login::location;
use crate::common::stack::two_projects;

const LOGIN_HOST: &str = "gw.localhost";

/// A browser's view of one host: the client naming that host.
fn host(c: &Https, name: &str) -> Https {
    c.host(name)
}

fn origin(c: &Https) -> String {
    format!("https://{}", c.authority())
}

/// The `__Host-ocgw` cookie a response sets, as `name=value`.
fn set_cookie(r: &Reply) -> Option<(String, String)> {
    let v = r.headers.get("set-cookie")?.to_str().unwrap().to_string();
    let pair = v.split(';').next().unwrap().trim().to_string();
    pair.starts_with("__Host-ocgw=").then_some((pair, v))
}

/// The project host's handoff state cookie a redirect sets, as `name=value`.
fn handoff_state(r: &Reply) -> String {
    r.headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|v| v.starts_with("__Host-ocgw-handoff="))
        .unwrap_or_else(|| panic!("no handoff state cookie: {:?}", r.headers))
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

/// Split `https://host:port/path?q` into the host part and the path part.
fn split_url(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("not https: {url}"));
    let i = rest.find('/').unwrap_or(rest.len());
    let host = rest[..i].rsplit_once(':').map_or(&rest[..i], |(h, _)| h).to_string();
    (host, rest[i..].to_string())
}

async fn get(c: &Https, path: &str, cookie: Option<&str>, html: bool) -> Reply {
    crate::common::login::browser_get(c, path, cookie, html).await
}

async fn post_form(
    c: &Https,
    path: &str,
    body: &str,
    cookie: Option<&str>,
    origin: Option<&str>,
    site: Option<&str>,
) -> Reply {
    let mut b = c
        .request("POST", path, None)
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(k) = cookie {
        b = b.header("cookie", k);
    }
    if let Some(o) = origin {
        b = b.header("origin", o);
    }
    if let Some(s) = site {
        b = b.header("sec-fetch-site", s);
    }
    c.call(b.body(Full::from(body.to_string())).unwrap()).await
}

/// Log in on the login host; the cookie pair.
async fn login(c: &Https, user: &str, password: &str, next: &str) -> (String, Reply) {
    let login = host(c, LOGIN_HOST);
    let body = format!(
        "user={user}&password={password}&next={}",
        next.replace('%', "%25")
            .replace('&', "%26")
            .replace('?', "%3F")
            .replace('=', "%3D")
    );
    let r = post_form(
        &login,
        "/login",
        &body,
        None,
        Some(&origin(&login)),
        Some("same-origin"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let (cookie, _) = set_cookie(&r).expect("a login sets the cookie");
    (cookie, r)
}

#[tokio::test]
async fn the_login_form_sets_a_host_only_cookie_and_basic_keeps_working() {
    let (gw, web, _api, c) = two_projects("").await;
    let lh = host(&c, LOGIN_HOST);

    let form = get(&lh, "/login", None, true).await;
    assert_eq!(form.status, 200);
    for needle in [
        "autocomplete=\"username\"",
        "autocomplete=\"current-password\"",
        "action=\"/login\"",
    ] {
        assert!(form.body.contains(needle), "{needle}: {}", form.body);
    }
    let csp = form.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(form.headers["x-content-type-options"], "nosniff");
    assert_eq!(form.headers["referrer-policy"], "no-referrer");
    assert!(form.headers.contains_key("strict-transport-security"));

    // A wrong password and an unknown user read the same.
    let own = origin(&lh);
    let wrong = post_form(
        &lh,
        "/login",
        "user=alice&password=nope",
        None,
        Some(&own),
        Some("same-origin"),
    )
    .await;
    let unknown = post_form(
        &lh,
        "/login",
        "user=mallory&password=nope",
        None,
        Some(&own),
        Some("same-origin"),
    )
    .await;
    assert_eq!((wrong.status.as_u16(), unknown.status.as_u16()), (401, 401));
    assert!(wrong.body.contains("Wrong user name or password."));
    assert!(unknown.body.contains("Wrong user name or password."));
    assert!(set_cookie(&wrong).is_none());
    // A token is for scripts, not the form.
    let token = post_form(
        &lh,
        "/login",
        "user=alice&password=ocgw_abc",
        None,
        Some(&own),
        Some("same-origin"),
    )
    .await;
    assert_eq!(token.status, 401);

    let r = post_form(
        &lh,
        "/login",
        "user=alice&password=alice-password-1&next=/inbox",
        None,
        Some(&own),
        Some("same-origin"),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(location(&r), "/inbox");
    let (cookie, raw) = set_cookie(&r).unwrap();
    for attr in ["Path=/", "Secure", "HttpOnly", "SameSite=Lax"] {
        assert!(raw.contains(attr), "{raw}");
    }
    assert!(!raw.to_ascii_lowercase().contains("domain="), "{raw}");
    // Logged in: the form sends the browser on.
    let again = get(&lh, "/login?next=/inbox", Some(&cookie), true).await;
    assert_eq!((again.status.as_u16(), location(&again)), (303, "/inbox".to_string()));
    // An open redirect through `next` goes home instead.
    for evil in ["//evil.example/", "https://evil.example/", "/\\evil.example"] {
        let body = format!(
            "user=alice&password=alice-password-1&next={}",
            evil.replace('/', "%2F").replace(':', "%3A").replace('\\', "%5C")
        );
        let r = post_form(&lh, "/login", &body, None, Some(&own), Some("same-origin")).await;
        assert_eq!(location(&r), "/", "{evil}");
    }
    // A cross-site form post is refused before any password is checked.
    let cross = post_form(
        &lh,
        "/login",
        "user=alice&password=alice-password-1",
        None,
        Some("https://evil.example"),
        Some("cross-site"),
    )
    .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    assert!(cross.body.contains("another"), "{}", cross.body);

    // OpenCode's clients keep using Basic, with no cookie, at the same gateway.
    let basic_ok = c.get("/p/web/echo", Some(&basic("alice", "alice-password-1"))).await;
    assert_eq!(basic_ok.status, 200, "{}", basic_ok.body);
    // The login-host cookie is not a credential for proxied requests.
    let by_cookie = get(&c, "/p/web/echo", Some(&cookie), false).await;
    assert_eq!(by_cookie.status, 401);
    assert!(!gw.logs().contains("alice-password-1"));
    drop(web);
}

#[tokio::test]
async fn a_project_host_gets_its_own_cookie_through_a_single_use_handoff() {
    let (gw, web, _api, c) = two_projects("").await;
    let lh = host(&c, LOGIN_HOST);
    let web_host = host(&c, "web.gw.localhost");
    let api_host = host(&c, "api.gw.localhost");

    // A browser on the project host with no cookie goes to the login host's handoff.
    let r = get(&web_host, "/echo?x=1", None, true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let state = handoff_state(&r);
    let to_handoff = location(&r);
    let (h, path) = split_url(&to_handoff);
    assert_eq!(h, LOGIN_HOST);
    assert!(
        path.starts_with("/_gw/handoff?to=https%3A%2F%2Fweb.gw.localhost%3A"),
        "{path}"
    );
    // A script (no navigation) gets 401, not a redirect, with the Basic challenge; a browser's
    // own fetch gets no challenge (it would pop up a password dialog over the web UI).
    let script = get(&web_host, "/echo", None, false).await;
    assert_eq!(script.status, 401);
    assert!(script.headers.contains_key("www-authenticate"));
    let fetch = web_host
        .call(
            web_host
                .request("GET", "/session", None)
                .header("sec-fetch-mode", "cors")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(fetch.status, 401);
    assert!(!fetch.headers.contains_key("www-authenticate"), "{:?}", fetch.headers);

    // Not logged in yet: the handoff sends the browser to the form, then back.
    let r = get(&lh, &path, None, true).await;
    assert_eq!(r.status, 303);
    assert!(
        location(&r).starts_with("/login?next=%2F_gw%2Fhandoff"),
        "{}",
        location(&r)
    );
    let (cookie, r) = login(&c, "alice", "alice-password-1", &path).await;
    assert_eq!(location(&r), path);

    let mint = |p: String, k: String| {
        let lh = lh.clone();
        async move {
            let r = get(&lh, &p, Some(&k), true).await;
            assert_eq!(r.status, 303, "{}", r.body);
            let (h, cb) = split_url(&location(&r));
            assert!(cb.starts_with("/_gw/callback?ticket="), "{cb}");
            (h, cb)
        }
    };
    let (h, callback) = mint(path.clone(), cookie.clone()).await;
    assert_eq!(h, "web.gw.localhost");

    // Another project's host may not redeem it (and does not burn it).
    let foreign = get(&api_host, &callback, Some(&state), true).await;
    assert_eq!(foreign.status, 403);
    assert!(foreign.body.contains("another project"), "{}", foreign.body);
    // Nor may another browser (one without this handoff's state: a link an attacker made with
    // their own login, sent to a victim).
    for other in [None, Some("__Host-ocgw-handoff=someone-elses")] {
        let r = get(&web_host, &callback, other, true).await;
        assert_eq!(r.status, 403, "{other:?} {:?} {}", r.headers, r.body);
        assert!(r.body.contains("another browser"), "{}", r.body);
    }
    // The project host redeems it once, sets its own cookie and goes to the path asked for.
    let r = get(&web_host, &callback, Some(&state), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(location(&r), "/echo?x=1");
    let (project_cookie, raw) = set_cookie(&r).expect("the project host's own cookie");
    assert!(!raw.to_ascii_lowercase().contains("domain="), "{raw}");
    assert_ne!(project_cookie, cookie);
    assert_eq!(r.headers["referrer-policy"], "no-referrer");
    assert!(
        r.headers
            .get_all("set-cookie")
            .iter()
            .any(|v| v.to_str().unwrap().starts_with("__Host-ocgw-handoff=;")),
        "the state is cleared"
    );
    let replay = get(&web_host, &callback, Some(&state), true).await;
    assert_eq!(replay.status, 403);
    assert!(replay.body.contains("expired or was used"), "{}", replay.body);

    // The project cookie works on its host; the upstream never sees a gateway cookie or the
    // ticket, and gets the gateway's own credential.
    let both = format!("theme=dark; {project_cookie}");
    let r = get(&web_host, "/echo", Some(&both), false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = web.seen();
    let last = seen.iter().rev().find(|s| s.target == "/echo").unwrap();
    assert_eq!(
        last.headers.get("cookie").map(|v| v.to_str().unwrap()),
        Some("theme=dark")
    );
    assert!(last.headers["authorization"].to_str().unwrap().starts_with("Basic "));
    assert!(
        seen.iter()
            .all(|s| !s.target.contains("ticket=") && !s.target.contains("_gw"))
    );
    // It is not a credential on another project's host, nor is the login cookie on this one.
    assert_eq!(get(&api_host, "/echo", Some(&project_cookie), false).await.status, 401);
    assert_eq!(get(&web_host, "/echo", Some(&cookie), false).await.status, 401);

    // Handoffs only to this gateway's project hosts, on its port.
    let port = c.addr.port();
    for (to, why) in [
        ("https://evil.example/".to_string(), "NotAProjectHost"),
        (format!("https://web.gw.localhost:{}/", port + 1), "OtherPort"),
        (format!("http://web.gw.localhost:{port}/"), "NotHttps"),
        (format!("https://web.gw.localhost:{port}//evil.example/"), "BadPath"),
        // A label whose end, counted in bytes from the base domain, falls inside a character
        // (the fuzz target's finding): refused, not a panic.
        (format!("https://\u{6df}gw.localhost:{port}/"), "NotAProjectHost"),
    ] {
        let q = crate::common::client::encode(&to);
        let r = get(&lh, &format!("/_gw/handoff?to={q}&state=S"), Some(&cookie), true).await;
        assert_eq!(r.status, 400, "{to}: {}", r.body);
        assert!(r.body.contains(why), "{to}: {}", r.body);
    }

    // Logout ends the project host's cookie too.
    let r = post_form(
        &lh,
        "/logout",
        "",
        Some(&cookie),
        Some(&origin(&lh)),
        Some("same-origin"),
    )
    .await;
    assert_eq!(r.status, 303);
    assert!(r.headers["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    let after = get(&web_host, "/echo", Some(&project_cookie), true).await;
    assert_eq!(after.status, 303, "a dead cookie means the login again: {}", after.body);
    assert_eq!(get(&web_host, "/echo", Some(&project_cookie), false).await.status, 401);
    drop(gw);
}

#[tokio::test]
async fn a_user_gets_no_handoff_to_a_project_they_may_not_use_and_tickets_expire() {
    let (gw, _web, _api, c) = two_projects("[limits]\nhandoff_ttl = \"1s\"\n").await;
    let lh = host(&c, LOGIN_HOST);
    let port = c.addr.port();
    let (bob, _) = login(&c, "bob", "bob-password-22", "/").await;
    let to = |p: &str| crate::common::client::encode(&format!("https://{p}.gw.localhost:{port}/"));
    let r = get(&lh, &format!("/_gw/handoff?to={}&state=S", to("api")), Some(&bob), true).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("no access to project api"), "{}", r.body);

    let missing = get(&lh, &format!("/_gw/handoff?to={}", to("web")), Some(&bob), true).await;
    assert_eq!(missing.status, 400, "a handoff without state: {}", missing.body);
    let r = get(&lh, &format!("/_gw/handoff?to={}&state=S", to("web")), Some(&bob), true).await;
    let (_, callback) = split_url(&location(&r));
    // Wait out the ticket's 1 s life (bounded), then it is refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let web_host = host(&c, "web.gw.localhost");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let state = Some("__Host-ocgw-handoff=S");
    let mut last = get(&web_host, &callback, state, true).await;
    while last.status != 403 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        last = get(&web_host, &callback, state, true).await;
    }
    assert_eq!(last.status, 403, "an expired ticket is refused: {}", last.body);
    assert!(last.body.contains("expired or was used"), "{}", last.body);
    drop(gw);
}

/// Project requests a cookie authenticates pass the cross-site rule: method × Sec-Fetch-Site ×
/// Origin, compared exactly (scheme, host, port); a WebSocket needs the exact origin.
#[tokio::test]
async fn cookie_requests_from_other_origins_are_refused() {
    let (gw, web, _api, c) = two_projects("").await;
    let lh = host(&c, LOGIN_HOST);
    let web_host = host(&c, "web.gw.localhost");
    let port = c.addr.port();
    let (cookie, _) = login(&c, "alice", "alice-password-1", "/").await;
    let to = crate::common::client::encode(&format!("https://web.gw.localhost:{port}/"));
    let r = get(&lh, &format!("/_gw/handoff?to={to}&state=S"), Some(&cookie), true).await;
    let (_, callback) = split_url(&location(&r));
    let r = get(&web_host, &callback, Some("__Host-ocgw-handoff=S"), true).await;
    let (pc, _) = set_cookie(&r).unwrap();

    let own = origin(&web_host);
    let cases: Vec<(Option<String>, Option<&str>, u16)> = vec![
        (Some(own.clone()), Some("same-origin"), 200),
        (None, None, 200),
        (None, Some("same-origin"), 200),
        (None, Some("cross-site"), 403),
        (None, Some("same-site"), 403),
        (Some(format!("https://api.gw.localhost:{port}")), Some("same-site"), 403),
        (Some(format!("https://api.gw.localhost:{port}")), None, 403),
        (Some(format!("https://web.gw.localhost:{}", port + 1)), None, 403),
        (Some(format!("http://web.gw.localhost:{port}")), None, 403),
        (Some("null".into()), None, 403),
    ];
    for (o, site, want) in cases {
        let before = web.seen().len();
        let r = post_form(&web_host, "/session", "{}", Some(&pc), o.as_deref(), site).await;
        assert_eq!(r.status.as_u16(), want, "origin {o:?} site {site:?}: {}", r.body);
        if want == 403 {
            assert_eq!(web.seen().len(), before, "a refused request never reaches OpenCode");
        }
    }
    // A WebSocket upgrade with the cookie must carry the project host's exact origin.
    for (o, reason) in [
        (None, "must say its origin"),
        (Some(format!("https://api.gw.localhost:{port}")), "another origin"),
    ] {
        let mut b = web_host
            .request("GET", "/pty/pty_1/connect?directory=%2Ftmp", None)
            .header("cookie", &pc)
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
        if let Some(o) = &o {
            b = b.header("origin", o);
        }
        let r = web_host.call(b.body(Full::default()).unwrap()).await;
        assert_eq!(r.status, 403, "{o:?}: {}", r.body);
        assert!(r.body.contains(reason), "{o:?}: {}", r.body);
    }
    drop(gw);
}

/// Issue 22: a login (or a pairing) on the gateway's address left a cookie the handoff on the
/// base domain never saw: a second password prompt, and a paired phone opened no web UI. Every
/// other name of the gateway now sends a browser to the one login host first.
#[tokio::test]
async fn every_other_name_of_the_gateway_sends_the_browser_to_the_one_login_host() {
    let (_gw, web, _api, c) = two_projects("").await;
    let port = c.authority().rsplit_once(':').unwrap().1.to_string();
    let login = format!("https://{LOGIN_HOST}:{port}");
    for name in ["127.0.0.1", "localhost"] {
        let other = host(&c, name);
        for path in ["/", "/login?next=%2Finbox", "/pair", "/inbox"] {
            let r = get(&other, path, None, true).await;
            assert_eq!(r.status, 303, "{name}{path}: {}", r.body);
            assert_eq!(location(&r), format!("{login}{path}"), "{name}{path}");
            assert!(set_cookie(&r).is_none(), "{name}{path}: no cookie elsewhere");
        }
        // A form posted to another name is refused: only a page served there could send it.
        let r = post_form(
            &other,
            "/login",
            "user=alice&password=alice-password-1&next=/",
            None,
            Some(&origin(&other)),
            Some("same-origin"),
        )
        .await;
        assert_eq!(r.status, 403, "{name}: {}", r.body);
        assert!(r.body.contains(&format!("open {login}/login there")), "{}", r.body);
        assert!(set_cookie(&r).is_none());
        // The pages' own files and the API are served on every name.
        assert_eq!(get(&other, "/_gw/static/app.css", None, false).await.status, 200);
        assert_eq!(
            other
                .get("/p/web/global/health", Some(&basic("alice", "alice-password-1")))
                .await
                .status,
            200
        );
    }
    // On the login host itself, the form is served, and the icon browsers ask for on their own
    // (issue 22: /favicon.ico answered 401).
    assert_eq!(get(&host(&c, LOGIN_HOST), "/login", None, true).await.status, 200);
    let icon = get(&host(&c, LOGIN_HOST), "/favicon.ico", None, false).await;
    assert_eq!(icon.status, 200, "{}", icon.body);
    assert_eq!(icon.headers["content-type"], "image/svg+xml");
    assert!(
        !web.seen().iter().any(|s| s.target.starts_with("/login")),
        "no page reached OpenCode"
    );
}
