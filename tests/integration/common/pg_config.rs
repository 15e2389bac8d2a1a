//! A gateway config on a throwaway PostgreSQL cluster (`[store] url`), with alice as an
//! operator: what the PostgreSQL store's tests start from.

use crate::common::gateway::{TestUser, base_config, users_toml};
use crate::common::postgres::Cluster;

/// alice's password in [`on_postgres`]'s config.
pub const ALICE: &str = "alice-password-1";

/// A throwaway cluster with one database, made off the test's runtime (its programs and its
/// blocking client), and a config using it; `None` where PostgreSQL is not installed.
pub async fn on_postgres() -> Option<(Cluster, String, String)> {
    let (cluster, url) = tokio::task::spawn_blocking(|| {
        let cluster = Cluster::start()?;
        let url = cluster.database("gateway");
        Some((cluster, url))
    })
    .await
    .unwrap()?;
    let users = users_toml(&[TestUser {
        name: "alice",
        password: ALICE,
        projects: "[\"*\"]",
        role: "operator",
    }]);
    let config = base_config(&format!("[store]\nurl = \"{url}\"\n\n{users}"));
    Some((cluster, url, config))
}
