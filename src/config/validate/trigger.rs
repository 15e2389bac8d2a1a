//! `[[trigger]]`: a unique name, a known project, exactly one of `github_secret_env` or `_file`,
//! `hmac_secret_env` or `_file`, and `schedule`, a secret that is set, events in words, a
//! template that parses, a policy that exists, and a `run_as_user` who is a configured user with the operator role
//! (or more) in the project: a firing creates and prompts a session as that user.

use std::collections::HashSet;
use std::sync::Arc;

use super::Checker;
use crate::config::Secret;
use crate::config::file::RawTrigger;
use crate::config::permissions::PermissionPolicy;
use crate::config::settings::{Role, User};
use crate::config::triggers::{
    DEFAULT_MAX_BODY, DEFAULT_REPLAY_WINDOW, HookKind, MAX_MAX_BODY, SessionChoice, Trigger, parse_session,
    parse_template, valid_event,
};

/// What a trigger is checked against: the projects, users and policies as validated.
pub(super) struct Known<'a> {
    pub projects: &'a HashSet<String>,
    pub users: &'a [User],
    pub policies: &'a [Arc<PermissionPolicy>],
}

pub(super) fn triggers(c: &mut Checker<'_>, raw: &[RawTrigger], known: &Known<'_>) -> Vec<Arc<Trigger>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, t) in raw.iter().enumerate() {
        let key = format!("trigger[{i}]");
        if !super::valid_user_name(&t.name) {
            c.problem(
                format!("{key}.name"),
                format!("{:?} is not a trigger name", t.name),
                "write a short name of letters, digits, `-` and `_`, like \"gh\"",
            );
        } else if !seen.insert(t.name.clone()) {
            c.problem(
                format!("{key}.name"),
                format!("two [[trigger]] tables are named {:?}", t.name),
                "give each trigger its own name",
            );
        }
        references(c, &key, t, known);
        let kind = kind(c, &key, t);
        let events = events(c, &key, t, kind.as_ref());
        let prompt = parse_template(&t.prompt).unwrap_or_else(|why| {
            c.problem(
                format!("{key}.prompt"),
                format!("the template {why}"),
                "write text with payload fields in double braces, like \"A push to {{ref}}: run the tests.\"",
            );
            Vec::new()
        });
        let session = parse_session(t.session.as_deref().unwrap_or("new")).unwrap_or_else(|why| {
            c.problem(
                format!("{key}.session"),
                why,
                "write session = \"new\" or session = \"titled: nightly-fixes\"",
            );
            SessionChoice::New
        });
        let max_body = max_body(c, &key, t.max_body);
        if let Some(kind) = kind {
            out.push(Arc::new(Trigger {
                name: t.name.clone(),
                project: t.project.clone(),
                kind,
                events,
                prompt,
                session,
                policy: t.policy.clone(),
                run_as_user: t.run_as_user.clone(),
                max_body,
                secret_file: t
                    .github_secret_file
                    .as_ref()
                    .or(t.hmac_secret_file.as_ref())
                    .map(|f| c.path(f)),
            }));
        }
    }
    out
}

/// The project, the policy and the user it names exist, and the user may create and prompt
/// sessions in the project.
fn references(c: &mut Checker<'_>, key: &str, t: &RawTrigger, known: &Known<'_>) {
    if !known.projects.contains(&t.project) {
        c.problem(
            format!("{key}.project"),
            format!("no [[project]] is named {:?}", t.project),
            "name a configured project",
        );
    }
    if !known.policies.iter().any(|p| p.name == t.policy) {
        c.problem(
            format!("{key}.policy"),
            format!("no [[policy]] is named {:?}", t.policy),
            "name a configured [[policy]]: an unattended run answers its permission requests by it",
        );
    }
    match known.users.iter().find(|u| u.name == t.run_as_user) {
        None => c.problem(
            format!("{key}.run_as_user"),
            format!("no [[user]] is named {:?}", t.run_as_user),
            "name a configured user (for example one made with `opencode-gateway user add ci-bot`): the runs count as theirs",
        ),
        Some(u) => match u.grants.role_in(&t.project) {
            Some(role) if role >= Role::Operator => {}
            role => c.problem(
                format!("{key}.run_as_user"),
                format!(
                    "{} has {} in project {}, and a trigger creates and prompts sessions",
                    t.run_as_user,
                    role.map_or("no role", |r| r.as_str()),
                    t.project
                ),
                format!("give {} the operator role in {}", t.run_as_user, t.project),
            ),
        },
    }
}

/// Exactly one of the kinds (GitHub's or the generic signed kind, each by environment variable
/// or file; or a schedule), its secret set.
fn kind(c: &mut Checker<'_>, key: &str, t: &RawTrigger) -> Option<HookKind> {
    let sources = [
        ("github_secret_env", &t.github_secret_env),
        ("github_secret_file", &t.github_secret_file),
        ("hmac_secret_env", &t.hmac_secret_env),
        ("hmac_secret_file", &t.hmac_secret_file),
        ("schedule", &t.schedule),
    ];
    let set: Vec<(&str, &String)> = sources
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
        .collect();
    let [(field, value)] = set[..] else {
        c.problem(
            key.to_string(),
            format!("sets {} of github_secret_env/_file, hmac_secret_env/_file and schedule", set.len()),
            "set exactly one: github_secret_env or _file (GitHub's webhooks), hmac_secret_env or _file (any other signed sender), or schedule",
        );
        return None;
    };
    if field == "schedule" {
        return schedule(c, key, t, value);
    }
    if t.time_zone.is_some() {
        c.problem(
            format!("{key}.time_zone"),
            "only a schedule has a time zone".to_string(),
            "remove time_zone",
        );
    }
    let generic = field.starts_with("hmac");
    let window = match t.replay_window.as_deref() {
        Some(_) if !generic => {
            c.problem(
                format!("{key}.replay_window"),
                "only the generic signed kind has a replay window".to_string(),
                "remove replay_window (GitHub's deliveries are each used once by their id)",
            );
            DEFAULT_REPLAY_WINDOW
        }
        Some(w) => c.duration(&format!("{key}.replay_window"), w),
        None => DEFAULT_REPLAY_WINDOW,
    };
    let secret = secret(c, &format!("{key}.{field}"), field.ends_with("_file"), value)?;
    Some(if generic {
        HookKind::Hmac { secret, window }
    } else {
        HookKind::GitHub { secret }
    })
}

/// The secret in environment variable `name`, or in file `name` (trailing newline dropped): at
/// least 16 bytes.
fn secret(c: &mut Checker<'_>, key: &str, file: bool, name: &str) -> Option<Secret> {
    let read = if file {
        let path = c.path(name);
        std::fs::read_to_string(&path)
            .map(|v| v.trim_end_matches(['\r', '\n']).to_string())
            .map_err(|e| {
                (
                    format!("cannot read {}: {e}", path.display()),
                    "create it (mode 0600) with the webhook's secret".to_string(),
                )
            })
    } else {
        std::env::var(name).map_err(|_| {
            (
                format!("the environment variable {name} is not set"),
                format!("export {name}=<the webhook's secret> before starting the gateway, or use the _file key"),
            )
        })
    };
    match read {
        Ok(v) if v.len() >= 16 => Some(Secret::new(v)),
        Ok(_) => {
            c.problem(
                key,
                format!("the secret in {name} is shorter than 16 bytes"),
                "write a long random value, like the output of `openssl rand -hex 32`, and give the sender the same",
            );
            None
        }
        Err((why, fix)) => {
            c.problem(key, why, fix);
            None
        }
    }
}

/// `schedule = "0 3 * * *"` in `time_zone` (UTC unless said); no payload, so no fields and no events.
fn schedule(c: &mut Checker<'_>, key: &str, t: &RawTrigger, cron: &str) -> Option<HookKind> {
    let zone = t.time_zone.clone().unwrap_or_else(|| "UTC".into());
    let offset = crate::support::cron::parse_offset(&zone)
        .map_err(|why| {
            c.problem(
                format!("{key}.time_zone"),
                why,
                "write time_zone = \"UTC\" or a fixed offset like \"+02:00\" (daylight-saving zones are not read)",
            )
        })
        .ok();
    let cron = crate::support::cron::Cron::parse(cron)
        .map_err(|why| {
            c.problem(
                format!("{key}.schedule"),
                format!("{cron:?} {why}"),
                "write five cron fields, like \"0 3 * * *\" (03:00 every day), or six with seconds first",
            )
        })
        .ok();
    if !t.events.is_empty() || t.replay_window.is_some() || t.max_body.is_some() {
        c.problem(
            key.to_string(),
            "a schedule has no deliveries: events, replay_window and max_body do not apply".to_string(),
            "remove them from this trigger",
        );
    }
    if t.prompt.contains("{{") {
        c.problem(
            format!("{key}.prompt"),
            "a schedule has no payload for the template's fields".to_string(),
            "write the prompt as plain text",
        );
    }
    Some(HookKind::Schedule {
        cron: cron?,
        offset: offset?,
        zone,
    })
}

fn events(c: &mut Checker<'_>, key: &str, t: &RawTrigger, kind: Option<&HookKind>) -> Vec<String> {
    for (j, e) in t.events.iter().enumerate() {
        if !valid_event(e) {
            c.problem(
                format!("{key}.events[{j}]"),
                format!("{e:?} is not an event"),
                "write an event, or an event and its action: \"push\", \"issues.opened\"",
            );
        }
    }
    if t.events.is_empty() && matches!(kind, Some(HookKind::GitHub { .. })) {
        c.problem(
            format!("{key}.events"),
            "a GitHub trigger listens for no event".to_string(),
            "list the events that fire it: events = [\"push\", \"issues.opened\"]",
        );
    }
    t.events.clone()
}

fn max_body(c: &mut Checker<'_>, key: &str, raw: Option<u64>) -> usize {
    match raw {
        None => DEFAULT_MAX_BODY,
        Some(n) if n >= 1 && n <= MAX_MAX_BODY as u64 => n as usize,
        Some(n) => {
            c.problem(
                format!("{key}.max_body"),
                format!("{n} bytes is outside 1 ..= {MAX_MAX_BODY}"),
                "write max_body = 262144 (bytes), or leave it out",
            );
            DEFAULT_MAX_BODY
        }
    }
}
