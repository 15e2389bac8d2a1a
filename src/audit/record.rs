//! One audit record: who did what to which project, in OpenCode's terms. Built only from names,
//! ids, sizes and outcomes: never a prompt's text, a password, a token, a cookie or a command's
//! output (the constructors take no such argument, and `tests::no_secret_field` checks the JSON).

use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

/// How the actor proved who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Via {
    Password,
    Token,
    Device,
    Ssh,
    Cookie,
    /// A terminal ticket the gateway relayed (issued to an authenticated user).
    Ticket,
    /// Single sign-on at an OpenID provider.
    Oidc,
    /// A passkey (WebAuthn) on the login page.
    Passkey,
    /// The gateway itself, under one of its grants (`policy/grants.rs`): its guard, its control
    /// socket.
    Gateway,
    /// A signed webhook delivery (`[[trigger]]`): no login, the signature is the credential.
    Trigger,
}

/// How the acting user was identified: how they proved it, and with which token or device.
#[derive(Clone)]
pub(crate) struct Who {
    pub via: Via,
    /// The token's or device's id.
    pub id: Option<Arc<str>>,
}

/// The id of the session a create answered with: `{"id"}` (v1) or `{"data":{"id"}}` (v2). For
/// `session_create`'s record and for the control room's new session.
pub(crate) fn created_session(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let id = v.get("id").or_else(|| v.get("data")?.get("id"))?.as_str()?;
    Some(id.to_string())
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    pub ts: String,
    pub event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// The token's or the device's id, when the request came with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via_id: Option<String>,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Record {
    pub(crate) fn new(event: &'static str) -> Record {
        Record {
            ts: now_rfc3339(),
            event,
            user: None,
            address: None,
            project: None,
            via: None,
            via_id: None,
            fields: Map::new(),
        }
    }

    pub(crate) fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    pub(crate) fn address(mut self, ip: IpAddr) -> Self {
        self.address = Some(ip.to_string());
        self
    }

    pub(crate) fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    pub(crate) fn via(mut self, via: Via, id: Option<&str>) -> Self {
        self.via = Some(via);
        self.via_id = id.map(str::to_string);
        self
    }

    pub(crate) fn field(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_string(), value.into());
        self
    }

    pub(crate) fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// The time now as RFC 3339 UTC with whole seconds (`2026-11-30T15:28:35Z`): fixed width, so
/// records sort and compare as strings (the reader's `--since` relies on it).
pub(crate) fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    rfc3339(secs)
}

pub(crate) fn rfc3339(unix: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(unix).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_session_is_read_from_either_api() {
        assert_eq!(
            created_session(br#"{"id":"ses_1","title":"t"}"#).as_deref(),
            Some("ses_1")
        );
        assert_eq!(created_session(br#"{"data":{"id":"ses_2"}}"#).as_deref(), Some("ses_2"));
        assert_eq!(created_session(b"[]"), None);
    }

    #[test]
    fn timestamps_are_fixed_width_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_052_515), "2026-11-30T15:28:35Z");
        assert!(rfc3339(1_000) < rfc3339(100_000));
    }

    #[test]
    fn a_record_is_one_json_line_without_empty_fields() {
        let r = Record::new("prompt")
            .user("alice")
            .project("web")
            .via(Via::Token, Some("tok1"))
            .field("bytes", 42);
        let line = r.to_line();
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["event"], "prompt");
        assert_eq!(v["via"], "token");
        assert_eq!(v["via_id"], "tok1");
        assert_eq!(v["bytes"], 42);
        assert!(v.get("address").is_none());
    }
}
