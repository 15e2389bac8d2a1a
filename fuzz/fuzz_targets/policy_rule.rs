//! A `[[policy]]` rule (`config::permissions::parse_rule`) and the matcher
//! (`policy::permission::wildcard`): any text, never a panic; a rule it accepts reads back the
//! same, and a pattern always matches itself spelled without wildcards.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::config::permissions::parse_rule;
use opencode_gateway::policy::permission::wildcard;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(rule) = parse_rule(text) {
        assert_eq!(parse_rule(&rule.to_string()).as_ref(), Ok(&rule), "a rule reads back the same");
        let literal = rule.pattern.replace(['*', '?'], "x");
        assert!(wildcard(&literal, &literal), "a literal pattern matches itself");
        let _ = wildcard(&rule.pattern, text);
    }
});
