//! Metrics read at scrape time from where they already live (the connection table, the argon2
//! verifier, the auth cache, the inbox, the supervisor), so nothing on the request path keeps a
//! second copy of them. Here, beside the [`Gateway`] that holds them all, not in `metrics/`,
//! which only keeps counters and knows nothing of the gateway.

use std::sync::atomic::Ordering;

use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::Gateway;
use super::state::Upstream;
use crate::metrics::ProjectLabel;
use crate::upstream::supervise::Status;

pub(crate) fn encode(gw: &Gateway, out: &mut String) -> std::fmt::Result {
    let mut r = Registry::with_prefix(crate::metrics::PREFIX);
    argon2(gw, &mut r);
    connections(gw, &mut r);
    notifications(gw, &mut r);
    records(gw, &mut r);
    upstreams(gw, &mut r);
    boxes(gw, &mut r);
    spend(gw, &mut r);
    prometheus_client::encoding::text::encode_registry(out, &r)
}

/// A value read at scrape time: a level now, or a count since the start.
#[derive(Clone, Copy)]
enum Kind {
    Level,
    Total,
}
use Kind::{Level, Total};

fn register(r: &mut Registry, each: &[(Kind, &str, &str, u64)]) {
    for &(kind, name, help, v) in each {
        match kind {
            Level => r.register(name, help, ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))),
            Total => r.register(name, help, ConstCounter::new(v)),
        }
    }
}

/// The password verifier's work, and the cache that spares it.
fn argon2(gw: &Gateway, r: &mut Registry) {
    let c = gw.auth.verifier.counters();
    let now = |n: &std::sync::atomic::AtomicUsize| n.load(Ordering::Relaxed) as u64;
    register(
        r,
        &[
            (
                Total,
                "argon2_verifications",
                "argon2 password verifications run",
                c.runs.load(Ordering::Relaxed),
            ),
            (
                Level,
                "argon2_running",
                "argon2 verifications running now",
                now(&c.running),
            ),
            (
                Level,
                "argon2_queued",
                "argon2 verifications waiting for a core",
                now(&c.waiting),
            ),
            (
                Level,
                "argon2_peak_running",
                "Most argon2 verifications that ran at once",
                now(&c.peak_running),
            ),
            (
                Level,
                "auth_cache_entries",
                "Verified credentials cached",
                gw.auth.cache.len() as u64,
            ),
        ],
    );
}

/// The connection table: how full, and how much of it strangers hold.
fn connections(gw: &Gateway, r: &mut Registry) {
    let (doors, table) = (&gw.doors, &gw.doors.conn_table);
    register(
        r,
        &[
            (
                Level,
                "connections_open",
                "HTTPS and SSH connections open",
                doors.connections.total(),
            ),
            (
                Level,
                "connections_unauthenticated",
                "HTTPS connections that have not presented a valid credential yet",
                u64::from(table.unauthenticated()),
            ),
            (
                Level,
                "connections_unauthenticated_cap",
                "The share of connections_cap unauthenticated connections may hold",
                u64::from(table.share()),
            ),
            (
                Total,
                "connections_shed",
                "Idle unauthenticated connections closed to make room for new ones",
                table.shed_total(),
            ),
            (
                Level,
                "connections_cap",
                "HTTPS and SSH connections allowed at once",
                u64::from(doors.connection_cap),
            ),
        ],
    );
}

/// The inbox's subscriptions and what it told: notifications and Web Push.
fn notifications(gw: &Gateway, r: &mut Registry) {
    let push = &gw.browser.push;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    register(
        r,
        &[
            (
                Level,
                "inbox_subscriptions_open",
                "Inbox event subscriptions open",
                gw.inbox.subscriptions() as u64,
            ),
            (
                Total,
                "notifications_dropped",
                "Push notifications dropped (queue full or failed)",
                gw.inbox.notifications_dropped(),
            ),
            (
                Total,
                "push_sent",
                "Web Push messages a push service accepted",
                n(&push.sent),
            ),
            (
                Total,
                "push_gone",
                "Web Push subscriptions a push service said are gone (deleted)",
                n(&push.gone),
            ),
            (
                Total,
                "push_failed",
                "Web Push messages given up after their attempts",
                n(&push.failed),
            ),
        ],
    );
}

/// What the gateway writes down: the audit trail and the state database.
fn records(gw: &Gateway, r: &mut Registry) {
    let db = gw.browser.sessions.store().health();
    register(
        r,
        &[
            (
                Total,
                "audit_dropped",
                "Audit records dropped because the writer's queue was full",
                gw.audit.dropped(),
            ),
            (
                Total,
                "audit_write_failures",
                "Audit records the writer could not write (a full disk)",
                gw.audit.lost(),
            ),
            (
                Level,
                "audit_writing",
                "1 while the audit trail is on and its last write worked",
                u64::from(gw.audit.writing()),
            ),
            (
                Total,
                "state_db_write_failures",
                "Writes to the state database that failed (a full disk)",
                db.failures,
            ),
            (
                Level,
                "state_db_writing",
                "1 while the state database's last write worked",
                u64::from(db.writing),
            ),
        ],
    );
}

/// Spawned project servers: up or not.
fn upstreams(gw: &Gateway, r: &mut Registry) {
    let up = Family::<ProjectLabel, Gauge>::default();
    for p in gw.state().projects.values() {
        if let Upstream::Supervised(s) = &p.upstream {
            let ready = matches!(s.status(), Status::Ready(_));
            up.get_or_create(&ProjectLabel {
                project: p.name.clone(),
            })
            .set(i64::from(ready));
        }
    }
    r.register(
        "upstream_up",
        "Spawned project servers: 1 when ready and answering health checks, else 0",
        up,
    );
}

/// What each project's sessions spent since the gateway started (issue 25), as OpenCode reports
/// cost: by project only, never by user or session (unbounded labels, and names).
fn spend(gw: &Gateway, r: &mut Registry) {
    let totals = gw.meter.project_totals();
    if totals.is_empty() {
        return;
    }
    let spent = Family::<ProjectLabel, prometheus_client::metrics::counter::Counter<f64, std::sync::atomic::AtomicU64>>::default();
    for (project, usd) in totals {
        spent
            .get_or_create(&ProjectLabel {
                project: project.into(),
            })
            .inc_by(usd);
    }
    r.register(
        "project_spend_usd",
        "US dollars the project's sessions spent since the gateway started, as OpenCode reports cost",
        spent,
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct BoxLabel {
    r#box: String,
}

/// Each `[[box]]`'s SSH link: up or not, connections made and failed, channels.
fn boxes(gw: &Gateway, r: &mut Registry) {
    let state = gw.state();
    if state.boxes.is_empty() {
        return;
    }
    let up = Family::<BoxLabel, Gauge>::default();
    let open = Family::<BoxLabel, Gauge>::default();
    let rtt = Family::<BoxLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let counter = || Family::<BoxLabel, prometheus_client::metrics::counter::Counter>::default();
    let (connects, failures, opened) = (counter(), counter(), counter());
    for link in state.boxes.values() {
        let b = link.report();
        let l = BoxLabel { r#box: b.name.clone() };
        up.get_or_create(&l).set(i64::from(b.state == "connected"));
        open.get_or_create(&l).set(b.channels_open);
        if let Some(ms) = b.rtt_ms {
            rtt.get_or_create(&l).set(ms / 1000.0);
        }
        connects.get_or_create(&l).inc_by(b.connects);
        failures.get_or_create(&l).inc_by(b.failures);
        opened.get_or_create(&l).inc_by(b.channels_opened);
    }
    r.register("box_up", "Boxes: 1 while the SSH connection is up, else 0", up);
    r.register("box_channels_open", "Channels open on each box's SSH connection", open);
    r.register(
        "box_rtt_seconds",
        "The last SSH ping's round trip to each connected box",
        rtt,
    );
    r.register("box_connects", "SSH connections made to each box", connects);
    r.register(
        "box_connect_failures",
        "Attempts to connect to a box that failed",
        failures,
    );
    r.register(
        "box_channels_opened",
        "Channels opened on each box's SSH connection",
        opened,
    );
}
