//! Authorization headers and `auth_token` values: parsing never panics, and what parses as Basic
//! has a non-empty user name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use opencode_gateway::auth::credentials::{self, Credentials};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(Credentials::Basic { user, .. }) = credentials::parse_authorization(text) {
        assert!(!user.is_empty());
    }
    let _ = credentials::from_query(Some(text));
});
