//! The gateway's Prometheus metrics (`GET /metrics` on the loopback admin listener), kept with the
//! `prometheus-client` library. Labels name projects, route classes, methods and reasons — never a
//! user or a directory. The request path only increments: every label set it touches is resolved
//! into a handle (an `Arc` of atomics) once, when a project's state is built ([`ProjectMetrics`])
//! or when the gateway starts, so no request hashes labels, takes a lock or allocates for them.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub mod classic;
pub mod histogram;

pub(crate) use histogram::Latency;

pub(crate) const PREFIX: &str = "opencode_gateway";
/// The project label of requests that named no project (or one that does not exist).
pub(crate) const NO_PROJECT: &str = "-";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProjectLabel {
    pub project: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    project: Arc<str>,
    class: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoginLabels {
    method: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// What a request counts as in the metrics (`opencode_gateway_requests_total{class=…}`): decided
/// once per table route from its (method, pattern) and treatment (`policy::plan::route_class`),
/// never from the request's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RouteClass {
    /// Asking the agent to work: messages, prompts, commands, shell runs.
    Prompt,
    /// Event streams.
    Events,
    /// Terminals: creating, listing, tickets, connections.
    Terminal,
    /// Reading files and searching them.
    Files,
    /// Everything else, the web UI's files and requests that named no route.
    #[default]
    Other,
}

impl RouteClass {
    pub(crate) const ALL: [RouteClass; 5] = [
        RouteClass::Prompt,
        RouteClass::Events,
        RouteClass::Terminal,
        RouteClass::Files,
        RouteClass::Other,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            RouteClass::Prompt => "prompt",
            RouteClass::Events => "events",
            RouteClass::Terminal => "terminal",
            RouteClass::Files => "files",
            RouteClass::Other => "other",
        }
    }
}

const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn status_index(status: u16) -> usize {
    match status {
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 4,
    }
}

/// How a login was attempted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LoginMethod {
    /// A user's password (Basic credentials or the login form), verified with argon2.
    Password,
    /// An API token (Bearer, or as the password).
    Token,
    /// A pairing code from the login page.
    Pairing,
    /// An SSH public key.
    SshKey,
    /// A passkey (WebAuthn) on the login page.
    Passkey,
}
const LOGIN_METHODS: [&str; 5] = ["password", "token", "pairing", "ssh_key", "passkey"];

/// Why a limiter refused something.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    /// The login limiter (per address or per user name).
    Login,
    /// The per-user request rate.
    Requests,
    /// The per-user cap on open streams.
    Streams,
    /// The per-address connection cap.
    ConnectionsPerAddress,
    /// The gateway-wide connection cap.
    Connections,
    /// The share of the cap that connections without a credential yet may hold.
    UnauthenticatedConnections,
}
const REFUSALS: [&str; 6] = [
    "login",
    "requests",
    "streams",
    "connections_per_address",
    "connections",
    "unauthenticated_connections",
];

/// What a long-lived request holds open.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StreamKind {
    Events,
    Terminal,
}

/// The request counters and upstream latency of one project, resolved once per state build.
pub struct ProjectMetrics {
    /// By route class, then status class.
    requests: [[Counter; STATUS_CLASSES.len()]; RouteClass::ALL.len()],
    /// Time from sending a request upstream to its response head.
    pub upstream_latency: Latency,
}

impl ProjectMetrics {
    pub(crate) fn count(&self, class: RouteClass, status: u16) {
        self.requests[class as usize][status_index(status)].inc();
    }

    #[cfg(test)]
    fn requests(&self, class: RouteClass, status: u16) -> u64 {
        self.requests[class as usize][status_index(status)].get()
    }
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    upstream_latency: Family<ProjectLabel, Latency>,
    /// Restarts of spawned servers, by project (handles live in the supervisor's entries).
    pub upstream_restarts: Family<ProjectLabel, Counter>,
    /// Requests that named no project.
    pub unrouted: ProjectMetrics,
    streams: [Gauge; 2],
    logins: [[Counter; 2]; LOGIN_METHODS.len()],
    refusals: [Counter; REFUSALS.len()],
    tls_ok: Counter,
    tls_failed: Counter,
    pub connections: Counter,
    pub reloads: Counter,
    pub reload_failures: Counter,
    /// Open SSH connections.
    pub ssh_sessions: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `metric`, registered under `name` (the registry keeps a handle to the same values).
fn registered<M: prometheus_client::registry::Metric + Clone>(
    r: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    r.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix(PREFIX);
        let requests = registered(
            &mut r,
            "requests",
            "Requests answered, by project, route class (prompt, events, terminal, files, other) and status class",
            Family::<RequestLabels, Counter>::default(),
        );
        let upstream_latency = registered(
            &mut r,
            "upstream_response_seconds",
            "Time from sending a request to a project's server to its response head",
            Family::<ProjectLabel, Latency>::default(),
        );
        let upstream_restarts = registered(
            &mut r,
            "upstream_restarts",
            "Restarts of spawned project servers after they failed or stopped answering",
            Family::<ProjectLabel, Counter>::default(),
        );
        let streams_family = registered(
            &mut r,
            "streams_open",
            "Long-lived requests open, by kind (events, terminal)",
            Family::<KindLabel, Gauge>::default(),
        );
        let streams = ["events", "terminal"].map(|kind| streams_family.get_or_create(&KindLabel { kind }).clone());
        let logins_family = registered(
            &mut r,
            "logins",
            "Login attempts that were judged, by method and outcome (success, failure)",
            Family::<LoginLabels, Counter>::default(),
        );
        let logins = LOGIN_METHODS.map(|method| {
            ["success", "failure"].map(|outcome| logins_family.get_or_create(&LoginLabels { method, outcome }).clone())
        });
        let refusals_family = registered(
            &mut r,
            "limiter_refusals",
            "Requests, logins and connections a limit refused, by reason",
            Family::<ReasonLabel, Counter>::default(),
        );
        let refusals = REFUSALS.map(|reason| refusals_family.get_or_create(&ReasonLabel { reason }).clone());
        let tls_family = registered(
            &mut r,
            "tls_handshakes",
            "TLS handshakes, by outcome (ok, failed)",
            Family::<OutcomeLabel, Counter>::default(),
        );
        let tls = |outcome| tls_family.get_or_create(&OutcomeLabel { outcome }).clone();
        let (tls_ok, tls_failed) = (tls("ok"), tls("failed"));
        let mut counter = |name, help| registered(&mut r, name, help, Counter::default());
        let connections = counter("connections", "HTTPS and SSH connections accepted");
        let reloads = counter("reloads", "Configuration reloads applied");
        let reload_failures = counter("reload_failures", "Configuration reloads refused");
        let ssh_sessions = registered(&mut r, "ssh_sessions_open", "SSH connections open", Gauge::default());
        let mut m = Metrics {
            registry: r,
            requests,
            upstream_latency,
            upstream_restarts,
            unrouted: ProjectMetrics {
                requests: Default::default(),
                upstream_latency: Latency::default(),
            },
            streams,
            logins,
            refusals,
            tls_ok,
            tls_failed,
            connections,
            reloads,
            reload_failures,
            ssh_sessions,
        };
        // Requests without a project never reach an upstream: no latency series for them.
        m.unrouted.requests = m.request_counters(&Arc::from(NO_PROJECT), Some(RouteClass::Other));
        m
    }

    /// Resolve a project's handles (the same counters again for a name seen before, so a
    /// reload keeps counting where it was).
    pub(crate) fn project(&self, name: &Arc<str>) -> ProjectMetrics {
        let upstream_latency = self
            .upstream_latency
            .get_or_create(&ProjectLabel { project: name.clone() })
            .clone();
        ProjectMetrics {
            requests: self.request_counters(name, None),
            upstream_latency,
        }
    }

    /// A project's request counters; `only` limits the registered series to one route class
    /// (requests without a project never resolved a route: only `other` can move for them).
    fn request_counters(
        &self,
        name: &Arc<str>,
        only: Option<RouteClass>,
    ) -> [[Counter; STATUS_CLASSES.len()]; RouteClass::ALL.len()] {
        RouteClass::ALL.map(|class| {
            STATUS_CLASSES.map(|status| {
                if only.is_some_and(|o| o != class) {
                    return Counter::default();
                }
                self.requests
                    .get_or_create(&RequestLabels {
                        project: name.clone(),
                        class: class.label(),
                        status,
                    })
                    .clone()
            })
        })
    }

    pub(crate) fn login(&self, method: LoginMethod, ok: bool) {
        self.logins[method as usize][usize::from(!ok)].inc();
    }

    pub(crate) fn refused(&self, why: Refusal) {
        self.refusals[why as usize].inc();
    }

    pub(crate) fn tls_handshake(&self, ok: bool) {
        if ok { &self.tls_ok } else { &self.tls_failed }.inc();
    }

    /// Counts one open stream of this kind until dropped.
    pub(crate) fn stream_open(&self, kind: StreamKind) -> StreamGauge {
        let g = self.streams[kind as usize].clone();
        g.inc();
        StreamGauge(g)
    }

    /// The metrics kept here, in the text exposition format.
    pub(crate) fn encode(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::text::encode_registry(out, &self.registry)
    }
}

/// One open stream, counted in `streams_open` while it lives.
pub(crate) struct StreamGauge(Gauge);

impl Drop for StreamGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_resolved_twice_counts_on_the_same_counters() {
        let m = Metrics::new();
        let name: Arc<str> = Arc::from("web");
        let a = m.project(&name);
        let b = m.project(&name);
        a.count(RouteClass::Prompt, 200);
        b.count(RouteClass::Prompt, 204);
        b.count(RouteClass::Prompt, 101);
        assert_eq!(a.requests(RouteClass::Prompt, 299), 2);
        assert_eq!(a.requests(RouteClass::Prompt, 101), 1);
        let mut out = String::new();
        m.encode(&mut out).unwrap();
        assert!(
            out.contains(r#"opencode_gateway_requests_total{project="web",class="prompt",status="2xx"} 2"#),
            "{out}"
        );
    }

    #[test]
    fn stream_gauges_go_down_when_the_stream_ends() {
        let m = Metrics::new();
        let s = m.stream_open(StreamKind::Terminal);
        assert_eq!(m.streams[1].get(), 1);
        drop(s);
        assert_eq!(m.streams[1].get(), 0);
    }
}
