//! `[[route_role]]`: a route pattern as the table writes it (`/session/*/x`, `*` one segment,
//! `**` the rest of the path, last), a method and a role.

use std::collections::HashSet;

use super::Checker;
use crate::config::Role;
use crate::config::file::RawRouteRole;
use crate::config::{ROUTE_METHODS, RouteRoleEntry};

pub(super) fn route_roles(c: &mut Checker<'_>, raw: &[RawRouteRole]) -> Vec<RouteRoleEntry> {
    let mut entries = Vec::new();
    let mut seen = HashSet::new();
    for (i, r) in raw.iter().enumerate() {
        let key = format!("route_role[{i}]");
        let method = r.method.to_ascii_uppercase();
        let method_ok = ROUTE_METHODS.contains(&method.as_str());
        if !method_ok {
            c.problem(
                format!("{key}.method"),
                format!("{:?} is not a method OpenCode routes use", r.method),
                "write one of GET, POST, PUT, PATCH, DELETE",
            );
        }
        let path = pattern(&r.path);
        if let Err(why) = &path {
            c.problem(
                format!("{key}.path"),
                format!("{:?} {why}", r.path),
                "write a route pattern as `check` and `status` print it: \"/session/*/new-thing\" (`*` one segment, `**` the rest of a file path, last)",
            );
        }
        let role = Role::parse(&r.role);
        if role.is_none() {
            c.problem(
                format!("{key}.role"),
                format!("{:?} is not a role", r.role),
                "write viewer, approver, operator or admin",
            );
        }
        if let (true, Ok(path), Some(role)) = (method_ok, path, role) {
            if !seen.insert((method.clone(), path.clone())) {
                c.problem(
                    format!("{key}.path"),
                    format!("{method} {path} has two [[route_role]] entries"),
                    "keep one entry per method and path",
                );
            }
            entries.push(RouteRoleEntry {
                method,
                pattern: path,
                role,
            });
        }
    }
    entries
}

/// The pattern with its names in lower case (OpenCode matches them in any case).
fn pattern(raw: &str) -> Result<String, &'static str> {
    let rest = raw.strip_prefix('/').ok_or("does not start with /")?;
    let segs: Vec<&str> = rest.split('/').collect();
    let mut out = String::with_capacity(raw.len());
    for (i, s) in segs.iter().enumerate() {
        if s.is_empty() {
            return Err("has an empty segment");
        }
        if i == 0 && (*s == "*" || *s == "**") {
            return Err("starts with a wildcard; the first segment must be a name");
        }
        if *s == "**" && i + 1 != segs.len() {
            return Err("has `**` before its end");
        }
        if *s != "*"
            && *s != "**"
            && (s.contains(['*', '{', '}', '%', ';', '?', '#', '\\']) || s.bytes().any(|b| b < 0x21 || b == 0x7f))
        {
            return Err("has a segment that is neither a name nor `*`/`**`");
        }
        out.push('/');
        out.push_str(&s.to_ascii_lowercase());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn patterns() {
        assert_eq!(pattern("/Session/*/New-Thing").as_deref(), Ok("/session/*/new-thing"));
        assert_eq!(pattern("/api/fs/read/**").as_deref(), Ok("/api/fs/read/**"));
        assert!(pattern("session").is_err());
        assert!(pattern("/*/x").is_err());
        assert!(pattern("/a/**/b").is_err());
        assert!(pattern("/a//b").is_err());
        assert!(pattern("/a/{id}").is_err());
        assert!(pattern("/a/%2e").is_err());
    }
}
