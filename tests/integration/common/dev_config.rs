//! The committed dev config (`config/gateway.toml`), as the README's first command serves it,
//! moved to ephemeral ports: tests never take fixed ones.

use std::path::Path;

/// The config as committed (HEAD), or as on disk outside a repository.
pub fn committed() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shown = std::process::Command::new("git")
        .args(["show", "HEAD:config/gateway.toml"])
        .current_dir(repo)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match shown {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
        _ => std::fs::read_to_string(repo.join("config/gateway.toml")).unwrap(),
    }
}

/// `text` with its fixed listeners on port 0 and no `public_url` (which names the fixed port):
/// the printed URLs then name the ports bound.
pub fn on_ephemeral_ports(text: &str) -> String {
    for fixed in ["127.0.0.1:8443", "127.0.0.1:9090", "127.0.0.1:2222"] {
        assert!(text.contains(&format!("listen = \"{fixed}\"")), "{fixed}");
    }
    text.replace("listen = \"127.0.0.1:8443\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:9090\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:2222\"", "listen = \"127.0.0.1:0\"")
        .lines()
        .filter(|l| !l.starts_with("public_url"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The one-time password from a first start's banner: the line after the one that announces it.
pub fn printed_password(stdout: &str) -> String {
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("Its password, shown only this once:"))
        .unwrap_or_else(|| panic!("no password printed:\n{stdout}"));
    lines[at + 2]
        .trim_matches(|c: char| c == '|' || c.is_whitespace())
        .to_string()
}

/// The committed LAN config (`config/gateway.lan.toml`) with each of its fixed listeners on port
/// 0, their addresses kept: run in a network namespace of its own, "every address" is that
/// namespace's loopback and LAN address, and the gateway finds the LAN address itself, as on a
/// home network. It has no `public_url`, so the printed URLs name the ports bound.
pub fn lan_on_ephemeral_ports(text: &str) -> String {
    let fixed = [
        "0.0.0.0:8443",
        "0.0.0.0:8080",
        "127.0.0.1:9090",
        "0.0.0.0:2222",
        "0.0.0.0:8444",
    ];
    let mut out = text.to_string();
    for addr in fixed {
        let (ip, _) = addr.split_once(':').unwrap();
        let line = format!(" = \"{addr}\"");
        assert_eq!(out.matches(&line).count(), 1, "{addr} in:\n{text}");
        out = out.replace(&line, &format!(" = \"{ip}:0\""));
    }
    assert!(!out.lines().any(|l| l.starts_with("public_url")), "{out}");
    out
}
