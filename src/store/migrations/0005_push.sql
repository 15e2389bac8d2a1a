-- Web Push subscriptions (issue 26): a browser's push endpoint and keys, for the user it was
-- made for, the login session it was made in (a push goes only while that login is live: a
-- logout, an expiry or a new password ends it) and the paired device it was made on (if any: a
-- revoked device's go with it).
CREATE TABLE push_subscriptions (
    endpoint   TEXT    NOT NULL PRIMARY KEY,
    user       TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    device_id  TEXT,
    p256dh     BLOB    NOT NULL,
    auth       BLOB    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX push_subscriptions_user ON push_subscriptions (user);
