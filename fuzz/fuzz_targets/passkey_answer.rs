//! A browser's passkey answer (`credential` of `POST /_gw/passkey`), as the gateway reads it
//! before any ceremony is looked up: JSON, base64url, CBOR attestation objects, authenticator
//! data and client data, all `webauthn_rp`'s parsers. Reading never panics, and nothing reads as
//! both a registration and a sign-in.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (registration, sign_in) = opencode_gateway::auth::passkeys::reads_as_answers(data);
    assert!(!(registration && sign_in));
});
