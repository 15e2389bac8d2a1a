//! `trigger list|fire|pause|resume`: ask the running gateway over its control socket
//! (`front/control_triggers.rs`).

use std::path::Path;

use anyhow::{Context, bail};

use super::admin_client::{request, request_with};
use crate::cli::args::TriggerAction;

pub fn trigger(config: &Path, action: TriggerAction) -> anyhow::Result<()> {
    let encode = crate::web::form::encode;
    let (code, body) = match &action {
        TriggerAction::List => request(config, "GET", "/triggers")?,
        TriggerAction::Fire { name, payload } => {
            let body = match payload {
                Some(file) => {
                    std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
                }
                None => String::new(),
            };
            request_with(config, "POST", &format!("/trigger/fire?name={}", encode(name)), &body)?
        }
        TriggerAction::Pause { name } => request(config, "POST", &format!("/trigger/pause?name={}", encode(name)))?,
        TriggerAction::Resume { name } => request(config, "POST", &format!("/trigger/resume?name={}", encode(name)))?,
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    if code != 200 {
        bail!("{}", v["error"].as_str().unwrap_or(body.trim()));
    }
    match action {
        TriggerAction::List => print_list(&v),
        TriggerAction::Fire { name, .. } => {
            println!("fired {name}: session {}", v["session"].as_str().unwrap_or("?"));
        }
        TriggerAction::Pause { name } => println!("paused {name} (on every gateway of the state database)"),
        TriggerAction::Resume { name } => println!("resumed {name}"),
    }
    Ok(())
}

fn print_list(v: &serde_json::Value) {
    let all = v["triggers"].as_array().cloned().unwrap_or_default();
    if all.is_empty() {
        println!("no [[trigger]] in the config");
    }
    for t in all {
        let s = |k: &str| t[k].as_str().unwrap_or("-").to_string();
        let when = match (t["next"].as_str(), t["endpoint"].as_str()) {
            (Some(next), _) => format!("next {next}"),
            (None, Some(endpoint)) => format!("POST {endpoint}"),
            _ => "-".into(),
        };
        let paused = match t["paused_why"].as_str() {
            Some(why) => format!("  PAUSED ({why})"),
            None => String::new(),
        };
        println!(
            "{}  {}  project {}  as {}  policy {}  {when}{paused}",
            s("name"),
            s("kind"),
            s("project"),
            s("run_as_user"),
            s("policy")
        );
        for run in t["runs"].as_array().into_iter().flatten() {
            println!("    {}", run_line(run));
        }
    }
}

/// One run, as `trigger list` prints it: when, outcome, session, cost, why it failed.
fn run_line(run: &serde_json::Value) -> String {
    let s = |k: &str| run[k].as_str().unwrap_or("-").to_string();
    let cost = run["usd"].as_f64().map_or(String::new(), |usd| format!("  ${usd:.4}"));
    let why = match s("detail").as_str() {
        "-" | "" => String::new(),
        d => format!("  ({d})"),
    };
    format!(
        "{}  {}  session {}{cost}{why}",
        s("started"),
        s("outcome"),
        s("session")
    )
}
