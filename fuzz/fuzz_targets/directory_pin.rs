//! Directory candidates and JSON bodies: what the pin accepts resolves inside the project.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::config::validate::lexical_clean;
use opencode_gateway::policy::{pin, plan};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let root = Path::new("/tmp/ocgw-fuzz-root/project");
    if pin::inside(root, text) && !text.contains('%') {
        assert!(lexical_clean(&root.join(text)).starts_with(root));
    }
    for (method, pattern) in [("POST", "/pty"), ("POST", "/experimental/control-plane/move-session")] {
        if let Some(rule) = plan::body_rule(method, pattern) {
            let _ = pin::check_body(data, rule, root);
        }
    }
});
