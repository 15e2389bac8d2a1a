//! Where a project's OpenCode server is and how the gateway proves itself to it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;

use crate::config::Secret;

#[derive(Debug)]
pub struct Endpoint {
    /// `127.0.0.1:4096`.
    pub authority: String,
    /// `Basic base64(user:password)`, marked sensitive so hyper never logs it.
    pub auth: Option<HeaderValue>,
}

impl Endpoint {
    pub fn new(authority: String, username: &str, password: Option<&Secret>) -> Self {
        let auth = password.map(|p| {
            let mut v = HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(format!("{username}:{}", p.expose()))))
                .expect("base64 is a valid header value");
            v.set_sensitive(true);
            v
        });
        Endpoint { authority, auth }
    }
}
