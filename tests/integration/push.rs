//! Web Push (issue 26): a device subscribes through `/_gw/push` after logging in; a permission
//! request that starts waiting (fake model, real OpenCode) is sent, encrypted for the device
//! (RFC 8291) with the gateway's VAPID token (RFC 8292), to a stand-in push service on loopback
//! (`common/push_service.rs`); the test opens it with the device's private key as a browser
//! would. Only devices of users who may answer get it; a subscription the push service says is
//! gone is deleted.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::{aead, agreement, hkdf};

use crate::common::client::{Https, basic, json};
use crate::common::gateway::{Gateway, TestUser, base_config, users_toml};
use crate::common::login::{LOGIN_HOST, browser_get, form_login, portal_post};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::push_service::{Delivery, PushService};

pub(crate) const ALICE: &str = "alice-password-1";
const VIC: &str = "vic-password-1";
/// What the model runs: a permission request whose command must never be in a push.
const COMMAND: &str = "echo SECRET-CMD-91 > marker.txt";

/// A browser's side of a subscription: its one-use P-256 key pair (ring's keys are ephemeral: a
/// device here opens one message) and its auth secret.
pub(crate) struct Device {
    private: Option<agreement::EphemeralPrivateKey>,
    public: Vec<u8>,
    auth: [u8; 16],
}

impl Device {
    pub(crate) fn new(auth_byte: u8) -> Device {
        let rng = ring::rand::SystemRandom::new();
        let private = agreement::EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng).unwrap();
        let public = private.compute_public_key().unwrap().as_ref().to_vec();
        Device {
            private: Some(private),
            public,
            auth: [auth_byte; 16],
        }
    }

    pub(crate) fn form(&self, endpoint: &str) -> String {
        format!(
            "do=subscribe&endpoint={}&p256dh={}&auth={}",
            crate::common::client::encode(endpoint),
            URL_SAFE_NO_PAD.encode(&self.public),
            URL_SAFE_NO_PAD.encode(self.auth)
        )
    }

    /// Open a delivered body (RFC 8291: the header's key, ECDH, the key schedule, AES-GCM).
    pub(crate) fn open(&mut self, body: &[u8]) -> Vec<u8> {
        struct Len(usize);
        impl hkdf::KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        let expand = |prk: &hkdf::Prk, info: &[&[u8]], n: usize| {
            let mut out = vec![0u8; n];
            prk.expand(info, Len(n)).unwrap().fill(&mut out).unwrap();
            out
        };
        let (salt, rest) = body.split_at(16);
        assert_eq!(u32::from_be_bytes(rest[..4].try_into().unwrap()), 4096, "record size");
        let (as_public, record) = rest[5..].split_at(rest[4] as usize);
        let theirs = agreement::UnparsedPublicKey::new(&agreement::ECDH_P256, as_public);
        let (ua_public, auth) = (self.public.clone(), self.auth);
        agreement::agree_ephemeral(self.private.take().unwrap(), &theirs, |secret| {
            let prk_key = hkdf::Salt::new(hkdf::HKDF_SHA256, &auth).extract(secret);
            let ikm = expand(&prk_key, &[b"WebPush: info\0", &ua_public, as_public], 32);
            let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&ikm);
            let cek = expand(&prk, &[b"Content-Encoding: aes128gcm\0"], 16);
            let nonce = expand(&prk, &[b"Content-Encoding: nonce\0"], 12);
            let key = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &cek).unwrap());
            let mut data = record.to_vec();
            let plain = key
                .open_in_place(
                    aead::Nonce::try_assume_unique_for_key(&nonce).unwrap(),
                    aead::Aad::empty(),
                    &mut data,
                )
                .expect("the body opens with the device's key");
            let (delimiter, text) = plain.split_last().unwrap();
            assert_eq!(*delimiter, 2, "the last record's delimiter");
            text.to_vec()
        })
        .unwrap()
    }
}

/// The VAPID header of a delivery, checked: an ES256 JWT for the push service's origin that
/// verifies with the `k` it came with, which is the key the portal gave the browser.
fn check_vapid(d: &Delivery, origin: &str, portal_key: &str) {
    let header = d.headers["authorization"].to_str().unwrap();
    let (t, k) = header
        .strip_prefix("vapid t=")
        .and_then(|r| r.split_once(", k="))
        .unwrap_or_else(|| panic!("not a VAPID header: {header}"));
    assert_eq!(k, portal_key, "the key the browser subscribed with");
    let (signed, signature) = t.rsplit_once('.').unwrap();
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_FIXED,
        URL_SAFE_NO_PAD.decode(k).unwrap(),
    )
    .verify(signed.as_bytes(), &URL_SAFE_NO_PAD.decode(signature).unwrap())
    .expect("the VAPID token verifies with k");
    let claims: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(signed.split_once('.').unwrap().1).unwrap()).unwrap();
    assert_eq!(claims["aud"], origin);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let exp = claims["exp"].as_u64().unwrap();
    assert!(exp > now && exp <= now + 24 * 3600, "exp {exp}, now {now}");
    assert!(claims["sub"].as_str().unwrap().starts_with("https://"), "{claims}");
    assert_eq!(d.headers["content-encoding"], "aes128gcm");
    assert!(d.headers.contains_key("ttl"));
}

/// The id of the permission request demo's server has waiting (bounded).
pub(crate) async fn waiting_permission(c: &Https) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, list) = json(c, "GET", "/p/demo/permission", &basic("alice", ALICE), "").await;
        if let Some(id) = list.as_array().and_then(|a| a.first()).and_then(|p| p["id"].as_str()) {
            return id.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no permission request waits: {list}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn prompt_bash(c: &Https) {
    let (status, session) = json(c, "POST", "/p/demo/session", &basic("alice", ALICE), "{}").await;
    assert_eq!(status, 200, "{session}");
    let id = session["id"].as_str().unwrap();
    let (status, body) = json(
        c,
        "POST",
        &format!("/p/demo/session/{id}/prompt_async"),
        &basic("alice", ALICE),
        r#"{"parts":[{"type":"text","text":"please RUNBASH"}]}"#,
    )
    .await;
    assert_eq!(status, 204, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenCode: run scripts/test.sh"]
async fn a_waiting_permission_is_pushed_encrypted_to_the_devices_that_may_answer_it() {
    let push = PushService::start().await;
    let model = FakeModel::start(COMMAND).await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let pw = oc.password.clone();
    let user = |name, password, role| TestUser {
        name,
        password,
        projects: "[\"*\"]",
        role,
    };
    let config = base_config(&format!(
        "[push]\nallow_private_endpoints = true\n\n[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"pw\"\n\n{}",
        oc.url(),
        users_toml(&[user("alice", ALICE, "operator"), user("vic", VIC, "viewer")])
    ));
    let ca = push.ca_file.display().to_string();
    let gw = Gateway::start_with(&config, &[("SSL_CERT_FILE", &ca)], move |d| {
        crate::common::write_secret(&d.join("pw"), &pw)
    });
    let c = Https::new(gw.https, &gw.ca());
    let lh = c.host(LOGIN_HOST);
    let alice = form_login(&c, "alice", ALICE).await;
    let vic = form_login(&c, "vic", VIC).await;

    // The portal offers it, with the gateway's key (made now, 0600, in state_dir).
    let portal = browser_get(&lh, "/", Some(&alice), true).await;
    let key = portal
        .body
        .split("data-key=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no push key on the portal: {}", portal.body))
        .to_string();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(gw.dir.path().join("state/vapid.pk8"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Refused: an endpoint that is not https, keys that are not a browser's, another site.
    let mut alice_device = Device::new(1);
    let alice_endpoint = format!("{}/push/alice", push.origin);
    for (form, says) in [
        (alice_device.form("http://127.0.0.1:9/x"), "must be an https URL"),
        (
            alice_device.form(&alice_endpoint).replace("p256dh=", "p256dh=AAAA"),
            "p256dh",
        ),
        (
            format!(
                "do=subscribe&endpoint={}",
                crate::common::client::encode(&alice_endpoint)
            ),
            "p256dh",
        ),
    ] {
        let r = portal_post(&lh, &alice, "/_gw/push", &form).await;
        assert_eq!(r.status, 400, "{form}: {}", r.body);
        assert!(r.body.contains(says), "{form}: {}", r.body);
    }
    let cross_site = lh
        .request("POST", "/_gw/push", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", &alice)
        .header("origin", "https://evil.example")
        .header("sec-fetch-site", "cross-site")
        .body(http_body_util::Full::from(alice_device.form(&alice_endpoint)))
        .unwrap();
    assert_eq!(lh.call(cross_site).await.status, 403);

    let ok = portal_post(&lh, &alice, "/_gw/push", &alice_device.form(&alice_endpoint)).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.contains("\"subscribed\":true"), "{}", ok.body);
    let vic_endpoint = format!("{}/push/vic", push.origin);
    let ok = portal_post(&lh, &vic, "/_gw/push", &Device::new(2).form(&vic_endpoint)).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    crate::common::audit::find(&crate::common::audit::file(&gw), "push_subscribed", |r| {
        r["user"] == "alice"
    })
    .await;

    // A permission request waits: alice's device is told, encrypted, without the command.
    prompt_bash(&c).await;
    let first = waiting_permission(&c).await;
    let delivered = push.deliveries("/push/alice", 1).await;
    check_vapid(&delivered[0], &push.origin, &key);
    let text = String::from_utf8(alice_device.open(&delivered[0].body)).unwrap();
    let message: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&message["project"], &message["tool"]),
        (&"demo".into(), &"bash".into()),
        "{text}"
    );
    assert_eq!(message["url"], "/inbox");
    assert!(!text.contains("SECRET-CMD-91"), "the command in a push: {text}");
    assert!(
        !String::from_utf8_lossy(&delivered[0].body).contains("demo"),
        "the body is not encrypted"
    );

    // The push service says alice's subscription is gone: it is deleted.
    push.script.lock().unwrap().push(410);
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
    push.deliveries("/push/alice", 2).await;
    assert!(
        gw.wait_log(
            "the push service says the subscription is gone: deleted",
            Duration::from_secs(10)
        )
        .await,
        "{}",
        gw.logs()
    );
    // `/metrics` counts them: one accepted, one gone.
    let metrics = gw.admin("GET", "/metrics").1;
    for line in ["push_sent_total 1", "push_gone_total 1", "push_failed_total 0"] {
        assert!(metrics.lines().any(|l| l.ends_with(line)), "{line}:\n{metrics}");
    }
    let db = rusqlite::Connection::open(gw.dir.path().join("state/gateway.db")).unwrap();
    let left: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM push_subscriptions WHERE user = 'alice'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0, "alice's gone subscription is deleted");
    // "Stop notifying this device": only one's own subscription can be removed.
    let other = Device::new(3);
    let other_endpoint = format!("{}/push/alice-2", push.origin);
    let ok = portal_post(&lh, &alice, "/_gw/push", &other.form(&other_endpoint)).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let remove = |endpoint: &str| format!("do=remove&endpoint={}", crate::common::client::encode(endpoint));
    let not_hers = portal_post(&lh, &alice, "/_gw/push", &remove(&vic_endpoint)).await;
    assert_eq!(
        (not_hers.status.as_u16(), not_hers.body.as_str()),
        (200, "{\"removed\":false}")
    );
    let removed = portal_post(&lh, &alice, "/_gw/push", &remove(&other_endpoint)).await;
    assert_eq!(
        (removed.status.as_u16(), removed.body.as_str()),
        (200, "{\"removed\":true}")
    );
    let count = |user: &str| -> i64 {
        db.query_row("SELECT COUNT(*) FROM push_subscriptions WHERE user = ?1", [user], |r| {
            r.get(0)
        })
        .unwrap()
    };
    assert_eq!((count("alice"), count("vic")), (0, 1));
    // At most 20 devices per user; subscribing one of them again still works.
    for n in 0..20 {
        let r = portal_post(
            &lh,
            &alice,
            "/_gw/push",
            &Device::new(4).form(&format!("{}/push/a{n}", push.origin)),
        )
        .await;
        assert_eq!(r.status, 200, "{n}: {}", r.body);
    }
    let over = portal_post(
        &lh,
        &alice,
        "/_gw/push",
        &Device::new(4).form(&format!("{}/push/a20", push.origin)),
    )
    .await;
    assert_eq!(over.status, 400, "{}", over.body);
    assert!(
        over.body.contains("20 devices already get notifications for alice"),
        "{}",
        over.body
    );
    let again = portal_post(
        &lh,
        &alice,
        "/_gw/push",
        &Device::new(5).form(&format!("{}/push/a3", push.origin)),
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    // A viewer may not answer: vic's device was told nothing, in either round.
    assert!(
        push.seen.lock().unwrap().iter().all(|d| d.path != "/push/vic"),
        "a viewer's device was pushed"
    );
}
