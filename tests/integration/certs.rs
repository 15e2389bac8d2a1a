//! The served certificate follows its files: a new pair on disk (another ACME client, Tailscale,
//! an operator) is served to new connections without a restart, on a reload at once and by the
//! file watcher within a bounded wait; connections opened before keep theirs and keep working;
//! a broken pair keeps the old certificate and the log (or the reload's answer) says why.

use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::Full;

use crate::common::client::{Https, read};
use crate::common::gateway::{ALICE, Gateway, base_config, users_toml};

/// A new server certificate from the same dev CA, written over the old pair.
fn reissue(dir: &Path) {
    let paths = opencode_gateway::front::devcert::DevCertPaths::beside(
        &dir.join("certs/server.crt"),
        &dir.join("certs/server.key"),
    );
    std::fs::remove_file(&paths.cert).unwrap();
    let names = opencode_gateway::front::devcert::server_names(Some("gw.localhost"), &[]);
    assert!(
        opencode_gateway::front::devcert::ensure(&paths, &names)
            .unwrap()
            .wrote()
    );
}

/// A key that belongs to no certificate served here.
fn foreign_key() -> String {
    rcgen::KeyPair::generate().unwrap().serialize_pem()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_certificate_files_are_served_without_a_restart_and_a_broken_pair_is_refused() {
    let gw = Gateway::start(&base_config(&users_toml(&[ALICE])));
    let c = Https::new(gw.https, &gw.ca());
    let first = crate::common::client::served_certificate(&c).await;
    let mut before = c.http1().await;
    let get = || c.request("GET", "/", None).body(Full::default()).unwrap();
    assert!(before.send_request(get()).await.is_ok());

    // The file watcher: a new pair is served within a bounded wait.
    reissue(gw.dir.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        let now = crate::common::client::served_certificate(&c).await;
        if now != first {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served in 10 s:\n{}",
            gw.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        gw.logs()
            .contains("certificate files changed: new connections get the new certificate")
    );
    // The connection opened before keeps its certificate and keeps working.
    let resp = before
        .send_request(get())
        .await
        .expect("the old connection still serves");
    read(resp).await;

    // A broken pair (a key that does not match): the watcher refuses it and says why.
    let key = gw.dir.path().join("certs/server.key");
    std::fs::write(&key, foreign_key()).unwrap();
    assert!(
        gw.wait_log("the new pair is refused", Duration::from_secs(10)).await,
        "{}",
        gw.logs()
    );
    assert!(
        gw.logs().contains("does not belong to the certificate"),
        "{}",
        gw.logs()
    );
    assert!(!gw.logs().contains("PRIVATE KEY"), "no key material in the log");
    assert_eq!(
        crate::common::client::served_certificate(&c).await,
        second,
        "the old certificate keeps serving"
    );

    // A reload with the broken pair is refused with the reason, and changes nothing.
    let (status, body) = gw.control("POST", "/reload");
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("tls: the key in") && body.contains("does not belong"),
        "{body}"
    );
    assert_eq!(crate::common::client::served_certificate(&c).await, second);

    // A reload picks up a good new pair at once, without waiting for the watcher.
    reissue(gw.dir.path());
    let (status, body) = gw.control("POST", "/reload");
    assert_eq!(status, 200, "{body}");
    let third = crate::common::client::served_certificate(&c).await;
    assert!(third != second && third != first, "the reload serves the new pair");
}
