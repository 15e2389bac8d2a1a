//! Host and path routing, canonical paths and query rewriting: never a panic; a routed project is a
//! known one; the forwarded spelling of a path reads back as what was judged;
//! no credential or directory selector survives the rewritten query, as OpenCode would read it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::policy::authz;
use opencode_gateway::policy::canonical::CanonicalPath;
use opencode_gateway::policy::route::{self, Route, RouteInput};
use opencode_gateway::policy::{pin, query};
use opencode_gateway::http::rewrite;

#[path = "../../tests/oracle/mod.rs"]
mod oracle;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (host, rest) = text.split_once('\n').unwrap_or(("", text));
    let (path, q) = rest.split_once('?').unwrap_or((rest, ""));
    if let Ok(parsed) = CanonicalPath::parse(path) {
        let input = RouteInput { bound: None, host: Some(host), segments: parsed.segments() };
        if let Route::Project { name, start } = route::route(&input, Some("gw.localhost"), |n| n == "web", None) {
            assert_eq!(name, "web");
            // The forwarded spelling reads back as the route, session and spelling judged.
            let first = authz::resolve(&http::Method::GET, parsed.tail(start));
            let again = CanonicalPath::parse(&first.upstream_path).expect("the forwarded spelling parses");
            let second = authz::resolve(&http::Method::GET, again.segments());
            assert_eq!(first.route.map(|r| r.pattern), second.route.map(|r| r.pattern));
            assert_eq!(first.session, second.session);
            assert_eq!(first.upstream_path, second.upstream_path);
        }
    }
    if let Some(out) = rewrite::upstream_query(Some(q), true) {
        for (name, _) in query::pairs(&out) {
            assert!(!pin::is_selector_param(&name) && !rewrite::is_credential_param(&name));
        }
        // Judged apart from the gateway's own predicates: no name OpenCode could read in the
        // rewritten query selects a directory or carries its credential (tests/oracle/).
        for name in oracle::query_names(&out) {
            assert!(
                !oracle::PINNED_SELECTORS.contains(&name.as_str()) && !oracle::CREDENTIALS.contains(&name.as_str()),
                "OpenCode reads {name} in {out:?} (from {q:?})"
            );
        }
    }
    if let Some(out) = rewrite::upstream_query(Some(q), false) {
        for name in oracle::query_names(&out) {
            assert!(!oracle::CREDENTIALS.contains(&name.as_str()), "OpenCode reads {name} in {out:?}");
        }
    }
    let _ = rewrite::loggable_query(q);
});
