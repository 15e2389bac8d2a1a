-- A push subscription is a user's (hostile review, round four): keyed by user and endpoint, so
-- that a user who learns another's endpoint URL and subscribes it makes a subscription of their
-- own instead of taking hers over, and removes only their own.
ALTER TABLE push_subscriptions DROP CONSTRAINT push_subscriptions_pkey;
ALTER TABLE push_subscriptions ADD PRIMARY KEY (user_name, endpoint);
-- The primary key now leads with the user; a push service's "gone" names an endpoint.
DROP INDEX push_subscriptions_user;
CREATE INDEX push_subscriptions_endpoint ON push_subscriptions (endpoint);
