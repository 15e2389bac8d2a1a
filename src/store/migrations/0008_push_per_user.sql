-- A push subscription is a user's (hostile review, round four): keyed by user and endpoint, so
-- that a user who learns another's endpoint URL and subscribes it makes a subscription of their
-- own instead of taking hers over, and removes only their own. SQLite cannot change a primary
-- key in place: the table is copied.
CREATE TABLE push_subscriptions_by_user (
    endpoint   TEXT    NOT NULL,
    user       TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    device_id  TEXT,
    p256dh     BLOB    NOT NULL,
    auth       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (user, endpoint)
);
INSERT INTO push_subscriptions_by_user (endpoint, user, session_id, device_id, p256dh, auth, created_at)
    SELECT endpoint, user, session_id, device_id, p256dh, auth, created_at FROM push_subscriptions;
DROP TABLE push_subscriptions;
ALTER TABLE push_subscriptions_by_user RENAME TO push_subscriptions;
-- A push service's "gone" names an endpoint.
CREATE INDEX push_subscriptions_endpoint ON push_subscriptions (endpoint);
