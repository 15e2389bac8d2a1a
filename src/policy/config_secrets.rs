//! The model providers' keys and other secrets of OpenCode's configuration, kept out of every
//! answer for every role (hostile round five, item 4): a viewer's `GET /config` answered the
//! provider's `apiKey` as `opencode.json` writes it (and `{env:VAR}` resolved). The gateway keeps
//! its own upstream password out of every answer; a team's model keys get the same: whoever needs
//! them has the config file. Pure: which routes carry configuration, and the walk that redacts.
//!
//! Where they are (seen on 1.18.33 and 2.1.2, docs/threat-model.md): `provider.*.options.apiKey`
//! and `.headers`, `mcp.*.headers` and `.environment` (`/config`, `/global/config`); the same and
//! `auth.json`'s keys as `providers[].key` (`/config/providers`, `/provider`);
//! `data[].api.settings.apiKey`, `.request.headers`, 2.x's `settings.apiKey`, `headers`,
//! `body.apiKey` (`/api/provider`, `/api/model`, `/api/config`); every stored credential's
//! `value.key` (2.x's `/api/credential`).

use serde_json::Value;

use super::routes::{GET, PATCH, POST};

/// What a redacted value says instead (non-empty: a client that only asks whether a key is set
/// still sees one).
pub const REDACTED: &str = "[redacted by opencode-gateway]";

/// The routes whose answer carries configuration (both versions' patterns; a route the table
/// does not know but a server's document lists gets the same when its pattern is here).
const CARRY_SECRETS: &[(&str, &str)] = &[
    (GET, "/config"),
    (PATCH, "/config"),
    (GET, "/global/config"),
    (PATCH, "/global/config"),
    (GET, "/config/providers"),
    (GET, "/provider"),
    (GET, "/api/provider"),
    (GET, "/api/provider/*"),
    (GET, "/api/model"),
    (GET, "/api/model/*"),
    (GET, "/api/config"),
    (GET, "/api/credential"),
    (POST, "/api/credential"),
    (PATCH, "/api/credential/*"),
];

pub(crate) fn carries_secrets(method: &str, pattern: &str) -> bool {
    CARRY_SECRETS.contains(&(method, pattern))
}

/// A field whose string value is a secret, by its name (compared without case, `_` and `-`).
const SECRET_FIELDS: &[&str] = &[
    "apikey",
    "key",
    "token",
    "accesstoken",
    "refreshtoken",
    "access",
    "refresh",
    "secret",
    "clientsecret",
    "password",
    "authorization",
];

/// A field whose value is a map of secrets when it is an object (HTTP headers, a server's
/// environment). Provider `env`, a list of variable *names*, is an array and stays.
const SECRET_MAPS: &[&str] = &["headers", "environment", "env"];

fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Redact `v` in place; how many values were replaced.
pub fn redact(v: &mut Value) -> usize {
    match v {
        Value::Array(items) => items.iter_mut().map(redact).sum(),
        Value::Object(map) => {
            let mut n = 0;
            for (name, value) in map.iter_mut() {
                let name = folded(name);
                n += match value {
                    Value::String(s) if SECRET_FIELDS.contains(&name.as_str()) && !s.is_empty() => {
                        *s = REDACTED.to_string();
                        1
                    }
                    Value::Object(inner) if SECRET_MAPS.contains(&name.as_str()) => inner
                        .values_mut()
                        .map(|x| match x {
                            Value::String(s) if !s.is_empty() => {
                                *s = REDACTED.to_string();
                                1
                            }
                            other => redact(other),
                        })
                        .sum(),
                    other => redact(other),
                };
            }
            n
        }
        _ => 0,
    }
}

/// A JSON answer with its secrets redacted; `None` when it is not JSON (the caller refuses it
/// rather than pass what it cannot read).
pub fn redacted(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(bytes).ok()?;
    if redact(&mut v) == 0 {
        return Some(bytes.to_vec());
    }
    serde_json::to_vec(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The answers seen carrying secrets on 1.18.33 and 2.1.2 (issue 55's captures), reduced.
    #[test]
    fn every_secret_seen_in_a_config_answer_is_redacted_and_nothing_else() {
        let mut v1 = json!({
            "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "options": {"apiKey": "SECRET-123",
                "baseURL": "http://127.0.0.1:9/v1", "headers": {"X-Hdr": "SECRET-124"}}, "env": ["FAKE_API_KEY"]}},
            "mcp": {"x": {"type": "remote", "url": "http://x", "headers": {"Authorization": "Bearer SECRET-111"}},
                    "y": {"type": "local", "command": ["/bin/true"], "environment": {"TOKEN": "SECRET-222"}}},
            "model": "fake/fake-model"
        });
        assert_eq!(redact(&mut v1), 4);
        let text = v1.to_string();
        assert!(!text.contains("SECRET"), "{text}");
        assert!(
            text.contains("FAKE_API_KEY") && text.contains("http://127.0.0.1:9/v1") && text.contains("fake/fake-model")
        );
        let mut providers = json!({"providers": [{"id": "openai", "key": "SECRET-000", "name": "OpenAI", "models": {}}],
            "default": {"openai": "gpt"}});
        assert_eq!(redact(&mut providers), 1);
        assert_eq!(providers["providers"][0]["key"], REDACTED);
        assert_eq!(providers["providers"][0]["name"], "OpenAI");
        let mut api = json!({"data": [{"id": "fake-model", "api": {"settings": {"apiKey": "SECRET-1"}},
            "request": {"headers": {"X-Hdr": "SECRET-2"}}, "body": {"api_key": "SECRET-3"}}]});
        assert_eq!(redact(&mut api), 3);
        let mut credentials = json!({"data": [{"id": "cred_1", "integrationID": "anthropic",
            "value": {"type": "key", "key": "SECRET-333"}}, {"id": "cred_2", "value": {"type": "oauth",
            "access": "SECRET-a", "refresh": "SECRET-r", "expires": 1}}]});
        assert_eq!(redact(&mut credentials), 3);
        assert_eq!(credentials["data"][1]["value"]["expires"], 1);
        assert!(!credentials.to_string().contains("SECRET"));
        // Nothing to redact: the answer as it came, byte for byte.
        let plain = br#"{"agent":{"build":{"model":"x"}}, "n": 1}"#;
        assert_eq!(redacted(plain).unwrap(), plain.to_vec());
        assert!(redacted(b"<html>").is_none());
    }
}
