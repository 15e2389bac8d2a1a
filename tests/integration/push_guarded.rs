//! Web Push with the address guard on (issue 44): the push service has an address the guard
//! allows, so the delivery is not the loopback exception `push.rs` switches on. Everything lives
//! in network namespaces the test makes (`common::netns`): the gateway, the OpenCode it spawns,
//! the fake model and two stand-in push services in "box", the public-looking one on
//! 192.88.99.1 (RFC 7526's retired 6to4 relay address, given to the box's loopback: no packet
//! leaves the namespaces), the other on the box's 127.0.0.1. End to end, with two logins of
//! alice: the device of the live login is told, the device of the login that ended is not, and
//! the device on a loopback endpoint is refused by the guard with its reason.

use std::time::Duration;

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, users_toml};
use crate::common::login::{LOGIN_HOST, form_login, portal_post};
use crate::common::netns::{BOX_ADDR, Lan};
use crate::common::opencode::{FakeModel, opencode_bin};
use crate::common::push_service::PushService;
use crate::common::supervised::spawned;
use crate::push::{ALICE, Device, prompt_bash, waiting_permission};

/// An address the guard takes for a push service's (not private, loopback, documentation…).
const PUBLIC_ADDR: &str = "192.88.99.1";

/// The gateway in the box with one spawned project (demo) and alice, trusting `ca_bundle`.
fn boxed_gateway(lan: &Lan, model: &FakeModel, project: &std::path::Path, ca_bundle: &str) -> Gateway {
    let config = format!(
        "[server]\nlisten = \"{BOX_ADDR}:0\"\nbase_domain = \"{LOGIN_HOST}\"\nstate_dir = \"state\"\nopencode_bin = \"{}\"\n\n\
         [tls]\ncert = \"certs/server.crt\"\nkey = \"certs/server.key\"\ndev_ca = true\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n{}{}",
        opencode_bin().display(),
        spawned("demo", project, model, ""),
        users_toml(&[TestUser {
            name: "alice",
            password: ALICE,
            projects: "[\"*\"]",
            role: "operator",
        }])
    );
    Gateway::start_wrapped(
        &config,
        &[("SSL_CERT_FILE", ca_bundle)],
        &["ip", "netns", "exec", &lan.box_ns],
        |_| {},
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode and root: run scripts/test.sh"]
async fn with_the_guard_on_a_public_push_service_is_told_only_while_the_login_lives() {
    let Some(lan) = Lan::make_or_skip("the guarded push test") else {
        return;
    };
    let add = crate::common::process::bounded(std::process::Command::new("ip").args([
        "-n",
        &lan.box_ns,
        "addr",
        "add",
        &format!("{PUBLIC_ADDR}/32"),
        "dev",
        "lo",
    ]));
    assert!(add.status.success(), "{}", String::from_utf8_lossy(&add.stderr));
    let public = PushService::start_on(Lan::bind_in(&lan.box_ns, &format!("{PUBLIC_ADDR}:0")));
    let private = PushService::start_on(Lan::bind_in(&lan.box_ns, "127.0.0.1:0"));
    let listener = Lan::bind_in(&lan.box_ns, "127.0.0.1:0");
    listener.set_nonblocking(true).unwrap();
    let model = FakeModel::start_on(tokio::net::TcpListener::from_std(listener).unwrap(), "echo RAN");
    // Both services trusted: the private one is kept out by the guard, not by its certificate.
    let bundle = tempfile::NamedTempFile::new().unwrap();
    let pems = [&public.ca_file, &private.ca_file].map(|f| std::fs::read_to_string(f).unwrap());
    std::fs::write(bundle.path(), pems.concat()).unwrap();
    let project = tempfile::tempdir().unwrap();
    let gw = boxed_gateway(
        &lan,
        &model,
        &project.path().canonicalize().unwrap(),
        &bundle.path().display().to_string(),
    );
    let c = Https::new(gw.https, &gw.ca()).in_netns(&lan.box_ns);
    let lh = c.host(LOGIN_HOST);

    // Two logins of alice, a device each; the first also has a device on a loopback endpoint.
    let (live, ended) = (
        form_login(&c, "alice", ALICE).await,
        form_login(&c, "alice", ALICE).await,
    );
    let mut live_device = Device::new(7);
    for (cookie, form) in [
        (&live, live_device.form(&format!("{}/push/live", public.origin))),
        (&ended, Device::new(8).form(&format!("{}/push/ended", public.origin))),
        (&live, Device::new(9).form(&format!("{}/push/private", private.origin))),
    ] {
        let r = portal_post(&lh, cookie, "/_gw/push", &form).await;
        assert_eq!(r.status, 200, "{form}: {}", r.body);
    }
    let out = portal_post(&lh, &ended, "/logout", "").await;
    assert_eq!(out.status, 303, "{}", out.body);

    // A permission request waits: the live login's device is told, through the guard.
    prompt_bash(&c).await;
    let first = waiting_permission(&c).await;
    let told = public.deliveries("/push/live", 1).await;
    let text = String::from_utf8(live_device.open(&told[0].body)).unwrap();
    assert!(text.contains("\"project\":\"demo\""), "{text}");
    assert!(
        gw.wait_log("which is not a public address", Duration::from_secs(30))
            .await,
        "the loopback endpoint was not refused by the guard:\n{}",
        gw.logs()
    );
    assert!(
        gw.logs()
            .contains("resolves to 127.0.0.1, which is not a public address"),
        "{}",
        gw.logs()
    );
    // A second request, told to the live device too: by then anything sent with the first
    // batch has arrived. The ended login's device and the loopback one got nothing.
    let (status, _) = json(
        &c,
        "POST",
        &format!("/p/demo/permission/{first}/reply"),
        &basic("alice", ALICE),
        r#"{"reply":"once"}"#,
    )
    .await;
    assert_eq!(status, 200);
    prompt_bash(&c).await;
    public.deliveries("/push/live", 2).await;
    let paths: Vec<String> = public.seen.lock().unwrap().iter().map(|d| d.path.clone()).collect();
    assert_eq!(paths, ["/push/live", "/push/live"], "only the live login's device");
    assert!(
        private.seen.lock().unwrap().is_empty(),
        "a loopback push service was reached"
    );
}
