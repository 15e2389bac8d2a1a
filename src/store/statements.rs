//! The store's SQL, written once for every backend. Each statement is written with PostgreSQL's
//! numbered parameters (`$1`) and two marks a backend spells its own way: `{user}`, the user
//! column (`user` on SQLite; `user_name` on PostgreSQL, where `user` is reserved), and
//! `{for_update}`, a row lock for the rest of the transaction (PostgreSQL's `FOR UPDATE`; nothing
//! on SQLite, whose immediate transaction holds the whole file). A [`Dialect`] spells a statement
//! once, on its first use, so a third backend adds a dialect, not a copy of the statements.
//! A parameter that may be null is cast where it is tested (`CAST($1 AS TEXT) IS NULL`), which
//! both read alike.

use std::sync::OnceLock;

/// How one backend spells the statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// `?NNN` parameters (SQLite numbers `$1` by first appearance, not by its digits).
    Sqlite,
    Postgres,
}

impl Dialect {
    fn spell(self, text: &str) -> String {
        let (user, for_update) = match self {
            Dialect::Sqlite => ("user", ""),
            Dialect::Postgres => ("user_name", " FOR UPDATE"),
        };
        let text = text.replace("{user}", user).replace("{for_update}", for_update);
        match self {
            Dialect::Postgres => text,
            Dialect::Sqlite => {
                let mut out = String::with_capacity(text.len());
                let mut chars = text.chars().peekable();
                while let Some(c) = chars.next() {
                    let numbered = c == '$' && chars.peek().is_some_and(char::is_ascii_digit);
                    out.push(if numbered { '?' } else { c });
                }
                out
            }
        }
    }
}

/// One statement, and its spelling in each dialect once asked for.
pub(crate) struct Statement {
    text: &'static str,
    spelt: [OnceLock<String>; 2],
}

impl Statement {
    const fn new(text: &'static str) -> Statement {
        Statement {
            text,
            spelt: [OnceLock::new(), OnceLock::new()],
        }
    }

    pub(crate) fn sql(&self, dialect: Dialect) -> &str {
        self.spelt[dialect as usize].get_or_init(|| dialect.spell(self.text))
    }
}

/// The columns of a record kept as one row, in the order the backends read them.
macro_rules! token_columns {
    () => {
        "id, digest, {user}, label, role, projects, created_at, expires_at, last_used_at, revoked_at, policy"
    };
}
macro_rules! device_columns {
    () => {
        "id, {user}, label, created_at, last_seen_at, last_address, revoked_at"
    };
}
macro_rules! session_columns {
    () => {
        "id, digest, {user}, device_id, parent, host, created_at, last_seen_at, idle_secs, expires_at, revoked_at"
    };
}
macro_rules! trigger_run_columns {
    () => {
        "id, trigger_name, project, session, delivery, started_at, ended_at, outcome, detail, usd"
    };
}
macro_rules! passkey_columns {
    () => {
        "id, credential_id, {user}, handle, static_state, dynamic_state, label, created_at, last_used_at, revoked_at"
    };
}

/// Every record of a table, of one user when `$1` names one, newest first.
macro_rules! newest_first {
    ($columns:ident, $table:literal) => {
        concat!(
            "SELECT ",
            $columns!(),
            " FROM ",
            $table,
            " WHERE CAST($1 AS TEXT) IS NULL OR {user} = $1 ORDER BY created_at DESC, id"
        )
    };
}

macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident = $text:expr;)*) => {
        $($(#[$doc])* pub(crate) static $name: Statement = Statement::new($text);)*
        /// Every statement (SQLite caches them all prepared; a test spells them all).
        pub(crate) static ALL: &[&Statement] = &[$(&$name),*];
    };
}

statements! {
    TOKEN_INSERT = concat!("INSERT INTO tokens (", token_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)");
    TOKEN_BY_DIGEST = concat!("SELECT ", token_columns!(), " FROM tokens WHERE digest = $1");
    TOKENS_OF = newest_first!(token_columns, "tokens");
    TOKEN_REVOKE = "UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL";
    TOKEN_TOUCH = "UPDATE tokens SET last_used_at = $2 WHERE id = $1";
    /// A session made under a token with a policy (the first word stands: a session is made once).
    SESSION_POLICY_SET = "INSERT INTO session_policies (session, project, policy, created_at) VALUES ($1, $2, $3, $4)
        ON CONFLICT (session) DO NOTHING";
    SESSION_POLICIES = "SELECT session, project, policy FROM session_policies ORDER BY created_at, session";

    /// A trigger's run (`runs.rs`), begun or already over.
    TRIGGER_RUN_INSERT = concat!("INSERT INTO trigger_runs (", trigger_run_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)");
    /// The trigger's newest runs stay (`runs::KEPT_PER_TRIGGER`).
    TRIGGER_RUNS_PRUNE = "DELETE FROM trigger_runs WHERE trigger_name = $1 AND id NOT IN
        (SELECT id FROM trigger_runs WHERE trigger_name = $1 ORDER BY started_at DESC, id LIMIT $2)";
    /// A run's end, once: only a running run is ended.
    TRIGGER_RUN_END = "UPDATE trigger_runs SET ended_at = $2, outcome = $3, detail = $4, usd = $5
        WHERE id = $1 AND outcome = 'running'";
    TRIGGER_RUNS_OF = concat!("SELECT ", trigger_run_columns!(), " FROM trigger_runs WHERE trigger_name = $1
        ORDER BY started_at DESC, id LIMIT $2");
    TRIGGER_RUNS_RUNNING_IN = concat!("SELECT ", trigger_run_columns!(), " FROM trigger_runs
        WHERE session = $1 AND outcome = 'running' ORDER BY started_at, id");

    DEVICE_INSERT = concat!("INSERT INTO devices (", device_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, $7)");
    DEVICES_OF = newest_first!(device_columns, "devices");
    DEVICE_REVOKE = "UPDATE devices SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL";
    /// A revoked phone is told nothing more.
    DEVICE_PUSH_DELETE = "DELETE FROM push_subscriptions WHERE device_id = $1";
    /// A revoked device's sessions, and the project-host sessions handed off from them.
    DEVICE_SESSIONS_REVOKE = "UPDATE web_sessions SET revoked_at = $2 WHERE revoked_at IS NULL AND (device_id = $1
        OR parent IN (SELECT id FROM web_sessions WHERE device_id = $1))";
    DEVICE_TOUCH = "UPDATE devices SET last_seen_at = $2, last_address = $3 WHERE id = $1";
    DEVICE_REVOKED = "SELECT revoked_at IS NOT NULL FROM devices WHERE id = $1";

    FINGERPRINT_OF = "SELECT fingerprint FROM password_fingerprints WHERE {user} = $1{for_update}";
    FINGERPRINT_SAVE = "INSERT INTO password_fingerprints ({user}, fingerprint) VALUES ($1, $2)
        ON CONFLICT ({user}) DO UPDATE SET fingerprint = excluded.fingerprint";
    /// Login-host sessions that no device owns (password and single sign-on logins), and the
    /// project-host sessions handed off from them.
    PASSWORD_SESSIONS_REVOKE = "UPDATE web_sessions SET revoked_at = $2 WHERE revoked_at IS NULL AND {user} = $1 AND (
        (device_id IS NULL AND parent IS NULL)
        OR parent IN (SELECT id FROM web_sessions WHERE {user} = $1 AND device_id IS NULL AND parent IS NULL))";

    SESSION_INSERT = concat!(
        "INSERT INTO web_sessions (", session_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
    );
    SESSION_BY_DIGEST = concat!("SELECT ", session_columns!(), " FROM web_sessions WHERE digest = $1");
    SESSION_BY_ID = concat!("SELECT ", session_columns!(), " FROM web_sessions WHERE id = $1");
    SESSION_REVOKE = "UPDATE web_sessions SET revoked_at = $2 WHERE (id = $1 OR parent = $1) AND revoked_at IS NULL";
    SESSION_TOUCH = "UPDATE web_sessions SET last_seen_at = $2 WHERE id = $1
        OR id = (SELECT parent FROM web_sessions WHERE id = $1)";
    SESSIONS_PRUNE = "DELETE FROM web_sessions WHERE revoked_at < $1 OR expires_at < $1";
    /// Push subscriptions made in logins that are gone now.
    PUSH_PRUNE = "DELETE FROM push_subscriptions WHERE session_id NOT IN (SELECT id FROM web_sessions)";

    SPEND_OF_DAY = "SELECT kind, name, usd FROM spend_days WHERE day = $1";
    SPEND_BETWEEN = "SELECT kind, name, SUM(usd) FROM spend_days WHERE day >= $1 AND day < $2 GROUP BY kind, name";
    SESSION_COSTS = "SELECT project, session, parent, prompter, usd FROM session_costs";
    SPEND_SAVE = "INSERT INTO spend_days (day, kind, name, usd) VALUES ($1, $2, $3, $4)
        ON CONFLICT (day, kind, name) DO UPDATE SET usd = excluded.usd";
    SESSION_COST_SAVE = "INSERT INTO session_costs (project, session, parent, prompter, usd) VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (project, session) DO UPDATE SET parent = excluded.parent, prompter = excluded.prompter,
        usd = excluded.usd";
    SESSION_COST_FORGET = "DELETE FROM session_costs WHERE project = $1 AND session = $2";

    PUSH_SAVE = "INSERT INTO push_subscriptions (endpoint, {user}, session_id, device_id, p256dh, auth, created_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        ON CONFLICT ({user}, endpoint) DO UPDATE SET session_id = excluded.session_id,
        device_id = excluded.device_id, p256dh = excluded.p256dh, auth = excluded.auth,
        created_at = excluded.created_at";
    /// The subscriptions whose login is live.
    PUSH_LIVE = "SELECT p.endpoint, p.{user}, p.session_id, p.device_id, p.p256dh, p.auth, p.created_at
        FROM push_subscriptions p JOIN web_sessions w ON w.id = p.session_id
        WHERE w.revoked_at IS NULL AND w.expires_at > $1";
    PUSH_ENDPOINTS_OF = "SELECT endpoint FROM push_subscriptions WHERE {user} = $1";
    PUSH_DELETE = "DELETE FROM push_subscriptions WHERE endpoint = $1 AND (CAST($2 AS TEXT) IS NULL OR {user} = $2)";

    PASSKEY_USER_INSERT = "INSERT INTO passkey_users ({user}, handle) VALUES ($1, $2) ON CONFLICT ({user}) DO NOTHING";
    PASSKEY_HANDLE_OF = "SELECT handle FROM passkey_users WHERE {user} = $1";
    PASSKEY_INSERT = concat!(
        "INSERT INTO passkeys (", passkey_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    );
    PASSKEY_BY_CREDENTIAL = concat!("SELECT ", passkey_columns!(), " FROM passkeys WHERE credential_id = $1");
    PASSKEYS_OF = newest_first!(passkey_columns, "passkeys");
    PASSKEY_REVOKE = "UPDATE passkeys SET revoked_at = $3
        WHERE id = $1 AND (CAST($2 AS TEXT) IS NULL OR {user} = $2) AND revoked_at IS NULL";
    PASSKEY_USED = "UPDATE passkeys SET dynamic_state = $2, last_used_at = $3 WHERE id = $1";

    ONCE_EXPIRED_DELETE = "DELETE FROM once_records WHERE kind = $1 AND expires_at <= $2";
    ONCE_COUNT = "SELECT COUNT(*) FROM once_records WHERE kind = $1";
    ONCE_INSERT = "INSERT INTO once_records (kind, key, value, expires_at) VALUES ($1, $2, $3, $4)
        ON CONFLICT (kind, key) DO NOTHING";
    /// Read in the transaction that settles it: of two replicas, one takes it.
    ONCE_OF = "SELECT value, expires_at FROM once_records WHERE kind = $1 AND key = $2{for_update}";
    ONCE_DELETE = "DELETE FROM once_records WHERE kind = $1 AND key = $2";
    ONCE_REPLACE = "UPDATE once_records SET value = $3 WHERE kind = $1 AND key = $2";
    ONCE_LIVE = "SELECT COUNT(*) FROM once_records WHERE kind = $1 AND expires_at > $2";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite gets `?n` where PostgreSQL has `$n` (its `$1` would be numbered by appearance:
    /// `SET revoked_at = $2 WHERE id = $1` would bind them swapped), and each its user column.
    #[test]
    fn each_dialect_spells_parameters_and_marks_its_way() {
        assert_eq!(
            TOKEN_REVOKE.sql(Dialect::Sqlite),
            "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL"
        );
        assert_eq!(TOKEN_REVOKE.sql(Dialect::Postgres), TOKEN_REVOKE.text);
        assert_eq!(
            FINGERPRINT_OF.sql(Dialect::Postgres),
            "SELECT fingerprint FROM password_fingerprints WHERE user_name = $1 FOR UPDATE"
        );
        assert_eq!(
            FINGERPRINT_OF.sql(Dialect::Sqlite),
            "SELECT fingerprint FROM password_fingerprints WHERE user = ?1"
        );
        for s in ALL {
            for d in [Dialect::Sqlite, Dialect::Postgres] {
                let sql = s.sql(d);
                assert!(!sql.contains('{'), "a mark left in {sql}");
                let other = if d == Dialect::Sqlite { '$' } else { '?' };
                assert!(!sql.contains(other), "{sql}");
            }
        }
    }
}
