//! Passkeys (issue 26, third part): registered and used in headless Chromium with its virtual
//! authenticator (tests/browser/passkeys.mjs), then what the gateway kept: the audit trail and
//! the CLI's list and revoke. And the login limiter before any passkey work.

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::Https;
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::login::{LOGIN_HOST, post_login};

fn alice_and_bob() -> Gateway {
    Gateway::start(&base_config(&users_toml(&[
        TestUser {
            name: "alice",
            password: "alice-password-1",
            projects: "[\"*\"]",
            role: "operator",
        },
        TestUser {
            name: "bob",
            password: "bob-password-1",
            projects: "[\"*\"]",
            role: "viewer",
        },
    ])))
}

/// Register after a password login, sign in with the passkey, one user's passkey refused as
/// another's, a replayed answer and one from another origin refused, a revoked passkey refused;
/// every sign-in and refusal audited; the CLI lists both users' passkeys and revokes bob's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: run scripts/test.sh"]
async fn a_passkey_is_added_signs_in_and_stops_when_revoked_in_chromium() {
    let gw = alice_and_bob();
    let shots = crate::common::browser::shots("passkeys");
    let (port, cert) = (gw.https.port().to_string(), gw.dir.path().join("certs/server.crt"));
    let out = crate::common::browser::run(
        "passkeys.mjs",
        &[
            ("GW_PORT", port.as_ref()),
            ("CERT", cert.as_os_str()),
            ("SHOT_DIR", shots.as_os_str()),
        ],
        Duration::from_secs(120),
        || gw.logs(),
    )
    .await;
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("passkey alice="))
        .unwrap_or_else(|| panic!("{out}"));
    let (alice_key, bob_key) = line.split_once(" bob=").unwrap();

    let audit = crate::common::audit::records(&crate::common::audit::file(&gw));
    let of = |event: &str, method_or_reason: &str| {
        audit
            .iter()
            .filter(|r| r["event"] == event && (r["method"] == method_or_reason || r["reason"] == method_or_reason))
            .count()
    };
    assert!(
        of("login", "passkey") >= 3,
        "alice signed in with it three times: {audit:#?}"
    );
    for reason in [
        "verification_failed",
        "no_ceremony",
        "foreign_origin",
        "revoked_passkey",
    ] {
        assert!(of("login_failed", reason) >= 1, "{reason}: {audit:#?}");
    }
    let passkey_logins: Vec<_> = audit
        .iter()
        .filter(|r| r["event"] == "login" && r["method"] == "passkey")
        .collect();
    assert!(
        passkey_logins
            .iter()
            .all(|r| r["user"] == "alice" && r["via"] == "passkey"),
        "only alice signed in with a passkey: {passkey_logins:#?}"
    );
    assert!(
        audit
            .iter()
            .any(|r| r["event"] == "passkey_added" && r["user"] == "bob")
    );
    assert!(
        audit
            .iter()
            .any(|r| r["event"] == "passkey_revoked" && r["passkey"] == alice_key)
    );

    // The CLI: both listed, alice's revoked; bob's revoked from here, once.
    let cli = |args: &[&str]| gw.cli(args);
    let (ok, list) = cli(&["passkeys"]);
    assert!(ok, "{list}");
    let row = |id: &str| {
        list.lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id}: {list}"))
            .to_string()
    };
    assert!(
        row(alice_key).contains("revoked") && row(alice_key).contains("alice phone"),
        "{list}"
    );
    assert!(
        row(bob_key).contains("active") && row(bob_key).contains("bob laptop"),
        "{list}"
    );
    let (ok, only_bob) = cli(&["passkeys", "bob"]);
    assert!(
        ok && only_bob.contains(bob_key) && !only_bob.contains(alice_key),
        "{only_bob}"
    );
    let (ok, said) = cli(&["passkeys", "revoke", bob_key]);
    assert!(ok && said.contains("signs no one in"), "{said}");
    let (ok, said) = cli(&["passkeys", "revoke", bob_key]);
    assert!(!ok && said.contains("revoked already"), "{said}");
    let (ok, said) = cli(&["passkeys", "revoke", "pk_nosuch"]);
    assert!(!ok && said.contains("there is no passkey"), "{said}");
}

/// A passkey sign-in from an address whose login allowance is spent is refused before any ceremony
/// (429 with Retry-After, as the password form); a page opened by address offers no passkey and
/// cannot start one; adding one needs a login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passkeys_ask_the_login_limiter_first_and_need_a_name_and_a_login() {
    let gw = alice_and_bob();
    let c = Https::new(gw.https, &gw.ca());
    let login = c.host(LOGIN_HOST);
    let passkey = |form: &'static str| {
        let login = &login;
        async move {
            let req = login
                .request("POST", "/_gw/passkey", None)
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", format!("https://{}", login.authority()))
                .header("sec-fetch-site", "same-origin")
                .body(Full::from(form))
                .unwrap();
            login.call(req).await
        }
    };
    let options = passkey("do=sign-in-options").await;
    assert_eq!(options.status, 200, "{}", options.body);
    let o: serde_json::Value = serde_json::from_str(&options.body).unwrap();
    assert_eq!(o["rpId"], "gw.localhost", "{o}");
    assert_eq!(o["userVerification"], "required", "{o}");

    let add = passkey("do=register-options").await;
    assert_eq!(add.status, 401, "{}", add.body);

    let garbage = passkey("do=sign-in&credential=%7B%7D").await;
    assert_eq!(garbage.status, 400, "{}", garbage.body);
    assert!(garbage.body.contains("\"reason\":\"malformed\""), "{}", garbage.body);

    // By address, on a gateway with a name: the login page sends the browser to the named login
    // host, where the passkey is offered (the check can see an offer).
    let by_address = Https::new(gw.https, &gw.ca());
    let page = get_login(by_address).await;
    assert_eq!(page.status, 303, "{}", page.body);
    let to = crate::common::login::location(&page);
    assert!(to.starts_with(&format!("https://{}/login", login.authority())), "{to}");
    let named = get_login(login.clone()).await;
    assert_eq!(named.status, 200, "{}", named.body);
    assert!(
        named.body.contains("passkey.js"),
        "no passkey offered on the login host: {}",
        named.body
    );
    // A gateway reached only by address (no base domain): no RP ID, so no passkey on its form.
    let alice = users_toml(&[TestUser {
        name: "alice",
        password: "alice-password-1",
        projects: "[\"*\"]",
        role: "operator",
    }]);
    let unnamed = Gateway::start(&base_config(&alice).replace("base_domain = \"gw.localhost\"\n", ""));
    let c2 = Https::new(unnamed.https, &unnamed.ca());
    let page = get_login(c2).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("name=\"password\""), "the login form: {}", page.body);
    assert!(
        !page.body.contains("passkey.js"),
        "a passkey offered by address: {}",
        page.body
    );

    // Spend the address's login allowance with wrong passwords: the next passkey start is refused.
    let mut limited = None;
    for _ in 0..30 {
        let r = post_login(&c, "alice", "wrong-password").await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
    }
    assert!(limited.is_some(), "the form never said 429");
    let refused = passkey("do=sign-in-options").await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(refused.headers.contains_key("retry-after"));
    assert!(refused.body.contains("login_limited"), "{}", refused.body);
}

/// A page on another port of the login host's name (an HTTPS server with a certificate the
/// victim trusts) relays a ceremony: with its own port in `Host`, the gateway refuses to start or
/// finish one, naming the one origin passkeys work on; with the login host's `Host` but an answer
/// the browser made on that other port (its clientDataJSON's origin), the answer is refused for
/// its origin before any passkey is looked up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passkey_ceremony_is_valid_only_on_the_configured_login_origin() {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let gw = alice_and_bob();
    let c = Https::new(gw.https, &gw.ca());
    let port = gw.https.port();
    let login = format!("https://{LOGIN_HOST}:{port}");
    let sibling = format!("{LOGIN_HOST}:{}", if port == u16::MAX { port - 1 } else { port + 1 });
    let post = |host: String, form: String| {
        let c = c.host(LOGIN_HOST);
        async move {
            let req = http::Request::builder()
                .method("POST")
                .uri("/_gw/passkey")
                .header("host", &host)
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", format!("https://{host}"))
                .header("sec-fetch-site", "same-origin")
                .body(Full::from(form))
                .unwrap();
            c.call(req).await
        }
    };
    for form in ["do=sign-in-options", "do=sign-in&credential=%7B%7D"] {
        let r = post(sibling.clone(), form.into()).await;
        assert_eq!(r.status, 400, "{form}: {}", r.body);
        assert!(r.body.contains("\"reason\":\"not_login_origin\""), "{form}: {}", r.body);
        assert!(r.body.contains(&login), "names where passkeys work: {}", r.body);
    }

    let started = post(format!("{LOGIN_HOST}:{port}"), "do=sign-in-options".into()).await;
    assert_eq!(started.status, 200, "{}", started.body);
    let o: serde_json::Value = serde_json::from_str(&started.body).unwrap();
    let client_data = serde_json::json!({
        "type": "webauthn.get",
        "challenge": o["challenge"],
        "origin": format!("https://{sibling}"),
        "crossOrigin": false,
    });
    let mut auth_data = ring::digest::digest(&ring::digest::SHA256, LOGIN_HOST.as_bytes())
        .as_ref()
        .to_vec();
    auth_data.extend_from_slice(&[0x05, 0, 0, 0, 1]);
    let answer = serde_json::json!({
        "id": b64(&[7; 16]),
        "rawId": b64(&[7; 16]),
        "type": "public-key",
        "response": {
            "clientDataJSON": b64(client_data.to_string().as_bytes()),
            "authenticatorData": b64(&auth_data),
            "signature": b64(&[1; 64]),
            "userHandle": b64(&[2; 16]),
        },
        "clientExtensionResults": {},
    });
    let form = format!(
        "do=sign-in&credential={}&ceremony={}",
        crate::common::client::encode(&answer.to_string()),
        crate::common::client::encode(o["ceremony"].as_str().unwrap_or_default())
    );
    let r = post(format!("{LOGIN_HOST}:{port}"), form).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("\"reason\":\"foreign_origin\""), "{}", r.body);
}

/// `GET /login` as a first visit (no cookie): the answer, whatever it is.
async fn get_login(c: Https) -> crate::common::client::Reply {
    c.call(c.request("GET", "/login", None).body(Full::default()).unwrap())
        .await
}
