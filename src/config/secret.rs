//! A secret string: never printed, zeroed when dropped, compared in constant time.

use std::fmt;

use subtle::ConstantTimeEq;
use zeroize::Zeroize;

#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The clear value. Every caller is a place where the secret leaves this type: keep them few.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time equality, so a comparison leaks nothing about how much matched.
    pub fn ct_eq(&self, other: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(other).into()
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other.0.as_bytes())
    }
}

impl Eq for Secret {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(format!("{s}"), "<redacted>");
        assert!(!format!("{:?}", Some(&s)).contains("hunter2"));
    }

    #[test]
    fn equality_compares_the_whole_value() {
        let s = Secret::new("hunter2");
        assert!(s.ct_eq(b"hunter2"));
        assert!(!s.ct_eq(b"hunter"));
        assert!(!s.ct_eq(b"hunter22"));
        assert_eq!(s, Secret::new("hunter2"));
    }
}
