//! Compression of the web UI's own files (issue 14). OpenCode sends them uncompressed, and the
//! gateway asks it for identity anyway (it redacts the upstream's credential from bodies), so a
//! phone would otherwise download a 2.7 MB script on every cold load.
//!
//! The web UI's static files are compressed, and of OpenCode's API only the few catalog routes
//! whose answer echoes nothing of the request (`plan::COMPRESSIBLE`: `/provider` is 6.45 MB of
//! JSON the web UI asks for four times per load). Never another API answer, whose user data sits
//! next to text an attacker may influence, so that the compressed length would leak it (BREACH);
//! never an event stream or an upgrade. Compression runs on the bytes the client would have got,
//! after redaction. Hashed assets (`/assets/<name>-<hash>.<ext>`) are compressed once per
//! validator and catalog answers once per keyed digest of their bytes, kept in a bounded cache;
//! the HTML document is small and compressed on the fly, never cached.

use std::io::Write;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};

/// Bodies larger than this pass through uncompressed (the web UI's largest file is ~2.7 MB).
pub(crate) const MAX_BODY: usize = 16 * 1024 * 1024;
/// The cache's bound on compressed bytes held.
const CACHE_BYTES: usize = 64 * 1024 * 1024;
/// The bound on answers read whole to be compressed, all requests together (each may be up to
/// [`MAX_BODY`]): past it an eligible answer streams as it came, uncompressed, rather than wait.
pub(crate) const BUFFERED_BYTES: usize = 64 * 1024 * 1024;
/// Catalog levels, measured on OpenCode's 6.45 MB `/provider` (docs/performance.md).
const CATALOG_BR: i32 = 6;
const CATALOG_GZIP: u32 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Coding {
    Br,
    Gzip,
}

impl Coding {
    fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }
    /// The suffix a compressed variant's ETag gets: each variant must have its own validator.
    fn etag_suffix(self) -> &'static str {
        match self {
            Coding::Br => "-br",
            Coding::Gzip => "-gz",
        }
    }
}

/// What the client asked for, taken before the request headers are rewritten for the upstream.
pub(crate) struct Ask {
    pub coding: Coding,
    /// Answered here against the variant's ETag: the upstream only knows the identity one.
    pub if_none_match: Option<HeaderValue>,
}

impl Ask {
    /// For a web UI request or a compressible API route: the coding the client accepts, if any, and its
    /// `If-None-Match`, still forwarded: a variant's ETag never matches upstream (so the body
    /// comes, and is answered here), while an identity one keeps working for files left as is.
    pub(crate) fn take(headers: &HeaderMap) -> Option<Ask> {
        let coding = headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| accepted(v.as_bytes()))?;
        Some(Ask {
            coding,
            if_none_match: headers.get(header::IF_NONE_MATCH).cloned(),
        })
    }
}

/// The coding to use for an `Accept-Encoding` value: br, then gzip, honouring q-values
/// (`q=0` refuses; `*` stands for any coding not named).
pub(crate) fn accepted(value: &[u8]) -> Option<Coding> {
    let text = std::str::from_utf8(value).ok()?;
    let (mut br, mut gzip, mut star) = (None, None, None);
    for item in text.split(',') {
        let mut params = item.split(';');
        let name = params.next().unwrap_or("").trim();
        let mut q = 1.0f32;
        for p in params {
            if let Some((k, v)) = p.split_once('=')
                && k.trim().eq_ignore_ascii_case("q")
            {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        if name.eq_ignore_ascii_case("br") {
            br = Some(q);
        } else if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(q);
        } else if name == "*" {
            star = Some(q);
        }
    }
    let br = br.or(star).unwrap_or(0.0);
    let gzip = gzip.or(star).unwrap_or(0.0);
    match (br > 0.0, gzip > 0.0) {
        (true, true) if gzip > br => Some(Coding::Gzip),
        (true, _) => Some(Coding::Br),
        (false, true) => Some(Coding::Gzip),
        (false, false) => None,
    }
}

/// Whether an answer may be compressed: a complete 200 of a compressible type, not already
/// encoded, not a stream. The caller has already excluded API routes but the compressible ones.
pub(crate) fn eligible(is_api: bool, status: StatusCode, headers: &HeaderMap) -> bool {
    if is_api || status != StatusCode::OK || headers.contains_key(header::CONTENT_ENCODING) {
        return false;
    }
    let Some(ctype) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let essence = ctype
        .as_bytes()
        .split(|b| *b == b';')
        .next()
        .unwrap_or(b"")
        .trim_ascii();
    let essence = essence.to_ascii_lowercase();
    if essence == b"text/event-stream" {
        return false;
    }
    essence.starts_with(b"text/")
        || essence.ends_with(b"javascript")
        || essence.ends_with(b"json")
        || essence.ends_with(b"+xml")
        || essence == b"application/wasm"
        || essence == b"application/manifest+json"
}

/// A content-hashed build asset: `/assets/<name>-<hash>.<ext>`; its bytes never change under
/// its name, so it may be cached for a year and its compression kept.
pub(crate) fn hashed_asset(path: &str) -> bool {
    let Some(file) = path.strip_prefix("/assets/") else {
        return false;
    };
    let stem = file.split('.').next().unwrap_or("");
    !file.contains('/')
        && stem
            .rsplit_once('-')
            .is_some_and(|(_, h)| h.len() >= 6 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

/// How hard to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Effort {
    /// A hashed asset: compressed once for good, so a high level.
    Asset,
    /// A catalog API answer: cached, but its bytes change with the config, and `/provider` is
    /// 6.45 MB, so a level that stays well under half a second for it.
    Catalog,
    /// The HTML document, compressed on every request.
    Fly,
}

/// Compress `bytes` with the effort asked for. `None` when the encoder failed: the caller then
/// sends the identity bytes (a truncated stream labelled `br` would be a broken page).
pub(crate) fn compress(bytes: &[u8], coding: Coding, effort: Effort) -> Option<Bytes> {
    let mut out = Vec::with_capacity(bytes.len() / 3);
    match coding {
        Coding::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                // 9 and not 11 for assets: within a few percent of 11 at a small fraction of its
                // time, so the first request of an asset can wait for it.
                quality: match effort {
                    Effort::Asset => 9,
                    Effort::Catalog => CATALOG_BR,
                    Effort::Fly => 5,
                },
                lgwin: 22,
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &bytes[..], &mut out, &params).ok()?;
        }
        Coding::Gzip => {
            let level = flate2::Compression::new(match effort {
                Effort::Asset => 9,
                Effort::Catalog => CATALOG_GZIP,
                Effort::Fly => 6,
            });
            let mut enc = flate2::write::GzEncoder::new(&mut out, level);
            enc.write_all(bytes).ok()?;
            enc.finish().ok()?;
        }
    }
    Some(Bytes::from(out))
}

/// Set the headers of a compressed variant; `true` when the client's `If-None-Match` matches
/// its ETag (the caller answers 304).
pub(crate) fn variant_headers(
    headers: &mut HeaderMap,
    coding: Coding,
    len: usize,
    asset: bool,
    inm: Option<&HeaderValue>,
) -> bool {
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if asset && !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        );
    }
    let etag = headers
        .get(header::ETAG)
        .and_then(|e| variant_etag(e.as_bytes(), coding));
    let Some(etag) = etag else { return false };
    let matched = inm.is_some_and(|v| matches(v.as_bytes(), etag.as_bytes()));
    headers.insert(header::ETAG, etag);
    matched
}

/// `"abc"` → `"abc-br"` (weakness kept).
fn variant_etag(etag: &[u8], coding: Coding) -> Option<HeaderValue> {
    let e = std::str::from_utf8(etag).ok()?;
    let (weak, quoted) = e.strip_prefix("W/").map_or((false, e), |q| (true, q));
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let w = if weak { "W/" } else { "" };
    HeaderValue::from_str(&format!("{w}\"{inner}{}\"", coding.etag_suffix())).ok()
}

/// `If-None-Match` (weak comparison, as RFC 9110 asks for it).
fn matches(inm: &[u8], etag: &[u8]) -> bool {
    let strip = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
    let want = strip(etag);
    inm.split(|b| *b == b',')
        .map(|t| t.trim_ascii())
        .any(|t| t == b"*" || strip(t) == want)
}

mod cache;

pub use cache::AssetCache;
pub(crate) use cache::Key;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_prefers_br_and_honours_q_values() {
        assert_eq!(accepted(b"gzip, deflate, br, zstd"), Some(Coding::Br));
        assert_eq!(accepted(b"gzip"), Some(Coding::Gzip));
        assert_eq!(accepted(b"br;q=0, gzip"), Some(Coding::Gzip));
        assert_eq!(accepted(b"br;q=0.5, gzip;q=0.8"), Some(Coding::Gzip));
        assert_eq!(accepted(b"gzip;q=0, br;q=0"), None);
        assert_eq!(accepted(b"identity"), None);
        assert_eq!(accepted(b"*"), Some(Coding::Br));
        assert_eq!(accepted(b"*;q=0, gzip"), Some(Coding::Gzip));
        assert_eq!(accepted(b"br;q=0, *"), Some(Coding::Gzip));
        assert_eq!(accepted(b""), None);
        assert_eq!(accepted(b"deflate"), None);
    }

    fn typed(t: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(t));
        h
    }

    #[test]
    fn only_the_web_uis_complete_text_answers_are_eligible() {
        let ok = StatusCode::OK;
        assert!(eligible(false, ok, &typed("text/html; charset=utf-8")));
        assert!(eligible(false, ok, &typed("text/javascript")));
        assert!(eligible(false, ok, &typed("application/javascript")));
        assert!(eligible(false, ok, &typed("text/css")));
        assert!(eligible(false, ok, &typed("image/svg+xml")));
        // An API route never, whatever the type (BREACH).
        assert!(!eligible(true, ok, &typed("text/html")));
        assert!(!eligible(true, ok, &typed("application/json")));
        assert!(!eligible(false, ok, &typed("text/event-stream")));
        assert!(!eligible(false, ok, &typed("image/png")));
        assert!(!eligible(false, ok, &HeaderMap::new()));
        assert!(!eligible(false, StatusCode::PARTIAL_CONTENT, &typed("text/css")));
        assert!(!eligible(false, StatusCode::NOT_MODIFIED, &typed("text/css")));
        let mut enc = typed("text/css");
        enc.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert!(!eligible(false, ok, &enc));
    }

    #[test]
    fn hashed_assets_are_recognised_by_name() {
        assert!(hashed_asset("/assets/index-BT9eG1xK.js"));
        assert!(hashed_asset("/assets/index-Dq_3vZ9a.css"));
        assert!(!hashed_asset("/index.html"));
        assert!(!hashed_asset("/assets/logo.svg"));
        assert!(!hashed_asset("/assets/sub/x-abcdef12.js"));
        assert!(!hashed_asset("/session/assets/index-BT9eG1xK.js"));
    }

    #[test]
    fn compressed_bytes_decompress_to_the_input() {
        let input = "console.log('hello');\n".repeat(2000).into_bytes();
        for (coding, effort) in [
            (Coding::Br, Effort::Asset),
            (Coding::Br, Effort::Fly),
            (Coding::Br, Effort::Catalog),
            (Coding::Gzip, Effort::Asset),
            (Coding::Gzip, Effort::Catalog),
        ] {
            let out = compress(&input, coding, effort).unwrap();
            assert!(out.len() < input.len() / 3, "{coding:?}");
            let mut back = Vec::new();
            match coding {
                Coding::Br => {
                    brotli::BrotliDecompress(&mut &out[..], &mut back).unwrap();
                }
                Coding::Gzip => {
                    use std::io::Read;
                    flate2::read::GzDecoder::new(&out[..]).read_to_end(&mut back).unwrap();
                }
            }
            assert_eq!(back, input, "{coding:?}");
        }
    }

    #[test]
    fn a_variant_has_its_own_etag_and_answers_if_none_match() {
        let mut h = typed("text/javascript");
        h.insert(header::ETAG, HeaderValue::from_static("W/\"abc\""));
        let inm = HeaderValue::from_static("\"abc-br\"");
        assert!(variant_headers(&mut h, Coding::Br, 10, true, Some(&inm)));
        assert_eq!(h[header::ETAG], "W/\"abc-br\"");
        assert_eq!(h[header::CACHE_CONTROL], "public, max-age=31536000, immutable");
        let mut h = typed("text/javascript");
        h.insert(header::ETAG, HeaderValue::from_static("\"abc\""));
        // The identity variant's ETag does not match the compressed one.
        let inm = HeaderValue::from_static("\"abc\"");
        assert!(!variant_headers(&mut h, Coding::Gzip, 10, false, Some(&inm)));
        assert_eq!(h[header::ETAG], "\"abc-gz\"");
        assert!(!h.contains_key(header::CACHE_CONTROL));
    }

    /// A stand-in for OpenCode's `/provider` (many providers, each with many models), or the
    /// real one from `PROVIDER_JSON` (the integration test writes it with `DUMP_PROVIDER`).
    fn catalog() -> Vec<u8> {
        if let Ok(p) = std::env::var("PROVIDER_JSON") {
            return std::fs::read(p).unwrap();
        }
        let mut out = String::from("{\"all\":[");
        let mut i = 0u64;
        while out.len() < 6_450_000 {
            i += 1;
            out.push_str(&format!(
                "{{\"id\":\"model-{i}\",\"name\":\"Model {i} ({})\",\"cost\":{{\"input\":{}.{},\"output\":{}}},\"limit\":{{\"context\":{},\"output\":{}}},\"modalities\":{{\"input\":[\"text\",\"image\"],\"output\":[\"text\"]}},\"release_date\":\"2025-{:02}-{:02}\",\"tool_call\":true,\"reasoning\":{}}},",
                i.wrapping_mul(2654435761) % 977,
                i % 17,
                i % 100,
                i % 31,
                (i % 8 + 1) * 32768,
                (i % 4 + 1) * 8192,
                i % 12 + 1,
                i % 28 + 1,
                i.is_multiple_of(2)
            ));
        }
        out.push_str("{}]}");
        out.into_bytes()
    }

    /// Measures the catalog levels (brotli and miniz are optimized in dev builds too): the
    /// figures in docs/performance.md. Timing is not asserted here: the machine is shared.
    #[test]
    #[ignore = "measurement: cargo test --lib catalog_levels -- --ignored --nocapture"]
    fn catalog_levels_are_fast_on_a_provider_catalog() {
        let body = catalog();
        for (coding, effort) in [
            (Coding::Br, Effort::Catalog),
            (Coding::Gzip, Effort::Catalog),
            (Coding::Br, Effort::Asset),
            (Coding::Gzip, Effort::Asset),
        ] {
            let t = std::time::Instant::now();
            let out = compress(&body, coding, effort).unwrap();
            eprintln!(
                "{coding:?} {effort:?}: {} -> {} bytes in {:?}",
                body.len(),
                out.len(),
                t.elapsed()
            );
        }
        let cache = AssetCache::default();
        let t = std::time::Instant::now();
        cache.digest(&body);
        eprintln!("keyed digest: {:?}", t.elapsed());
    }
}
