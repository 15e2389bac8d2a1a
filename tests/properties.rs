//! Property tests for the parsers and rewriters every request goes through: no input makes them
//! panic, and the invariants the gateway's security rests on hold for generated inputs.

use std::net::IpAddr;
use std::path::Path;

use base64::Engine;
use http::Method;
use http::{HeaderMap, HeaderName, HeaderValue};
use opencode_gateway::auth::credentials::{self, Credentials};
use opencode_gateway::config::Role;
use opencode_gateway::config::validate::lexical_clean;
use opencode_gateway::http::rewrite::{self, Forward};
use opencode_gateway::policy::authz;
use opencode_gateway::policy::canonical::CanonicalPath;
use opencode_gateway::policy::drift::{RouteRoles, UpstreamApi};
use opencode_gateway::policy::event_scope::{EventFilter, Shape};
use opencode_gateway::policy::pin;
use opencode_gateway::policy::route::{self, Route, RouteInput};
use opencode_gateway::policy::routes::ROUTES;
use opencode_gateway::upstream::redact::Redactor;
use proptest::prelude::*;

/// Reference readings of what OpenCode does, written apart from the gateway's code.
mod oracle;

/// The canonical request, origins, listings, API documents, the config and protected files.
#[path = "properties/boundaries.rs"]
mod boundaries;

/// Permission policies' matcher and rule parser (issue 40).
#[path = "properties/permission.rs"]
mod permission;

/// A task's slug and base branch (issue 41).
#[path = "properties/task_name.rs"]
mod task_name;

/// The PROXY protocol read from its specification, written apart from the gateway's parser
/// (shared with fuzz/).
#[path = "oracle/proxy_protocol.rs"]
mod proxy_reference;

/// The gateway's reading of a balancer's first bytes, as its accept path takes them (shared
/// with fuzz/).
#[path = "support/proxy_reading.rs"]
mod proxy_reading;

/// The PROXY protocol header against the reference: HAProxy's own headers, and generated ones.
#[path = "properties/proxy_header.rs"]
mod proxy_header;

/// The chunked coding read from RFC 9112, written apart from the gateway's decoder (shared with
/// fuzz/).
#[path = "oracle/chunked.rs"]
mod chunked_reference;

/// The event-stream road's chunked decoder against the reference.
#[path = "properties/chunked.rs"]
mod chunked;

/// An answer head read the plain way, written apart from the direct road's reader (shared with
/// fuzz/).
#[path = "oracle/answer_head.rs"]
mod answer_head_reference;

/// The direct road's reading of an answer head, in the reference's terms (shared with fuzz/).
#[path = "support/answer_head_reading.rs"]
mod answer_head_reading;

/// The direct road's answer-head reader against the reference.
#[path = "properties/answer_head.rs"]
mod answer_head;

/// The two ways of writing a request's head for the upstream, side by side (shared with fuzz/).
#[path = "support/upstream_heads.rs"]
mod upstream_heads;

/// The direct road's one-pass request head against the edited header map's.
#[path = "properties/upstream_head.rs"]
mod upstream_head;

/// A concrete path for a pattern, with parameter values no route name can be mistaken for.
fn concrete(pattern: &str) -> String {
    pattern
        .split('/')
        .skip(1)
        .map(|s| match s {
            "*" => "/Id_9x".to_string(),
            "**" => "/src/Main.rs".to_string(),
            lit => format!("/{lit}"),
        })
        .collect()
}

/// Another spelling of `canonical`, chosen by `coins`: route names in random case, characters
/// percent-encoded, `;` parameters, repeated slashes and a trailing slash (but not inside a file
/// path, where OpenCode keeps slashes as they are).
fn respell(canonical: &str, pattern: &str, coins: &[u8]) -> String {
    let pattern: Vec<&str> = pattern.split('/').skip(1).collect();
    let mut coin = coins.iter().copied().cycle();
    let mut out = String::new();
    let segs: Vec<&str> = canonical.split('/').skip(1).collect();
    let file_from = pattern.iter().position(|p| *p == "**").unwrap_or(usize::MAX);
    for (i, seg) in segs.iter().enumerate() {
        let in_file = i >= file_from;
        let literal = pattern.get(i).is_some_and(|p| !p.starts_with('*'));
        out.push('/');
        if !in_file && coin.next().unwrap() % 4 == 0 {
            out.push('/');
        }
        for ch in seg.chars() {
            let c = coin.next().unwrap();
            let ch = if literal && c % 2 == 0 {
                ch.to_ascii_uppercase()
            } else {
                ch
            };
            if c % 5 == 0 {
                out.push_str(&format!("%{:02X}", ch as u32));
            } else {
                out.push(ch);
            }
        }
        if coin.next().unwrap() % 5 == 0 {
            out.push_str(";p=1");
        }
    }
    if file_from == usize::MAX && coin.next().unwrap() % 3 == 0 {
        out.push('/');
    }
    out
}

/// The gateway's verdict on a path: route, class, session, forwarded spelling.
fn verdict(method: &Method, raw: &str) -> (Option<String>, Option<authz::Class>, Option<String>, String) {
    let parsed = CanonicalPath::parse(raw).expect("a spelling the gateway reads");
    let r = authz::resolve(method, parsed.segments());
    (
        r.route.map(|r| r.pattern.to_string()),
        r.class,
        r.session.map(str::to_string),
        r.upstream_path,
    )
}

/// A newer OpenCode's document (new roots, new routes under table roots, a new literal beside a
/// table parameter) and a config entry, for the drift property.
const NEWER_DOC: &[(&str, &str)] = &[
    ("GET", "/newroot/things"),
    ("POST", "/newroot/things"),
    ("DELETE", "/newroot/things/{thingID}"),
    ("GET", "/session/{sessionID}/new-thing"),
    ("GET", "/session/newlist"),
    ("POST", "/tui/new-toast"),
    ("GET", "/api/session/{sessionID}/new/{partID}/deep"),
];
const CONFIGURED: &[(&str, &str, Role)] = &[
    ("GET", "/newroot/things", Role::Viewer),
    ("POST", "/configured/*/only", Role::Approver),
];

fn newer_api() -> &'static (UpstreamApi, RouteRoles) {
    static API: std::sync::OnceLock<(UpstreamApi, RouteRoles)> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        let mut paths = serde_json::Map::new();
        for (m, p) in NEWER_DOC {
            let e = paths.entry(p.to_string()).or_insert_with(|| serde_json::json!({}));
            e[m.to_ascii_lowercase()] = serde_json::json!({});
        }
        let doc = serde_json::json!({ "paths": paths });
        (
            UpstreamApi::from_doc(&opencode_gateway::policy::dialect::V1, Some("1.99.0".into()), &doc).unwrap(),
            RouteRoles::new(CONFIGURED.iter().copied()),
        )
    })
}

fn verdict_with(method: &Method, raw: &str) -> (Option<String>, Option<authz::Class>, Option<String>, String) {
    let (api, configured) = newer_api();
    let parsed = CanonicalPath::parse(raw).expect("a spelling the gateway reads");
    let extra = authz::Extra {
        upstream: Some(api),
        configured,
    };
    let r = authz::resolve_with(method, parsed.segments(), extra);
    (
        r.route.map(|r| r.pattern.to_string()),
        r.class,
        r.session.map(str::to_string),
        r.upstream_path,
    )
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// `name` with characters percent-encoded (upper or lower hex) where `coins` say so.
fn percent_spell(name: &str, coins: &[u8]) -> String {
    let mut coin = coins.iter().copied().cycle();
    let mut out = String::new();
    for ch in name.chars() {
        match coin.next().unwrap_or(0) % 4 {
            0 => out.push_str(&format!("%{:02X}", ch as u32)),
            1 => out.push_str(&format!("%{:02x}", ch as u32)),
            _ => out.push(ch),
        }
    }
    out
}

/// Names OpenCode acts on that are neither selectors nor credentials: a rewrite must keep them.
const BENIGN: &[&str] = &["path", "cursor", "limit", "q", "search", "roots", "after"];

/// A project folder that exists (canonical, no symlinks inside), for the pin's file-system steps.
fn real_root() -> &'static str {
    static ROOT: std::sync::OnceLock<(tempfile::TempDir, String)> = std::sync::OnceLock::new();
    &ROOT
        .get_or_init(|| {
            let t = tempfile::tempdir().unwrap();
            let root = t.path().canonicalize().unwrap().join("project");
            std::fs::create_dir_all(root.join("sub")).unwrap();
            let root = root.to_str().unwrap().to_string();
            (t, root)
        })
        .1
}

#[test]
fn the_oracle_reads_as_opencode_does() {
    // From the OpenCode facts: `../` is normalised, nonexistent folders are fine.
    assert_eq!(oracle::node_resolve("/tmp/p", "../../etc"), "/etc");
    assert_eq!(oracle::node_resolve("/tmp/p", "/tmp/p/../../etc"), "/etc");
    assert_eq!(oracle::node_resolve("/tmp/p", "a/./b//c/"), "/tmp/p/a/b/c");
    assert_eq!(oracle::node_resolve("/tmp/p", "/../.."), "/");
    assert_eq!(oracle::decode_uri_component("%2Fetc").as_deref(), Some("/etc"));
    assert_eq!(oracle::decode_uri_component("%zz"), None);
    assert_eq!(oracle::decode_uri_component("%FF"), None, "not UTF-8: it throws");
    assert_eq!(oracle::form_decode("a+b%20c%"), "a b c%");
    assert!(oracle::query_names("%64irectory=%2Fetc&x").contains(&"directory".to_string()));
    assert!(oracle::query_names("location%5Bdirectory%5D=1").contains(&"location[directory]".to_string()));
    assert!(oracle::directories("/tmp/p", "/tmp/p/%2E%2E/%2E%2E/etc").contains(&"/etc".to_string()));
    assert!(oracle::is_inside("/tmp/p", "/tmp/p") && oracle::is_inside("/tmp/p", "/tmp/p/x"));
    assert!(!oracle::is_inside("/tmp/p", "/tmp/px") && !oracle::is_inside("/tmp/p", "/tmp"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A connection's memo of a verified header answers for exactly those bytes (auth/memo.rs).
    #[test]
    fn the_auth_memo_recalls_only_the_exact_header(a in proptest::collection::vec(any::<u8>(), 0..80), b in proptest::collection::vec(any::<u8>(), 0..80), same in any::<bool>()) {
        let b = if same { a.clone() } else { b };
        let user = std::sync::Arc::new(opencode_gateway::auth::users::UserState {
            name: "u".into(),
            hash: None,
            fingerprint: [0; 32],
            grants: opencode_gateway::config::Grants::All(Role::Viewer),
            ssh_keys: Vec::new(),
            policy: None,
        });
        let mut users = opencode_gateway::support::name_map::NameMap::default();
        users.insert("u".to_string(), user.clone());
        let memo = opencode_gateway::auth::memo::AuthMemo::default();
        memo.remember(&a, user, std::time::Instant::now() + std::time::Duration::from_secs(60));
        prop_assert_eq!(memo.recall(&b, &users).is_some(), a == b);
    }

    #[test]
    fn authorization_parsing_never_panics(value in ".{0,300}") {
        let _ = credentials::parse_authorization(&value);
        let _ = credentials::parse_basic_token(&value);
        let _ = credentials::from_query(Some(&value));
    }

    #[test]
    fn basic_credentials_round_trip(user in "[A-Za-z0-9._@-]{1,40}", password in "\\PC{0,60}") {
        let parsed = credentials::parse_authorization(&format!("Basic {}", b64(&format!("{user}:{password}"))));
        match parsed {
            Ok(Credentials::Basic { user: u, password: p }) => {
                prop_assert_eq!(u, user);
                prop_assert!(p.ct_eq(password.as_bytes()));
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }

    #[test]
    fn routing_never_panics_and_names_only_known_projects(host in "[a-zA-Z0-9.:\\[\\]-]{0,40}", path in "/[a-zA-Z0-9/._%;-]{0,60}") {
        let known = |n: &str| n == "web" || n == "api";
        let Ok(parsed) = CanonicalPath::parse(&path) else { return Ok(()) };
        let input = RouteInput { bound: None, host: Some(&host), segments: parsed.segments() };
        match route::route(&input, Some("gw.localhost"), known, None) {
            Route::Project { name, start } => {
                prop_assert!(known(name));
                prop_assert!(start <= parsed.segments().len());
            }
            Route::Unknown(name) => prop_assert!(!known(name)),
            Route::None => {}
        }
    }

    #[test]
    fn a_path_prefix_strips_exactly_itself(tail in "(/[a-z0-9_.-]{1,10}){0,5}") {
        let path = format!("/p/web{tail}");
        let Ok(parsed) = CanonicalPath::parse(&path) else { return Ok(()) };
        let input = RouteInput { bound: None, host: None, segments: parsed.segments() };
        let r = route::route(&input, None, |n| n == "web", None);
        prop_assert_eq!(r, Route::Project { name: "web", start: 2 });
        let rest: Vec<&str> = parsed.tail(2).iter().map(|s| s.as_ref()).collect();
        let expected: Vec<&str> = tail.split('/').skip(1).collect();
        prop_assert_eq!(rest, expected);
    }

    /// Issue 10's property: every spelling of every route in the table (names in any case, any
    /// character percent-encoded, `;` parameters, repeated and trailing slashes) gets the verdict
    /// of the canonical spelling: the same route (so the same role, treatment, body rule and
    /// workspace rule), the same session, and the same forwarded bytes.
    #[test]
    fn every_spelling_of_a_route_gets_the_canonical_verdict(
        row in 0..ROUTES.len(),
        coins in prop::collection::vec(any::<u8>(), 64..65),
    ) {
        let (method, pattern, _) = ROUTES[row];
        let method: Method = method.parse().unwrap();
        let canonical = concrete(pattern);
        let spelled = respell(&canonical, pattern, &coins);
        let want = verdict(&method, &canonical);
        prop_assert_eq!(&want.0, &Some(pattern.to_string()), "the canonical spelling is its own route");
        prop_assert_eq!(verdict(&method, &spelled), want, "{} {} spelled {}", method, canonical, spelled);
    }

    /// Issue 16: routes a newer upstream's document adds (with their default) and `[[route_role]]`
    /// routes are matched with the same canonical rules as the table's: every spelling gets the
    /// canonical verdict, and no default is below operator.
    #[test]
    fn every_spelling_of_a_defaulted_or_configured_route_gets_the_canonical_verdict(
        row in 0..(NEWER_DOC.len() + CONFIGURED.len()),
        coins in prop::collection::vec(any::<u8>(), 64..65),
    ) {
        let (method, pattern) = match NEWER_DOC.get(row) {
            Some((m, p)) => (*m, opencode_gateway::policy::drift::pattern_from_doc(m, p, &opencode_gateway::policy::table::V1).unwrap()),
            None => { let (m, p, _) = CONFIGURED[row - NEWER_DOC.len()]; (m, p.to_string()) }
        };
        let method: Method = method.parse().unwrap();
        let canonical = concrete(&pattern);
        let spelled = respell(&canonical, &pattern, &coins);
        let want = verdict_with(&method, &canonical);
        prop_assert_eq!(&want.0, &Some(pattern.clone()), "the canonical spelling is its own route");
        if row < NEWER_DOC.len() && !(method == Method::GET && pattern == "/newroot/things") {
            prop_assert!(want.1 >= Some(authz::Class::Operate), "{} {} defaults to {:?}", method, pattern, want.1);
        }
        prop_assert_eq!(verdict_with(&method, &spelled), want, "{} {} spelled {}", method, canonical, spelled);
    }

    /// What the gateway forwards is a fixed point: read again the way OpenCode reads it, the
    /// forwarded spelling is the same route, session and spelling. So the request OpenCode executes
    /// is the one the gateway judged, whatever the client sent.
    #[test]
    fn the_forwarded_spelling_reads_as_what_was_judged(path in "(/(%[0-9A-Fa-f]{2}|[a-zA-Z_;.~-]|session|pty|api|SESSION|Pty|connect|event|read|fs){0,6}){1,6}/?", method in prop_oneof![Just(Method::GET), Just(Method::POST), Just(Method::DELETE), Just(Method::PATCH)]) {
        let Ok(parsed) = CanonicalPath::parse(&path) else { return Ok(()) };
        let first = authz::resolve(&method, parsed.segments());
        let again = CanonicalPath::parse(&first.upstream_path).expect("the forwarded spelling parses");
        let second = authz::resolve(&method, again.segments());
        prop_assert_eq!(first.route.map(|r| r.pattern), second.route.map(|r| r.pattern));
        prop_assert_eq!(first.class, second.class);
        prop_assert_eq!(first.session, second.session);
        prop_assert_eq!(&first.upstream_path, &second.upstream_path);
    }

    #[test]
    fn canonical_parsing_never_panics(path in "\\PC{0,80}") {
        if let Ok(p) = CanonicalPath::parse(&path) {
            let _ = authz::resolve(&Method::GET, p.segments());
        }
    }

    #[test]
    fn a_directory_the_pin_accepts_is_inside_the_project(segs in prop::collection::vec(prop_oneof!["[a-z]{1,6}", Just("..".to_string()), Just(".".to_string()), Just("%2E%2E".to_string()), Just("".to_string())], 0..8), absolute in any::<bool>()) {
        let root = Path::new("/tmp/ocgw-prop-root/project");
        let rel = segs.join("/");
        let candidate = if absolute { format!("{}/{rel}", root.display()) } else { rel };
        if pin::inside(root, &candidate) {
            let decoded = candidate.replace("%2E", ".");
            let resolved = lexical_clean(&root.join(&decoded));
            prop_assert!(resolved.starts_with(root), "{candidate} → {}", resolved.display());
        }
    }

    #[test]
    fn directory_selectors_and_credentials_never_leave_in_the_query(pairs in prop::collection::vec(("(directory|workspace|location%5Bdirectory%5D|%64irectory|auth_token|auth%5Ftoken|cursor|path|q)", "[a-zA-Z0-9%/._-]{0,12}"), 0..8)) {
        let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let query = query.join("&");
        if let Some(out) = rewrite::upstream_query(Some(&query), true) {
            for (name, _) in opencode_gateway::policy::query::pairs(&out) {
                prop_assert!(!pin::is_selector_param(&name) && !rewrite::is_credential_param(&name), "{name} left in {out}");
            }
        }
        if let Some(out) = rewrite::upstream_query(Some(&query), false) {
            for (name, _) in opencode_gateway::policy::query::pairs(&out) {
                prop_assert!(!rewrite::is_credential_param(&name));
            }
        }
    }

    #[test]
    fn opencode_reads_no_selector_or_credential_in_the_rewritten_query_and_the_rest_survives(
        params in prop::collection::vec((
            prop_oneof![
                prop::sample::select(oracle::PINNED_SELECTORS).prop_map(str::to_string),
                prop::sample::select(oracle::CREDENTIALS).prop_map(str::to_string),
                prop::sample::select(BENIGN).prop_map(str::to_string),
                "[a-zA-Z0-9%+_.\\[\\]-]{0,10}",
            ],
            prop::collection::vec(any::<u8>(), 1..24),
            "[a-zA-Z0-9%/._+-]{0,12}",
            any::<bool>(),
        ), 0..10),
    ) {
        let mut raw = Vec::new();
        let (mut benign, mut selectors) = (Vec::new(), Vec::new());
        for (name, coins, value, with_value) in &params {
            let pair = if *with_value {
                format!("{}={value}", percent_spell(name, coins))
            } else {
                percent_spell(name, coins)
            };
            if BENIGN.contains(&name.as_str()) {
                benign.push(pair.clone());
            }
            if oracle::PINNED_SELECTORS.contains(&name.as_str()) {
                selectors.push(pair.clone());
            }
            raw.push(pair);
        }
        let query = raw.join("&");
        for pinned in [true, false] {
            let out = rewrite::upstream_query(Some(&query), pinned);
            let out = out.as_deref().unwrap_or("");
            let forbidden: Vec<&str> = if pinned {
                oracle::PINNED_SELECTORS.iter().chain(oracle::CREDENTIALS).copied().collect()
            } else {
                oracle::CREDENTIALS.to_vec()
            };
            for name in oracle::query_names(out) {
                prop_assert!(!forbidden.contains(&name.as_str()), "OpenCode reads {name} in {out} (from {query}, pinned {pinned})");
            }
            // Nothing OpenCode needs is lost: the benign parameters (and, unpinned, the
            // selectors) reach it as written, in order.
            let kept = oracle::raw_pairs(out);
            let must: Vec<&String> = if pinned { benign.iter().collect() } else {
                raw.iter().filter(|p| benign.contains(p) || selectors.contains(p)).collect()
            };
            let mut rest = kept.iter();
            for p in must {
                prop_assert!(rest.any(|k| k == p), "{p} lost from {query} (pinned {pinned}): {out}");
            }
        }
    }

    #[test]
    fn the_pin_accepts_a_directory_only_if_opencode_would_act_inside_the_project(
        segs in prop::collection::vec(prop_oneof![
            "[a-z]{1,6}",
            prop::sample::select(vec!["..", ".", "", "%2E%2E", "%2e%2e", "%2E.", ".%2e", "%2F", "%2f..%2f..", "..%2F..", "%252E%252E", "%", "%zz", "x%2Fy", "sub", "+"]).prop_map(str::to_string),
        ], 0..8),
        start in 0u8..4,
    ) {
        let root = real_root();
        let rel = segs.join("/");
        let candidate = match start {
            0 => format!("{root}/{rel}"),
            1 => rel,
            2 => format!("{root}x/{rel}"),
            _ => format!("/{rel}"),
        };
        let readings = oracle::directories(root, &candidate);
        let all_inside = readings.iter().all(|d| oracle::is_inside(root, d));
        if pin::inside(Path::new(root), &candidate) {
            prop_assert!(all_inside, "accepted {candidate}, which OpenCode may read as {readings:?}");
        } else if !candidate.is_empty() {
            // Refusing everything would pass the line above: what is inside under every reading is accepted.
            prop_assert!(!all_inside, "refused {candidate}, inside under every reading: {readings:?}");
        }
    }

    #[test]
    fn rewritten_headers_carry_only_the_upstream_credential(headers in prop::collection::vec(("[a-z-]{1,20}", "[ -~]{0,30}"), 0..20), client_auth in "[ -~]{0,40}") {
        let mut map = HeaderMap::new();
        for (k, v) in &headers {
            if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
                map.append(k, v);
            }
        }
        if let Ok(v) = HeaderValue::from_str(&client_auth) {
            map.insert(http::header::AUTHORIZATION, v);
        }
        let upstream = HeaderValue::from_static("Basic b3BlbmNvZGU6c2VjcmV0");
        let ip: IpAddr = "198.51.100.4".parse().unwrap();
        rewrite::request_headers(&mut map, &Forward {
            client_ip: ip, proto: "https", original_host: Some("gw:8443"),
            upstream_host: &HeaderValue::from_static("127.0.0.1:4096"),
            upstream_origin: &HeaderValue::from_static("http://127.0.0.1:4096"),
            upstream_auth: Some(&upstream), upgrade: None,
        });
        let auths: Vec<_> = map.get_all(http::header::AUTHORIZATION).iter().collect();
        prop_assert_eq!(auths, vec![&upstream]);
        prop_assert_eq!(map.get_all("x-forwarded-for").iter().count(), 1);
        prop_assert_eq!(&map["x-forwarded-for"], "198.51.100.4");
        for hop in ["connection", "keep-alive", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "forwarded", "x-real-ip"] {
            prop_assert!(!map.contains_key(hop), "{hop} survived");
        }
    }

    #[test]
    fn the_upstream_credential_never_survives_a_response_frame(prefix in prop::collection::vec(any::<u8>(), 0..200), suffix in prop::collection::vec(any::<u8>(), 0..200), repeats in 1usize..4) {
        let secret = b"s3cr3t-upstream-Pa55";
        let token = b64("opencode:s3cr3t-upstream-Pa55");
        let r = Redactor::new(&[secret, token.as_bytes()]).unwrap();
        let mut frame = prefix.clone();
        for _ in 0..repeats {
            frame.extend_from_slice(secret);
            frame.extend_from_slice(token.as_bytes());
        }
        frame.extend_from_slice(&suffix);
        let out = r.frame(bytes::Bytes::from(frame.clone()));
        prop_assert_eq!(out.len(), frame.len(), "the length is kept");
        prop_assert!(!out.windows(secret.len()).any(|w| w == secret));
        prop_assert!(!out.windows(token.len()).any(|w| w == token.as_bytes()));
    }

    #[test]
    fn event_filtering_does_not_depend_on_how_the_stream_is_cut(cuts in prop::collection::vec(1usize..40, 0..10), located in any::<bool>()) {
        let events: &[&str] = match located {
            false => &[
                r#"data: {"directory":"/home/a/web","payload":{"type":"x"}}"#,
                r#"data: {"directory":"/home/b","payload":{"type":"y"}}"#,
                r#"data: {"payload":{"type":"server.heartbeat"}}"#,
                r#"data: {"directory":"/home/a/web/sub","payload":{"type":"z"}}"#,
            ],
            true => &[
                r#"data: {"type":"server.connected","data":{}}"#,
                ": heartbeat",
                r#"data: {"type":"session.created","location":{"directory":"/home/b"},"data":{"sessionID":"ses_b"}}"#,
                r#"data: {"type":"session.created","location":{"directory":"/home/a/web"},"data":{"sessionID":"ses_a"}}"#,
                r#"data: {"type":"session.execution.started","data":{"sessionID":"ses_b","dir":"/home/b"}}"#,
                r#"data: {"type":"session.execution.started","data":{"sessionID":"ses_a"}}"#,
            ],
        };
        let shape = if located { Shape::Located } else { Shape::Global };
        let stream: String = events.iter().map(|e| format!("{e}\n\n")).collect();
        let mut whole = EventFilter::new("/home/a/web".into(), shape);
        let expected = whole.push(stream.as_bytes());
        let mut pieces = EventFilter::new("/home/a/web".into(), shape);
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts {
            let end = (at + c).min(stream.len());
            out.extend_from_slice(&pieces.push(&stream.as_bytes()[at..end]));
            at = end;
        }
        out.extend_from_slice(&pieces.push(&stream.as_bytes()[at..]));
        prop_assert_eq!(&out[..], &expected[..]);
        prop_assert!(!String::from_utf8_lossy(&out).contains("/home/b"));
        prop_assert!(!String::from_utf8_lossy(&out).contains("ses_b"));
    }

    /// Whatever a frame says, the filter passes none that names another folder, or another
    /// folder's session, in the field it reads (the fields OpenCode 1.18.33 and 2.1.2 use).
    #[test]
    fn no_frame_of_another_folder_passes(
        dir in prop::sample::select(vec!["/home/a/web", "/home/a/web/sub", "/home/b", "/home/a/webx", "/"]),
        session in prop::sample::select(vec!["ses_a", "ses_b"]),
        with_location in any::<bool>(),
        kind in prop::sample::select(vec!["server.connected", "session.created", "session.deleted", "credential.updated"]),
    ) {
        let mut f = EventFilter::new("/home/a/web".into(), Shape::Located);
        // ses_b lives in /home/b: the stream said so first.
        f.push(b"data: {\"type\":\"session.created\",\"location\":{\"directory\":\"/home/b\"},\"data\":{\"sessionID\":\"ses_b\"}}\n\n");
        let frame = match with_location {
            true => serde_json::json!({"type": kind, "location": {"directory": dir}, "data": {"sessionID": session}}),
            false => serde_json::json!({"type": kind, "data": {"sessionID": session}}),
        };
        let out = f.push(format!("data: {frame}\n\n").as_bytes());
        let inside = dir == "/home/a/web" || dir == "/home/a/web/sub";
        if with_location && !inside {
            prop_assert!(out.is_empty(), "{frame}");
        }
        if !with_location {
            prop_assert!(out.is_empty(), "a folderless frame of a session not seen inside: {frame}");
        }
    }

    #[test]
    fn query_decoding_never_panics(s in "\\PC{0,100}") {
        let _ = opencode_gateway::policy::query::percent_decode(&s, true);
        let _ = opencode_gateway::policy::query::without(&s, |n| n == "x");
        let _ = opencode_gateway::http::rewrite::loggable_query(&s);
    }
}
