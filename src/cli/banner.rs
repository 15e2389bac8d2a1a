//! The start's banner: what to run next, each command on a line of its own and typed as it runs
//! from the folder the gateway was started in (issue 38: after `cargo run --release -- serve`
//! the printed `opencode-gateway …` named a program that was not installed), the model each
//! project's server answers with (and a warning with the fix when it will likely fail), and a
//! first user's password, framed, last: the one thing to copy before it scrolls away.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::gateway::Gateway;
use crate::gateway::state::Upstream;
use crate::support::invocation::typed;
use crate::upstream::supervise::Status;

/// How long the banner waits for the servers started with the gateway to say their model: a
/// first start of OpenCode takes a few seconds, and its answer belongs in what is read first.
const MODEL_WAIT: Duration = Duration::from_secs(30);

pub(crate) struct Banner {
    settings: Settings,
    gateway: Arc<Gateway>,
    https: SocketAddr,
    http: Option<SocketAddr>,
    ssh: Option<SocketAddr>,
    first_user: Option<(String, String)>,
}

impl Banner {
    pub(crate) fn new(settings: &Settings, running: &crate::Running, first_user: Option<(String, String)>) -> Banner {
        Banner {
            settings: settings.clone(),
            gateway: running.gateway.clone(),
            https: running.https,
            http: running.http,
            ssh: running.ssh,
            first_user,
        }
    }

    /// Once every server started with the gateway said its model (or `MODEL_WAIT` passed).
    pub(crate) async fn print(self) {
        let deadline = Instant::now() + MODEL_WAIT;
        let models = loop {
            let models = self.models();
            if models.values().all(|m| m.is_some()) || Instant::now() >= deadline {
                break models;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // ok: the password printed here is the one just generated for the operator, shown this once.
        print!("{}", self.text(&models));
    }

    /// Each spawned project's model line, `None` while its server is still starting.
    fn models(&self) -> HashMap<String, Option<String>> {
        let state = self.gateway.state();
        let status_cmd = self.again("status");
        state
            .projects
            .values()
            .filter_map(|p| match &p.upstream {
                Upstream::Supervised(s) => Some((p.name.to_string(), model_line(s, &status_cmd))),
                Upstream::Fixed(_) => None,
            })
            .collect()
    }

    /// `opencode-gateway <args>` as typed here, with `-c` where needed.
    fn again(&self, args: &str) -> String {
        super::again(&self.settings.path, args)
    }

    fn text(&self, models: &HashMap<String, Option<String>>) -> String {
        let settings = &self.settings;
        // The user the commands name: the one just made, else the only one there is.
        let only = (settings.users.len() == 1).then(|| settings.users[0].name.as_str());
        let (user, pw) = match &self.first_user {
            Some((u, p)) => (u.as_str(), p.as_str()),
            None => (only.unwrap_or("<user>"), "<password>"),
        };
        let reach = self
            .gateway
            .doors
            .ports
            .get()
            .map_or_else(
                || crate::reach::Reach::new(settings, Some(self.https.port())),
                |p| crate::reach::Reach::bound(settings, p),
            )
            .with_named(crate::reach::named_host(|n| self.gateway.doors.certs.covers(n)));
        let mut out = format!("\nopencode-gateway is serving {}\n", reach.base());
        out += &super::banner_ca::trust_the_ca(settings, self.http, &reach);
        out += &format!("control room (log in with the form): {}/\n", reach.login());
        out += &format!("pair a phone:\n  {}\n", self.again(&format!("pair {user}")));
        if let Some(named) = reach.named_origin() {
            out += &passkeys_line(&named);
        }
        let client = Client {
            ca: super::banner_ca::node_extra_ca(settings),
            opencode: opencode_typed(settings),
            user,
            pw,
        };
        for p in &settings.projects {
            out += &self.project(p, &reach, &client, models.get(&p.name));
        }
        if let (Some(cfg), Some(addr)) = (&settings.ssh, self.ssh) {
            out += &format!(
                "\nSSH host key:\n{}",
                crate::front::ssh::host_key::describe(&cfg.host_key, addr)
            );
        }
        let recover = [
            format!("    {}", self.again(&format!("user passwd {user}"))),
            format!("    {}", self.again("reload")),
        ];
        match &self.first_user {
            Some((u, p)) => {
                let mut lines = vec![
                    format!("Created gateway user {u:?}. Its password, shown only this once:"),
                    String::new(),
                    format!("    {p}"),
                    String::new(),
                    "Only its argon2id hash was written. Lost it? Set a new one, then reload:".into(),
                ];
                lines.extend(recover);
                out += &framed(&lines);
            }
            None => {
                out += &format!(
                    "\nforgot the password? set a new one, then reload:\n{}\n",
                    recover.join("\n")
                )
            }
        }
        out
    }

    fn project(
        &self,
        p: &crate::config::Project,
        reach: &crate::reach::Reach,
        client: &Client,
        model: Option<&Option<String>>,
    ) -> String {
        if let Some(why) = crate::upstream::supervise::cannot_start(&self.settings, p) {
            return format!("\nproject {}: NOT RUNNING\n  {why}\n", p.name);
        }
        let mut out = format!("\nproject {}:\n", p.name);
        match model {
            Some(Some(line)) => out += line,
            Some(None) => {
                out += &format!(
                    "  model: not known yet, its server is still starting (`{}` shows it)\n",
                    self.again("status")
                )
            }
            None => {}
        }
        let at = reach.project(&p.name);
        let dialect = crate::upstream::supervise::local_dialect(&self.settings, p);
        let token_command = self.again(&format!("token create {} --projects {}", client.user, p.name));
        let c = crate::policy::dialect::Client {
            ca: &client.ca,
            opencode: &client.opencode,
            user: client.user,
            password: client.pw,
            token_command: &token_command,
        };
        for line in dialect.login_lines(&c) {
            out += &format!("  {line}\n");
        }
        out += &format!("  {}\n", dialect.attach(&at, &c));
        out += &format!("  {}\n", dialect.run(&at, &c, "hello"));
        if let Some(web) = reach.web_ui(&p.name) {
            out += &format!("  web UI: {web}   (trust the CA in your browser)\n");
        }
        if let Some(ssh) = self.ssh {
            out += &format!(
                "  over SSH, the first forwards while the second attaches through it:\n  {}\n  {}\n",
                crate::reach::ssh_forward(&p.name, client.user, ssh, Some(reach.host())),
                dialect.attach("http://127.0.0.1:4096", &c)
            );
        }
        out
    }
}

/// Where passkeys work when the login host is an address (issue 38): the named host, which a
/// phone must resolve by multicast DNS.
pub(crate) fn passkeys_line(named: &str) -> String {
    format!(
        "passkeys: {named} (by name, not by address: the portal's \"Add a passkey\" button logs a paired phone in there; the phone must resolve the .local name, see docs/phone.md)\n"
    )
}

/// What the attach commands are made of.
struct Client<'a> {
    /// `NODE_EXTRA_CA_CERTS=… ` when the gateway made its own CA.
    ca: String,
    opencode: String,
    user: &'a str,
    pw: &'a str,
}

/// A spawned server's model in a line (with the warning and its fix on the next), or `None`
/// while a server started with the gateway has not said yet.
fn model_line(s: &crate::upstream::supervise::Supervised, status_cmd: &str) -> Option<String> {
    if let Some(seen) = s.model.load_full() {
        let mut line = format!("  model: {}\n", seen.model().unwrap_or("not known"));
        if let Some(warning) = seen.warning() {
            line += &format!("  WARNING: {warning}\n");
        }
        return Some(line);
    }
    match s.status() {
        Status::Waiting => Some(format!(
            "  model: told when its server starts, at the first request (`{status_cmd}` shows it)\n"
        )),
        Status::Starting | Status::Ready(_) => None,
        // Not running: its own line says why; the model is asked once it runs.
        Status::Failed(_) | Status::NotRunning(_) | Status::Stopped => Some(String::new()),
    }
}

/// The `opencode` a local spawned project's server uses, as typed here (`opencode` when that is
/// the one on PATH): the client the attach commands run is the same install.
fn opencode_typed(settings: &Settings) -> String {
    settings
        .projects
        .iter()
        .find_map(|p| crate::upstream::supervise::local_opencode(settings, p))
        .map_or_else(|| "opencode".into(), |bin| typed(&bin, "opencode"))
}

/// Lines in a box drawn with ASCII, wide enough for the longest.
fn framed(lines: &[String]) -> String {
    let width = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let rule = format!("+{}+\n", "-".repeat(width + 2));
    let mut out = format!("\n{rule}");
    for l in lines {
        out += &format!("| {l}{} |\n", " ".repeat(width - l.chars().count()));
    }
    out + &rule
}
