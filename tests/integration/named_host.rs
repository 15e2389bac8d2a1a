//! The named host (issue 38, item 7): a gateway reached by address (LAN mode: no base domain, no
//! name in the public URL) has its passkeys at `https://<host>.local:<port>`, the name its
//! certificate covers. A phone paired at the address gets a login there through a handoff, with
//! no password; the ticket is single-use, bound to the browser that began it, and the named
//! host's session dies with the address's. Real DNS is not needed: the gateway routes by `Host`
//! (and the client's SNI), so `<host>.local` is only a name sent to 127.0.0.1.

use std::time::{Duration, Instant};

use http_body_util::Full;

use crate::common::client::{Https, Reply};
use crate::common::gateway::{ALICE, Gateway, base_config, users_toml};
use crate::common::login::{browser_get, location, pair_code, portal_post, redeem_code};

/// This machine's `<host>.local`, as the gateway computes it (`support::host::local_name`).
pub fn local_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the host name")
        .trim()
        .to_ascii_lowercase();
    assert!(
        !host.is_empty() && host != "localhost" && !host.contains('.'),
        "the named host needs a single-label host name (its <host>.local), not {host:?}"
    );
    format!("{host}.local")
}

/// A gateway by address only, whose dev certificate also covers `<host>.local` (as LAN mode's
/// does, without listening on every address here).
fn by_address(local: &str) -> Gateway {
    let config = base_config(&users_toml(&[ALICE]))
        .replace("base_domain = \"gw.localhost\"\n", "")
        .replace(
            "dev_ca = true\n",
            &format!("dev_ca = true\ndev_names = [\"{local}\"]\n"),
        );
    Gateway::start(&config)
}

/// The `name=value` pair of the cookie `name` a response sets.
fn set_cookie(r: &Reply, name: &str) -> Option<String> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap().to_string())
}

/// `https://authority/path` → the path.
fn path_of(url: &str, authority: &str) -> String {
    url.strip_prefix(&format!("https://{authority}"))
        .unwrap_or_else(|| panic!("{url} is not on {authority}"))
        .to_string()
}

/// A passkey form posted as the page on `host` does (same origin), through `c`.
async fn passkey(c: &Https, host: &str, cookie: Option<&str>, form: &str) -> Reply {
    let mut b = http::Request::builder()
        .method("POST")
        .uri("/_gw/passkey")
        .header("host", host)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", format!("https://{host}"))
        .header("sec-fetch-site", "same-origin");
    if let Some(k) = cookie {
        b = b.header("cookie", k);
    }
    c.call(b.body(Full::from(form.to_string())).unwrap()).await
}

/// The named host's `/_gw/arrive` without a login there: its state cookie and the handoff path
/// on the address it sends the browser to.
async fn arrive(named: &Https, address: &Https) -> (String, String) {
    let r = browser_get(named, "/_gw/arrive", None, true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let state = set_cookie(&r, "__Host-ocgw-handoff").expect("the named host's handoff state");
    let to = location(&r);
    (state, path_of(&to, &address.authority()))
}

/// The address's handoff, with its login: the callback path on the named host.
async fn mint(address: &Https, named: &Https, path: &str, cookie: &str) -> String {
    let r = browser_get(address, path, Some(cookie), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    path_of(&location(&r), &named.authority())
}

/// What a person reads: the banner and `pair` say where passkeys work.
fn printed(gw: &Gateway, named_origin: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = format!("passkeys: {named_origin} ");
    while !gw.stdout.lock().unwrap().contains(&want) {
        assert!(
            Instant::now() < deadline,
            "the banner does not name {named_origin}:\n{}",
            gw.stdout.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, said) = gw.cli(&["pair", "alice", "--label", "other phone"]);
    assert!(ok && said.contains(&want), "{said}");
}

/// At the address: the portal names the host and offers the button, the pairing page probes the
/// name (and at the name pairs there), and a ceremony is refused naming the named host.
async fn shown_at_the_address(address: &Https, named: &Https, phone: &str) {
    let named_origin = format!("https://{}", named.authority());
    let portal = browser_get(address, "/", Some(phone), true).await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    assert!(
        portal.body.contains(&format!(
            "href=\"{named_origin}/_gw/arrive\">Add a passkey at {named_origin}</a>"
        )),
        "no button to the named host: {}",
        portal.body
    );
    let pair = browser_get(address, "/pair", None, true).await;
    assert!(
        pair.body.contains(&format!("data-named=\"{named_origin}\"")),
        "{}",
        pair.body
    );
    let csp = pair.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains(&format!("connect-src 'self' {named_origin};")), "{csp}");
    let pair_named = browser_get(named, "/pair", None, true).await;
    assert!(!pair_named.body.contains("data-named"), "{}", pair_named.body);
    let r = passkey(address, &address.authority(), Some(phone), "do=register-options").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("\"reason\":\"not_login_origin\""), "{}", r.body);
    assert!(r.body.contains(&named_origin), "{}", r.body);
}

/// The handoff: arrive at the name, mint at the address with the phone's login, redeem once in
/// the browser that began it and only at the name. The named host's login cookie.
async fn handed_off(address: &Https, named: &Https, phone: &str) -> String {
    let (state, handoff) = arrive(named, address).await;
    let callback = mint(address, named, &handoff, phone).await;
    assert!(callback.starts_with("/_gw/callback?ticket="), "{callback}");
    // Without the state cookie (another browser, or one an attacker minted it for): refused,
    // and the ticket stays for its own browser.
    let foreign = browser_get(named, &callback, None, true).await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    assert!(foreign.body.contains("started in another browser"), "{}", foreign.body);
    // At the address (another login-host name): no callback there, and the ticket stays.
    let elsewhere = browser_get(address, &callback, Some(&state), true).await;
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    assert!(elsewhere.body.contains("no such gateway page"), "{}", elsewhere.body);
    let redeemed = browser_get(named, &callback, Some(&state), true).await;
    assert_eq!(redeemed.status, 303, "{}", redeemed.body);
    assert_eq!(location(&redeemed), "/");
    let login = set_cookie(&redeemed, "__Host-ocgw").expect("a login cookie on the named host");
    let replayed = browser_get(named, &callback, Some(&state), true).await;
    assert_eq!(replayed.status, 403, "{}", replayed.body);
    assert!(
        replayed.body.contains("expired or was used already"),
        "{}",
        replayed.body
    );
    login
}

/// Logged in at the name: passkeys there, with the name as the RP ID; another `.local` name is
/// not the passkey origin.
async fn passkeys_at_the_name(address: &Https, named: &Https, login: &str, local: &str) {
    let here = browser_get(named, "/", Some(login), true).await;
    assert_eq!(here.status, 200, "{}", here.body);
    assert!(here.body.contains("passkey.js"), "no passkey offered: {}", here.body);
    let options = passkey(named, &named.authority(), Some(login), "do=register-options").await;
    assert_eq!(options.status, 200, "{}", options.body);
    assert!(
        options.body.contains(&format!("\"id\":\"{local}\"")),
        "{}",
        options.body
    );
    let sign_in = passkey(named, &named.authority(), None, "do=sign-in-options").await;
    let o: serde_json::Value = serde_json::from_str(&sign_in.body).unwrap();
    assert_eq!(o["rpId"], local, "{o}");
    let other = format!("other.local:{}", address.addr.port());
    let r = passkey(address, &other, None, "do=sign-in-options").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("\"reason\":\"not_login_origin\""), "{}", r.body);
    assert!(r.body.contains(&format!("https://{}", named.authority())), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_paired_at_the_address_gets_a_login_at_the_named_host_without_a_password() {
    let local = local_name();
    let gw = by_address(&local);
    let address = Https::new(gw.https, &gw.ca());
    let named = address.host(&local);
    printed(&gw, &format!("https://{}", named.authority()));
    let phone = redeem_code(&address, &pair_code(&gw)).await;
    shown_at_the_address(&address, &named, &phone).await;
    let login = handed_off(&address, &named, &phone).await;
    passkeys_at_the_name(&address, &named, &login, &local).await;

    // A login held on the named host is kept: arriving goes to the portal, and a fresh ticket
    // for this browser is refused there rather than replacing it.
    let again = browser_get(&named, "/_gw/arrive", Some(&login), true).await;
    assert_eq!(location(&again), "/#passkeys");
    let (state2, handoff2) = arrive(&named, &address).await;
    let callback2 = mint(&address, &named, &handoff2, &phone).await;
    let kept = browser_get(&named, &callback2, Some(&format!("{login}; {state2}")), true).await;
    assert_eq!(kept.status, 403, "{}", kept.body);
    assert!(kept.body.contains("logged in here already"), "{}", kept.body);

    // The phone logs out at the address: the named host's session ends with it.
    let out = portal_post(&address, &phone, "/logout", "").await;
    assert_eq!(out.status, 303, "{}", out.body);
    let after = browser_get(&named, "/", Some(&login), true).await;
    assert_eq!(after.status, 303, "{}", after.body);
    assert!(location(&after).starts_with("/login"), "{}", location(&after));
}

/// The address's handoff mints for the named host only: another `.local` name, another port, a
/// path off the portal, are refused with their reasons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_hands_off_to_the_named_origin_only() {
    let local = local_name();
    let gw = by_address(&local);
    let address = Https::new(gw.https, &gw.ca());
    let phone = redeem_code(&address, &pair_code(&gw)).await;
    let port = gw.https.port();
    let other_port = if port == u16::MAX { port - 1 } else { port + 1 };
    for (to, reason) in [
        (format!("https://other.local:{port}/"), "NotAProjectHost"),
        (format!("https://{local}.evil:{port}/"), "NotAProjectHost"),
        (format!("https://{local}:{port}@evil.example/"), "NotAProjectHost"),
        (format!("https://{local}:{other_port}/"), "OtherPort"),
        (format!("http://{local}:{port}/"), "NotHttps"),
        (format!("https://{local}:{port}/login"), "BadPath"),
        (format!("https://{local}:{port}//evil.example/"), "BadPath"),
    ] {
        let path = format!("/_gw/handoff?to={}&state=S", crate::common::client::encode(&to));
        let r = browser_get(&address, &path, Some(&phone), true).await;
        assert_eq!(r.status, 400, "{to}: {}", r.body);
        assert!(r.body.contains(&format!("({reason})")), "{to}: {}", r.body);
    }
    // The case of the name does not matter; the callback goes to the origin as configured.
    let to = format!("https://{}:{port}/", local.to_ascii_uppercase());
    let path = format!("/_gw/handoff?to={}&state=S", crate::common::client::encode(&to));
    let r = browser_get(&address, &path, Some(&phone), true).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(
        location(&r).starts_with(&format!("https://{local}:{port}/_gw/callback?ticket=")),
        "{}",
        location(&r)
    );
}

/// Chromium (tests/browser/named_host.mjs): a phone that reaches the name pairs there and adds a
/// passkey; one whose probe fails pairs at the address, and the portal's button hands it off to
/// the name, where it adds one. No login form on either; the gateway kept both passkeys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: run scripts/test.sh"]
async fn a_phone_adds_a_passkey_at_the_named_host_without_a_password_in_chromium() {
    let local = local_name();
    let gw = by_address(&local);
    let port = gw.https.port();
    let pair_url = |code: String| format!("https://127.0.0.1:{port}/pair#{code}");
    let (a, b) = (pair_url(pair_code(&gw)), pair_url(pair_code(&gw)));
    let named = format!("https://{local}:{port}");
    let shots = crate::common::browser::shots("named_host");
    let cert = gw.dir.path().join("certs/server.crt");
    let out = crate::common::browser::run(
        "named_host.mjs",
        &[
            ("PAIR_A", a.as_ref()),
            ("PAIR_B", b.as_ref()),
            ("NAMED", named.as_ref()),
            ("CERT", cert.as_os_str()),
            ("SHOT_DIR", shots.as_os_str()),
        ],
        Duration::from_secs(120),
        || gw.logs(),
    )
    .await;
    assert!(out.contains("ok: every step passed"), "{out}");
    let audit = crate::common::audit::records(&crate::common::audit::file(&gw));
    let added = audit
        .iter()
        .filter(|r| r["event"] == "passkey_added" && r["user"] == "alice")
        .count();
    assert_eq!(added, 2, "{audit:#?}");
    let handoffs = gw.logs().matches("named host handoff").count();
    assert_eq!(handoffs, 1, "only phone B was handed off:\n{}", gw.logs());
}
