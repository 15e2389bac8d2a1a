//! What the inbox holds and a page reads: server states, sessions, cards (permission requests and
//! questions) and how a request was resolved. Plain data, serialisable as JSON.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum ServerState {
    Running,
    Starting,
    /// Not running, and not failing: an on-demand server nobody asked for yet, or stopped.
    Stopped {
        reason: String,
    },
    Failed {
        reason: String,
    },
    /// It could not be started at all.
    NotRunning {
        reason: String,
    },
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum SessionStatus {
    Idle,
    Busy,
    Retry { attempt: u64, message: String, next: u64 },
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Session {
    pub id: String,
    pub title: String,
    /// Set for subagent (child) sessions.
    pub parent_id: Option<String>,
    pub status: SessionStatus,
    pub last_activity_ms: u64,
    /// The session's running totals as OpenCode reports them on the session itself
    /// (`session.updated`'s `info.cost` / `info.tokens`, and `GET /session`).
    pub cost: Option<f64>,
    pub tokens: Option<Tokens>,
    /// What the gateway's guard said of it (stopped for its budget, a runaway), until its next
    /// turn starts.
    pub flag: Option<Flag>,
    /// The failure its last finished tool calls (or retries) ended with, and how many times in a
    /// row: the runaway guard's count.
    #[serde(skip)]
    pub streak: Option<(String, u32)>,
    /// When the model last said something in it (a message or a part of one).
    #[serde(skip)]
    pub last_said_ms: u64,
    /// When OpenCode made it (`info.time.created`; 0: not said).
    #[serde(skip)]
    pub created_ms: u64,
    /// Messages older than the session itself whose cost it took over: a fork's copies.
    #[serde(skip)]
    pub copied: Vec<String>,
    /// The error OpenCode said ended its turn (`session.error`), until its next turn starts.
    #[serde(skip)]
    pub error: Option<String>,
    /// Why its prompt waits for room in the fleet's caps ("queued: 1 session of yours is busy
    /// (fleet.max_busy_per_user = 1)"), while it does.
    pub queued: Option<String>,
    /// The agent's last words in it, one line (`words.rs`).
    pub last_words: Option<String>,
    /// Its last assistant message (whose text parts are the agent's words).
    #[serde(skip)]
    pub answering: Option<String>,
    /// When its running turn began (ms since the epoch; 0: idle since it was first seen).
    #[serde(skip)]
    pub busy_since_ms: u64,
}

impl Session {
    /// A session known by its id only (an event named it before any list did).
    pub(crate) fn new(id: &str, now: u64) -> Session {
        Session {
            id: id.to_string(),
            title: String::new(),
            parent_id: None,
            status: SessionStatus::Idle,
            last_activity_ms: now,
            cost: None,
            tokens: None,
            flag: None,
            streak: None,
            last_said_ms: now,
            created_ms: 0,
            copied: Vec::new(),
            error: None,
            queued: None,
            last_words: None,
            answering: None,
            busy_since_ms: 0,
        }
    }
}

/// Why the guard flagged a session.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FlagWhy {
    /// Its spend reached a budget.
    Budget,
    /// It failed the same way `same_failure` times in a row.
    SameFailure,
    /// It was busy `max_busy_minutes` without a word from the model.
    Silent,
}

/// The guard's word on a session, for the pages.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub(crate) struct Flag {
    pub why: FlagWhy,
    /// The guard stopped it (`false`: only reported, with `notify`, or its abort not answered).
    pub stopped: bool,
    /// The guard asked OpenCode to stop it: a turn that ends now ended by the guard's abort,
    /// even before the abort's answer arrives (which may come after the session's idle event).
    pub stopping: bool,
    /// What happened, in words ("retried the same failure twice").
    pub says: String,
    /// The failure's first line, or the budget's figures; shown to the project's users, never
    /// put in a notification.
    pub detail: String,
    pub at_ms: u64,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Permission {
    pub id: String,
    pub session_id: String,
    /// OpenCode's `permission` (`bash`, `edit`, …).
    pub tool: String,
    /// The first lines of `metadata.command`, or of the diff or patch in `metadata`.
    pub lines: Vec<String>,
    /// More lines (or longer ones) than shown.
    pub truncated: bool,
    pub patterns: Vec<String>,
    /// What "always" would store.
    pub always: Vec<String>,
    pub asked_at_ms: u64,
    /// `metadata.filepath`: the absolute path a file tool asks for, as the tool resolved it
    /// (not through links), for the policy's judgement (`paths.rs`); never shown.
    #[serde(skip)]
    pub filepath: Option<String>,
    /// `metadata.command`: a shell tool's whole command line, which OpenCode's patterns may not
    /// hold whole (a redirect on a compound statement is in none), for the policy's judgement;
    /// never shown beyond `lines`.
    #[serde(skip)]
    pub command: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct QuestionOption {
    pub label: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct QuestionItem {
    pub question: String,
    #[serde(default)]
    pub header: String,
    #[serde(default)]
    pub options: Vec<QuestionOption>,
    #[serde(default)]
    pub multiple: bool,
    /// Whether a free-text answer is allowed (OpenCode's default is yes).
    #[serde(default)]
    pub custom: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Question {
    pub id: String,
    pub session_id: String,
    pub questions: Vec<QuestionItem>,
    pub asked_at_ms: u64,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CardKind {
    Permission,
    Question,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "how", rename_all = "snake_case")]
pub(crate) enum Resolution {
    /// The gateway sent the reply (for this user).
    AnsweredHere { by: String },
    /// Answered in the TUI, the web UI, another client, or during a gap in the event stream.
    Elsewhere,
}

#[derive(Clone, Debug, Serialize)]
pub struct Resolved {
    pub project: String,
    pub id: String,
    pub kind: CardKind,
    pub resolved_at_ms: u64,
    #[serde(flatten)]
    pub how: Resolution,
    /// How it was answered, when known: `once`, `always`, `reject` (permissions), `reply`,
    /// `reject` (questions). Unknown for a request found gone after a gap.
    pub answer: Option<String>,
    /// What was asked: the permission's kind (`bash`) or `question`.
    pub tool: String,
    /// The first line of its command or patch, its first pattern, or the question's text.
    pub detail: String,
}

/// A request that just appeared (for notifications).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewCard {
    pub project: String,
    /// The request's id (OpenCode's `per_…`, `que_…`): a message names which request it is about,
    /// so a receiver tells a new request from one told again.
    pub id: String,
    pub kind: CardKind,
    /// `bash`, `edit`, … for permissions; `question` for questions.
    pub tool: String,
}

/// Something the guard wants people told of (a budget warned at or spent, a runaway, a trigger
/// that paused itself). Names the project, the session and why: never a prompt, a command or its
/// output.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Alert {
    pub project: String,
    pub session: String,
    /// The session's title, as OpenCode named it.
    pub title: String,
    pub kind: AlertKind,
    /// Why, in words, with figures ("spent $4.0200 of this session's budget, $5.00").
    pub reason: String,
    /// The guard stopped the session.
    pub stopped: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AlertKind {
    BudgetWarning,
    BudgetSpent,
    Runaway,
    /// A trigger paused itself after failed runs in a row (`gateway/trigger_runs.rs`).
    TriggerPaused,
    /// A session's acceptance test passed: its task waits for a person's review
    /// (`gateway/accept.rs`).
    ReadyForReview,
}

/// What waits for the notifier: a new pending request, or an alert.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Notice {
    Card(NewCard),
    Alert(Alert),
}
