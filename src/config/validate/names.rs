//! The names a config gives: projects (one DNS label, as they also name hosts) and users.

/// A project name is one DNS label, because it also names a host (`<project>.<base_domain>`).
pub(crate) fn valid_project_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

pub(crate) fn valid_user_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b))
}
