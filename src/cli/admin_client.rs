//! `status` and `reload`: talk to the running gateway over its control socket
//! (`<state_dir>/control/gateway.sock`, reachable only by the gateway's OS user).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

pub(crate) fn request(config: &Path, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    request_with(config, method, path, "")
}

/// A request with a JSON body (empty: none).
pub(crate) fn request_with(config: &Path, method: &str, path: &str, body: &str) -> anyhow::Result<(u16, String)> {
    let settings = crate::config::load(config)?;
    let socket = crate::front::control::socket_path(&settings);
    let mut s = UnixStream::connect(&socket).with_context(|| {
        format!(
            "the gateway's control socket {} does not answer: is the gateway running with this config, and are you its OS user?",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let kind = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{kind}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

pub(crate) fn status(config: &Path) -> anyhow::Result<()> {
    let (code, body) = request(config, "GET", "/status")?;
    if code != 200 {
        bail!("the gateway answered {code}: {body}");
    }
    let v: serde_json::Value = serde_json::from_str(&body).context("the status is not JSON")?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

pub(crate) fn restart(config: &Path, project: &str) -> anyhow::Result<()> {
    let path = format!("/restart?project={}", crate::web::form::encode(project));
    let (code, body) = request(config, "POST", &path)?;
    if code != 200 {
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        bail!("{}", v["error"].as_str().unwrap_or(body.trim()));
    }
    println!(
        "restarting project {project}'s server (`{}` shows when it is ready)",
        super::again(config, "status")
    );
    Ok(())
}

pub(crate) fn reload(config: &Path) -> anyhow::Result<()> {
    let (code, body) = request(config, "POST", "/reload")?;
    if code != 200 {
        bail!("reload refused ({code}): {body}");
    }
    println!("reloaded");
    // What it could not apply: named, never dropped (issue 38).
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let later: Vec<&str> = v["needs_restart"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str())
        .collect();
    if !later.is_empty() {
        println!("needs a restart: {}", later.join(", "));
        println!("(everything else in the file applies now; restart the gateway to apply these)");
    }
    Ok(())
}
