-- Browser logins. A session's cookie value is never stored, only its keyed digest. A device is a
-- paired phone (or any browser paired with a code): it owns long-lived sessions, and revoking it
-- ends them at once. A project host's session is a child of a login session (`parent`) and is
-- revoked with it.
CREATE TABLE devices (
    id           TEXT PRIMARY KEY,          -- public handle: `devices revoke <id>`
    user         TEXT NOT NULL,
    label        TEXT NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,          -- unix seconds
    last_seen_at INTEGER,
    last_address TEXT,
    revoked_at   INTEGER
);
CREATE INDEX devices_user ON devices(user);

CREATE TABLE web_sessions (
    id           TEXT PRIMARY KEY,          -- public handle (logs, revocation)
    digest       BLOB NOT NULL UNIQUE,      -- keyed BLAKE2b-256 of the cookie value
    user         TEXT NOT NULL,
    device_id    TEXT REFERENCES devices(id),  -- NULL: a password login
    parent       TEXT,                      -- NULL: a login-host session; else its login session
    host         TEXT,                      -- NULL: the login host; else the project whose host it serves
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    idle_secs    INTEGER NOT NULL,          -- ends after this long unused
    expires_at   INTEGER NOT NULL,          -- ends at this time whatever its use
    revoked_at   INTEGER
);
CREATE INDEX web_sessions_parent ON web_sessions(parent);
CREATE INDEX web_sessions_device ON web_sessions(device_id);
CREATE INDEX web_sessions_user ON web_sessions(user);
