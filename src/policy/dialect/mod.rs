//! The version-specific part: everything that differs between OpenCode's major versions, in one
//! place the rest of the gateway asks (the route table, the health and document endpoints, the
//! spawn command and its ready line, the client commands printed). A project's dialect is known
//! from its server's answers (`Endpoint::read_api` tries each dialect's health endpoint) or, for a
//! spawned server, from its executable's `--version`. A third version adds a file here, not
//! branches elsewhere.

mod v1;
mod v2;

use super::table::Table;

pub use v1::V1;
pub use v2::V2;

/// What one OpenCode major version does its own way.
pub trait Dialect: Sync + Send + std::fmt::Debug {
    /// `1.x`, `2.x`: how `status`, `doctor` and the portal name it.
    fn family(&self) -> &'static str;
    /// The reviewed route table for this version.
    fn table(&self) -> &'static Table;
    /// The authenticated endpoint that answers the server's version as JSON.
    fn health_path(&self) -> &'static str;
    /// Where its API document (OpenAPI) is.
    fn doc_path(&self) -> &'static str;
    /// The version the answer to [`Self::health_path`] names: `None` when the answer is not this
    /// version's (OpenCode 2 answers unknown paths, 1.x's health included, with its web UI's
    /// `index.html`, which proves nothing).
    fn version_in_health(&self, answer: &[u8]) -> Option<String>;
    /// The version `opencode --version` printed, when it is this major version's.
    fn version_in_output(&self, output: &str) -> Option<String>;
    /// Where one session is read (its id as the forwarded request spells it), to learn its folder.
    fn session_path(&self, id: &str) -> String;
    /// The folder a session lives in, from the answer to [`Self::session_path`].
    fn session_directory<'v>(&self, answer: &'v serde_json::Value) -> Option<&'v str>;
    /// The arguments of `opencode …` that serve on `127.0.0.1:port`.
    fn serve_args(&self, port: u16) -> Vec<String>;
    /// Does this line of the server's standard output say it listens on `port`?
    fn ready_line(&self, line: &str, port: u16) -> bool;
    /// The server stops when its standard input closes (so it gets a pipe the gateway holds).
    fn stops_with_stdin(&self) -> bool;
    /// What to run once before this version's clients can log in (2.x: a token in the
    /// environment), exactly as printed.
    fn login_lines(&self, client: &Client<'_>) -> Vec<String>;
    /// The command that opens this version's terminal UI on the server at `url`.
    fn attach(&self, url: &str, client: &Client<'_>) -> String;
    /// The command that sends one prompt to the server at `url` and prints the answer.
    fn run(&self, url: &str, client: &Client<'_>, prompt: &str) -> String;
}

/// What printed client commands are made of.
pub struct Client<'a> {
    /// `NODE_EXTRA_CA_CERTS=… ` when the gateway made its own CA, else empty.
    pub ca: &'a str,
    /// `opencode` as the person types it.
    pub opencode: &'a str,
    pub user: &'a str,
    /// The password, as it may be printed (the first user's, shown once), or a placeholder.
    pub password: &'a str,
    /// The command that makes a token for the user and prints it (OpenCode 2's clients send only a
    /// password, as the fixed user `opencode`: a gateway token names the user).
    pub token_command: &'a str,
}

/// Every dialect, the one tried first first (1.x, whose health endpoint is cheapest to tell).
pub static ALL: &[&'static dyn Dialect] = &[&V1, &V2];

/// The dialect whose executable printed `output` for `--version`.
pub fn from_version_output(output: &str) -> Option<(&'static dyn Dialect, String)> {
    ALL.iter().find_map(|d| d.version_in_output(output).map(|v| (*d, v)))
}

/// The dialect an npm package's `package.json` names (`opencode-ai`, `@opencode/cli`, or one of
/// their platform packages, whose `bin/` holds the executable), by its version's major.
pub fn from_package_json(json: &str) -> Option<(&'static dyn Dialect, String)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let name = v.get("name")?.as_str()?;
    let version = v.get("version")?.as_str()?;
    if !(name.starts_with("opencode") || name.starts_with("@opencode/")) {
        return None;
    }
    let major = version.split('.').next()?;
    let dialect: &'static dyn Dialect = match major {
        "1" => &V1,
        "2" => &V2,
        _ => return None,
    };
    Some((dialect, version.to_string()))
}

/// `prefix/<id>`, the id one segment spelt the way the forwarded request spells it.
pub(super) fn segment_under(prefix: &str, id: &str) -> String {
    let mut path = String::from(prefix);
    super::canonical::push_segment(&mut path, id);
    path
}

/// The `version` string field of a JSON object answer.
pub(super) fn version_field(answer: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(answer).ok()?;
    v.get("version")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests;
