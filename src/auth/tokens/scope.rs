//! A token's scope: at most a role, only some projects; never wider than its user's grants.

use crate::config::{Grants, Role};
use crate::store::TokenRecord;

/// What a token may do, within its user's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scope {
    /// At most this role; `None`: the user's own.
    pub role: Option<Role>,
    /// Only these projects; `None`: all the user's.
    pub projects: Option<Vec<String>>,
    /// The `[[policy]]` the gateway answers this token's sessions' permission requests by.
    pub policy: Option<String>,
}

impl Scope {
    pub(crate) fn of(record: &TokenRecord) -> Scope {
        Scope {
            role: record.role.as_deref().and_then(Role::parse),
            projects: record.projects.clone(),
            policy: record.policy.clone(),
        }
    }

    /// Refuse a scope wider than `grants` (checked at create time). `known` says which projects exist.
    pub(crate) fn check_within(&self, grants: &Grants, known: impl Fn(&str) -> bool) -> Result<(), String> {
        let within = |project: &str, user_role: Role| match self.role {
            Some(r) if r > user_role => Err(format!(
                "the token's role {} is wider than the user's role {} in project {project}",
                r.as_str(),
                user_role.as_str()
            )),
            _ => Ok(()),
        };
        match (&self.projects, grants) {
            (Some(list), _) => {
                if list.is_empty() {
                    return Err("--projects names no project".into());
                }
                for p in list {
                    if !known(p) {
                        return Err(format!("there is no project {p:?}"));
                    }
                    let role = grants
                        .role_in(p)
                        .ok_or_else(|| format!("the user has no access to project {p}"))?;
                    within(p, role)?;
                }
                Ok(())
            }
            (None, Grants::All(role)) => within("*", *role),
            (None, Grants::Each(map)) => map.iter().try_for_each(|(p, role)| within(p, *role)),
        }
    }

    /// The grants a request with this token gets: the user's grants of the moment, narrowed.
    pub(crate) fn narrow(&self, grants: &Grants) -> Grants {
        let cap = |r: Role| self.role.map_or(r, |t| t.min(r));
        match (&self.projects, grants) {
            (None, Grants::All(r)) => Grants::All(cap(*r)),
            (None, Grants::Each(map)) => Grants::Each(map.iter().map(|(p, r)| (p.clone(), cap(*r))).collect()),
            (Some(list), _) => Grants::Each(
                list.iter()
                    .filter_map(|p| Some((p.clone(), cap(grants.role_in(p)?))))
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn each(pairs: &[(&str, Role)]) -> Grants {
        Grants::Each(
            pairs
                .iter()
                .map(|(p, r)| (p.to_string(), *r))
                .collect::<BTreeMap<_, _>>(),
        )
    }

    #[test]
    fn a_scope_can_only_narrow() {
        let grants = each(&[("web", Role::Operator), ("api", Role::Viewer)]);
        let known = |p: &str| p == "web" || p == "api" || p == "ops";
        let scope = |role, projects: Option<&[&str]>| Scope {
            role,
            projects: projects.map(|l| l.iter().map(|s| s.to_string()).collect()),
            policy: None,
        };
        assert!(
            scope(Some(Role::Viewer), Some(&["web"]))
                .check_within(&grants, known)
                .is_ok()
        );
        assert!(scope(None, None).check_within(&grants, known).is_ok());
        let wider = scope(Some(Role::Operator), None)
            .check_within(&grants, known)
            .unwrap_err();
        assert!(wider.contains("api"), "{wider}");
        assert!(
            scope(Some(Role::Admin), Some(&["web"]))
                .check_within(&grants, known)
                .is_err()
        );
        assert!(
            scope(None, Some(&["ops"])).check_within(&grants, known).is_err(),
            "not granted"
        );
        assert!(
            scope(None, Some(&["nope"]))
                .check_within(&Grants::All(Role::Admin), known)
                .is_err()
        );
        assert!(
            scope(Some(Role::Admin), None)
                .check_within(&Grants::All(Role::Operator), known)
                .is_err()
        );
    }

    #[test]
    fn at_use_the_scope_meets_the_users_grants_of_the_moment() {
        let scope = Scope {
            role: Some(Role::Operator),
            projects: Some(vec!["web".into(), "api".into()]),
            policy: None,
        };
        // The user was demoted in api and lost web since the token was made.
        let now = each(&[("api", Role::Viewer), ("ops", Role::Admin)]);
        let g = scope.narrow(&now);
        assert_eq!(g.role_in("api"), Some(Role::Viewer));
        assert_eq!(g.role_in("web"), None);
        assert_eq!(g.role_in("ops"), None);
        let viewer = Scope {
            role: Some(Role::Viewer),
            projects: None,
            policy: None,
        };
        assert_eq!(viewer.narrow(&Grants::All(Role::Admin)), Grants::All(Role::Viewer));
        let all = Scope {
            role: None,
            projects: None,
            policy: None,
        };
        assert_eq!(all.narrow(&now), now);
    }
}
