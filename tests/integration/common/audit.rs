//! Reading a test gateway's audit trail (`<dir>/state/audit.jsonl`, the default place).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn file(gw: &super::gateway::Gateway) -> PathBuf {
    gw.dir.path().join("state/audit.jsonl")
}

/// The whole lines: a last line without its newline is still being written (the writer's one
/// `write` per line is not atomic to a reader), and is read on the next call.
pub fn records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// The first record of `event` that satisfies `pred`, waiting (bounded) for the writer thread
/// (30 s: on CI's two cores under the whole suite the writer was seen to lag a phone's chain).
pub async fn find(path: &Path, event: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = records(path);
        if let Some(r) = all.iter().find(|r| r["event"] == event && pred(r)) {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no matching {event} record in the audit log:\n{}",
            all.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
