//! Properties of the boundaries no earlier property covered: the canonical request (one reading
//! of a request head), browser origins, the listings a pinned project's shared server is filtered
//! to, an upstream's API document, the config boundary and the gateway's protected files. Each
//! judges the code by a model written here from what it promises, not by its own helpers.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use http::Method;
use opencode_gateway::config::protected::ProtectedPaths;
use opencode_gateway::gateway::state::State;
use opencode_gateway::http::error::HttpError;
use opencode_gateway::pipeline::request::{self, Reading};
use opencode_gateway::pipeline::{ConnInfo, Front};
use opencode_gateway::policy::authz::{self, Class};
use opencode_gateway::policy::canonical::CanonicalPath;
use opencode_gateway::policy::drift::UpstreamApi;
use opencode_gateway::policy::origin;
use opencode_gateway::policy::routes::ROUTES;
use opencode_gateway::policy::scope;
use proptest::prelude::*;

use super::oracle;
use super::{concrete, respell};

/// A password hash the config boundary accepts (argon2id of "x").
const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$hnXrCVeTu4NoWLdElfHJEw$N1rNl6VO+ZfhOWV+i+Mcc2VUFrcEx2wvp4FoZuXrJ3w";

fn config_text(projects: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:8443\"\nbase_domain = \"gw.localhost\"\n\n[tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n\n{projects}\n[[user]]\nname = \"alice\"\npassword_hash = \"{HASH}\"\nprojects = [\"*\"]\nrole = \"operator\"\n"
    )
}

fn external(name: &str) -> String {
    format!("[[project]]\nname = \"{name}\"\nupstream = \"http://127.0.0.1:4096\"\n\n")
}

/// The gateway's state for two external projects, "web" and "api", under `gw.localhost`.
fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        let text = config_text(&format!("{}{}", external("web"), external("api")));
        let settings = opencode_gateway::config::parse(&text, Path::new("/tmp/ocgw-prop-config/gateway.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["gw.localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        let supervisor = opencode_gateway::upstream::supervise::Supervisor::new(
            std::time::Duration::from_secs(1),
            tokio_util::sync::CancellationToken::new(),
            Default::default(),
            opencode_gateway::audit::Audit::off(),
        );
        let metrics = opencode_gateway::metrics::Metrics::new();
        State::build(settings, Arc::new(tls), &supervisor, &Default::default(), &metrics).unwrap()
    })
}

fn conn() -> ConnInfo {
    let peer: SocketAddr = "198.51.100.7:50000".parse().unwrap();
    ConnInfo::new(peer, Front::Tls { bound: None })
}

/// The request head: `uri` (origin form, or absolute for an h2 `:authority`), `hosts` as Host headers.
fn head(method: &Method, uri: &str, hosts: &[&str]) -> http::request::Parts {
    let mut b = http::Request::builder().method(method.clone()).uri(uri);
    for h in hosts {
        b = b.header(http::header::HOST, *h);
    }
    b.body(()).unwrap().into_parts().0
}

/// A project request's reading: the host it names and its target (a gateway page fails the test).
struct ForProject {
    host: Option<String>,
    target: Result<request::Target, HttpError>,
}

fn read(method: &Method, uri: &str, hosts: &[&str]) -> Result<ForProject, HttpError> {
    match request::read(state(), &conn(), head(method, uri, hosts), 8192)? {
        Reading::Project { request, target } => Ok(ForProject {
            host: request.host,
            target,
        }),
        Reading::Page { .. } => panic!("{method} {uri} {hosts:?} was read as one of the gateway's pages"),
    }
}

/// What a target says, comparable: project, route, class, session, forwarded path, file.
type Seen = (
    String,
    Option<String>,
    Option<Class>,
    Option<String>,
    String,
    Option<String>,
);

fn target(method: &Method, uri: &str, hosts: &[&str]) -> Seen {
    let reading = read(method, uri, hosts).unwrap_or_else(|e| panic!("{uri} {hosts:?}: {e}"));
    let t = reading.target.unwrap_or_else(|e| panic!("{uri} {hosts:?}: {e}"));
    (
        t.project.name.to_string(),
        t.route.map(|r| r.pattern.to_string()),
        t.class,
        t.session,
        t.upstream_path,
        t.file,
    )
}

#[test]
fn the_canonical_request_routes_and_refuses_as_documented() {
    let get = Method::GET;
    // A project host and a /p/ prefix name the same target.
    let by_host = target(&get, "/session/ses_1/message", &["web.gw.localhost:8443"]);
    let by_prefix = target(&get, "/p/web/session/ses_1/message", &["gw.localhost:8443"]);
    assert_eq!(by_host, by_prefix);
    assert_eq!(by_host.0, "web");
    assert_eq!(by_host.1.as_deref(), Some("/session/*/message"));
    assert_eq!(by_host.3.as_deref(), Some("ses_1"));
    assert_eq!(by_host.4, "/session/ses_1/message");
    // An h2 `:authority` counts as the host.
    assert_eq!(
        target(&get, "https://api.gw.localhost/session", &[]).0,
        "api",
        "the authority names the project"
    );
    // Two Host headers, or an authority and a Host that disagree: refused, for that reason.
    for (uri, hosts, why) in [
        (
            "/session",
            &["web.gw.localhost", "api.gw.localhost"][..],
            "more than one Host header",
        ),
        (
            "/session",
            &["web.gw.localhost", "web.gw.localhost"][..],
            "more than one Host header",
        ),
        (
            "https://web.gw.localhost/session",
            &["api.gw.localhost"][..],
            "disagree",
        ),
    ] {
        match read(&get, uri, hosts) {
            Err(e @ HttpError::BadRequest(_)) => assert!(e.to_string().contains(why), "{uri} {hosts:?}: {e}"),
            Err(e) => panic!("{uri} {hosts:?}: refused for another reason: {e}"),
            Ok(_) => panic!("{uri} {hosts:?} was read"),
        }
    }
    // The same authority and Host, in another case, is one host.
    let same = read(&get, "https://web.gw.localhost/session", &["WEB.gw.localhost"]).unwrap();
    assert_eq!(same.host.as_deref(), Some("web.gw.localhost"));
    // A path OpenCode could read two ways is refused before any project is looked at.
    assert!(matches!(
        read(&get, "/p/web/session/%2e%2e/config", &["gw.localhost"]),
        Err(HttpError::BadPath(_))
    ));
    // Unknown projects and no project at all: the reading says so (and is kept, not returned
    // early, so an unauthenticated client learns nothing from the status).
    let unknown = read(&get, "/p/nope/session", &["gw.localhost"]).unwrap();
    assert!(matches!(&unknown.target, Err(HttpError::UnknownProject(n)) if n == "nope"));
    let unknown = read(&get, "/session", &["nope.gw.localhost"]).unwrap();
    assert!(matches!(&unknown.target, Err(HttpError::UnknownProject(n)) if n == "nope"));
    let none = read(&get, "/session", &["gw.localhost"]).unwrap();
    assert!(matches!(&none.target, Err(HttpError::NoProject)));
}

/// A reference DNS label (lower case, as project names must be: they name hosts).
fn dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// An origin in parts: scheme, host, explicit port.
fn origin_text(scheme: &str, host: &str, port: Option<u16>, upper: &[bool], slash: bool) -> String {
    let mut s = format!("{scheme}://{host}");
    if let Some(p) = port {
        s.push_str(&format!(":{p}"));
    }
    let mut flip = upper.iter().copied().cycle();
    let mut s: String = s
        .chars()
        .map(|c| {
            if flip.next().unwrap_or(false) {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    if slash {
        s.push('/');
    }
    s
}

fn effective_port(scheme: &str, port: Option<u16>) -> u16 {
    port.unwrap_or(if scheme == "https" { 443 } else { 80 })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every spelling of a route, by project host or by `/p/<name>` prefix, over HTTP/1.1 or as an
    /// h2 authority, is read as one target.
    #[test]
    fn every_spelling_of_a_request_is_one_canonical_target(
        row in 0..ROUTES.len(),
        coins in prop::collection::vec(any::<u8>(), 64),
        project in prop::sample::select(vec!["web", "api"]),
        port in prop::option::of(prop::sample::select(vec![443u16, 8443])),
    ) {
        let (method, pattern, _) = ROUTES[row];
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let canonical = concrete(pattern);
        let spelled = respell(&canonical, pattern, &coins);
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let host = format!("{project}.gw.localhost{port}");
        let base = target(&method, &canonical, &[&host]);
        prop_assert_eq!(&base.0, project);
        prop_assert_eq!(&target(&method, &spelled, &[&host]), &base, "{}", spelled);
        let gw = format!("gw.localhost{port}");
        prop_assert_eq!(&target(&method, &format!("/p/{project}{spelled}"), &[&gw]), &base, "/p/{}{}", project, spelled);
        prop_assert_eq!(&target(&method, &format!("https://{host}{spelled}"), &[]), &base, "h2 {}", spelled);
        // The forwarded spelling reads back as what was judged.
        let again = CanonicalPath::parse(&base.4).expect("the forwarded path parses");
        let r = authz::resolve(&method, again.segments());
        prop_assert_eq!(r.route.map(|r| r.pattern.to_string()), base.1.clone());
        prop_assert_eq!(r.upstream_path, base.4.clone());
    }

    /// Writes and upgrades from a browser: only the gateway's own origin (any case, a trailing
    /// slash, the scheme's default port written or not) or a configured one.
    #[test]
    fn an_origin_is_allowed_exactly_when_it_is_the_requests_own_or_configured(
        o_scheme in prop::sample::select(vec!["https", "http"]),
        o_host in prop::sample::select(vec!["gw.localhost", "web.gw.localhost", "evil.example", "[::1]", "127.0.0.1"]),
        o_port in prop::option::of(prop::sample::select(vec![443u16, 80, 8443, 4430])),
        r_scheme in prop::sample::select(vec!["https", "http"]),
        r_host in prop::sample::select(vec!["gw.localhost", "web.gw.localhost", "evil.example", "[::1]", "127.0.0.1"]),
        r_port in prop::option::of(prop::sample::select(vec![443u16, 80, 8443, 4430])),
        upper in prop::collection::vec(any::<bool>(), 1..40),
        slash in any::<bool>(),
        configured in any::<bool>(),
    ) {
        let origin = origin_text(o_scheme, o_host, o_port, &upper, slash);
        let host = match r_port { Some(p) => format!("{r_host}:{p}"), None => r_host.to_string() };
        let same = o_scheme == r_scheme && o_host == r_host && effective_port(o_scheme, o_port) == effective_port(r_scheme, r_port);
        let extra = if configured { vec![origin_text(o_scheme, o_host, o_port, &[false], false)] } else { vec![] };
        prop_assert_eq!(origin::allowed(&origin, r_scheme, Some(&host), &extra), same || configured, "{} to {}://{}", origin, r_scheme, host);
        // Never from an origin that is not one.
        for bad in ["null", "", "https://", "https://a/b", "https://u@gw.localhost", "ftp://gw.localhost"] {
            prop_assert!(!origin::allowed(bad, r_scheme, Some(&host), &[bad.to_string()]), "{}", bad);
        }
        // Normalising twice changes nothing.
        if let Some(n) = origin::normalize(&origin) {
            prop_assert_eq!(origin::normalize(&n), Some(n.clone()));
        }
    }

    /// Over an SSH tunnel only loopback names are this machine.
    #[test]
    fn only_loopback_hosts_are_local(ip in any::<std::net::Ipv4Addr>(), port in prop::option::of(1u16..), label in "[a-z]{1,10}") {
        let with_port = |h: String| match port { Some(p) => format!("{h}:{p}"), None => h };
        prop_assert_eq!(origin::is_local_host(&with_port(ip.to_string())), ip.octets()[0] == 127);
        let (sub, fake, other) = (
            with_port(format!("{label}.localhost")),
            with_port(format!("localhost.{label}")),
            with_port(format!("{label}.example")),
        );
        prop_assert!(origin::is_local_host(&sub), "{}", sub);
        prop_assert!(!origin::is_local_host(&fake), "{}", fake);
        prop_assert!(!origin::is_local_host(&other), "{}", other);
    }

    /// A pinned project's listings from a shared server keep exactly its own sessions and the
    /// projects around it, in order and unchanged.
    #[test]
    fn listings_keep_exactly_what_is_inside_the_project(
        dirs in prop::collection::vec(prop::sample::select(vec![
            "/srv/a/web", "/srv/a/web/sub", "/srv/a/web/sub/deep", "/srv/a/webx", "/srv/a/we", "/srv/a", "/srv", "/", "/srv/b/web", "/other",
        ]), 0..12),
        v2_location in prop::collection::vec(any::<bool>(), 12),
    ) {
        let root = "/srv/a/web";
        let sessions: Vec<serde_json::Value> = dirs.iter().enumerate()
            .map(|(i, d)| serde_json::json!({"id": format!("ses_{i}"), "directory": d, "n": i}))
            .collect();
        let expect: Vec<&serde_json::Value> = sessions.iter().filter(|s| oracle::is_inside(root, s["directory"].as_str().unwrap())).collect();
        let out = scope::filter_sessions(&serde_json::to_vec(&sessions).unwrap(), Path::new(root)).unwrap();
        let out: Vec<serde_json::Value> = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(out.iter().collect::<Vec<_>>(), expect.clone());
        // v2: `location.directory` when a session has one, else `directory`; the page's other fields stay.
        let page_items: Vec<serde_json::Value> = dirs.iter().enumerate().map(|(i, d)| {
            if v2_location[i] {
                serde_json::json!({"id": format!("ses_{i}"), "location": {"directory": d}, "directory": "/srv/a/web"})
            } else {
                serde_json::json!({"id": format!("ses_{i}"), "directory": d})
            }
        }).collect();
        let page = serde_json::json!({"data": page_items, "cursor": {"next": "c1"}});
        let expect_page: Vec<&serde_json::Value> = page_items.iter().zip(&dirs).filter(|(_, d)| oracle::is_inside(root, d)).map(|(s, _)| s).collect();
        let out = scope::filter_session_page(&serde_json::to_vec(&page).unwrap(), Path::new(root)).unwrap();
        let out: serde_json::Value = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(out["data"].as_array().unwrap().iter().collect::<Vec<_>>(), expect_page);
        prop_assert_eq!(&out["cursor"], &page["cursor"]);
        // Projects: those inside the pinned directory, and those whose worktree holds it.
        let projects: Vec<serde_json::Value> = dirs.iter().enumerate().map(|(i, d)| serde_json::json!({"id": format!("p{i}"), "worktree": d})).collect();
        let expect: Vec<&serde_json::Value> = projects.iter().filter(|p| {
            let w = p["worktree"].as_str().unwrap();
            oracle::is_inside(root, w) || oracle::is_inside(w, root)
        }).collect();
        let out = scope::filter_projects(&serde_json::to_vec(&projects).unwrap(), Path::new(root)).unwrap();
        let out: Vec<serde_json::Value> = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(out.iter().collect::<Vec<_>>(), expect);
    }

    /// Routes an upstream's API document adds (OpenAPI templates: `{name}` is one segment) become
    /// routes of the operate class under roots the table does not know; each is counted once.
    #[test]
    fn an_api_document_adds_exactly_its_routes(
        entries in prop::collection::vec((
            prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE"]),
            "zq[a-z]{2,5}",
            prop::collection::vec(prop_oneof!["[a-z]{2,6}", Just("{id}".to_string()), Just("{sessionID}".to_string())], 0..4),
        ), 1..8),
    ) {
        let mut paths = serde_json::Map::new();
        let mut want = std::collections::BTreeSet::new();
        for (method, root, rest) in &entries {
            let path = format!("/{root}{}", rest.iter().map(|s| format!("/{s}")).collect::<String>());
            let e = paths.entry(path.clone()).or_insert_with(|| serde_json::json!({}));
            e[method.to_ascii_lowercase()] = serde_json::json!({"operationId": "x"});
            want.insert((method.to_string(), path));
        }
        let doc = serde_json::json!({"openapi": "3.1.0", "paths": paths});
        let api = UpstreamApi::from_doc(&opencode_gateway::policy::dialect::V1, Some("9.9.9".into()), &doc).unwrap();
        prop_assert_eq!(api.listed, want.len());
        let configured = opencode_gateway::policy::drift::RouteRoles::new(std::iter::empty());
        for (method, path) in &want {
            let m = Method::from_bytes(method.as_bytes()).unwrap();
            let pattern: String = path.split('/').skip(1).map(|s| if s.starts_with('{') { "/*".to_string() } else { format!("/{s}") }).collect();
            let concrete: String = path.split('/').skip(1).map(|s| if s.starts_with('{') { "/Val_1".to_string() } else { format!("/{s}") }).collect();
            let parsed = CanonicalPath::parse(&concrete).unwrap();
            let without = authz::resolve_with(&m, parsed.segments(), authz::Extra { upstream: None, configured: &configured });
            prop_assert!(without.route.is_none(), "{} {} is in the table already", method, path);
            let with = authz::resolve_with(&m, parsed.segments(), authz::Extra { upstream: Some(&api), configured: &configured });
            prop_assert_eq!(with.route.map(|r| r.pattern.to_string()), Some(pattern.clone()), "{} {}", method, concrete);
            prop_assert_eq!(with.class, Some(Class::Operate), "{} {}", method, concrete);
        }
        let no_paths = serde_json::json!({"openapi": "3.1.0"});
        prop_assert!(UpstreamApi::from_doc(&opencode_gateway::policy::dialect::V1, None, &no_paths).is_err(), "a document without paths");
    }

    /// The config boundary: project names are DNS labels, each used once; anything else is
    /// refused naming the key, and a config it accepts names exactly the projects written.
    #[test]
    fn the_config_accepts_exactly_unique_dns_label_project_names(
        names in prop::collection::vec(prop_oneof![
            "[a-z0-9][a-z0-9-]{0,8}[a-z0-9]",
            "[a-z]",
            prop::sample::select(vec!["Web", "-web", "web-", "we_b", "we.b", "", "web", "api"]).prop_map(str::to_string),
            Just("a".repeat(64)),
            Just("b".repeat(63)),
        ], 1..5),
    ) {
        let text = config_text(&names.iter().map(|n| external(n)).collect::<String>());
        let parsed = opencode_gateway::config::parse(&text, Path::new("/tmp/ocgw-prop-config/gateway.toml"));
        let mut seen = std::collections::HashSet::new();
        let bad: Vec<usize> = names.iter().enumerate().filter(|(_, n)| !dns_label(n) || !seen.insert(n.as_str())).map(|(i, _)| i).collect();
        match parsed {
            Ok(settings) => {
                prop_assert!(bad.is_empty(), "accepted {:?}", names);
                let got: Vec<&str> = settings.projects.iter().map(|p| p.name.as_str()).collect();
                prop_assert_eq!(got, names.iter().map(String::as_str).collect::<Vec<_>>());
                prop_assert!(settings.protected.covers(Path::new("/tmp/ocgw-prop-config/gateway.toml")));
            }
            Err(e) => {
                prop_assert!(!bad.is_empty(), "refused {:?}: {}", names, e);
                let text = e.to_string();
                for i in bad {
                    // `project[1] (web).name: …`
                    let named = text.lines().any(|l| l.trim_start().starts_with(&format!("project[{i}]")) && l.contains(".name:"));
                    prop_assert!(named, "project[{}] not named: {:?}: {}", i, names, text);
                }
            }
        }
    }

    /// Any text: the config boundary answers, never panics.
    #[test]
    fn the_config_boundary_never_panics(text in "(\\[\\[?[a-z_]{1,8}\\]?\\]\n|[a-z_]{1,10} = (\"[ -~]{0,12}\"|[0-9]{1,4}|true|\\[\\]|\\{ \\})\n|\\PC{0,20}\n){0,12}") {
        let _ = opencode_gateway::config::parse(&text, Path::new("/tmp/ocgw-prop-config/gateway.toml"));
    }
}

/// The protected files for `covers`: a key file, a state folder, a symlink into the key's
/// folder and a hard link to the key.
fn protected() -> &'static (tempfile::TempDir, String, ProtectedPaths) {
    static P: OnceLock<(tempfile::TempDir, String, ProtectedPaths)> = OnceLock::new();
    P.get_or_init(|| {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("gw/certs")).unwrap();
        std::fs::create_dir_all(base.join("state/control")).unwrap();
        std::fs::create_dir_all(base.join("project/src")).unwrap();
        std::fs::write(base.join("gw/certs/server.key"), "k").unwrap();
        std::fs::write(base.join("gw/certs/server.crt"), "c").unwrap();
        std::os::unix::fs::symlink(base.join("gw/certs"), base.join("project/link")).unwrap();
        std::fs::hard_link(base.join("gw/certs/server.key"), base.join("project/hard")).unwrap();
        let mut p = ProtectedPaths::default();
        p.add("tls.key", &base.join("gw/certs/server.key"), false);
        p.add("server.state_dir", &base.join("state"), true);
        let base = base.to_str().unwrap().to_string();
        (t, base, p)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A path names a protected file exactly when, resolved as OpenCode resolves it (`..` first,
    /// then the link), it is the key, the key's hard link, or inside the state folder.
    #[test]
    fn covers_exactly_the_protected_files_however_they_are_named(
        segs in prop::collection::vec(prop::sample::select(vec![
            "gw", "certs", "server.key", "server.crt", "state", "control", "project", "src", "link", "hard", "..", ".", "", "x",
        ]), 0..7),
    ) {
        let (_t, base, p) = protected();
        let candidate = format!("{base}/{}", segs.join("/"));
        let lexical = oracle::node_resolve(base, &candidate);
        // The one symlink, project/link → gw/certs.
        let link = format!("{base}/project/link");
        let real = if oracle::is_inside(&link, &lexical) {
            format!("{base}/gw/certs{}", &lexical[link.len()..])
        } else {
            lexical.clone()
        };
        let key = format!("{base}/gw/certs/server.key");
        let want = real == key || real == format!("{base}/project/hard") || oracle::is_inside(&format!("{base}/state"), &real);
        prop_assert_eq!(p.covers(Path::new(&candidate)), want, "{} ({})", candidate, real);
        // From a project folder, relative names reach the same files.
        let rel = segs.join("/");
        let from_project = oracle::node_resolve(&format!("{base}/project"), &rel);
        let by_rel = p.covers_in(Path::new(&format!("{base}/project")), Path::new(&rel));
        let direct = p.covers(Path::new(&from_project));
        prop_assert_eq!(by_rel, direct, "{} from the project ({})", rel, from_project);
    }
}
