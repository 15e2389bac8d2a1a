//! Permission policies (issue 40, `policy/permission.rs`): a deny wins whatever the order of the
//! rules, every pattern must be allowed, more allow rules never take an allowance away and more
//! deny rules never give one; the rule parser takes any text without a panic and reads back what
//! it was given.

use opencode_gateway::config::permissions::{Otherwise, PermissionPolicy, Rule, parse_rule};
use opencode_gateway::policy::permission::{Verdict, judge, wildcard};
use proptest::prelude::*;

fn rule() -> impl Strategy<Value = Rule> {
    (
        prop::sample::select(vec!["bash", "edit", "read", "external_directory", "*"]),
        "[a-c/ *?]{0,6}",
    )
        .prop_filter("a pattern", |(_, p)| !p.trim().is_empty())
        .prop_map(|(perm, pat)| Rule {
            permission: perm.to_string(),
            pattern: pat.trim().to_string(),
        })
}

fn policy() -> impl Strategy<Value = PermissionPolicy> {
    (
        prop::collection::vec(rule(), 0..5),
        prop::collection::vec(rule(), 0..5),
        any::<bool>(),
    )
        .prop_map(|(allow, deny, ask)| PermissionPolicy {
            name: "p".into(),
            allow,
            deny,
            otherwise: if ask { Otherwise::Ask } else { Otherwise::Reject },
            ask_timeout: std::time::Duration::from_secs(1),
        })
}

fn request() -> impl Strategy<Value = (String, Vec<String>)> {
    (
        prop::sample::select(vec!["bash", "edit", "read", "external_directory"]),
        prop::collection::vec("[a-c/ ]{0,6}", 0..4),
    )
        .prop_map(|(p, pats)| (p.to_string(), pats))
}

fn allowed(v: &Verdict<'_>) -> bool {
    matches!(v, Verdict::Allow(_))
}

proptest! {
    #[test]
    fn a_deny_wins_and_every_pattern_must_be_allowed(p in policy(), (perm, pats) in request()) {
        let v = judge(&p, &perm, &pats);
        let denied = pats.iter().any(|x| p.deny.iter().any(|r| wildcard(&r.permission, &perm) && wildcard(&r.pattern, x)));
        let all_allowed = !pats.is_empty()
            && pats.iter().all(|x| p.allow.iter().any(|r| wildcard(&r.permission, &perm) && wildcard(&r.pattern, x)));
        match v {
            Verdict::Deny(r) => prop_assert!(denied && p.deny.contains(r)),
            Verdict::Allow(r) => prop_assert!(!denied && all_allowed && p.allow.contains(r)),
            Verdict::Ask => prop_assert!(!denied && !all_allowed && p.otherwise == Otherwise::Ask),
            Verdict::Reject => prop_assert!(!denied && !all_allowed && p.otherwise == Otherwise::Reject),
        }
    }

    #[test]
    fn the_order_of_the_rules_does_not_matter(p in policy(), (perm, pats) in request()) {
        let mut q = p.clone();
        q.allow.reverse();
        q.deny.reverse();
        let (a, b) = (judge(&p, &perm, &pats), judge(&q, &perm, &pats));
        prop_assert_eq!(std::mem::discriminant(&a), std::mem::discriminant(&b));
    }

    #[test]
    fn more_allow_never_takes_and_more_deny_never_gives(p in policy(), extra in rule(), (perm, pats) in request()) {
        let before = judge(&p, &perm, &pats);
        let mut wider = p.clone();
        wider.allow.push(extra.clone());
        if allowed(&before) {
            prop_assert!(allowed(&judge(&wider, &perm, &pats)));
        }
        let mut narrower = p.clone();
        narrower.deny.push(extra);
        if !allowed(&before) {
            prop_assert!(!allowed(&judge(&narrower, &perm, &pats)));
        }
    }

    #[test]
    fn a_star_matches_anything_and_a_literal_only_itself(text in "[a-z /*?.]{0,12}") {
        prop_assert!(wildcard("*", &text));
        let literal = text.replace(['*', '?'], "x");
        prop_assert!(wildcard(&literal, &literal));
        let longer = format!("{literal}y");
        prop_assert!(!wildcard(&literal, &longer));
    }

    #[test]
    fn the_rule_parser_takes_any_text_and_reads_back_what_it_was_given(text in "\\PC{0,40}") {
        if let Ok(r) = parse_rule(&text) {
            let again = parse_rule(&r.to_string()).unwrap();
            prop_assert_eq!(&again, &r);
            prop_assert!(!r.pattern.is_empty() && !r.permission.is_empty());
        }
    }
}
