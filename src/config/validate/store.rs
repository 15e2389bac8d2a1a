//! `[store] url`: the state database on PostgreSQL, which several gateways (replicas behind a
//! load balancer) may share. What works on one gateway only is refused with it, by name: a
//! project whose server this gateway spawns on its own loopback (another replica would spawn a
//! second, and the first would be unreachable from it).

use super::checker::Checker;
use crate::config::file::RawStore;
use crate::config::{Project, Secret, UpstreamKind};

const FIX_URL: &str = "write url = \"postgres://user:password@host:5432/database?sslmode=require\" (or \"host=/run/postgresql dbname=gateway\"), or remove [store] for SQLite in state_dir";

pub(super) fn url(c: &mut Checker<'_>, raw: Option<&RawStore>, projects: &[Project]) -> Option<Secret> {
    let url = raw?.url.as_deref()?;
    // The parser's message can quote the URL: it is never repeated, only the kind of mistake.
    if url.parse::<postgres::Config>().is_err() {
        c.problem(
            "store.url",
            "is not a PostgreSQL connection string (its value is not shown: it may hold a password)",
            FIX_URL,
        );
        return None;
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://") || url.contains("host=")) {
        c.problem("store.url", "names no PostgreSQL server", FIX_URL);
        return None;
    }
    for p in projects {
        if p.upstream == UpstreamKind::Spawned && p.on_box.is_none() {
            c.problem(
                format!("project {}", p.name),
                "is spawned by this gateway on its own loopback, which works on one gateway only: with a shared [store] each replica would run its own server for it, and one replica could not reach another's",
                "run its server yourself and point upstream at it (replicas on one host share its loopback), or spawn it on a [[box]] every replica reaches over SSH, or remove [store] url to run one gateway on SQLite",
            );
        }
    }
    Some(Secret::new(url))
}
