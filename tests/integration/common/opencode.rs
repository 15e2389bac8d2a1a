//! The real OpenCode server (npm `opencode-ai`, pinned, installed by scripts/test.sh into
//! node_modules/) and a small OpenAI-compatible fake model it talks to, so the whole agent loop runs
//! offline: a prompt with RUNBASH makes the model call the bash tool, which needs permission; one
//! with ASKQUESTION makes it ask the user a question (OpenCode's question tool); LOOPBASH makes it
//! call bash again after every result; HANGMODEL makes it never answer; SPAWNTASK makes it start a
//! subagent (OpenCode's task tool; with SPAWNHANG the subagent's model never answers);
//! `RUNCMD: <command>` makes it run that command, and then say
//! what the tool answered (`SAW: …`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::process::Guarded;

pub const ANSWER: &str = "FAKE-ANSWER-42";
/// The fake provider's API key in the model's config: an answer through the gateway never
/// carries it (`provider_secrets.rs`).
pub const FAKE_API_KEY: &str = "SECRET-fake-provider-key-0042";
pub const AFTER_TOOL: &str = "TOOL-FINISHED-7";

/// OpenCode 1.x (npm `opencode-ai`, pinned): scripts/npm-deps.sh links it as `opencode`.
pub fn opencode_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node_modules/.bin/opencode");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/test.sh, which installs opencode-ai@1.18.33",
        bin.display()
    );
    bin
}

/// OpenCode 2.x (npm `@opencode/cli`, pinned): its server and its clients, as `opencode2`.
pub fn opencode2_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node_modules/.bin/opencode2");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/test.sh, which installs @opencode/cli@2.1.2",
        bin.display()
    );
    bin
}

pub struct FakeModel {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicUsize>,
    pub bodies: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
    /// Dollars per million input and output tokens, written into the model's config so that
    /// OpenCode computes a cost (see [`FakeModel::priced`]).
    price: Option<(f64, f64)>,
    /// The bash tool runs without asking (see [`FakeModel::allowing_bash`]).
    bash_allowed: bool,
    /// What must hold before the model answers (see [`FakeModel::answer_when`]).
    gate: Gate,
}

/// A condition the model waits for (polled, bounded) before it answers; none: it answers after
/// its moment.
type Gate = Arc<Mutex<Option<Arc<dyn Fn() -> bool + Send + Sync>>>>;

/// How long the model waits for its gate before it answers anyway (the test's own assertion then
/// says what was missing).
const GATE_WAIT: Duration = Duration::from_secs(60);

/// Wait, bounded by [`GATE_WAIT`], until the gate (if any) holds.
async fn pass(gate: &Gate) {
    let Some(holds) = gate.lock().unwrap().clone() else {
        return;
    };
    let deadline = tokio::time::Instant::now() + GATE_WAIT;
    while tokio::time::Instant::now() < deadline {
        let holds = holds.clone();
        if tokio::task::spawn_blocking(move || holds()).await.unwrap_or(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The usage the fake model reports with every answer (OpenAI's `stream_options.include_usage`
/// chunk, which OpenCode asks for).
pub const USAGE_TOKENS: (u64, u64) = (1000, 500);

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let v = serde_json::json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {v}\n\n")
}

/// A prompt with HANGMODEL: the model never answers its agent's requests (title requests, which
/// carry no tools, are answered).
fn hangs(body: &serde_json::Value) -> bool {
    body["tools"].as_array().is_some_and(|t| !t.is_empty())
        && body["messages"].as_array().is_some_and(|m| {
            m.iter()
                .any(|m| m["role"] == "user" && m.to_string().contains("HANGMODEL"))
        })
}

/// The text of a chat message (a string, or the text parts of an array).
fn text_of(m: &serde_json::Value) -> String {
    match &m["content"] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// `RUNCMD: <command>` in a user's prompt: the model runs that command with the bash tool.
fn runcmd(m: &serde_json::Value) -> Option<String> {
    let text = text_of(m);
    let at = text.find("RUNCMD: ")?;
    // `opencode run` 1.18.33 sends a prompt with spaces in quotes (`"RUNCMD: …"`).
    let line = text[at + 8..].lines().next().unwrap_or_default().trim();
    Some(line.strip_suffix('"').unwrap_or(line).to_string())
}

/// `RUNWRITE: <path>` or `RUNREAD: <path>` in a user's prompt: the model writes (OpenCode's
/// `write` tool, with a fixed content) or reads (`read`) that file, then says what the tool
/// answered (`SAW: …`).
fn file_tool(m: &serde_json::Value) -> Option<(&'static str, serde_json::Value)> {
    let text = text_of(m);
    let (tool, at) = [("write", "RUNWRITE: "), ("read", "RUNREAD: ")]
        .into_iter()
        .find_map(|(tool, word)| text.find(word).map(|at| (tool, at + word.len())))?;
    let line = text[at..].lines().next().unwrap_or_default().trim();
    let path = line.strip_suffix('"').unwrap_or(line).to_string();
    Some(match tool {
        "write" => (
            tool,
            serde_json::json!({"filePath": path, "content": "written by the fake model\n"}),
        ),
        _ => (tool, serde_json::json!({"filePath": path})),
    })
}

/// [`FakeModel::start`] with this "command": the model runs the commands its prompt names in
/// backticks, in order, one a step, then says what the last one answered (`SAW: …`), as a real
/// model told "run the tests (`npm test`), then push (`git push origin main`)" would.
pub const BACKTICKED: &str = "<the prompt's backticked commands>";

/// The next backticked command of the conversation's first user prompt: the one after as many
/// as there are tool results so far.
fn next_backticked(messages: &[serde_json::Value]) -> Option<String> {
    let prompt = text_of(messages.iter().find(|m| m["role"] == "user")?);
    let done = messages.iter().filter(|m| m["role"] == "tool").count();
    prompt.split('`').skip(1).step_by(2).nth(done).map(str::to_string)
}

/// The stream the fake model answers a request with.
fn answer(body: &serde_json::Value, bash_command: &str) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let last = messages.last().cloned().unwrap_or_default();
    let last_text = last.to_string();
    let mut out = String::new();
    // LOOPBASH: a runaway agent, asking for the bash tool again after every result.
    let looping = messages
        .iter()
        .any(|m| m["role"] == "user" && m.to_string().contains("LOOPBASH"));
    let backticked = (bash_command == BACKTICKED && has_tools)
        .then(|| next_backticked(&messages))
        .flatten();
    if let Some(command) = backticked {
        let args = serde_json::json!({"command": command, "description": "as the prompt says"}).to_string();
        out += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": format!("call_b{}", messages.len()), "type": "function", "function": {"name": "bash", "arguments": args}}]}),
            None,
        );
        out += &chunk(serde_json::json!({}), Some("tool_calls"));
    } else if has_tools && looping {
        let args = serde_json::json!({"command": bash_command, "description": "again"}).to_string();
        out += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": format!("call_{}", messages.len()), "type": "function", "function": {"name": "bash", "arguments": args}}]}),
            None,
        );
        out += &chunk(serde_json::json!({}), Some("tool_calls"));
    } else if has_tools
        && last["role"] == "user"
        && let Some((tool, args)) = file_tool(&last)
    {
        out += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_f", "type": "function", "function": {"name": tool, "arguments": args.to_string()}}]}),
            None,
        );
        out += &chunk(serde_json::json!({}), Some("tool_calls"));
    } else if has_tools
        && last["role"] == "user"
        && let Some(command) = runcmd(&last)
    {
        // RUNCMD: the command the prompt names; after its result the model says what it saw.
        let args = serde_json::json!({"command": command, "description": "as asked"}).to_string();
        out += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_c", "type": "function", "function": {"name": "bash", "arguments": args}}]}),
            None,
        );
        out += &chunk(serde_json::json!({}), Some("tool_calls"));
    } else if has_tools && last["role"] == "user" && last_text.contains("RUNBASH") {
        let args = serde_json::json!({"command": bash_command, "description": "write a marker"}).to_string();
        out += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "bash", "arguments": args}}]}),
            None,
        );
        out += &chunk(serde_json::json!({}), Some("tool_calls"));
    } else if has_tools && last["role"] == "user" && last_text.contains("SPAWNTASK") {
        // OpenCode's task tool: a subagent's session (with `parentID`) answers "hello" (or, with
        // SPAWNHANG, never answers: a child still busy when its parent is stopped).
        let child = if last_text.contains("SPAWNHANG") {
            "HANGMODEL from the parent"
        } else {
            "hello from the parent"
        };
        let args =
            serde_json::json!({"description": "sub work", "prompt": child, "subagent_type": "general"}).to_string();
        out += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_t", "type": "function", "function": {"name": "task", "arguments": args}}]}),
            None,
        );
        out += &chunk(serde_json::json!({}), Some("tool_calls"));
    } else if has_tools && last["role"] == "user" && last_text.contains("ASKQUESTION") {
        // OpenCode's question tool: the session waits for an answer (`question.asked`).
        let args = serde_json::json!({"questions": [{"question": "Which colour?", "header": "Colour",
            "options": [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}]}]})
        .to_string();
        out += &chunk(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_q", "type": "function", "function": {"name": "question", "arguments": args}}]}),
            None,
        );
        out += &chunk(serde_json::json!({}), Some("tool_calls"));
    } else {
        let asked_cmd = bash_command == BACKTICKED
            || messages
                .iter()
                .any(|m| m["role"] == "user" && (runcmd(m).is_some() || file_tool(m).is_some()));
        let text = match last["role"] == "tool" {
            true if asked_cmd => format!("SAW: {}", text_of(&last)),
            true => AFTER_TOOL.to_string(),
            false => ANSWER.to_string(),
        };
        out += &chunk(serde_json::json!({"role": "assistant", "content": text}), None);
        out += &chunk(serde_json::json!({}), Some("stop"));
    }
    let usage = serde_json::json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model", "choices": [],
        "usage": {"prompt_tokens": USAGE_TOKENS.0, "completion_tokens": USAGE_TOKENS.1, "total_tokens": USAGE_TOKENS.0 + USAGE_TOKENS.1}
    });
    out += &format!("data: {usage}\n\n");
    out += "data: [DONE]\n\n";
    out
}

impl FakeModel {
    /// `bash_command` is what the model asks the bash tool to run when a prompt says RUNBASH.
    pub async fn start(bash_command: &str) -> FakeModel {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener, bash_command)
    }

    /// Like [`FakeModel::start`], on a socket the caller bound (inside a network namespace).
    pub fn start_on(listener: TcpListener, bash_command: &str) -> FakeModel {
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let gate: Gate = Arc::new(Mutex::new(None));
        let (r2, b2, g2) = (requests.clone(), bodies.clone(), gate.clone());
        let cmd = bash_command.to_string();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (requests, bodies, cmd, gate) = (r2.clone(), b2.clone(), cmd.clone(), g2.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (requests, bodies, cmd, gate) =
                            (requests.clone(), bodies.clone(), cmd.clone(), gate.clone());
                        async move {
                            let bytes = req
                                .into_body()
                                .collect()
                                .await
                                .map(|c| c.to_bytes())
                                .unwrap_or_default();
                            let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                            requests.fetch_add(1, Ordering::SeqCst);
                            bodies
                                .lock()
                                .unwrap()
                                .push(String::from_utf8_lossy(&bytes).into_owned());
                            pass(&gate).await;
                            // A model takes a moment; clients subscribe to events meanwhile.
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            // HANGMODEL: a provider that never answers (the session stays busy).
                            if hangs(&body) {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                            }
                            let mut r = Response::new(Full::new(Bytes::from(answer(&body, &cmd))));
                            r.headers_mut()
                                .insert("content-type", "text/event-stream".parse().unwrap());
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        FakeModel {
            addr,
            requests,
            bodies,
            task,
            price: None,
            bash_allowed: false,
            gate,
        }
    }

    /// From now on the model answers only once `holds` says so (polled every 20 ms on a blocking
    /// thread, a minute at most). `opencode run --attach` (1.18.33) sends its prompt while its
    /// event stream is still being opened and exits when the prompt's answer comes, whether or
    /// not an event arrived; OpenCode's stream joins the bus only after its first event. A test
    /// that asserts what the client printed from events holds the model until the client's
    /// stream is open (see [`crate::common::gateway::Gateway::events_opened_after_now`]), so
    /// the events after the model's answer reach it however loaded the machine is.
    pub fn answer_when(&self, holds: impl Fn() -> bool + Send + Sync + 'static) {
        *self.gate.lock().unwrap() = Some(Arc::new(holds));
    }

    /// The model with a price: OpenCode 1.18.33 computes an assistant message's `cost` from the
    /// model's configured `cost` (dollars per million tokens) and the usage the provider reports,
    /// and sums it into the session's `cost` (seen in `session.updated` and `GET /session/{id}`).
    /// With [`USAGE_TOKENS`], each answer costs `(1000 × input + 500 × output) / 1e6`.
    pub fn priced(mut self, input: f64, output: f64) -> FakeModel {
        self.price = Some((input, output));
        self
    }

    /// The bash tool allowed without a permission request (an unattended agent).
    pub fn allowing_bash(mut self) -> FakeModel {
        self.bash_allowed = true;
        self
    }

    /// OpenCode config using this model for everything, with bash and edit asking permission.
    pub fn config_json(&self) -> String {
        let mut config = self.base_config();
        if let Some((input, output)) = self.price {
            config["provider"]["fake"]["models"]["fake-model"]["cost"] =
                serde_json::json!({"input": input, "output": output});
        }
        if self.bash_allowed {
            config["permission"]["bash"] = serde_json::json!("allow");
        }
        config.to_string()
    }

    fn base_config(&self) -> serde_json::Value {
        serde_json::json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible", "name": "Fake",
                "options": {"baseURL": format!("http://{}/v1", self.addr), "apiKey": FAKE_API_KEY},
                "models": {"fake-model": {"name": "Fake", "tool_call": true, "limit": {"context": 100000, "output": 4096}}}
            }},
            "model": "fake/fake-model",
            "small_model": "fake/fake-model",
            "permission": {"bash": "ask", "edit": "ask"}
        })
    }
}

/// A real `opencode serve` on an ephemeral port with its own password and private folders.
pub struct OpenCode {
    child: Guarded,
    pub port: u16,
    pub password: String,
    pub project: PathBuf,
    pub log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl OpenCode {
    pub fn start(model: &FakeModel) -> OpenCode {
        Self::start_with(model, |_| {})
    }

    /// [`OpenCode::start`] in a project folder that `prepare` fills first (a git repository, a
    /// link out of it), beside which `outside/` exists.
    pub fn start_with(model: &FakeModel, prepare: impl FnOnce(&std::path::Path)) -> OpenCode {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        let project = project.canonicalize().unwrap();
        prepare(&project);
        let mut password_bytes = [0u8; 18];
        getrandom::fill(&mut password_bytes).unwrap();
        let password = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, password_bytes);
        for attempt in 0..3 {
            let port = super::free_port();
            let mut cmd = Command::new(opencode_bin());
            cmd.args(["serve", "--hostname", "127.0.0.1", "--port", &port.to_string()])
                .current_dir(&project)
                .env("OPENCODE_SERVER_PASSWORD", &password)
                .env("OPENCODE_CONFIG_CONTENT", model.config_json())
                .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                .env("HOME", dir.path())
                .env("XDG_DATA_HOME", dir.path().join("data"))
                .env("XDG_CONFIG_HOME", dir.path().join("config"))
                .env("XDG_CACHE_HOME", dir.path().join("cache"))
                .env("XDG_STATE_HOME", dir.path().join("state"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0);
            // Its process group is stopped if the start-up check below fails, too.
            let mut child = Guarded::group(cmd.spawn().unwrap(), Duration::from_secs(5));
            let log = Arc::new(Mutex::new(String::new()));
            super::pump_lines(child.stdout.take().unwrap(), log.clone());
            super::pump_lines(child.stderr.take().unwrap(), log.clone());
            let needle = format!("listening on http://127.0.0.1:{port}");
            let listening = |log: &str| log.contains(&needle);
            if super::process::ready_or_exited(&mut child, &log, Duration::from_secs(60), "opencode serve", listening) {
                return OpenCode {
                    child,
                    port,
                    password,
                    project,
                    log,
                    _dir: dir,
                };
            }
            eprintln!(
                "opencode serve exited on attempt {attempt} (port {port} taken?):\n{}",
                log.lock().unwrap()
            );
        }
        panic!("opencode serve did not start");
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's own log file (`$XDG_DATA_HOME/opencode/log/*.log`), where it files the
    /// reason behind each error reference (`ref=err_…`) it answers with.
    pub fn server_log(&self) -> String {
        let dir = self._dir.path().join("data/opencode/log");
        let mut out = String::new();
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            out += &std::fs::read_to_string(e.path()).unwrap_or_default();
        }
        out
    }

    /// A file holding the server's password, for the gateway's `upstream_password_file`.
    pub fn password_file(&self, dir: &std::path::Path) -> PathBuf {
        let p = dir.join("upstream.pw");
        std::fs::write(&p, &self.password).unwrap();
        p
    }
}

/// `config` as the user's global OpenCode config under `home` (`~/.config/opencode/opencode.json`):
/// a provider only there is the user's own setup, as `opencode auth login` or an edit leaves it.
pub fn write_user_config(home: &std::path::Path, config: &str) {
    let dir = home.join(".config/opencode");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("opencode.json"), config).unwrap();
}

/// The messages of the only session of `project`, asked through the gateway as `auth`:
/// `run --attach` 1.18.33 prints the model's name, not its answer, so tests read it back.
pub async fn only_session_messages(c: &crate::common::client::Https, project: &str, auth: &str) -> serde_json::Value {
    let (_, sessions) = crate::common::client::json(c, "GET", &format!("/p/{project}/session"), auth, "").await;
    let id = sessions[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {sessions}"));
    let path = format!("/p/{project}/session/{id}/message");
    crate::common::client::json(c, "GET", &path, auth, "").await.1
}
