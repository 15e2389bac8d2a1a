-- API tokens. Only a keyed digest of each token is kept; the token itself is shown once.
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,          -- public handle: `token list`, `token revoke`
    digest       BLOB NOT NULL UNIQUE,      -- keyed BLAKE2b-256 of the token (the key is not in this file)
    user         TEXT NOT NULL,
    label        TEXT NOT NULL DEFAULT '',
    role         TEXT,                      -- NULL: the user's own role
    projects     TEXT,                      -- NULL: all the user's projects; else comma-separated names
    created_at   INTEGER NOT NULL,          -- unix seconds
    expires_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE INDEX tokens_user ON tokens(user);
