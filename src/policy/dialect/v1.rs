//! OpenCode 1.x (npm `opencode-ai`, 1.18.33): one server per folder, `/global/health` and
//! `/doc`, `serve --port`, clients that `attach` with `-u`/`-p`.

use super::{Client, Dialect, version_field};
use crate::policy::table::{self, Table};

#[derive(Debug)]
pub struct V1;

impl Dialect for V1 {
    fn family(&self) -> &'static str {
        "1.x"
    }

    fn table(&self) -> &'static Table {
        &table::V1
    }

    fn health_path(&self) -> &'static str {
        "/global/health"
    }

    fn doc_path(&self) -> &'static str {
        "/doc"
    }

    fn version_in_health(&self, answer: &[u8]) -> Option<String> {
        version_field(answer).filter(|v| v.starts_with("1."))
    }

    /// 1.18.33 prints `1.18.33`.
    fn version_in_output(&self, output: &str) -> Option<String> {
        let v = output.trim();
        (v.starts_with("1.") && v.chars().all(|c| c.is_ascii_digit() || c == '.')).then(|| v.to_string())
    }

    fn session_path(&self, id: &str) -> String {
        super::segment_under("/session", id)
    }

    /// `{"id", "directory", …}`.
    fn session_directory<'v>(&self, answer: &'v serde_json::Value) -> Option<&'v str> {
        answer.get("directory")?.as_str()
    }

    fn serve_args(&self, port: u16) -> Vec<String> {
        ["serve", "--hostname", "127.0.0.1", "--port", &port.to_string()]
            .map(String::from)
            .to_vec()
    }

    /// `opencode server listening on http://127.0.0.1:N`.
    fn ready_line(&self, line: &str, port: u16) -> bool {
        let url = format!("listening on http://127.0.0.1:{port}");
        line.split_once(&url)
            .is_some_and(|(_, rest)| !rest.starts_with(|c: char| c.is_ascii_digit()))
    }

    fn stops_with_stdin(&self) -> bool {
        false
    }

    fn login_lines(&self, _: &Client<'_>) -> Vec<String> {
        Vec::new()
    }

    fn attach(&self, url: &str, c: &Client<'_>) -> String {
        let Client { ca, opencode, .. } = c;
        if url.starts_with("http://127.0.0.1") {
            // Through an SSH forward: the forward is the login.
            return format!("{opencode} attach {url}");
        }
        format!("{ca}{opencode} attach {url} -u {} -p '{}'", c.user, c.password)
    }

    fn run(&self, url: &str, c: &Client<'_>, prompt: &str) -> String {
        let Client { ca, opencode, .. } = c;
        format!(
            "{ca}{opencode} run --attach {url} -u {} -p '{}' \"{prompt}\"",
            c.user, c.password
        )
    }
}
