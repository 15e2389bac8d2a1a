//! A gateway config on a throwaway PostgreSQL cluster (`[store] url`), with alice as an
//! operator: what the PostgreSQL store's tests start from.

use crate::common::gateway::{TestUser, base_config, users_toml};
use crate::common::postgres::Cluster;

/// alice's password in [`on_postgres`]'s config.
pub const ALICE: &str = "alice-password-1";

/// A throwaway cluster with one empty database `gateway`, made off the test's runtime (its
/// programs and its blocking client), and that database's URL; `None` where PostgreSQL is not
/// installed (skipped through `skip`, which names the calling test: call this on its thread).
pub async fn cluster() -> Option<(Cluster, String)> {
    let test = crate::common::skip::this_test();
    let made = tokio::task::spawn_blocking(move || {
        let cluster = Cluster::start_for(&test)?;
        let url = cluster.database("gateway");
        Some((cluster, url))
    })
    .await;
    // Its panic (a failed start, or a skip under CI) is the test's, word for word.
    made.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// [`cluster`] and a config using it.
pub async fn on_postgres() -> Option<(Cluster, String, String)> {
    let (cluster, url) = cluster().await?;
    let users = users_toml(&[TestUser {
        name: "alice",
        password: ALICE,
        projects: "[\"*\"]",
        role: "operator",
    }]);
    let config = base_config(&format!("[store]\nurl = \"{url}\"\n\n{users}"));
    Some((cluster, url, config))
}
