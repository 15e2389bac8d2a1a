//! The team's model keys stay out of every answer, for every role (hostile round five, item 4),
//! against the real OpenCode 1.18.33: a provider key in the project's `opencode.json`, one in the
//! model's config, an MCP server's headers and environment, and a key `opencode auth login` left
//! in `auth.json`, on every route that carries configuration, asked as a viewer and as an
//! operator, plain and compressed. (2.x's routes are in the same list, `policy/config_secrets.rs`.)

use std::io::Read;

use crate::common::client::{Https, basic};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::opencode::{FAKE_API_KEY, FakeModel, OpenCode};
use crate::common::stack::ALICE_PW;

const VIC_PW: &str = "vic-password-of-the-secrets-test";

fn project_config() -> String {
    serde_json::json!({
        "provider": {"extra": {"npm": "@ai-sdk/openai-compatible", "name": "Extra",
            "options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "SECRET-in-project-config-123",
                "headers": {"X-Extra": "SECRET-in-project-header-124"}},
            "models": {"m": {"name": "M"}}}},
        "mcp": {"x": {"type": "remote", "url": "http://127.0.0.1:9/mcp", "enabled": false,
                "headers": {"Authorization": "Bearer SECRET-mcp-header-111"}},
            "y": {"type": "local", "command": ["/bin/true"], "enabled": false,
                "environment": {"TOKEN": "SECRET-mcp-environment-222"}}}
    })
    .to_string()
}

/// The body as sent, decoded when the gateway compressed it.
fn decoded(r: &crate::common::client::Reply, raw: &[u8]) -> String {
    match r.headers.get("content-encoding").and_then(|v| v.to_str().ok()) {
        Some("br") => {
            let mut out = String::new();
            brotli::Decompressor::new(raw, 4096).read_to_string(&mut out).unwrap();
            out
        }
        Some(other) => panic!("an encoding the test does not read: {other}"),
        None => String::from_utf8_lossy(raw).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn provider_keys_and_credentials_are_redacted_in_every_answer_for_every_role() {
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| {
        OpenCode::start_with(&model, |project| {
            std::fs::write(project.join("opencode.json"), project_config()).unwrap();
            let data = project.parent().unwrap().join("data/opencode");
            std::fs::create_dir_all(&data).unwrap();
            let auth = r#"{"openai":{"type":"api","key":"SECRET-auth-json-000"}}"#;
            std::fs::write(data.join("auth.json"), auth).unwrap();
        })
    });
    let pw = oc.password.clone();
    let users = users_toml(&[
        TestUser {
            name: "alice",
            password: ALICE_PW,
            projects: "[\"demo\"]",
            role: "operator",
        },
        TestUser {
            name: "vic",
            password: VIC_PW,
            projects: "[\"demo\"]",
            role: "viewer",
        },
    ]);
    let config = base_config(&format!(
        "[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\n\n{users}",
        oc.url()
    ));
    let gw = Gateway::start_with(&config, &[], move |d| crate::common::write_secret(&d.join("pw"), &pw));
    let c = Https::new(gw.https, &gw.ca());
    // What OpenCode itself answers carries them: the test sees the secrets it must not see later.
    let direct = crate::common::client::direct_call(oc.port, &oc.password, "GET", "/config", &[], "").await;
    assert!(
        direct.contains("SECRET-in-project-config-123") && direct.contains(FAKE_API_KEY),
        "{direct}"
    );
    let routes = [
        "/config",
        "/global/config",
        "/config/providers",
        "/provider",
        "/api/provider",
        "/api/model",
    ];
    let mut redacted = 0;
    for (who, pw) in [("vic", VIC_PW), ("alice", ALICE_PW)] {
        for route in routes {
            for coding in ["identity", "br"] {
                let req = c
                    .request("GET", &format!("/p/demo{route}"), Some(&basic(who, pw)))
                    .header("accept-encoding", coding)
                    .body(http_body_util::Full::default())
                    .unwrap();
                let resp = c.send(req).await;
                let status = resp.status();
                let headers = resp.headers().clone();
                let raw = http_body_util::BodyExt::collect(resp.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                let r = crate::common::client::Reply {
                    status,
                    headers,
                    body: String::new(),
                };
                let body = decoded(&r, &raw);
                assert_eq!(status, 200, "{who} {route} {coding}: {body}");
                for secret in ["SECRET-", FAKE_API_KEY] {
                    assert!(
                        !body.contains(secret),
                        "{who} {route} {coding} carries {secret}: {body:.2000}"
                    );
                }
                redacted += body.matches("[redacted by opencode-gateway]").count();
            }
        }
    }
    assert!(
        redacted > 0,
        "nothing was redacted: the routes carried no secret to hide"
    );
    // The web UI still gets a usable answer: the providers and their models are listed.
    let r = c.get("/p/demo/config/providers", Some(&basic("vic", VIC_PW))).await;
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        v["providers"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["id"] == "extra")),
        "{v:.500}"
    );
}
