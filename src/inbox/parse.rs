//! Reading OpenCode's objects (as sent in events and listed by `GET /session`, `/permission`,
//! `/question`, `/session/status`) into the inbox's types, cut to size.

use serde_json::Value;

use super::cards::*;

pub(super) fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// Strings an event carries are cut to this many characters, lists to this many items: a card is
/// read on a phone, and the model's memory must not follow what a tool call puts in a request.
const MAX_TEXT: usize = 2000;
const MAX_ITEMS: usize = 50;

fn cut(text: &str) -> String {
    text.chars().take(MAX_TEXT).collect()
}

pub(super) fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str().map(cut)).take(MAX_ITEMS).collect())
        .unwrap_or_default()
}

/// A card shows this many lines of the command or patch, each cut to this many characters.
pub(crate) const MAX_LINES: usize = 8;
pub(crate) const MAX_LINE_CHARS: usize = 200;

/// The first [`MAX_LINES`] lines of `text`, each at most [`MAX_LINE_CHARS`] characters.
pub(crate) fn first_lines(text: &str) -> (Vec<String>, bool) {
    let mut truncated = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if i == MAX_LINES {
            truncated = true;
            break;
        }
        let mut l: String = line.chars().take(MAX_LINE_CHARS).collect();
        if l.len() < line.len() {
            truncated = true;
            l.push('…');
        }
        out.push(l);
    }
    (out, truncated)
}

pub(super) fn permission(p: &Value, now: u64) -> Option<Permission> {
    let meta = &p["metadata"];
    let text = ["command", "diff", "patch", "filepath", "path", "url"]
        .iter()
        .find_map(|k| meta[*k].as_str())
        .unwrap_or_default();
    let (lines, truncated) = first_lines(text);
    Some(Permission {
        id: s(&p["id"])?,
        session_id: s(&p["sessionID"]).unwrap_or_default(),
        tool: s(&p["permission"]).unwrap_or_else(|| "unknown".into()),
        lines,
        truncated,
        patterns: strings(&p["patterns"]),
        always: strings(&p["always"]),
        asked_at_ms: now,
        filepath: meta["filepath"].as_str().map(str::to_string),
        command: meta["command"].as_str().map(str::to_string),
    })
}

fn question_item(v: &Value) -> Option<QuestionItem> {
    let mut item: QuestionItem = serde_json::from_value(v.clone()).ok()?;
    item.question = cut(&item.question);
    item.header = cut(&item.header);
    item.options.truncate(MAX_ITEMS);
    for o in &mut item.options {
        o.label = cut(&o.label);
        o.description = cut(&o.description);
    }
    Some(item)
}

pub(super) fn question(q: &Value, now: u64) -> Option<Question> {
    Some(Question {
        id: s(&q["id"])?,
        session_id: s(&q["sessionID"]).unwrap_or_default(),
        questions: q["questions"]
            .as_array()
            .map(|a| a.iter().take(MAX_ITEMS).filter_map(question_item).collect())
            .unwrap_or_default(),
        asked_at_ms: now,
    })
}

pub(super) fn status(v: &Value) -> SessionStatus {
    match v["type"].as_str() {
        Some("busy") => SessionStatus::Busy,
        Some("retry") => SessionStatus::Retry {
            attempt: v["attempt"].as_u64().unwrap_or(0),
            message: v["message"].as_str().unwrap_or_default().chars().take(500).collect(),
            next: v["next"].as_u64().unwrap_or(0),
        },
        _ => SessionStatus::Idle,
    }
}

pub(super) fn session_from_info(info: &Value, old: Option<&Session>) -> Option<Session> {
    let id = s(&info["id"])?;
    let t = &info["tokens"];
    let tokens = t.is_object().then(|| Tokens {
        input: t["input"].as_u64().unwrap_or(0),
        output: t["output"].as_u64().unwrap_or(0),
        reasoning: t["reasoning"].as_u64().unwrap_or(0),
        cache_read: t["cache"]["read"].as_u64().unwrap_or(0),
        cache_write: t["cache"]["write"].as_u64().unwrap_or(0),
    });
    let updated = info["time"]["updated"].as_u64().unwrap_or(0);
    Some(Session {
        title: s(&info["title"]).unwrap_or_default().chars().take(200).collect(),
        parent_id: s(&info["parentID"]),
        status: old.map_or(SessionStatus::Idle, |o| o.status.clone()),
        last_activity_ms: old.map_or(updated, |o| o.last_activity_ms.max(updated)),
        cost: info["cost"].as_f64().or(old.and_then(|o| o.cost)),
        tokens: tokens.or_else(|| old.and_then(|o| o.tokens.clone())),
        flag: old.and_then(|o| o.flag.clone()),
        streak: old.and_then(|o| o.streak.clone()),
        last_said_ms: old.map_or(updated, |o| o.last_said_ms),
        created_ms: info["time"]["created"]
            .as_u64()
            .unwrap_or_else(|| old.map_or(0, |o| o.created_ms)),
        copied: old.map(|o| o.copied.clone()).unwrap_or_default(),
        error: old.and_then(|o| o.error.clone()),
        queued: old.and_then(|o| o.queued.clone()),
        last_words: old.and_then(|o| o.last_words.clone()),
        answering: old.and_then(|o| o.answering.clone()),
        busy_since_ms: old.map_or(0, |o| o.busy_since_ms),
        id,
    })
}

/// What a `session.error` says (`properties.error`: `{name, data: {message}}`): its first line,
/// at most 200 characters, after its name ("APIError: rate limited").
pub(super) fn session_error(error: &Value) -> String {
    let name = error["name"].as_str().unwrap_or("an error");
    match error["data"]["message"].as_str().and_then(|m| m.lines().next()) {
        Some(m) if !m.trim().is_empty() => format!("{name}: {}", m.trim()).chars().take(200).collect(),
        _ => name.chars().take(200).collect(),
    }
}

/// How a finished tool call ended (`message.part.updated`'s `part`): `None` for anything that is
/// not a finished tool call, `Some(Ok(()))` for a success, `Some(Err(failure))` for a failure,
/// named by tool and first line. Seen on OpenCode 1.18.33: a tool that throws ends `"status":
/// "error"` with `error` (`read` of a missing file: "File not found: …"); a shell command that
/// exits non-zero ends `"completed"` with `metadata.exit` and its output.
pub(super) fn tool_outcome(part: &Value) -> Option<Result<(), Failure>> {
    if part["type"] != "tool" {
        return None;
    }
    let tool = part["tool"].as_str().unwrap_or("tool");
    let state = &part["state"];
    let said = match state["status"].as_str()? {
        "error" => state["error"].as_str().unwrap_or_default().to_string(),
        "completed" => match state["metadata"]["exit"].as_i64() {
            Some(code) if code != 0 => {
                let out = state["output"].as_str().unwrap_or_default();
                format!("exit {code}: {}", out.trim_start())
            }
            _ => return Some(Ok(())),
        },
        _ => return None,
    };
    Some(Err(Failure::new(tool, &said)))
}

/// A failure: what repeats when it repeats (the tool and what it said, cut), and its first line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Failure {
    /// The tool (`bash`) or `retry` (OpenCode's own retry of a provider error).
    pub tool: String,
    /// The tool and its error's first 300 characters: equal keys are the same failure.
    pub key: String,
    /// The first line, for a page.
    pub first_line: String,
}

impl Failure {
    pub(crate) fn new(tool: &str, said: &str) -> Failure {
        let said: String = said.chars().take(300).collect();
        let first_line = said.lines().next().unwrap_or_default().chars().take(200).collect();
        Failure {
            tool: tool.chars().take(64).collect(),
            key: format!("{tool}\n{said}"),
            first_line,
        }
    }
}
