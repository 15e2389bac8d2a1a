//! `[notify]`: receivers must be URLs a message can go to without leaking it: `https://`, or
//! `http://` to this machine (a local relay, a test receiver).

use super::super::file::RawNotify;
use super::super::settings::Notify;
use super::{Checker, parse_duration};

const DEFAULT_DEBOUNCE: std::time::Duration = std::time::Duration::from_secs(5);

fn receiver(c: &mut Checker<'_>, key: &str, url: &str) -> Option<String> {
    let parsed = url.parse::<http::Uri>().ok().filter(|u| u.host().is_some());
    let Some(uri) = parsed else {
        c.problem(
            key,
            format!("{url:?} is not a URL"),
            format!("write {key} = \"https://host/path\""),
        );
        return None;
    };
    let host = uri.host().unwrap_or_default().trim_matches(|ch| ch == '[' || ch == ']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match uri.scheme_str() {
        Some("https") => Some(url.to_string()),
        Some("http") if loopback => Some(url.to_string()),
        Some("http") => {
            c.problem(
                key,
                format!("{url:?} would send notifications unencrypted"),
                format!("use an https:// URL (plain http:// is allowed to 127.0.0.1 or localhost only) for {key}"),
            );
            None
        }
        _ => {
            c.problem(
                key,
                format!("{url:?} is not an http(s) URL"),
                format!("write {key} = \"https://host/path\""),
            );
            None
        }
    }
}

pub(super) fn notify(c: &mut Checker<'_>, raw: &RawNotify) -> Option<Notify> {
    let webhook = raw.webhook.as_deref().and_then(|u| receiver(c, "notify.webhook", u));
    let ntfy = raw.ntfy.as_deref().and_then(|u| receiver(c, "notify.ntfy", u));
    if raw.webhook.is_none() && raw.ntfy.is_none() {
        c.problem(
            "notify",
            "[notify] names no receiver",
            "add webhook = \"https://…\" or ntfy = \"https://ntfy.sh/<topic>\", or remove [notify]",
        );
    }
    let debounce = match raw.debounce.as_deref() {
        None => DEFAULT_DEBOUNCE,
        Some(d) => match parse_duration(d) {
            Some(d) if d <= std::time::Duration::from_secs(3600) => d,
            _ => {
                c.problem(
                    "notify.debounce",
                    format!("{d:?} is not a duration of at most 1h"),
                    "write debounce = \"5s\" (a number with ms, s, m or h)",
                );
                DEFAULT_DEBOUNCE
            }
        },
    };
    Some(Notify {
        webhook,
        ntfy,
        debounce,
    })
}
