-- Secrets every gateway on this database shares (issue 27): the key that digests API tokens and
-- cookie values, so that a session or token made through one replica is found by another.
CREATE TABLE ocgw_keys (
    name  TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
