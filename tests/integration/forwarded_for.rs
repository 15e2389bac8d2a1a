//! Who the client is behind a proxy (`X-Forwarded-For`, `http/client_addr.rs`): believed only
//! from `trusted_proxies`, so a forged header can neither hide its sender from the login limiter
//! nor name someone else in the access log. (The PROXY protocol header: proxy_protocol.rs.)

use std::time::Duration;

use http_body_util::Full;

use crate::common::client::{Https, basic};
use crate::common::gateway::ALICE;
use crate::common::stack::one_project_as;

const PW: &str = "forwarded-upstream-pw";

fn alice() -> String {
    basic("alice", "alice-password-1")
}

/// `X-Forwarded-For` is believed only from `trusted_proxies`, read from the right: from the
/// proxy, the address it appended is the client (the upstream, the access log and the login
/// limiter see it), even when the client wrote one of its own first; from anyone else the header
/// changes nothing, so a forged one neither hides the sender from the login limiter nor names
/// someone else in the log. (198.51.100.0/24 is what the tests forge.)
#[tokio::test]
async fn x_forwarded_for_is_believed_only_from_trusted_proxies() {
    // A gateway behind a proxy at 127.0.0.8.
    let (gw, web2) = one_project_as(PW, "", &[ALICE], |config| {
        config.replace(
            "state_dir = \"state\"\n",
            "state_dir = \"state\"\ntrusted_proxies = [\"127.0.0.8\"]\n",
        )
    })
    .await;
    let c = Https::new(gw.https, &gw.ca());
    let via = |from: &str, xff: &str, auth: String| {
        let client = c.from(from);
        let xff = xff.to_string();
        async move {
            let req = client
                .request("GET", "/echo", Some(&auth))
                .header("x-forwarded-for", xff)
                .body(Full::default())
                .unwrap();
            client.call(req).await
        }
    };
    assert_eq!(via("127.0.0.8", "203.0.113.7", alice()).await.status, 200);
    assert_eq!(via("127.0.0.9", "203.0.113.7", alice()).await.status, 200);
    // Read from the right: the client's own entry first, the address the proxy appended last.
    assert_eq!(
        via("127.0.0.8", "198.51.100.9, 203.0.113.77", alice()).await.status,
        200
    );
    let seen = web2.seen();
    let forwarded: Vec<&str> = seen
        .iter()
        .map(|s| s.headers["x-forwarded-for"].to_str().unwrap())
        .collect();
    assert_eq!(
        forwarded,
        ["203.0.113.7", "127.0.0.9", "203.0.113.77"],
        "believed from the trusted proxy (its last entry), ignored from anyone else"
    );
    assert!(gw.wait_log("peer=203.0.113.7", Duration::from_secs(5)).await);
    assert!(gw.wait_log("peer=203.0.113.77", Duration::from_secs(5)).await);
    // From anyone else, a new forged address with each wrong password: the login limiter still
    // counts the sender, which is refused after its burst, the right password included.
    let mut last = None;
    for i in 0..12 {
        let wrong = basic("alice", &format!("wrong{i}"));
        last = Some(via("127.0.0.9", &format!("198.51.100.{i}"), wrong).await);
    }
    let last = last.unwrap();
    assert_eq!(
        last.status, 429,
        "the 12th wrong password from 127.0.0.9: {}",
        last.body
    );
    assert!(last.body.contains("address limit"), "{}", last.body);
    let right = via("127.0.0.9", "198.51.100.99", alice()).await;
    assert_eq!(right.status, 429, "a forged address unlocked 127.0.0.9: {}", right.body);
    // The login limiter counts the real client behind the proxy, not the proxy.
    for i in 0..12 {
        via("127.0.0.8", "203.0.113.66", basic("alice", &format!("wrong{i}"))).await;
    }
    let locked = via("127.0.0.8", "203.0.113.66", alice()).await;
    assert_eq!(locked.status, 429, "203.0.113.66 behind the proxy: {}", locked.body);
    assert_eq!(
        via("127.0.0.8", "203.0.113.7", alice()).await.status,
        200,
        "another client behind the same proxy is not locked out"
    );
    let logs = gw.logs();
    assert!(logs.contains("peer=127.0.0.9"), "{logs}");
    assert!(
        !logs.contains("peer=198.51.100."),
        "a forged address reached the log as a peer:\n{logs}"
    );
}
