//! `status` and `reload`: talk to the running gateway's loopback admin listener.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

fn request(config: &Path, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let settings = crate::config::load(config)?;
    let Some(admin) = settings.admin else {
        bail!(
            "{} has no [admin] listener; add one (listen = \"127.0.0.1:9090\") or send SIGHUP to the gateway",
            config.display()
        );
    };
    let mut s = TcpStream::connect_timeout(&admin.listen, Duration::from_secs(3)).with_context(|| {
        format!(
            "the gateway's admin listener {} does not answer: is the gateway running?",
            admin.listen
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        admin.listen
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

pub fn status(config: &Path) -> anyhow::Result<()> {
    let (code, body) = request(config, "GET", "/status")?;
    if code != 200 {
        bail!("the gateway answered {code}: {body}");
    }
    let v: serde_json::Value = serde_json::from_str(&body).context("the status is not JSON")?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

pub fn reload(config: &Path) -> anyhow::Result<()> {
    let (code, body) = request(config, "POST", "/reload")?;
    if code != 200 {
        bail!("reload refused ({code}): {body}");
    }
    println!("reloaded");
    Ok(())
}
