//! OpenID Connect single sign-on for the browser login (`[oidc]`): the provider's metadata and
//! code exchange ([`provider`]), its keys ([`jwks`]) and the ID token check ([`idtoken`]). The
//! browser side (the start and callback pages, the flow state) is [`crate::web::sso`].
//!
//! No OIDC crate: the ones available pull in some 85 crates (a second RSA implementation among
//! them); the checks are few and written out here against `ring`, which the TLS stack already
//! uses, and each is tested with crafted tokens.

pub mod flows;
pub mod idtoken;
pub mod jwks;
pub mod provider;
