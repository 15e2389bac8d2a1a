//! Reading the audit file and its rotations back, oldest first, with the CLI's filters.

use std::path::{Path, PathBuf};

use serde_json::Value;

#[derive(Debug, Default, Clone)]
pub(crate) struct Filter {
    pub user: Option<String>,
    pub project: Option<String>,
    pub event: Option<String>,
    /// Records at or after this RFC 3339 UTC time (compared as fixed-width strings).
    pub since: Option<String>,
}

impl Filter {
    pub(crate) fn matches(&self, v: &Value) -> bool {
        let is = |key: &str, want: &Option<String>| {
            want.as_deref()
                .is_none_or(|w| v.get(key).and_then(Value::as_str) == Some(w))
        };
        is("user", &self.user)
            && is("project", &self.project)
            && is("event", &self.event)
            && self
                .since
                .as_deref()
                .is_none_or(|s| v.get("ts").and_then(Value::as_str).is_some_and(|ts| ts >= s))
    }
}

/// The files to read, oldest first: `audit.jsonl.N` … `.1`, then `audit.jsonl`.
pub(crate) fn files(base: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut n = 1;
    while super::writer::rotated(base, n).exists() {
        n += 1;
    }
    for i in (1..n).rev() {
        out.push(super::writer::rotated(base, i));
    }
    if base.exists() {
        out.push(base.to_path_buf());
    }
    out
}

/// Every record matching `filter`, oldest first, as parsed JSON with its line.
pub(crate) fn read(base: &Path, filter: &Filter) -> std::io::Result<Vec<(Value, String)>> {
    let mut out = Vec::new();
    for f in files(base) {
        let text = match std::fs::read_to_string(&f) {
            Ok(t) => t,
            // Rotated away between listing and reading.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if filter.matches(&v) {
                out.push((v, line.to_string()));
            }
        }
    }
    Ok(out)
}

/// One record as a line for people: time, event, who, where, then the event's own fields.
pub(crate) fn human(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
    let mut line = format!(
        "{} {:<18} user={} project={} address={}",
        s("ts"),
        s("event"),
        s("user"),
        s("project"),
        s("address")
    );
    if let Some(via) = v.get("via").and_then(Value::as_str) {
        line.push_str(&format!(" via={via}"));
        if let Some(id) = v.get("via_id").and_then(Value::as_str) {
            line.push_str(&format!(":{id}"));
        }
    }
    if let Some(map) = v.as_object() {
        for (k, val) in map {
            if matches!(
                k.as_str(),
                "ts" | "event" | "user" | "project" | "address" | "via" | "via_id"
            ) {
                continue;
            }
            match val {
                Value::String(t) => line.push_str(&format!(" {k}={t}")),
                other => line.push_str(&format!(" {k}={other}")),
            }
        }
    }
    line
}

/// `1h`, `30m`, `2d`, `45s` back from now, as the RFC 3339 cut-off.
pub(crate) fn since(ago: &str) -> Option<String> {
    let (num, unit) = ago.split_at(ago.find(|c: char| !c.is_ascii_digit())?);
    let n: i64 = num.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return None,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs() as i64;
    Some(super::record::rfc3339(now - secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Record;
    use crate::audit::writer::Appender;
    use crate::config::AuditConfig;

    fn rec(ts: &str, event: &'static str, user: &str, project: &str) -> Vec<u8> {
        let mut r = Record::new(event).user(user).project(project);
        r.ts = ts.to_string();
        r.to_line()
    }

    #[test]
    fn filters_by_user_project_event_and_time_across_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = AuditConfig {
            file: dir.path().join("audit.jsonl"),
            max_bytes: 150,
            keep: 5,
        };
        let mut a = Appender::open(cfg.clone()).unwrap();
        a.append(&rec("2026-01-01T00:00:00Z", "login", "alice", "web")).unwrap();
        a.append(&rec("2026-01-02T00:00:00Z", "prompt", "bob", "web")).unwrap();
        a.append(&rec("2026-01-03T00:00:00Z", "prompt", "alice", "api"))
            .unwrap();
        a.append(&rec("2026-01-04T00:00:00Z", "prompt", "alice", "web"))
            .unwrap();
        assert!(files(&cfg.file).len() > 1, "the test needs rotations to read across");
        let got = |f: Filter| -> Vec<String> {
            read(&cfg.file, &f)
                .unwrap()
                .into_iter()
                .map(|(v, _)| v["ts"].as_str().unwrap()[..10].to_string())
                .collect()
        };
        let all = got(Filter::default());
        assert_eq!(
            all,
            ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"],
            "oldest first"
        );
        let alice = Filter {
            user: Some("alice".into()),
            ..Default::default()
        };
        assert_eq!(got(alice.clone()), ["2026-01-01", "2026-01-03", "2026-01-04"]);
        assert_eq!(
            got(Filter {
                project: Some("web".into()),
                event: Some("prompt".into()),
                ..alice.clone()
            }),
            ["2026-01-04"]
        );
        assert_eq!(
            got(Filter {
                since: Some("2026-01-02T00:00:00Z".into()),
                ..alice
            }),
            ["2026-01-03", "2026-01-04"]
        );
    }

    #[test]
    fn since_reads_units_and_refuses_others() {
        let hour = since("1h").unwrap();
        let day = since("1d").unwrap();
        assert!(day < hour);
        assert!(since("1w").is_none());
        assert!(since("h").is_none());
    }

    #[test]
    fn human_lines_name_who_and_what() {
        let v: Value = serde_json::from_slice(
            &Record::new("prompt")
                .user("alice")
                .project("web")
                .via(crate::audit::Via::Token, Some("t1"))
                .field("bytes", 12)
                .to_line(),
        )
        .unwrap();
        let h = human(&v);
        assert!(
            h.contains("prompt") && h.contains("user=alice") && h.contains("via=token:t1") && h.contains("bytes=12"),
            "{h}"
        );
    }
}
