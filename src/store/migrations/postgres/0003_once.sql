-- Short-lived records each used once (issue 27): handoff tickets, terminal tickets and pairing
-- codes, kept here so that whichever replica a browser reaches next finds them. Keys are
-- digests; values are the gateway's own JSON.
CREATE TABLE once_records (
    kind        TEXT NOT NULL,
    key         BYTEA NOT NULL,
    value       BYTEA NOT NULL,
    expires_at  BIGINT NOT NULL, -- Unix milliseconds
    PRIMARY KEY (kind, key)
);
CREATE INDEX once_records_expiry ON once_records (kind, expires_at);
