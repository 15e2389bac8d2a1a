//! Reading a config file's TOML into its typed form, with every key of the wrong form reported
//! at once, each by its key and what it should be in words (issue 38: a wrong type said only
//! `expected f64`, and only the first of them). The TOML library stops at the first error and
//! names only its place in the text, so the key there is found in the parsed document, noted,
//! taken out, and the text read again, until it reads or nothing more can be named.

use serde::de::DeserializeOwned;
use toml_edit::{Document, DocumentMut, Item, Value};

use super::Problem;

/// At most this many problems are reported (each costs one more read of a small file).
const MOST: usize = 50;

/// `text` as `T`, or every problem with its form (`Err(None)` when the text is not even TOML:
/// the caller reports the library's own error, which shows the line).
pub(crate) fn read<T: DeserializeOwned>(text: &str) -> Result<T, ReadError> {
    let original = text;
    let mut text = text.to_string();
    let mut problems: Vec<(usize, Problem)> = Vec::new();
    let in_order = |mut p: Vec<(usize, Problem)>| {
        // As they stand in the file (the library meets them in its own order).
        p.sort_by_key(|(at, _)| *at);
        ReadError::Problems(p.into_iter().map(|(_, p)| p).collect())
    };
    loop {
        let error = match toml::from_str::<T>(&text) {
            Ok(v) if problems.is_empty() => return Ok(v),
            Ok(_) => return Err(in_order(problems)),
            Err(e) => e,
        };
        let found = error.span().and_then(|span| key_at(&text, span.start));
        let Some(path) = found.filter(|_| problems.len() < MOST) else {
            if problems.is_empty() {
                return Err(ReadError::Toml(error));
            }
            // Not nameable (e.g. a missing key the removal itself caused): the ones named stand.
            return Err(in_order(problems));
        };
        problems.push((position(original, &path), in_words(&path, error.message())));
        match without(&text, &path) {
            Some(shorter) => text = shorter,
            None => return Err(in_order(problems)),
        }
    }
}

pub(crate) enum ReadError {
    /// Not TOML, or a problem no key can be named for: the library's error, with the line.
    Toml(toml::de::Error),
    Problems(Vec<Problem>),
}

/// A key path in the config's own spelling (`budget.session_usd`, `project[1].listen`).
type Path = Vec<Step>;

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

fn spelled(path: &Path) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out += k,
            Step::Key(k) => out += &format!(".{k}"),
            Step::Index(i) => out += &format!("[{i}]"),
        }
    }
    out
}

/// The deepest key whose name or value holds byte `at` of `text`.
fn key_at(text: &str, at: usize) -> Option<Path> {
    let doc = Document::parse(text.to_string()).ok()?;
    let mut path = Vec::new();
    in_table(doc.as_table(), at, &mut path).then_some(path)
}

/// Where the key at `path` starts in `text` (the end when it cannot be found).
fn position(text: &str, path: &Path) -> usize {
    let Ok(doc) = Document::parse(text.to_string()) else {
        return text.len();
    };
    let mut item = doc.as_item();
    for step in path {
        let next = match step {
            Step::Key(k) => item.get(k.as_str()),
            Step::Index(i) => item.get(*i),
        };
        match next {
            Some(n) => item = n,
            None => return text.len(),
        }
    }
    item.span().map_or(text.len(), |s| s.start)
}

fn holds(span: Option<std::ops::Range<usize>>, at: usize) -> bool {
    span.is_some_and(|s| s.contains(&at) || (s.is_empty() && s.start == at))
}

fn in_table(table: &toml_edit::Table, at: usize, path: &mut Path) -> bool {
    for (key, item) in table.iter() {
        let Some((k, _)) = table.get_key_value(key) else {
            continue;
        };
        path.push(Step::Key(key.to_string()));
        if in_item(item, at, path) || holds(k.span(), at) {
            return true;
        }
        path.pop();
    }
    false
}

fn in_item(item: &Item, at: usize, path: &mut Path) -> bool {
    match item {
        Item::Table(t) => in_table(t, at, path),
        Item::ArrayOfTables(tables) => tables.iter().enumerate().any(|(i, t)| {
            path.push(Step::Index(i));
            let found = in_table(t, at, path);
            if !found {
                path.pop();
            }
            found
        }),
        Item::Value(v) => in_value(v, at, path),
        Item::None => false,
    }
}

fn in_value(value: &Value, at: usize, path: &mut Path) -> bool {
    if let Value::InlineTable(t) = value {
        for (key, v) in t.iter() {
            path.push(Step::Key(key.to_string()));
            if in_value(v, at, path) {
                return true;
            }
            path.pop();
        }
    }
    holds(value.span(), at)
}

/// `text` without the key at `path`.
fn without(text: &str, path: &Path) -> Option<String> {
    let mut doc: DocumentMut = text.parse().ok()?;
    let (last, parents) = path.split_last()?;
    let mut item: &mut Item = doc.as_item_mut();
    for step in parents {
        item = match step {
            Step::Key(k) => item.get_mut(k.as_str())?,
            Step::Index(i) => item.get_mut(*i)?,
        };
    }
    let Step::Key(last) = last else { return None };
    match item {
        Item::Table(t) => t.remove(last)?,
        Item::Value(Value::InlineTable(t)) => Item::Value(t.remove(last)?),
        _ => return None,
    };
    Some(doc.to_string())
}

/// The library's message about a key, in words, with the fix.
fn in_words(path: &Path, message: &str) -> Problem {
    let key = spelled(path);
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let name = rest.split(',').next().unwrap_or(rest);
        return Problem {
            key,
            message: format!("unknown field {name}"),
            fix: "remove the key or correct its spelling (config/gateway.example.toml lists every key)".into(),
        };
    }
    let (got, expected) = match message.split_once(", expected ") {
        Some((got, expected)) => (got, expected),
        None => (message, ""),
    };
    let want = expected_in_words(expected);
    let got = got.strip_prefix("invalid type: ").unwrap_or(got);
    let got = got.strip_prefix("invalid value: ").unwrap_or(got);
    Problem {
        key,
        message: match want {
            Some(want) => format!("this is {got}, but it must be {want}"),
            None => message.to_string(),
        },
        fix: match want {
            Some(want) => format!("write {want}"),
            None => "see config/gateway.example.toml for this key's form".into(),
        },
    }
}

/// What serde's name for a type means to a person writing TOML.
fn expected_in_words(expected: &str) -> Option<&'static str> {
    Some(match expected.trim() {
        "f64" | "f32" => "a number, like 2.5",
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more, like 10",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number, like 10",
        "a boolean" => "true or false",
        "a string" | "a borrowed string" => "text in quotes, like \"…\"",
        "a sequence" => "a list, like [\"a\", \"b\"]",
        e if e.starts_with("struct ") || e == "a map" => "a table, like [name] with keys under it",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Config {
        budget: Option<Budget>,
        #[serde(default)]
        project: Vec<Project>,
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Budget {
        session_usd: Option<f64>,
        project_day_usd: Option<f64>,
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Project {
        name: String,
        spawn: Option<bool>,
        env: Option<std::collections::BTreeMap<String, String>>,
    }

    fn problems(text: &str) -> Vec<(String, String)> {
        match read::<Config>(text) {
            Err(ReadError::Problems(p)) => p
                .into_iter()
                .map(|p| (p.key, format!("{}. Fix: {}", p.message, p.fix)))
                .collect(),
            Err(ReadError::Toml(e)) => panic!("not named: {e}"),
            Ok(c) => panic!("read: {c:?}"),
        }
    }

    #[test]
    fn every_wrong_form_is_named_at_once_in_words() {
        let found = problems(
            "[budget]\nsession_usd = \"two\"\nproject_day_usd = true\n\n[[project]]\nname = \"a\"\n\n[[project]]\nname = \"b\"\nspawn = \"yes\"\nenv = { A = 1 }\ncolour = 3\n",
        );
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "budget.session_usd",
                "budget.project_day_usd",
                "project[1].spawn",
                "project[1].env.A",
                "project[1].colour"
            ],
            "{found:#?}"
        );
        assert_eq!(
            found[0].1,
            "this is string \"two\", but it must be a number, like 2.5. Fix: write a number, like 2.5"
        );
        assert!(found[2].1.contains("must be true or false"), "{found:#?}");
        assert!(found[3].1.contains("must be text in quotes"), "{found:#?}");
        assert!(found[4].1.starts_with("unknown field `colour`"), "{found:#?}");
        assert!(found.iter().all(|(_, m)| !m.contains("f64")), "{found:#?}");
    }

    #[test]
    fn text_that_is_not_toml_keeps_the_librarys_line_and_column() {
        match read::<Config>("[budget\nsession_usd = 1\n") {
            Err(ReadError::Toml(e)) => assert!(e.to_string().contains("line 1"), "{e}"),
            _ => panic!("read"),
        }
    }

    #[test]
    fn a_good_file_reads() {
        assert!(read::<Config>("[budget]\nsession_usd = 2.0\n[[project]]\nname = \"a\"\n").is_ok());
    }
}
