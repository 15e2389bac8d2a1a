//! Reading a form a gateway page posts (`application/x-www-form-urlencoded`, small, read within
//! the body timeout), and encoding values into URLs.

use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::http::error::HttpError;
pub(crate) use crate::support::form::encode;

/// The largest form a gateway page takes (a reject message is the longest field).
pub(crate) const MAX_FORM_BYTES: usize = 16 * 1024;

/// The fields of a posted form (the first of each name).
pub(crate) async fn read(body: Incoming, timeout: std::time::Duration) -> Result<Form, HttpError> {
    let limited = http_body_util::Limited::new(body, MAX_FORM_BYTES);
    let bytes = match tokio::time::timeout(timeout, limited.collect()).await {
        Err(_) => return Err(HttpError::BodyTimeout { secs: timeout }),
        Ok(Err(_)) => {
            return Err(HttpError::PayloadTooLarge {
                max: MAX_FORM_BYTES as u64,
            });
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| HttpError::MalformedBody("the form is not UTF-8".into()))?;
    Ok(parse(text))
}

/// A posted form: the first value of each name, and every value in order (checkboxes).
#[derive(Debug, Default)]
pub(crate) struct Form {
    pairs: Vec<(String, String)>,
}

impl Form {
    pub(crate) fn get(&self, name: &str) -> Option<&String> {
        self.pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn parse(text: &str) -> Form {
    let pairs = text
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                crate::policy::query::percent_decode(n, true).into_owned(),
                crate::policy::query::percent_decode(v, true).into_owned(),
            )
        })
        .collect();
    Form { pairs }
}

/// A path on this host to go to after a step (`next`): it must start with one `/` and name no
/// other host (`//evil`, `/\evil`), and hold no control characters. Anything else becomes `/`.
pub(crate) fn local_path(next: &str) -> &str {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.bytes().any(|b| b < 0x20 || b == 0x7f || b == b'\\')
        && next.len() <= 2048;
    if ok { next } else { "/" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_plus_and_escapes_and_keep_the_first() {
        let f = parse("user=al+ice&password=p%26w%3D&user=bob&empty=");
        assert_eq!(f.get("user").unwrap(), "al ice");
        assert_eq!(f.get("password").unwrap(), "p&w=");
        assert_eq!(f.get("empty").unwrap(), "");
        assert_eq!(f.all("user").collect::<Vec<_>>(), ["al ice", "bob"]);
        assert!(f.get("missing").is_none());
    }

    #[test]
    fn encoding_round_trips() {
        let s = "https://web.gw.localhost:8443/a b?c=d&e=/ü";
        assert_eq!(crate::policy::query::percent_decode(&encode(s), false), s);
        assert!(!encode(s).contains(['/', '?', '&', ' ', ':']));
    }

    #[test]
    fn only_local_paths_are_followed() {
        for ok in ["/", "/inbox", "/_gw/handoff?to=https%3A%2F%2Fx"] {
            assert_eq!(local_path(ok), ok);
        }
        for bad in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "evil",
            "",
            "/a\r\nb",
            "/a\\b",
        ] {
            assert_eq!(local_path(bad), "/", "{bad:?}");
        }
    }
}
