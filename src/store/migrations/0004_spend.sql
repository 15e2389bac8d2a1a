-- The cost meter (issue 25), kept across restarts: what each project and each user spent per UTC
-- day (`kind` 'project' or 'user'; a month is the sum of its days), and each session's cost as
-- last seen, its parent and who last prompted it, so spend while the gateway was down is counted
-- when it sees the session again.
CREATE TABLE spend_days (
    day  INTEGER NOT NULL,
    kind TEXT    NOT NULL,
    name TEXT    NOT NULL,
    usd  REAL    NOT NULL,
    PRIMARY KEY (day, kind, name)
);
CREATE TABLE session_costs (
    project  TEXT NOT NULL,
    session  TEXT NOT NULL,
    parent   TEXT,
    prompter TEXT,
    usd      REAL NOT NULL,
    PRIMARY KEY (project, session)
);
