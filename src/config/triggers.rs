//! `[[trigger]]`: a signed webhook, or a schedule, that starts a turn in a project, as validated (issue 40).
//! The gateway runs it as `run_as_user` (roles, budgets, audit), under `policy` (its session's
//! permission requests are answered by the gateway). Parsing is here (the config room); judging a
//! delivery (signatures, events, the template's values) is the policy room's (`policy/hook.rs`);
//! the endpoint is a gateway page (`web/hook.rs`).

use std::time::Duration;

use super::Secret;

/// A delivery's body is refused past this many bytes unless `max_body` says otherwise.
pub const DEFAULT_MAX_BODY: usize = 256 * 1024;
/// No `max_body` may be larger (GitHub's own cap is 25 MB; a prompt needs a few fields).
pub const MAX_MAX_BODY: usize = 8 * 1024 * 1024;
/// The generic kind's replay window unless `replay_window` says otherwise.
pub const DEFAULT_REPLAY_WINDOW: Duration = Duration::from_secs(5 * 60);
/// The longest prompt template accepted.
pub const MAX_TEMPLATE_BYTES: usize = 8 * 1024;
/// A payload value reaches the prompt as a JSON string of at most this many characters.
pub const MAX_VALUE_CHARS: usize = 200;

/// How a delivery proves it comes from the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookKind {
    /// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`, the event in
    /// `X-GitHub-Event` (and the payload's `action`), the delivery in `X-GitHub-Delivery`.
    GitHub { secret: Secret },
    /// Any other sender: `X-Signature-256: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`,
    /// `X-Signature-Timestamp` (Unix seconds) within `window` of the gateway's clock, the event
    /// (optional) in `X-Event`; the signature itself is the delivery's id.
    Hmac { secret: Secret, window: Duration },
    /// No webhook: due by `cron` at `offset` from UTC (`zone` as written, for messages).
    Schedule {
        cron: crate::support::cron::Cron,
        offset: time::UtcOffset,
        zone: String,
    },
}

/// Which session a firing prompts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChoice {
    /// A new session each time.
    New,
    /// The project's session with this title (made with it the first time).
    Titled(String),
}

/// One piece of a prompt template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `{{pusher.name}}`: a path into the payload's JSON object.
    Field(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub name: String,
    pub project: String,
    pub kind: HookKind,
    /// Events that fire (`push`, `issues.opened`); empty: any (the generic kind only).
    pub events: Vec<String>,
    pub prompt: Vec<Piece>,
    pub session: SessionChoice,
    pub policy: String,
    pub run_as_user: String,
    pub max_body: usize,
    /// `github_secret_file` / `hmac_secret_file`: one of the gateway's own files (kept out of
    /// every project, like a password file).
    pub secret_file: Option<std::path::PathBuf>,
}

/// `"A push to {{ref}}"` → text and fields. A field is letters, digits, `_` and `-`, separated
/// by `.`; anything else between `{{` and `}}`, or a `{{` left open, is an error.
pub fn parse_template(text: &str) -> Result<Vec<Piece>, String> {
    if text.len() > MAX_TEMPLATE_BYTES {
        return Err(format!("is longer than {MAX_TEMPLATE_BYTES} bytes"));
    }
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            out.push(Piece::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err("opens a `{{` it never closes".into());
        };
        let name = after[..close].trim();
        let path: Vec<String> = name.split('.').map(str::to_string).collect();
        let fine = |s: &String| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !path.iter().all(fine) {
            return Err(format!(
                "names the field {name:?}, which is not a path like ref or pusher.name"
            ));
        }
        out.push(Piece::Field(path));
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest.to_string()));
    }
    if out.is_empty() {
        return Err("is empty".into());
    }
    Ok(out)
}

/// `"new"` or `"titled: nightly-fixes"`.
pub fn parse_session(text: &str) -> Result<SessionChoice, String> {
    if text == "new" {
        return Ok(SessionChoice::New);
    }
    match text.strip_prefix("titled:").map(str::trim) {
        Some(t) if !t.is_empty() && t.len() <= 200 && !t.chars().any(char::is_control) => {
            Ok(SessionChoice::Titled(t.to_string()))
        }
        _ => Err(format!("{text:?} is not which session a trigger prompts")),
    }
}

/// `"push"`, `"issues.opened"`: an event and, optionally, its action.
pub fn valid_event(text: &str) -> bool {
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match text.split_once('.') {
        Some((e, a)) => ok(e) && ok(a),
        None => ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_text_and_dotted_fields_and_nothing_else() {
        let t = parse_template("A push to {{ref}} by {{ pusher.name }}.").unwrap();
        assert_eq!(
            t,
            vec![
                Piece::Text("A push to ".into()),
                Piece::Field(vec!["ref".into()]),
                Piece::Text(" by ".into()),
                Piece::Field(vec!["pusher".into(), "name".into()]),
                Piece::Text(".".into()),
            ]
        );
        for (bad, why) in [
            ("a {{ref", "never closes"),
            ("{{a..b}}", "not a path"),
            ("{{}}", "not a path"),
            ("{{a b}}", "not a path"),
            ("", "is empty"),
        ] {
            let e = parse_template(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(parse_template(&"x".repeat(MAX_TEMPLATE_BYTES + 1)).is_err());
    }

    #[test]
    fn sessions_and_events_in_words() {
        assert_eq!(parse_session("new"), Ok(SessionChoice::New));
        assert_eq!(
            parse_session("titled: nightly-fixes"),
            Ok(SessionChoice::Titled("nightly-fixes".into()))
        );
        assert!(parse_session("titled:  ").is_err());
        assert!(parse_session("old").is_err());
        assert!(valid_event("push") && valid_event("issues.opened"));
        assert!(!valid_event("issues.") && !valid_event("a b") && !valid_event(""));
    }
}
