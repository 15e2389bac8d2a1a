//! The audit record of one proxied request, for routes whose plan names an [`AuditKind`]: begun
//! once the request is authorized (who, which project, which session or request), finished when
//! the response status is known. A terminal's close is recorded by a guard its splice holds.
//! Nothing here reads a body except a permission answer's (small JSON: once/always/reject).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::audit::{Audit, Record, Who};
use crate::policy::plan::{AuditKind, last_param};

pub(crate) struct Pending {
    pub kind: AuditKind,
    base: Record,
    /// The permission or question the answer is for, or the terminal.
    request: Option<String>,
    /// The request body's declared size (prompts, shell commands, patches).
    bytes: Option<u64>,
    /// Without a declared size: the bytes the client sent, counted as they pass.
    pub counted: Option<Arc<AtomicU64>>,
    /// once / always / reject, read from a permission answer's body.
    pub answer: Option<String>,
    /// The session a create answered with.
    pub created: Option<String>,
}

impl Pending {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin(
        kind: AuditKind,
        user: &str,
        project: &str,
        address: IpAddr,
        who: &Who,
        session: Option<&str>,
        pattern: &str,
        upstream_path: &str,
        content_length: Option<u64>,
    ) -> Pending {
        let mut base = Record::new(kind.event())
            .user(user)
            .project(project)
            .address(address)
            .via(who.via, who.id.as_deref());
        if let Some(s) = session {
            base = base.field("session", s);
        }
        let request = match kind {
            AuditKind::PermissionAnswer | AuditKind::QuestionAnswer(_) | AuditKind::Terminal => {
                last_param(pattern, upstream_path).map(str::to_string)
            }
            _ => None,
        };
        let bytes = content_length;
        let sized = matches!(kind, AuditKind::Prompt | AuditKind::Shell | AuditKind::FileWrite);
        Pending {
            kind,
            base,
            request,
            counted: (sized && bytes.is_none()).then(Arc::default),
            bytes,
            answer: None,
            created: None,
        }
    }

    /// Recorded as `event` (a grant's own name for its act: `session_resumed`, `runaway`) when
    /// given, else as the route's kind.
    pub(crate) fn named(mut self, event: Option<&'static str>) -> Pending {
        if let Some(e) = event {
            self.base.event = e;
        }
        self
    }

    /// The terminal's close, recorded when its splice ends (armed once it starts).
    pub(crate) fn terminal_close(&self, audit: &Audit) -> Option<TerminalClose> {
        (self.kind == AuditKind::Terminal).then(|| TerminalClose {
            audit: audit.clone(),
            record: {
                let mut r = self.base.clone();
                r.event = "terminal_close";
                if let Some(id) = &self.request {
                    r = r.field("terminal", id.as_str());
                }
                r
            },
            opened: Instant::now(),
            armed: false,
        })
    }

    /// The record once the status is known. A terminal that did not switch protocols did not open.
    pub(crate) fn finish(self, status: u16) -> Option<Record> {
        if self.kind == AuditKind::Terminal && status != 101 {
            return None;
        }
        let mut r = self.base.field("status", status);
        // The time of the answer, not of the request (a synchronous prompt can take minutes).
        r.ts = crate::audit::record::now_rfc3339();
        match self.kind {
            AuditKind::PermissionAnswer | AuditKind::QuestionAnswer(_) => {
                if let Some(id) = self.request {
                    r = r.field("request", id);
                }
                let answer = match self.kind {
                    AuditKind::QuestionAnswer(a) => Some(a.to_string()),
                    _ => self.answer,
                };
                r = r.field("answer", answer.unwrap_or_else(|| "unknown".into()));
            }
            AuditKind::Terminal => {
                if let Some(id) = self.request {
                    r = r.field("terminal", id);
                }
            }
            AuditKind::Prompt | AuditKind::Shell | AuditKind::FileWrite => {
                let counted = self.counted.map(|c| c.load(Ordering::Relaxed));
                r = r.field("bytes", self.bytes.or(counted));
            }
            AuditKind::SessionCreate => {
                if let Some(id) = self.created {
                    r = r.field("session", id);
                }
            }
            AuditKind::SessionDelete | AuditKind::SessionAbort => {}
        }
        Some(r)
    }
}

/// The answer a permission reply's body gives, when it is one OpenCode knows. Anything else
/// (a message the user typed) is not recorded.
pub(crate) fn permission_answer(body: &serde_json::Value) -> Option<String> {
    crate::policy::permission::answer(body).said.map(str::to_string)
}

pub(crate) struct TerminalClose {
    audit: Audit,
    record: Record,
    opened: Instant,
    armed: bool,
}

impl TerminalClose {
    pub(crate) fn arm(&mut self) {
        self.opened = Instant::now();
        self.armed = true;
    }
}

impl Drop for TerminalClose {
    fn drop(&mut self) {
        if self.armed {
            let mut r = std::mem::replace(&mut self.record, Record::new("terminal_close"));
            r.ts = crate::audit::record::now_rfc3339();
            r = r.field("duration_ms", self.opened.elapsed().as_millis() as u64);
            self.audit.record(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Via;

    const PASSWORD: Who = Who {
        via: Via::Password,
        id: None,
    };

    /// An act of alice's in project `web` (in `session`, when given) from 127.0.0.1.
    fn alices(
        who: &Who,
        kind: AuditKind,
        session: Option<&str>,
        (pattern, path): (&str, &str),
        length: Option<u64>,
    ) -> Pending {
        Pending::begin(
            kind,
            "alice",
            "web",
            "127.0.0.1".parse().unwrap(),
            who,
            session,
            pattern,
            path,
            length,
        )
    }

    #[test]
    fn a_body_without_a_length_is_counted() {
        let shell = ("/session/*/shell", "/session/ses_1/shell");
        let p = alices(&PASSWORD, AuditKind::Shell, Some("ses_1"), shell, None);
        p.counted
            .as_ref()
            .expect("a counter without Content-Length")
            .fetch_add(99, Ordering::Relaxed);
        let v: serde_json::Value = serde_json::from_slice(&p.finish(200).unwrap().to_line()).unwrap();
        assert_eq!(v["bytes"], 99);
    }

    #[test]
    fn only_known_answers_are_kept() {
        let said = |b: &str| permission_answer(&serde_json::from_str(b).unwrap());
        assert_eq!(said(r#"{"response":"once"}"#).as_deref(), Some("once"));
        assert_eq!(said(r#"{"reply":"always","message":"x"}"#).as_deref(), Some("always"));
        assert_eq!(said(r#"{"decision":"reject"}"#).as_deref(), Some("reject"));
        assert_eq!(
            said(r#"{"reply":"reject","response":"once"}"#).as_deref(),
            Some("once"),
            "the most approving reading"
        );
        assert_eq!(said(r#"{"response":"my secret reason"}"#), None);
        assert_eq!(said("null"), None);
    }

    #[test]
    fn a_prompt_record_has_its_size_and_never_its_text() {
        let prompt = ("/session/*/prompt_async", "/session/ses_1/prompt_async");
        let p = alices(&PASSWORD, AuditKind::Prompt, Some("ses_1"), prompt, Some(37));
        let line = String::from_utf8(p.finish(204).unwrap().to_line()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["event"], "prompt");
        assert_eq!(v["bytes"], 37);
        assert_eq!(v["session"], "ses_1");
        assert_eq!(v["status"], 204);
        assert_eq!(v["via"], "password");
    }

    /// Every kind, for a request made with a token: the token's id reaches the line, and (a
    /// record is begun from the canonical request's facts, never its headers) no secret can.
    #[test]
    fn no_credential_of_the_request_reaches_a_record() {
        let who = Who {
            via: Via::Token,
            id: Some("tok_id1".into()),
        };
        for kind in [
            AuditKind::SessionCreate,
            AuditKind::SessionDelete,
            AuditKind::Prompt,
            AuditKind::PermissionAnswer,
            AuditKind::QuestionAnswer("reply"),
            AuditKind::Shell,
            AuditKind::FileWrite,
            AuditKind::Terminal,
        ] {
            let path = ("/session/*/x/*", "/session/ses_1/x/id_2");
            let p = alices(&who, kind, Some("ses_1"), path, Some(12));
            let line = String::from_utf8(p.finish(101).unwrap().to_line()).unwrap();
            assert!(!line.contains("Basic") && !line.contains("ocgw"), "{kind:?}: {line}");
            assert!(line.contains("tok_id1"), "the token's id, not the token: {line}");
        }
    }

    #[test]
    fn a_terminal_that_did_not_switch_protocols_is_not_recorded() {
        let who = Who {
            via: Via::Ticket,
            id: None,
        };
        let connect = ("/pty/*/connect", "/pty/pty_1/connect");
        let p = alices(&who, AuditKind::Terminal, None, connect, None);
        assert!(p.finish(403).is_none());
    }
}
