-- Login budgets every gateway on this database spends together (issue 27): one row per
-- address or user name, its GCRA theoretical arrival time in Unix milliseconds. A row whose time
-- is past is a full budget, and is pruned.
CREATE TABLE ocgw_budgets (
    key  TEXT PRIMARY KEY,
    tat  BIGINT NOT NULL
);
