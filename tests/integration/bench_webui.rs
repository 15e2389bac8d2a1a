//! Not a test: the harness of `bench/webui.sh` (issue 14), which reuses the real stack (OpenCode
//! and the gateway in front of it) to time a cold load of the web UI in throttled Chromium,
//! directly and through the gateway. Without `OCGW_BENCH_WEBUI=1` it returns at once, saying so,
//! so that the suite (which runs ignored tests) does not pay for a benchmark.

use std::time::Duration;

use crate::common::stack::{ALICE_PW, setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run bench/webui.sh"]
async fn bench_webui_cold_load() {
    if std::env::var_os("OCGW_BENCH_WEBUI").is_none() {
        eprintln!("bench_webui_cold_load: a benchmark, run by bench/webui.sh (OCGW_BENCH_WEBUI=1); not run");
        return;
    }
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
