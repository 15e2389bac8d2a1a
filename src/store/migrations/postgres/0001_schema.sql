-- The state database on PostgreSQL (issue 27): the same tables as SQLite's migrations 0001-0006,
-- in PostgreSQL's types. `user` is a reserved word here: the column is `user_name`. A change to
-- the schema is a new file here and a new one beside it for SQLite.
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    digest       BYTEA NOT NULL UNIQUE,
    user_name    TEXT NOT NULL,
    label        TEXT NOT NULL DEFAULT '',
    role         TEXT,
    projects     TEXT,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at   BIGINT
);
CREATE INDEX tokens_user ON tokens (user_name);

CREATE TABLE devices (
    id           TEXT PRIMARY KEY,
    user_name    TEXT NOT NULL,
    label        TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    last_seen_at BIGINT,
    last_address TEXT,
    revoked_at   BIGINT
);
CREATE INDEX devices_user ON devices (user_name);

CREATE TABLE web_sessions (
    id           TEXT PRIMARY KEY,
    digest       BYTEA NOT NULL UNIQUE,
    user_name    TEXT NOT NULL,
    device_id    TEXT REFERENCES devices (id),
    parent       TEXT,
    host         TEXT,
    created_at   BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    idle_secs    BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);
CREATE INDEX web_sessions_parent ON web_sessions (parent);
CREATE INDEX web_sessions_device ON web_sessions (device_id);
CREATE INDEX web_sessions_user ON web_sessions (user_name);

CREATE TABLE password_fingerprints (
    user_name   TEXT PRIMARY KEY,
    fingerprint BYTEA NOT NULL
);

CREATE TABLE spend_days (
    day  BIGINT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    usd  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (day, kind, name)
);
CREATE TABLE session_costs (
    project  TEXT NOT NULL,
    session  TEXT NOT NULL,
    parent   TEXT,
    prompter TEXT,
    usd      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (project, session)
);

CREATE TABLE push_subscriptions (
    endpoint   TEXT PRIMARY KEY,
    user_name  TEXT NOT NULL,
    session_id TEXT NOT NULL,
    device_id  TEXT,
    p256dh     BYTEA NOT NULL,
    auth       BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX push_subscriptions_user ON push_subscriptions (user_name);

CREATE TABLE passkey_users (
    user_name TEXT PRIMARY KEY,
    handle    BYTEA NOT NULL UNIQUE
);
CREATE TABLE passkeys (
    id            TEXT PRIMARY KEY,
    credential_id BYTEA NOT NULL UNIQUE,
    user_name     TEXT NOT NULL,
    handle        BYTEA NOT NULL,
    static_state  BYTEA NOT NULL,
    dynamic_state BYTEA NOT NULL,
    label         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    last_used_at  BIGINT,
    revoked_at    BIGINT
);
CREATE INDEX passkeys_user ON passkeys (user_name);
