//! The last thing the agent said in a session (issue 41, item 2: the board's cards): the tail of
//! its last finished text part in an assistant message, as one line. The event watch passes on
//! only finished text parts (`time.end` set), already redacted like every event it reads; the
//! user's own prompt is never taken for the agent's words (its message is not the assistant's).

use serde_json::Value;

use super::model::Model;

/// Characters kept.
pub(crate) const MAX_WORDS: usize = 200;

/// The tail of `text` as one line of at most [`MAX_WORDS`] characters ("…" where it was cut).
pub(crate) fn one_line_tail(text: &str) -> Option<String> {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return None;
    }
    let n = line.chars().count();
    Some(match n > MAX_WORDS {
        true => format!("…{}", line.chars().skip(n - (MAX_WORDS - 1)).collect::<String>()),
        false => line,
    })
}

impl Model {
    /// An assistant message of session `id` began: its text parts are the agent's words.
    pub(super) fn answering(&mut self, project: &str, id: &str, info: &Value) {
        if info["role"] == "assistant"
            && let (Some(message), Some(s)) = (info["id"].as_str(), self.project_mut(project).sessions.get_mut(id))
        {
            s.answering = Some(message.to_string());
        }
    }

    /// A finished text part of session `id`: the agent's last words, when its message is the
    /// assistant's (true when they changed).
    pub(super) fn words(&mut self, project: &str, id: &str, part: &Value) -> bool {
        if part["type"] != "text" || part["time"]["end"].is_null() || part["synthetic"] == true {
            return false;
        }
        let Some(s) = self.project_mut(project).sessions.get_mut(id) else {
            return false;
        };
        if s.answering.is_none() || part["messageID"].as_str() != s.answering.as_deref() {
            return false;
        }
        let words = part["text"].as_str().and_then(one_line_tail);
        let changed = words.is_some() && s.last_words != words;
        if words.is_some() {
            s.last_words = words;
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_one_line_and_keep_their_end() {
        assert_eq!(
            one_line_tail("  Done.\n\nAll   tests pass. "),
            Some("Done. All tests pass.".into())
        );
        assert_eq!(one_line_tail(" \n "), None);
        let long = format!("{}END", "é".repeat(500));
        let tail = one_line_tail(&long).unwrap();
        assert!(tail.starts_with('…') && tail.ends_with("END") && tail.chars().count() == MAX_WORDS);
    }

    #[test]
    fn only_the_assistants_finished_text_is_the_agents_words() {
        let mut m = Model::default();
        let info = serde_json::json!({"id": "ses_1", "title": "t", "time": {"created": 1, "updated": 1}});
        let _ = m.apply(
            "web",
            &serde_json::json!({"type": "session.created", "properties": {"info": info}}),
            1,
        );
        let text = |message: &str, end: bool, text: &str| {
            serde_json::json!({"type": "text", "messageID": message, "sessionID": "ses_1", "text": text,
                "time": if end { serde_json::json!({"start": 1, "end": 2}) } else { serde_json::json!({"start": 1}) }})
        };
        // The user's prompt (its message is not the assistant's) is not taken.
        m.answering("web", "ses_1", &serde_json::json!({"id": "msg_u", "role": "user"}));
        assert!(!m.words("web", "ses_1", &text("msg_u", true, "delete everything")));
        m.answering("web", "ses_1", &serde_json::json!({"id": "msg_a", "role": "assistant"}));
        assert!(
            !m.words("web", "ses_1", &text("msg_a", false, "Working")),
            "not finished"
        );
        assert!(m.words("web", "ses_1", &text("msg_a", true, "All tests pass.")));
        let s = &m.projects["web"].sessions["ses_1"];
        assert_eq!(s.last_words.as_deref(), Some("All tests pass."));
    }
}
