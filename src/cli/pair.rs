//! `pair <user>`: ask the running gateway (over its control socket: running this on the host, as
//! the gateway's OS user, is the proof of presence) for a one-time pairing code, and show it as a
//! QR code of `https://<login host>/pair#<code>` and as text to type.

use std::path::Path;

use anyhow::{Context, bail};
use qrcode::QrCode;
use qrcode::render::unicode::Dense1x2;

pub(crate) fn pair(config: &Path, user: &str, label: &str, ttl: &str) -> anyhow::Result<()> {
    let ttl = crate::auth::tokens::parse_ttl(ttl)
        .with_context(|| format!("--ttl {ttl:?}: use a number and m or s, as in 10m"))?;
    let max = crate::auth::pairing::MAX_TTL;
    if ttl > max {
        bail!("--ttl: a pairing code lives at most {} minutes", max.as_secs() / 60);
    }
    let body = serde_json::json!({"user": user, "label": label, "ttl_secs": ttl.as_secs()}).to_string();
    let (code, text) = super::admin_client::request_with(config, "POST", "/pair", &body)
        .context("pairing needs the running gateway (it issues the code and keeps it in its state database)")?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if code != 200 {
        let why = v["error"].as_str().map_or(text.trim().to_string(), str::to_string);
        bail!("the gateway refused ({code}): {why}");
    }
    let (Some(pair_code), Some(url), Some(expires_at)) =
        (v["code"].as_str(), v["url"].as_str(), v["expires_at"].as_i64())
    else {
        bail!("the gateway's answer is not a pairing code: {text}");
    };
    // ok: showing the one-time code to the operator on the host is this command's purpose.
    print!("{}", render(url)?);
    let page = url.split_once('#').map_or(url, |(p, _)| p);
    println!("\nScan it with the phone's camera, or open {page} and type the code:\n");
    println!("    {pair_code}\n"); // ok: the one-time code, shown once on the host
    println!(
        "It pairs {label:?} as {user}, works once and expires {} (in {}).",
        crate::support::when::when(expires_at),
        human(ttl.as_secs())
    );
    println!("See and revoke devices with:\n    {}", super::again(config, "devices"));
    if let Some(named) = v["passkeys"].as_str() {
        // The QR code keeps the address (it always resolves); the pairing page moves to the name
        // when the phone resolves it.
        print!("\n{}", super::banner::passkeys_line(named));
    }
    if let Some(why) = only_here(page) {
        // Loud, and on stderr too: a QR code no phone can open looks like one that works.
        eprintln!(
            "\nWARNING: {page} {why}: a phone cannot open it. For a phone on this Wi-Fi, serve the \
             LAN variant (`{me} serve -c config/gateway.lan.toml` in the repository, or \
             a config from `{me} init --lan`) and run pair again with its -c; or give \
             the gateway a name the phone resolves (server.base_domain and server.public_url, and \
             a certificate for that name).",
            me = crate::support::invocation::me()
        );
    }
    Ok(())
}

/// Why a URL opens only on this machine (a loopback address, `localhost` or a `*.localhost` name).
pub(crate) fn only_here(url: &str) -> Option<&'static str> {
    let authority = url.strip_prefix("https://")?.split('/').next()?;
    let host = crate::policy::route::strip_port(authority)
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
        return Some("is a loopback address");
    }
    let lower = host.to_ascii_lowercase();
    (lower == "localhost" || lower.ends_with(".localhost")).then_some("names this machine only (*.localhost)")
}

/// A QR code as half-block characters (two rows of modules per line). The light modules and the
/// quiet zone are drawn as blocks (the terminal's foreground) and the dark ones left as its
/// background: on the usual dark terminal that is a dark-on-light code as printed.
pub fn render(text: &str) -> anyhow::Result<String> {
    let qr = QrCode::new(text.as_bytes()).context("the URL does not fit in a QR code")?;
    Ok(qr
        .render::<Dense1x2>()
        .dark_color(Dense1x2::Light)
        .light_color(Dense1x2::Dark)
        .quiet_zone(true)
        .build()
        + "\n")
}

fn human(secs: u64) -> String {
    match secs {
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s if s >= 60 => format!("{} min {} s", s / 60, s % 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_only_this_machine_opens_are_told_apart() {
        for url in [
            "https://127.0.0.1:8443/pair",
            "https://[::1]:8443/pair",
            "https://gw.localhost:8443/pair",
            "https://localhost/pair",
        ] {
            assert!(only_here(url).is_some(), "{url}");
        }
        for url in [
            "https://gw.example.com:8443/pair",
            "https://192.0.2.7:8443/pair",
            "https://devbox.local/pair",
        ] {
            assert_eq!(only_here(url), None, "{url}");
        }
    }

    #[test]
    fn the_qr_code_is_half_blocks() {
        let q = render("https://gw.example.com/pair#K7QM-4M2P-XW9H").unwrap();
        assert!(q.contains('█') && q.contains('▀') && q.contains('▄'), "{q}");
        assert!(q.lines().count() > 10);
        assert!(!q.contains("K7QM"));
        assert_eq!(human(600), "10 min");
        assert_eq!(human(90), "1 min 30 s");
        assert_eq!(human(2), "2 s");
    }

    /// Read the half blocks back into modules: they are exactly the QR code's, dark ones left
    /// blank, inside a 4-module quiet zone.
    #[test]
    fn the_half_blocks_are_the_codes_modules() {
        let url = "https://gw.example.com:8443/pair#K7QM-4M2P-XW9H";
        let text = render(url).unwrap();
        let qr = QrCode::new(url.as_bytes()).unwrap();
        let n = qr.width();
        let colors = qr.to_colors();
        let side = n + 8;
        let mut painted = vec![vec![false; side]; side + 1];
        for (row, line) in text.lines().enumerate() {
            assert_eq!(line.chars().count(), side, "line {row}");
            for (x, ch) in line.chars().enumerate() {
                let (top, bottom) = match ch {
                    ' ' => (false, false),
                    '▄' => (false, true),
                    '▀' => (true, false),
                    '█' => (true, true),
                    other => panic!("{other:?}"),
                };
                painted[2 * row][x] = top;
                painted[2 * row + 1][x] = bottom;
            }
        }
        assert_eq!(text.lines().count(), side.div_ceil(2));
        for (y, row) in painted.iter().enumerate().take(side) {
            for (x, &p) in row.iter().enumerate() {
                let inside = (4..n + 4).contains(&x) && (4..n + 4).contains(&y);
                let dark = inside && colors[(y - 4) * n + (x - 4)] == qrcode::Color::Dark;
                assert_eq!(p, !dark, "module ({x}, {y})");
            }
        }
    }
}
