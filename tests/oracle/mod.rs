//! Reference readings of what OpenCode does with a request's directory and query, written from
//! its behaviour (docs: the OpenCode facts the project keeps; checked against the real server by
//! `pinning::the_oracle_reads_queries_and_directories_as_the_real_opencode_does`), not from the
//! gateway's code. The property tests (tests/properties.rs) and the fuzz targets (fuzz/) judge
//! the gateway's rewriting and pinning with it, so a shared mistake cannot make them agree.
//! Deliberately small and separate: nothing here calls the gateway's crate.

#![allow(dead_code)]

/// The query parameters OpenCode acts on that the gateway must never pass on for a pinned project
/// (directory and workspace selectors, v1 and v2) or at all (`auth_token`, the server's own
/// credential).
pub const PINNED_SELECTORS: &[&str] = &["directory", "workspace", "location[directory]", "location[workspace]"];
pub const CREDENTIALS: &[&str] = &["auth_token"];

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// JavaScript's `decodeURIComponent`: `None` where it throws (a `%` not followed by two hex
/// digits, or bytes that are not UTF-8).
pub fn decode_uri_component(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hi = b.get(i + 1).copied().and_then(hex_value)?;
            let lo = b.get(i + 2).copied().and_then(hex_value)?;
            out.push(hi * 16 + lo);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `application/x-www-form-urlencoded` decoding (URLSearchParams): `+` is a space, `%XX` a byte,
/// a `%` without two hex digits stays as written, bytes that are not UTF-8 become U+FFFD.
pub fn form_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => match (
                b.get(i + 1).copied().and_then(hex_value),
                b.get(i + 2).copied().and_then(hex_value),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push(hi * 16 + lo);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every name a server could read each parameter of `query` as: split at `&`, the name before
/// the first `=`, read as written, form-decoded (URLSearchParams) and URI-decoded (Hono, falling
/// back to the raw name where decoding throws).
pub fn query_names(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    for pair in query.split('&') {
        let raw = pair.split('=').next().unwrap_or("");
        names.push(raw.to_string());
        names.push(form_decode(raw));
        if let Some(d) = decode_uri_component(raw) {
            names.push(d);
        }
    }
    names
}

/// The raw `name=value` pairs of `query`, in order (empty ones left out).
pub fn raw_pairs(query: &str) -> Vec<&str> {
    query.split('&').filter(|p| !p.is_empty()).collect()
}

/// Node's `path.resolve(root, candidate)` on POSIX: an absolute candidate replaces the root;
/// `.` and empty segments vanish; `..` removes the segment before it and stays at `/`.
pub fn node_resolve(root: &str, candidate: &str) -> String {
    let joined = if candidate.starts_with('/') {
        candidate.to_string()
    } else {
        format!("{root}/{candidate}")
    };
    let mut stack: Vec<&str> = Vec::new();
    for seg in joined.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                stack.pop();
            }
            s => stack.push(s),
        }
    }
    format!("/{}", stack.join("/"))
}

/// The folders OpenCode could act in for a directory a client names (a header, a body field):
/// the value as written and, where it decodes, percent-decoded, each resolved from `root`.
pub fn directories(root: &str, candidate: &str) -> Vec<String> {
    let mut out = vec![node_resolve(root, candidate)];
    if let Some(d) = decode_uri_component(candidate) {
        out.push(node_resolve(root, &d));
    }
    // A value whose escapes JavaScript refuses is still percent-decoded byte by byte by some
    // readers: that reading is kept too.
    out.push(node_resolve(root, &form_decode(&candidate.replace('+', "%2B"))));
    out
}

/// Is `path` (resolved, absolute) `root` or inside it?
pub fn is_inside(root: &str, path: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))
}
