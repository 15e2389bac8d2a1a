//! Single sign-on (`[oidc]`, issue 12): a real OpenID Provider (npm's `oidc-provider`, run by
//! tests/browser/oidc-provider.mjs on loopback) and headless Chromium signing in through it
//! (tests/browser/sso.mjs); and, without either, the pages' answers when the provider cannot be
//! used or a callback is not one the gateway started. The ID token checks themselves are unit
//! tests beside `oidc::idtoken::verify`.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::client::Https;
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{Gateway, TestUser, base_config, external_project, users_toml};
use crate::common::process::Guarded;
use crate::common::stack::UPSTREAM_PW;

const CLIENT_SECRET: &str = "oidc-client-secret-Xv93";

/// The config: projects web and api; alice may use web and has no password (SSO only); bob has
/// a password and no SSO identity.
fn config(issuer: &str, web: &str, api: &str) -> String {
    base_config(&format!(
        "[oidc]\nissuer = \"{issuer}\"\nclient_id = \"gateway\"\nclient_secret_env = \"OIDC_SECRET\"\nlabel = \"Test IdP\"\n\n{}{}[[user]]\nname = \"alice\"\noidc = \"Alice@Example.com\"\nprojects = [\"web\"]\nrole = \"operator\"\n\n{}",
        external_project("web", web),
        external_project("api", api),
        users_toml(&[TestUser {
            name: "bob",
            password: "bob-password-22",
            projects: "[\"*\"]",
            role: "viewer",
        }]),
    ))
}

fn start(config: &str) -> Gateway {
    let pw = UPSTREAM_PW.to_string();
    Gateway::start_with(config, &[("OIDC_SECRET", CLIENT_SECRET)], move |d| {
        crate::common::write_secret(&d.join("pw"), &pw)
    })
}

async fn get(c: &Https, path: &str, cookie: Option<&str>) -> crate::common::client::Reply {
    let mut b = c
        .request("GET", path, None)
        .header("accept", "text/html")
        .header("sec-fetch-mode", "navigate");
    if let Some(k) = cookie {
        b = b.header("cookie", k);
    }
    c.call(b.body(http_body_util::Full::default()).unwrap()).await
}

/// No provider listening, callbacks the gateway never started: pages with the reason, never a
/// 500, and no session cookie.
#[tokio::test]
async fn without_a_usable_provider_or_flow_the_pages_refuse_plainly() {
    let web = FakeUpstream::start(UPSTREAM_PW).await;
    let api = FakeUpstream::start(UPSTREAM_PW).await;
    // A port nothing listens on (bound, then closed).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = start(&config(&format!("http://{closed}"), &web.url(), &api.url()));
    let c = Https::new(gw.https, &gw.ca()).host("gw.localhost");

    let form = get(&c, "/login", None).await;
    assert_eq!(form.status, 200);
    assert!(form.body.contains("Sign in with Test IdP"), "{}", form.body);
    assert!(form.body.contains("href=\"/_gw/oidc/start?next=%2F\""), "{}", form.body);

    let start = get(&c, "/_gw/oidc/start?next=/inbox", None).await;
    assert_eq!(start.status, 502, "{}", start.body);
    assert!(start.body.contains("could not be reached"), "{}", start.body);
    assert!(gw.wait_log("oidc_provider_unavailable", Duration::from_secs(5)).await);

    let forged = get(
        &c,
        "/_gw/oidc/callback?code=abc&state=made-up",
        Some("__Host-ocgw-sso=x"),
    )
    .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(forged.body.contains("Sign in again"), "{}", forged.body);
    assert!(
        !forged
            .headers
            .get_all("set-cookie")
            .iter()
            .any(|v| v.to_str().unwrap().starts_with("__Host-ocgw="))
    );
    let denied = get(&c, "/_gw/oidc/callback?error=access_denied&state=made-up", None).await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert!(
        gw.wait_log("reason=\"oidc_unknown_state\"", Duration::from_secs(5))
            .await,
        "{}",
        gw.logs()
    );
    assert!(!gw.logs().contains("code=abc"), "the callback's code is in the log");

    // alice is SSO only: no password opens the form for her.
    let own = format!("https://{}", c.authority());
    let b = c
        .request("POST", "/login", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", &own)
        .header("sec-fetch-site", "same-origin");
    let pw = c
        .call(
            b.body(http_body_util::Full::from("user=alice&password=anything-at-all"))
                .unwrap(),
        )
        .await;
    assert_eq!(pw.status, 401, "{}", pw.body);

    // Every start holds a flow for ten minutes: one address gets the login allowance (burst 10).
    let mut limited = None;
    for i in 0..20 {
        let r = get(&c, "/_gw/oidc/start", None).await;
        if r.status == 429 {
            limited = Some((i, r));
            break;
        }
        assert_eq!(r.status, 502, "{}", r.body);
    }
    let (i, r) = limited.expect("twenty starts from one address were never limited");
    assert!(i <= 10, "limited only after {i} more starts");
    assert!(r.headers.contains_key("retry-after"));
    assert!(gw.wait_log("oidc_start_limited", Duration::from_secs(5)).await);

    // Project hosts have no such pages.
    let project = Https::new(gw.https, &gw.ca()).host("web.gw.localhost");
    let r = get(&project, "/_gw/oidc/start", None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(!gw.logs().contains(CLIENT_SECRET));
}

/// The provider script: its port first; the redirect URI later.
struct Provider {
    child: Guarded,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    log: Arc<Mutex<String>>,
    port: u16,
}

impl Provider {
    async fn spawn() -> Provider {
        let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        // Stopped and reaped however the test ends.
        let mut child = std::process::Command::new("node");
        child
            .arg(repo.join("tests/browser/oidc-provider.mjs"))
            .current_dir(&repo)
            .env("CLIENT_ID", "gateway")
            .env("CLIENT_SECRET", CLIENT_SECRET)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = Guarded::spawn(&mut child, Duration::from_secs(2));
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = tokio::process::ChildStderr::from_std(child.stderr.take().unwrap()).unwrap();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                sink.lock().unwrap().push_str(&format!("{l}\n"));
            }
        });
        let stdin = tokio::process::ChildStdin::from_std(child.stdin.take().unwrap()).unwrap();
        let lines =
            BufReader::new(tokio::process::ChildStdout::from_std(child.stdout.take().unwrap()).unwrap()).lines();
        let mut p = Provider {
            child,
            stdin,
            lines,
            log,
            port: 0,
        };
        let line = p.line("listening ").await;
        p.port = line.trim_start_matches("listening ").parse().unwrap();
        p
    }

    /// The next stdout line starting with `prefix` (bounded).
    async fn line(&mut self, prefix: &str) -> String {
        let wait = async {
            while let Some(l) = self.lines.next_line().await.unwrap() {
                if l.starts_with(prefix) {
                    return l;
                }
            }
            panic!("the provider exited:\n{}", self.log.lock().unwrap());
        };
        match tokio::time::timeout(Duration::from_secs(30), wait).await {
            Ok(l) => l,
            Err(_) => panic!("the provider did not say {prefix:?}:\n{}", self.log.lock().unwrap()),
        }
    }

    async fn register(&mut self, redirect_uri: &str) {
        self.stdin
            .write_all(format!("{redirect_uri}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        self.line("ready").await;
    }
}

/// alice signs in at a real provider in Chromium, reaches the control room and a project host
/// without a second login; a replayed or transplanted callback, a cancelled sign-in and mallory
/// (not in the config) are refused, each with its reason in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn chromium_signs_in_through_a_real_provider_and_strangers_are_refused() {
    let web = FakeUpstream::start(UPSTREAM_PW).await;
    let api = FakeUpstream::start(UPSTREAM_PW).await;
    let mut provider = Provider::spawn().await;
    let issuer = format!("http://127.0.0.1:{}", provider.port);
    // The gateway first (its port is in the redirect URI), then the provider's client.
    let gw = start(&config(&issuer, &web.url(), &api.url()));
    let port = gw.https.port();
    provider
        .register(&format!("https://gw.localhost:{port}/_gw/oidc/callback"))
        .await;

    let cert = gw.dir.path().join("certs/server.crt");
    let shots = crate::common::browser::shots("sso");
    let gw_url = format!("https://gw.localhost:{port}");
    let project_url = format!("https://web.gw.localhost:{port}/");
    let text = crate::common::browser::run(
        "sso.mjs",
        &[
            ("GW_URL", gw_url.as_ref()),
            ("PROJECT_URL", project_url.as_ref()),
            ("CERT", cert.as_os_str()),
            ("SHOT_DIR", shots.as_os_str()),
        ],
        Duration::from_secs(120),
        || {
            format!(
                "gateway log:\n{}\nprovider log:\n{}",
                gw.logs(),
                provider.log.lock().unwrap()
            )
        },
    )
    .await;
    eprintln!("{text}");
    let logs = gw.logs();
    for reason in [
        "oidc_unknown_state",
        "oidc_other_browser",
        "oidc_provider_error",
        "oidc_unknown_user",
    ] {
        assert!(
            logs.contains(&format!("reason=\"{reason}\"")),
            "{reason} not logged:\n{logs}"
        );
    }
    // Quoted and escaped: a claim is the provider's text, and may not forge a log line.
    assert!(logs.contains("identity=\"mallory@example.com\""), "{logs}");
    assert!(logs.contains("method=\"oidc\""), "{logs}");
    assert!(!logs.contains(CLIENT_SECRET), "the client secret is in the log");
    // The audit trail: alice's sign-in, and the stranger refused without naming them.
    use crate::common::audit::{file, find};
    let f = file(&gw);
    let login = find(&f, "login", |r| r["method"] == "oidc").await;
    assert_eq!(
        (login["user"].as_str(), login["via"].as_str()),
        (Some("alice"), Some("oidc"))
    );
    let stranger = find(&f, "login_failed", |r| r["reason"] == "oidc_unknown_user").await;
    assert!(stranger.get("user").is_none(), "{stranger}");
    let audit = std::fs::read_to_string(&f).unwrap();
    assert!(!audit.contains(CLIENT_SECRET) && !audit.contains("mallory"), "{audit}");
    // The upstream saw alice's request on the project host, never the gateway's cookies.
    let seen = web.seen();
    assert!(
        seen.iter().any(|s| s.method == "GET"),
        "alice's request on the project host never reached it: {:?}",
        seen.iter().map(|s| &s.target).collect::<Vec<_>>()
    );
    assert!(
        seen.iter().all(|s| !format!("{s:?}").contains("__Host-ocgw")),
        "a gateway cookie reached the upstream"
    );
    provider.child.stop();
}
