//! Host and path routing, and query rewriting: never a panic; a routed project is a known one;
//! no credential or directory selector survives the rewritten query.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::policy::route::{self, Route, RouteInput};
use opencode_gateway::policy::{pin, query};
use opencode_gateway::rewrite;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (host, rest) = text.split_once('\n').unwrap_or(("", text));
    let (path, q) = rest.split_once('?').unwrap_or((rest, ""));
    let input = RouteInput { bound: None, host: Some(host), path };
    if let Route::Project { name, .. } = route::route(&input, Some("gw.localhost"), |n| n == "web", None) {
        assert_eq!(name, "web");
    }
    if let Some(out) = rewrite::upstream_query(Some(q), true) {
        for (name, _) in query::pairs(&out) {
            assert!(!pin::is_selector_param(&name) && !rewrite::is_credential_param(&name));
        }
    }
    let _ = rewrite::loggable_query(q);
});
