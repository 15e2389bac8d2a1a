-- Passkeys (issue 26): WebAuthn credentials a user registered, for signing in without a password.
-- A user's handle is the random WebAuthn user id every one of their passkeys carries (never the
-- name: the authenticator keeps it). A passkey's public key and flags are the library's encoding
-- (`webauthn_rp`'s `StaticState`, and `DynamicState`, updated at each sign-in).
CREATE TABLE passkey_users (
    user   TEXT NOT NULL PRIMARY KEY,
    handle BLOB NOT NULL UNIQUE
);
CREATE TABLE passkeys (
    id            TEXT    NOT NULL PRIMARY KEY,
    credential_id BLOB    NOT NULL UNIQUE,
    user          TEXT    NOT NULL,
    handle        BLOB    NOT NULL,
    static_state  BLOB    NOT NULL,
    dynamic_state BLOB    NOT NULL,
    label         TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER,
    revoked_at    INTEGER
);
CREATE INDEX passkeys_user ON passkeys (user);
