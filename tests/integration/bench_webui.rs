//! Not a test: the harness of `bench/webui.sh` (issue 14), which reuses the real stack (OpenCode
//! and the gateway in front of it) to time a cold load of the web UI in throttled Chromium,
//! directly and through the gateway. Compiled only with `--features bench-webui`, so the suite
//! never runs it (and never passes it without doing anything).

use std::time::Duration;

use crate::common::stack::{ALICE_PW, setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run bench/webui.sh"]
async fn bench_webui_cold_load() {
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(2);
    let s = setup("echo unused").await;
    let cert = s.gw.dir.path().join("certs/server.crt");
    let dir = s.oc.project.to_string_lossy().to_string();
    let slug = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, dir.as_bytes());
    let direct = format!("direct={}/{slug}/session@opencode:{}", s.oc.url(), s.oc.password);
    let gw = format!(
        "gateway=https://demo.gw.localhost:{}/{slug}/session@alice:{ALICE_PW}",
        s.gw.https.port()
    );
    let mut args = vec!["bench/webui.mjs".to_string()];
    for _ in 0..rounds {
        args.push(direct.clone());
        args.push(gw.clone());
    }
    let out = tokio::process::Command::new("node")
        .args(&args)
        .env("CERT", &cert)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120 * 2 * rounds as u64), out)
        .await
        .expect("the bench finished")
        .unwrap();
    // The figures, one JSON line per load (bench/webui.sh keeps them).
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
