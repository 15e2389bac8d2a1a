//! The config boundary (`config::parse`): any text, never a panic; a config it accepts keeps the
//! config file itself among the paths no client may read, and every project it accepts has a
//! unique name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new("/tmp/ocgw-fuzz-config/gateway.toml");
    if let Ok(settings) = opencode_gateway::config::parse(text, path) {
        assert!(settings.protected.covers(path), "the config file is not protected");
        let mut names: Vec<&str> = settings.projects.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "two projects share a name");
    }
});
