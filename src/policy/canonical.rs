//! The one reading of a request path, made before any decision. OpenCode's router (1.18.33, seen
//! on this machine) percent-decodes path segments, matches route names whatever their case, drops
//! what follows `;`, and ignores repeated and trailing slashes; a gateway that compared the raw
//! string judged one request while OpenCode executed another. So the gateway reads the path the
//! same way once, here: every segment `;`-stripped and percent-decoded. `authz` matches these
//! segments against OpenCode's route table (names case-insensitively) and renders the spelling
//! that is forwarded, so OpenCode executes exactly what the gateway judged.
//!
//! Spellings whose reading would be ambiguous are refused rather than guessed: `.` and `..`
//! segments (plain or encoded; URL parsers resolve them), an encoded `/` or `\` (is it a separator
//! or part of a name?), a raw `\` (WHATWG URL parsing turns it into `/`), control characters and
//! NUL, malformed escapes and escapes that are not UTF-8. No client of OpenCode sends any of them:
//! its web UI encodes each file-path segment on its own.

use std::borrow::Cow;

use super::query::hex;

/// Why a path cannot be read one way only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    #[error("the request path must start with /")]
    NotAbsolute,
    #[error("the request path has a `.` or `..` segment")]
    DotSegment,
    #[error("the request path has a percent-encoded / or \\ in a segment")]
    EncodedSeparator,
    #[error("the request path has a backslash")]
    Backslash,
    #[error("the request path has a control character")]
    ControlCharacter,
    #[error("the request path has a malformed percent-escape")]
    MalformedEscape,
    #[error("the request path's escapes are not UTF-8")]
    NotUtf8,
}

impl PathRefusal {
    /// A stable name for logs and tests.
    pub(crate) fn code(self) -> &'static str {
        match self {
            PathRefusal::NotAbsolute => "path_not_absolute",
            PathRefusal::DotSegment => "path_dot_segment",
            PathRefusal::EncodedSeparator => "path_encoded_separator",
            PathRefusal::Backslash => "path_backslash",
            PathRefusal::ControlCharacter => "path_control_character",
            PathRefusal::MalformedEscape => "path_malformed_escape",
            PathRefusal::NotUtf8 => "path_not_utf8",
        }
    }
}

/// A request path as OpenCode reads it: the segments after the leading `/`, each with its `;`
/// parameters dropped and its escapes decoded. Empty segments (from `//` or a trailing `/`) are
/// kept: route matching skips them, but the tail of a file-path wildcard keeps them, as OpenCode
/// does (`/api/fs/read//abs/path` reads an absolute path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalPath<'a> {
    segments: Vec<Cow<'a, str>>,
}

impl<'a> CanonicalPath<'a> {
    pub fn parse(raw: &'a str) -> Result<Self, PathRefusal> {
        let rest = raw.strip_prefix('/').ok_or(PathRefusal::NotAbsolute)?;
        let mut segments = Vec::with_capacity(8);
        if !rest.is_empty() {
            for seg in rest.split('/') {
                segments.push(segment(seg)?);
            }
        }
        Ok(CanonicalPath { segments })
    }

    /// Every segment, empty ones included.
    pub fn segments(&self) -> &[Cow<'a, str>] {
        &self.segments
    }

    /// The segments from `start` on, as a path of its own.
    pub fn tail(&self, start: usize) -> &[Cow<'a, str>] {
        &self.segments[start.min(self.segments.len())..]
    }
}

fn segment(raw: &str) -> Result<Cow<'_, str>, PathRefusal> {
    // One pass over the raw bytes (this runs for every segment of every request): what follows
    // `;` is a parameter OpenCode ignores; a backslash or a control character is refused.
    let mut end = raw.len();
    let mut escaped = false;
    for (i, b) in raw.bytes().enumerate() {
        match b {
            b';' => {
                end = i;
                break;
            }
            b'%' => escaped = true,
            b'\\' => return Err(PathRefusal::Backslash),
            0..=0x1f | 0x7f => return Err(PathRefusal::ControlCharacter),
            _ => {}
        }
    }
    let raw = &raw[..end];
    let decoded = if escaped {
        let d = decode(raw)?;
        if d.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(PathRefusal::ControlCharacter);
        }
        if d.contains(['/', '\\']) {
            return Err(PathRefusal::EncodedSeparator);
        }
        Cow::Owned(d)
    } else {
        Cow::Borrowed(raw)
    };
    if decoded == "." || decoded == ".." {
        return Err(PathRefusal::DotSegment);
    }
    Ok(decoded)
}

fn decode(raw: &str) -> Result<String, PathRefusal> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = bytes.get(i + 1).and_then(|b| hex(*b));
            let lo = bytes.get(i + 2).and_then(|b| hex(*b));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(PathRefusal::MalformedEscape);
            };
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| PathRefusal::NotUtf8)
}

/// Append `/` and one decoded segment, escaped so that OpenCode decodes it back to exactly this
/// segment: unreserved characters and the sub-delimiters other than `;` stay as they are,
/// everything else (including `%`, `;`, `?`, `#` and non-ASCII) is percent-encoded.
pub(crate) fn push_segment(out: &mut String, segment: &str) {
    out.push('/');
    for &b in segment.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,=:@".contains(&b) {
            out.push(b as char);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(raw: &str) -> Vec<String> {
        CanonicalPath::parse(raw)
            .unwrap()
            .segments()
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn segments_are_decoded_and_parameters_dropped() {
        assert_eq!(segs("/%70ty/abc;x=1/connect"), ["pty", "abc", "connect"]);
        assert_eq!(segs("/session//ses%5F1/"), ["session", "", "ses_1", ""]);
        assert_eq!(segs("/"), Vec::<String>::new());
        assert_eq!(segs("/a%3Bb"), ["a;b"], "an encoded ; is part of the name");
        assert_eq!(segs("/caf%C3%A9"), ["café"]);
    }

    #[test]
    fn ambiguous_spellings_are_refused_with_their_reason() {
        let refusal = |raw| CanonicalPath::parse(raw).unwrap_err();
        for (raw, why) in [
            ("/session/../pty", PathRefusal::DotSegment),
            ("/session/%2e%2E/pty", PathRefusal::DotSegment),
            ("/session/.;x", PathRefusal::DotSegment),
            ("/global%2Fhealth", PathRefusal::EncodedSeparator),
            ("/a%5Cb", PathRefusal::EncodedSeparator),
            ("/a\\b", PathRefusal::Backslash),
            ("/a%00", PathRefusal::ControlCharacter),
            ("/a%0a", PathRefusal::ControlCharacter),
            ("/a%zz", PathRefusal::MalformedEscape),
            ("/a%4", PathRefusal::MalformedEscape),
            ("/a%ff", PathRefusal::NotUtf8),
            ("session", PathRefusal::NotAbsolute),
        ] {
            assert_eq!(refusal(raw), why, "{raw}");
        }
    }

    #[test]
    fn a_rendered_segment_decodes_to_itself() {
        for s in ["ses_1", "a b", "100%", "a;b", "é", "x?y#z", "L3RtcC9v+=", "a'(b)*!"] {
            let mut out = String::new();
            push_segment(&mut out, s);
            let back = CanonicalPath::parse(&out).unwrap();
            assert_eq!(back.segments(), [Cow::Borrowed(s)], "{out}");
        }
    }
}
