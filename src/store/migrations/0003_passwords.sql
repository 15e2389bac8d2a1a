-- The password hash each user's browser logins were made under, as a BLAKE2b-256 digest of its PHC
-- text (the config holds the hash itself). When the config's hash changes (`user passwd`), the
-- user's password logins end, whether the gateway was running at the time or not.
CREATE TABLE password_fingerprints (
    user        TEXT PRIMARY KEY,
    fingerprint BLOB NOT NULL
);
