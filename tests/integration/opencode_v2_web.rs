//! OpenCode 2.1.2's web UI on a phone (headless Chromium, 390 x 844) through the gateway, on the
//! project's own host after the gateway's login: an operator prompts and sees the fake model's
//! answer; a viewer sees it, and her prompt is refused without breaking the page. Screenshots
//! are kept in test-artifacts/webui-v2/.

use std::time::Duration;

use base64::Engine;

use crate::common::client::{basic, json};
use crate::common::opencode::ANSWER;
use crate::opencode_v2::{OTTO, VERA, v2_stack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and Chromium: run scripts/test.sh"]
async fn a_phone_uses_a_2x_project_through_the_gateway_as_operator_and_as_viewer() {
    let s = v2_stack().await;
    let (status, made) = json(&s.client, "POST", "/p/v2/api/session", &basic("otto", OTTO), "{}").await;
    assert_eq!(status, 200, "{made}");
    let id = made["data"]["id"].as_str().unwrap().to_string();
    let origin = format!("https://v2.gw.localhost:{}", s.gw.https.port());
    // The UI's own route to a session: /server/<base64url(its server's origin)>/session/<id>.
    let server = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&origin);
    let session_path = format!("/server/{server}/session/{id}");
    let shots = crate::common::browser::shots("webui-v2");
    let cert = s.gw.dir.path().join("certs/server.crt");
    for (user, password, role) in [("otto", OTTO, "operator"), ("vera", VERA, "viewer")] {
        let text = crate::common::browser::run(
            "webui_v2.mjs",
            &[
                ("GW_URL", origin.as_ref()),
                ("SESSION_PATH", session_path.as_ref()),
                ("GW_USER", user.as_ref()),
                ("GW_PASS", password.as_ref()),
                ("ROLE", role.as_ref()),
                ("EXPECT", ANSWER.as_ref()),
                ("CERT", cert.as_os_str()),
                ("SHOT_DIR", shots.as_os_str()),
            ],
            Duration::from_secs(180),
            || format!("gateway log:\n{}", s.gw.logs()),
        )
        .await;
        assert!(!text.contains(password), "{text}");
        for shot in ["1-session", "2-answered"].iter().filter(|_| role == "operator") {
            assert!(shots.join(format!("{role}-{shot}.png")).exists(), "{role} {shot}");
        }
    }
    assert!(shots.join("viewer-2-refused.png").exists());
    // The operator's prompt went through the gateway as otto; the viewer's first write was refused.
    let logs = s.gw.logs();
    assert!(
        logs.contains(&format!(
            "user=\"otto\" project=\"v2\" method=POST path=/api/session/{id}/prompt status=200"
        )),
        "{logs}"
    );
    let vera_wrote = format!("user=\"vera\" project=\"v2\" method=POST path=/api/session/{id}/");
    assert!(
        logs.lines()
            .any(|l| l.contains(&vera_wrote) && l.contains("status=403")),
        "{logs}"
    );
    assert!(
        !logs
            .lines()
            .any(|l| l.contains(&vera_wrote) && l.contains("/prompt status=200")),
        "{logs}"
    );
}
