//! OpenCode 2.x (npm `@opencode/cli`, 2.1.2): one server for every folder (chosen per request
//! by `location`), `/api/info` and `/openapi.json`, `serve --stdio` (the password leaves its own
//! environment, and it stops when its input closes), clients that take `--server` and send the
//! fixed user `opencode` with `OPENCODE_SERVER_PASSWORD`.

use super::{Client, Dialect, version_field};
use crate::policy::table::{self, Table};

#[derive(Debug)]
pub struct V2;

impl Dialect for V2 {
    fn family(&self) -> &'static str {
        "2.x"
    }

    fn table(&self) -> &'static Table {
        &table::V2
    }

    /// `{"version":"2.1.2","pid":…,"urls":[…],…}`, authenticated.
    fn health_path(&self) -> &'static str {
        "/api/info"
    }

    fn doc_path(&self) -> &'static str {
        "/openapi.json"
    }

    fn version_in_health(&self, answer: &[u8]) -> Option<String> {
        version_field(answer).filter(|v| v.starts_with("2."))
    }

    /// 2.1.2 prints `opencode v2.1.2`.
    fn version_in_output(&self, output: &str) -> Option<String> {
        let v = output.trim().strip_prefix("opencode v")?;
        (v.starts_with("2.") && v.chars().all(|c| c.is_ascii_digit() || c == '.')).then(|| v.to_string())
    }

    fn session_path(&self, id: &str) -> String {
        super::segment_under("/api/session", id)
    }

    /// `{"data":{"id", "location":{"directory"}, …}}`.
    fn session_directory<'v>(&self, answer: &'v serde_json::Value) -> Option<&'v str> {
        answer.get("data")?.get("location")?.get("directory")?.as_str()
    }

    fn serve_args(&self, port: u16) -> Vec<String> {
        [
            "serve",
            "--stdio",
            "--hostname",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ]
        .map(String::from)
        .to_vec()
    }

    /// `{"url":"http://127.0.0.1:N"}`, one JSON line.
    fn ready_line(&self, line: &str, port: u16) -> bool {
        let url = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("url")?.as_str().map(str::to_string));
        url.is_some_and(|u| u.trim_end_matches('/') == format!("http://127.0.0.1:{port}"))
    }

    fn stops_with_stdin(&self) -> bool {
        true
    }

    /// Its clients send `opencode:$OPENCODE_SERVER_PASSWORD` and ignore credentials in the URL:
    /// a gateway token there names the user, whatever the name sent.
    fn login_lines(&self, c: &Client<'_>) -> Vec<String> {
        vec![format!("export OPENCODE_SERVER_PASSWORD=$({})", c.token_command)]
    }

    fn attach(&self, url: &str, c: &Client<'_>) -> String {
        let ca = if url.starts_with("http://127.0.0.1") { "" } else { c.ca };
        format!("{ca}{} --server {url}", c.opencode)
    }

    fn run(&self, url: &str, c: &Client<'_>, prompt: &str) -> String {
        format!("{}{} run --server {url} \"{prompt}\"", c.ca, c.opencode)
    }
}
