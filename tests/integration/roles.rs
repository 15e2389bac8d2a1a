//! Roles × routes: every route of OpenCode's OpenAPI document, for every role, against the
//! reviewed table in tests/fixtures; and roles per project through the running gateway.

use http::Method;
use http_body_util::Full;
use opencode_gateway::config::Role;
use opencode_gateway::http::error::HttpError;
use opencode_gateway::policy::authz;

use crate::common::client::{Https, basic};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{Gateway, TestUser, base_config, external_project, users_toml};

const ROLES: [Role; 4] = [Role::Viewer, Role::Approver, Role::Operator, Role::Admin];

fn table() -> Vec<(Method, String, Role)> {
    let text = include_str!("../fixtures/opencode-1.18.33-routes.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.split_whitespace();
            let method: Method = parts.next().unwrap().parse().unwrap();
            let path = parts.next().unwrap().to_string();
            let role = match parts.next().unwrap() {
                "read" => Role::Viewer,
                "respond" => Role::Approver,
                "operate" => Role::Operator,
                "configure" => Role::Admin,
                other => panic!("unknown class {other}"),
            };
            (method, path, role)
        })
        .collect()
}

/// A concrete path for a templated one: `{sessionID}` → `ses_x1`, `*` → `a/b`.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| match s {
            "*" => "a/b".to_string(),
            s if s.starts_with('{') => format!("{}_x1", s.trim_matches(['{', '}']).to_ascii_lowercase()),
            s => s.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn every_route_of_the_openapi_document_allows_exactly_the_roles_the_table_says() {
    let table = table();
    assert!(table.len() > 150, "the table covers the whole document");
    for (method, template, least) in &table {
        let path = concrete(template);
        for role in ROLES {
            let allowed = authz::check_path(role, method, &path).is_ok();
            assert_eq!(
                allowed,
                role >= *least,
                "{method} {template} for {role:?} (least role {least:?})"
            );
        }
    }
}

#[test]
fn routes_the_table_does_not_know_are_denied_to_everyone() {
    for (method, path) in [
        (Method::POST, "/session/ses_1/something-new"),
        (Method::GET, "/api/session/ses_1/new/deep"),
        (Method::DELETE, "/config"),
        (Method::PUT, "/global/config"),
        (Method::POST, "/"),
    ] {
        for role in ROLES {
            let refused = authz::check_path(role, &method, path).map_err(HttpError::from);
            assert!(
                matches!(&refused, Err(HttpError::Forbidden(why)) if why.ends_with("is not a route the gateway allows")),
                "{method} {path} for {role:?}: {refused:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn the_table_matches_the_real_servers_openapi_document() {
    use crate::common::opencode::{FakeModel, OpenCode};
    let model = FakeModel::start("true").await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let doc = crate::common::client::direct_call(oc.port, &oc.password, "GET", "/doc", &[], "").await;
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    let mut live = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for m in ["get", "post", "put", "patch", "delete"] {
            if ops.get(m).is_some() {
                live.push(format!("{} {path}", m.to_uppercase()));
            }
        }
    }
    live.sort();
    let mut known: Vec<String> = table().iter().map(|(m, p, _)| format!("{m} {p}")).collect();
    known.sort();
    assert_eq!(
        live, known,
        "OpenCode's routes changed: review tests/fixtures/opencode-1.18.33-routes.txt and authz::ROUTES"
    );
    // Which routes ask the model is the table's to say for this version too: every route whose
    // body names a model is judged by the budgets or reviewed as asking none.
    use opencode_gateway::policy::routes::{ASKS_MODEL, NAMES_A_MODEL_ASKS_NONE};
    let naming = routes_naming_a_model(&doc);
    assert!(naming.len() >= 8, "{naming:?}");
    for (method, pattern) in &naming {
        let key = (method.as_str(), pattern.as_str());
        assert!(
            ASKS_MODEL.contains(&key) || NAMES_A_MODEL_ASKS_NONE.contains(&key),
            "{method} {pattern} names a model: review policy::routes::ASKS_MODEL"
        );
    }
    let listed: Vec<String> = live
        .iter()
        .filter_map(|l| {
            let (m, path) = l.split_once(' ')?;
            Some(format!(
                "{m} {}",
                opencode_gateway::policy::drift::pattern_from_doc(m, path, &opencode_gateway::policy::table::V1)?
            ))
        })
        .collect();
    for (m, p) in ASKS_MODEL {
        assert!(
            listed.contains(&format!("{m} {p}")),
            "{m} {p} is not a route of this version"
        );
    }
}

/// The (method, table pattern) of every route whose JSON body has a `model`, `modelID` or
/// `providerID` property (following `$ref`s and `anyOf`/`oneOf`/`allOf`).
fn routes_naming_a_model(doc: &serde_json::Value) -> Vec<(String, String)> {
    fn names(doc: &serde_json::Value, schema: &serde_json::Value, depth: u32) -> bool {
        if depth > 6 {
            return false;
        }
        if let Some(r) = schema["$ref"].as_str() {
            let name = r.rsplit('/').next().unwrap_or_default();
            return names(doc, &doc["components"]["schemas"][name], depth + 1);
        }
        let direct = schema["properties"]
            .as_object()
            .is_some_and(|p| ["model", "modelID", "providerID"].iter().any(|k| p.contains_key(*k)));
        direct
            || ["anyOf", "oneOf", "allOf"].iter().any(|k| {
                schema[*k]
                    .as_array()
                    .is_some_and(|all| all.iter().any(|s| names(doc, s, depth + 1)))
            })
    }
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for m in ["post", "put", "patch", "delete"] {
            let body = &ops[m]["requestBody"]["content"]["application/json"]["schema"];
            if !body.is_null() && names(doc, body, 0) {
                let method = m.to_uppercase();
                let pattern = opencode_gateway::policy::drift::pattern_from_doc(
                    &method,
                    path,
                    &opencode_gateway::policy::table::V1,
                )
                .unwrap();
                out.push((method, pattern));
            }
        }
    }
    out
}

#[tokio::test]
async fn a_user_has_a_role_per_project() {
    let web = FakeUpstream::start("pw-web-project").await;
    let api = FakeUpstream::start("pw-web-project").await;
    let config = base_config(&format!(
        "{}{}{}",
        external_project("web", &web.url()),
        external_project("api", &api.url()),
        users_toml(&[TestUser {
            name: "carol",
            password: "carol-password",
            projects: "{ web = \"operator\", api = \"viewer\" }",
            role: "viewer"
        }])
        .replace("role = \"viewer\"\n", "")
    ));
    let gw = Gateway::start_behind(&config, "pw-web-project");
    let c = Https::new(gw.https, &gw.ca());
    let carol = basic("carol", "carol-password");
    let post = |p: &str| c.request("POST", p, Some(&carol)).body(Full::from("{}")).unwrap();
    assert_eq!(c.call(post("/p/web/session")).await.status, 200);
    let r = c.call(post("/p/api/session")).await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("needs the operator role; you are viewer"), "{}", r.body);
    assert_eq!(c.get("/p/api/session", Some(&carol)).await.status, 200);
    let sessions = api
        .seen()
        .into_iter()
        .filter(|s| s.target.starts_with("/session"))
        .count();
    assert_eq!(sessions, 1, "only the allowed read reached api");
}
