//! The one reading of a client's JSON body that a decision is made on (hostile round five, item
//! 1). Pure.
//!
//! OpenCode parses a body with JavaScript's `JSON.parse` after decoding it as UTF-8 the lenient
//! way (an invalid byte becomes U+FFFD), so it accepts bodies serde_json refuses: a lone
//! surrogate escape (`"\ud800"`), a raw invalid UTF-8 byte, numbers past f64's range
//! (`Infinity`), nesting deeper than serde_json's recursion limit. A check that skipped what it
//! could not parse let such a body through unjudged (a policy token approved its own request with
//! `{"reply":"once","message":"\ud800"}`). So every decision that reads a body reads it here,
//! once, and a body this reading refuses is refused (400, with the reason), never passed.
//!
//! Refused besides what serde_json refuses: integers past 2^53 (JavaScript rounds them, serde_json
//! keeps them), duplicate keys (`JSON.parse` keeps the last, a
//! reader that kept the first would judge another request; no client of OpenCode sends them), a
//! `__proto__` key (which JavaScript's assignment reads as the object's prototype) and a
//! byte-order mark. What is accepted means the same to both parsers: UTF-8 text, JSON's
//! grammar, unique keys, numbers within f64.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A body as the decisions read it.
#[derive(Debug, PartialEq)]
pub enum Body {
    /// Nothing but JSON whitespace (or no bytes): names nothing.
    Empty,
    Json(Value),
}

impl Body {
    /// The body's JSON value, `Null` when empty.
    pub fn value(&self) -> &Value {
        static NULL: Value = Value::Null;
        match self {
            Body::Empty => &NULL,
            Body::Json(v) => v,
        }
    }
}

/// Read `bytes` as the one JSON reading, or say why a body cannot be read the way OpenCode
/// reads it.
pub fn read(bytes: &[u8]) -> Result<Body, String> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err("the request body starts with a byte-order mark; send plain UTF-8 JSON".into());
    }
    if bytes.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        return Ok(Body::Empty);
    }
    if std::str::from_utf8(bytes).is_err() {
        return Err("the request body is not valid UTF-8".into());
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Unique::deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v.0))
        .map_err(|e| {
            format!(
                "the request body cannot be read as JSON the way OpenCode reads it: {}",
                words(&e)
            )
        })?;
    Ok(Body::Json(value))
}

/// serde_json's error, said for a person: its own words, with the position.
fn words(e: &serde_json::Error) -> String {
    let said = e.to_string();
    // serde_json says "unexpected end of hex escape" for `"\ud800"` and "lone leading
    // surrogate" for `"\udc00"`.
    if said.contains("surrogate") || said.contains("hex escape") {
        return format!("a string holds an unpaired UTF-16 surrogate escape ({said})");
    }
    if said.contains("recursion limit") {
        return format!("it is nested more than 128 levels deep ({said})");
    }
    said
}

/// A JSON value whose objects have unique keys.
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

/// An integer JavaScript holds exactly (|n| ≤ 2^53): past it `JSON.parse` rounds
/// (9007199254740993 becomes …992) where serde_json keeps every digit.
fn exact<E: de::Error>(magnitude: u64) -> Result<(), E> {
    const MAX_SAFE: u64 = 1 << 53;
    match magnitude <= MAX_SAFE {
        true => Ok(()),
        false => Err(E::custom("an integer larger than JavaScript holds exactly (2^53)")),
    }
}

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        exact(v.unsigned_abs())?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        exact(v)?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // JavaScript gives `__proto__` a meaning of its own wherever a parsed body is copied
            // with assignment (`Object.assign`): a reader that sees a plain key would judge
            // another object than the one OpenCode may act on.
            if key == "__proto__" {
                return Err(de::Error::custom("the key \"__proto__\" is not accepted"));
            }
            if out.contains_key(&key) {
                let shown: String = key.chars().take(64).collect();
                return Err(de::Error::custom(format!(
                    "the key {shown:?} appears twice in one object"
                )));
            }
            let Unique(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(bytes: &[u8]) -> String {
        read(bytes).expect_err(&String::from_utf8_lossy(bytes))
    }

    #[test]
    fn what_both_parsers_read_alike_is_read() {
        assert_eq!(read(b"").unwrap(), Body::Empty);
        assert_eq!(read(b" \n\t\r").unwrap(), Body::Empty);
        let v = read(br#"{"reply":"once","message":"caf\u00e9 \ud83d\ude00"}"#).unwrap();
        assert_eq!(v.value()["message"], "café 😀", "a surrogate pair is one character");
        assert_eq!(read(b"[1,2.5,-3e10,null,true]").unwrap().value()[1], 2.5);
        assert_eq!(
            read(br#"{"a":{"b":[{"c":1}]},"d":"x"}"#).unwrap().value()["a"]["b"][0]["c"],
            1
        );
        // Past u64: a float to both.
        assert!(read(b"123456789012345678901234567890").unwrap().value().is_f64());
    }

    /// A number is read correctly rounded, as `JSON.parse` reads it: serde_json's default fast
    /// path read `92E91` one ulp off, so the value written back read as another (the fuzz
    /// target `json_body` found it). `float_roundtrip` is the feature that reads it exactly.
    #[test]
    fn numbers_are_read_correctly_rounded() {
        for text in ["92E91", "9.2e92", "1.7976931348623157e308", "5e-324", "0.1", "2.5e-7"] {
            let exact: f64 = text.parse().unwrap();
            let read_as = read(text.as_bytes()).unwrap().value().as_f64().unwrap();
            assert_eq!(read_as.to_bits(), exact.to_bits(), "{text}");
            let again = serde_json::to_vec(read(text.as_bytes()).unwrap().value()).unwrap();
            assert_eq!(
                read(&again).unwrap().value().as_f64(),
                Some(exact),
                "{text} written back"
            );
        }
    }

    #[test]
    fn what_only_opencode_reads_is_refused_with_the_reason() {
        assert!(refused(br#"{"reply":"once","message":"\ud800"}"#).contains("surrogate"));
        assert!(refused(br#"{"message":"\udc00"}"#).contains("surrogate"));
        assert!(refused(b"{\"message\":\"\xff\"}").contains("UTF-8"));
        assert!(refused(b"{\"message\":\"\xc0\xaf\"}").contains("UTF-8"));
        assert!(refused(b"\xEF\xBB\xBF{}").contains("byte-order mark"));
        assert!(refused(br#"{"reply":"reject","reply":"once"}"#).contains("appears twice"));
        assert!(
            refused(br#"{"reply":"reject","rep\u006cy":"once"}"#).contains("appears twice"),
            "an escaped spelling of the same key"
        );
        assert!(refused(br#"{"a":{"x":1,"x":2}}"#).contains("appears twice"), "nested");
        assert!(refused(br#"{"__proto__":{"directory":"/etc"}}"#).contains("__proto__"));
        assert!(refused(br#"{"n":1e400}"#).contains("out of range"));
        assert!(refused(br#"{"n":9007199254740993}"#).contains("2^53"));
        assert!(refused(br#"{"n":-9007199254740993}"#).contains("2^53"));
        assert_eq!(
            read(br#"{"n":9007199254740992}"#).unwrap().value()["n"],
            9007199254740992u64
        );
        assert!(refused(br#"{"n":-1e400}"#).contains("out of range"));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(refused(deep.as_bytes()).contains("128 levels"));
        assert!(!refused(br#"{"a":1}x"#).is_empty(), "trailing bytes");
        assert!(!refused(br#"{"a":1} {}"#).is_empty(), "two values");
        assert!(!refused(b"{'a':1}").is_empty());
        assert!(!refused(b"{\"a\":NaN}").is_empty());
        assert!(!refused(b"{\"a\":1,}").is_empty());
        assert!(!refused(b"\x0c{}").is_empty(), "a form feed is no JSON whitespace");
    }
}
