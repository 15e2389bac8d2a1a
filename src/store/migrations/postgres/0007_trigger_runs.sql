-- Issue 40: a trigger's runs (a webhook delivery or a schedule's firing), for the portal's
-- trigger cards and the self-pause after failed runs in a row. The newest 50 per trigger are kept.
CREATE TABLE trigger_runs (
    id           TEXT   NOT NULL PRIMARY KEY,
    trigger_name TEXT   NOT NULL,
    project      TEXT   NOT NULL,
    session      TEXT,
    delivery     TEXT   NOT NULL,
    started_at   BIGINT NOT NULL,
    ended_at     BIGINT,
    outcome      TEXT   NOT NULL,
    detail       TEXT   NOT NULL,
    usd          DOUBLE PRECISION
);
CREATE INDEX trigger_runs_newest ON trigger_runs (trigger_name, started_at);
CREATE INDEX trigger_runs_of_session ON trigger_runs (session);
