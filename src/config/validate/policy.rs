//! `[[policy]]`: a unique name, rules that parse, `otherwise` and `ask_timeout` in words.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::Checker;
use crate::config::file::RawPolicy;
use crate::config::permissions::{Otherwise, PermissionPolicy, Rule, parse_rule};

/// `ask_timeout` when none is written.
pub(crate) const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(30 * 60);

pub(super) fn policies(c: &mut Checker<'_>, raw: &[RawPolicy]) -> Vec<Arc<PermissionPolicy>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let key = format!("policy[{i}]");
        if !super::valid_user_name(&p.name) {
            c.problem(
                format!("{key}.name"),
                format!("{:?} is not a policy name", p.name),
                "write a short name of letters, digits, `-` and `_`, like \"ci\"",
            );
        } else if !seen.insert(p.name.clone()) {
            c.problem(
                format!("{key}.name"),
                format!("two [[policy]] tables are named {:?}", p.name),
                "give each policy its own name",
            );
        }
        let allow = rules(c, &format!("{key}.allow"), &p.allow);
        let deny = rules(c, &format!("{key}.deny"), &p.deny);
        let otherwise = match p.otherwise.as_deref() {
            None | Some("ask") => Otherwise::Ask,
            Some("reject") => Otherwise::Reject,
            Some(other) => {
                c.problem(
                    format!("{key}.otherwise"),
                    format!("{other:?} is not what a policy does with other requests"),
                    "write otherwise = \"ask\" (a person answers in the inbox) or \"reject\"",
                );
                Otherwise::Reject
            }
        };
        let ask_timeout = match p.ask_timeout.as_deref() {
            None => DEFAULT_ASK_TIMEOUT,
            Some(t) => c.duration(&format!("{key}.ask_timeout"), t),
        };
        if ask_timeout.is_zero() {
            c.problem(
                format!("{key}.ask_timeout"),
                "a zero ask_timeout leaves a person no time".to_string(),
                "write ask_timeout = \"30m\", or otherwise = \"reject\"",
            );
        }
        out.push(Arc::new(PermissionPolicy {
            name: p.name.clone(),
            allow,
            deny,
            otherwise,
            ask_timeout,
        }));
    }
    out
}

fn rules(c: &mut Checker<'_>, key: &str, raw: &[String]) -> Vec<Rule> {
    let mut out = Vec::new();
    for (j, text) in raw.iter().enumerate() {
        match parse_rule(text) {
            Ok(r) => out.push(r),
            Err(why) => c.problem(
                format!("{key}[{j}]"),
                format!("{text:?} {why}"),
                "write \"<permission>: <pattern>\", like \"bash: npm test*\" or \"edit: src/**\"",
            ),
        }
    }
    out
}
