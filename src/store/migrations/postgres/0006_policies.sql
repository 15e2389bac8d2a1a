-- Issue 40: a token may carry a permission policy, and each session made under it keeps the
-- policy's name here, so the gateway answers that session's permission requests after a restart.
ALTER TABLE tokens ADD COLUMN policy TEXT;
CREATE TABLE session_policies (
    session    TEXT   NOT NULL PRIMARY KEY,
    project    TEXT   NOT NULL,
    policy     TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
