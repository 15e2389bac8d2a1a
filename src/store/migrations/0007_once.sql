-- Short-lived records each used once (issue 27): handoff tickets, terminal tickets and pairing
-- codes. In the store, not in one process's memory, so that whichever gateway on the store a
-- browser reaches next finds them. Keys are digests; values are the gateway's own JSON.
CREATE TABLE once_records (
    kind        TEXT NOT NULL,
    key         BLOB NOT NULL,
    value       BLOB NOT NULL,
    expires_at  INTEGER NOT NULL, -- Unix milliseconds
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE INDEX once_records_expiry ON once_records (kind, expires_at);
