//! `/metrics` after real traffic through the gateway: the counters and the latency histogram
//! moved where that traffic says, no user name shows, and Prometheus's own checker
//! (`promtool check metrics`, Debian's `prometheus` package) accepts the output.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::client::{EventLog, Https, basic};
use crate::common::gateway::{ALICE, Gateway, metric_in};
use crate::common::stack::{one_project, one_project_as};

const PW: &str = "metrics-upstream-pw";

/// `promtool check metrics` on `body`: its complaints, or `Ok` when it has none.
pub fn promtool_check(body: &str) -> Result<(), String> {
    // (promtool: Debian package prometheus; scripts/test.sh installs it.)
    let out = crate::common::process::output_within(
        Command::new("promtool").args(["check", "metrics"]),
        Some(body.as_bytes()),
        Duration::from_secs(60),
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(said)
    }
}

/// `/metrics` asked the way Prometheus asks: the content type and body.
fn openmetrics(gw: &Gateway) -> (String, String) {
    let mut s = TcpStream::connect(gw.admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {}\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\nConnection: close\r\n\r\n",
        gw.admin
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (ctype, body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn metrics_move_with_real_traffic_and_pass_promtool() {
    let (gw, _web) = one_project(
        PW,
        "[limits]\nauth_failure_burst = 2\nauth_failures_per_minute = 1\n",
        &[ALICE],
    )
    .await;
    let c = Https::new(gw.https, &gw.ca());
    let alice = basic("alice", "alice-password-1");
    // Every series of a project exists from the start, at zero.
    assert_eq!(gw.metric("requests_total{project=\"web\""), 0);
    assert_eq!(gw.metric("upstream_response_seconds_count{project=\"web\"}"), 0);

    assert_eq!(c.get("/p/web/global/health", Some(&alice)).await.status, 200);
    let prompt = c
        .request("POST", "/p/web/session/ses_1/prompt_async", Some(&alice))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"parts\":[]}")))
        .unwrap();
    assert_eq!(c.call(prompt).await.status, 200);
    assert_eq!(c.get("/p/web/find/file?query=readme", Some(&alice)).await.status, 200);
    let token = c
        .request("POST", "/p/web/pty/pty_1/connect-token", Some(&alice))
        .body(Full::default())
        .unwrap();
    assert_eq!(c.call(token).await.status, 200);
    // An open event stream is a gauge while it lasts.
    let events = EventLog::open(&c, "/p/web/event", &alice).await;
    assert_eq!(gw.metric("streams_open{kind=\"events\"}"), 1);
    drop(events);
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.metric("streams_open{kind=\"events\"}") != 0 {
        assert!(Instant::now() < deadline, "the closed stream is still counted open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A project that does not exist counts under "-".
    assert_eq!(c.get("/p/nope/session", Some(&alice)).await.status, 404);
    // Wrong passwords until the login limiter steps in (burst 2 per address).
    let mallory = basic("mallory", "not-a-password");
    let mut refused = false;
    for _ in 0..6 {
        match c.get("/p/web/session", Some(&mallory)).await.status.as_u16() {
            401 => {}
            429 => {
                refused = true;
                break;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(refused, "the login limiter never refused");
    // A client that is not speaking TLS: a failed handshake.
    let mut raw = tokio::net::TcpStream::connect(gw.https).await.unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut sink)).await;
    // The gateway may close the connection before it counts the failure: wait for the count
    // (bounded), then read everything once.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while metric_in(
        &gw.admin("GET", "/metrics").1,
        "tls_handshakes_total{outcome=\"failed\"}",
    ) != Some(1)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the failed handshake was never counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (code, body) = gw.admin("GET", "/metrics");
    assert_eq!(code, 200);
    let m = |sel: &str| metric_in(&body, sel).unwrap_or_else(|| panic!("no {sel} in:\n{body}"));
    for (class, status) in [
        ("other", "2xx"),
        ("prompt", "2xx"),
        ("files", "2xx"),
        ("terminal", "2xx"),
        ("events", "2xx"),
    ] {
        assert_eq!(
            m(&format!(
                "requests_total{{project=\"web\",class=\"{class}\",status=\"{status}\"}}"
            )),
            1,
            "{class}:\n{body}"
        );
    }
    // The unknown project's 404, mallory's 401s and the 429: no project was resolved for them.
    assert!(
        m("requests_total{project=\"-\",class=\"other\",status=\"4xx\"}") >= 3,
        "{body}"
    );
    assert_eq!(m("upstream_response_seconds_count{project=\"web\"}"), 5);
    assert_eq!(m("upstream_response_seconds_bucket{le=\"+Inf\",project=\"web\"}"), 5);
    assert_eq!(
        m("logins_total{method=\"password\",outcome=\"success\"}"),
        1,
        "verified once, then cached"
    );
    assert!(m("logins_total{method=\"password\",outcome=\"failure\"}") >= 1);
    assert_eq!(m("limiter_refusals_total{reason=\"login\"}"), 1);
    assert!(m("tls_handshakes_total{outcome=\"ok\"}") >= 7);
    assert_eq!(m("tls_handshakes_total{outcome=\"failed\"}"), 1);
    assert!(m("argon2_verifications_total") >= 2);
    assert_eq!(m("streams_open"), 0);
    assert!(!body.contains("alice") && !body.contains("mallory"), "{body}");
    promtool_check(&body).unwrap_or_else(|e| panic!("promtool check metrics:\n{e}\n{body}"));

    // Prometheus asks for OpenMetrics and gets it, with the same counts.
    let (ctype, om) = openmetrics(&gw);
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert_eq!(metric_in(&om, "limiter_refusals_total{reason=\"login\"}"), Some(1));
}

/// `[server] log_format = "json"`: every line on stderr is one JSON object, and the access record
/// carries the text format's fields at the top level. (Text stays the default: every other test
/// reads `key=value` lines.)
#[tokio::test]
async fn json_logs_are_one_object_a_line_with_the_access_fields() {
    let (gw, _web) = one_project_as(PW, "", &[ALICE], |config| {
        config.replacen("[server]\n", "[server]\nlog_format = \"json\"\n", 1)
    })
    .await;
    let c = Https::new(gw.https, &gw.ca());
    assert_eq!(
        c.get("/p/web/global/health", Some(&basic("alice", "alice-password-1")))
            .await
            .status,
        200
    );
    assert!(
        gw.wait_log("\"target\":\"access\"", Duration::from_secs(10)).await,
        "{}",
        gw.logs()
    );
    let logs = gw.logs();
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access = lines
        .iter()
        .find(|l| l["target"] == "access" && l["path"] == "/p/web/global/health")
        .unwrap_or_else(|| panic!("no access record:\n{logs}"));
    assert_eq!(access["user"], "alice");
    assert_eq!(access["project"], "web");
    assert_eq!(access["method"], "GET");
    assert_eq!(access["status"], 200);
    assert_eq!(access["transport"], "tls");
    assert_eq!(access["peer"], "127.0.0.1");
    assert_eq!(access["level"], "INFO");
    for field in ["timestamp", "bytes", "duration_ms", "reason", "outcome"] {
        assert!(access.get(field).is_some(), "{field} missing: {access}");
    }
    assert!(lines.iter().any(|l| l["message"] == "gateway ready"), "{logs}");
}
