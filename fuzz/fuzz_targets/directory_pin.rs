//! Directory candidates and JSON bodies: what the pin accepts resolves inside the project.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::config::validate::lexical_clean;
use opencode_gateway::policy::pin;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let root = Path::new("/tmp/ocgw-fuzz-root/project");
    if pin::inside(root, text) && !text.contains('%') {
        assert!(lexical_clean(&root.join(text)).starts_with(root));
    }
    if let Some(rule) = pin::body_rule(&http::Method::POST, "/pty") {
        let _ = pin::check_body(data, &rule, root);
    }
});
