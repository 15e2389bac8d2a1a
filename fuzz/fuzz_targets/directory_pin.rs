//! Directory candidates and JSON bodies: what the pin accepts, OpenCode would act inside the
//! project under every reading of it (as written, percent-decoded), judged by the reference in
//! tests/oracle/ (Node's path.resolve and JavaScript's decoding, written apart from the pin's own
//! `lexical_clean`). Percent-encoded inputs are fuzzed too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::policy::{json_body, pin, plan};
use std::path::Path;

#[path = "../../tests/oracle/mod.rs"]
mod oracle;

const ROOT: &str = "/tmp/ocgw-fuzz-root/project";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let root = Path::new(ROOT);
    if pin::inside(root, text) {
        for reading in oracle::directories(ROOT, text) {
            assert!(oracle::is_inside(ROOT, &reading), "accepted {text:?}, which OpenCode may read as {reading}");
        }
    }
    for (method, pattern) in [("POST", "/pty"), ("POST", "/experimental/control-plane/move-session")] {
        if let Some(rule) = plan::body_rule(method, pattern) {
            let Ok(body) = json_body::read(data) else { continue };
            if let Ok(names) = pin::check_body(&body, rule, root) {
                for p in &names.paths {
                    for reading in oracle::directories(ROOT, p) {
                        assert!(oracle::is_inside(ROOT, &reading), "a body naming {p:?} passed: {reading}");
                    }
                }
            }
        }
    }
});
