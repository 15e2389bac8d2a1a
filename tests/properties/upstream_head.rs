//! The direct road's request head (src/http/upstream_head.rs), written in one pass, held to the
//! head written from the header map as `rewrite::request_headers` and `pin::pin_headers` edit it
//! (hyper's road): for any fields a client sends, in any case and order, with Connection naming
//! any of them, the same request line and the same values under each name.

use std::net::IpAddr;

use proptest::prelude::*;

use crate::upstream_heads::{Case, both, fields};

/// A field name a client may send: every name the rules act on, in any case, and custom ones.
fn name() -> impl Strategy<Value = String> {
    let acted_on = prop::sample::select(vec![
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authorization",
        "authorization",
        "content-length",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-real-ip",
        "host",
        "accept-encoding",
        "origin",
        "cookie",
        "x-opencode-directory",
        "x-opencode-workspace",
        "accept",
        "x-secret",
    ]);
    prop_oneof![
        3 => (acted_on, any::<bool>()).prop_map(|(n, upper)| if upper { n.to_uppercase() } else { n.to_string() }),
        1 => "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,12}",
        // Not a field name: skipped by both.
        1 => Just("bad name".to_string()),
    ]
}

/// A field value: what a client sends, a Connection list naming fields, cookies with the
/// gateway's among them, and bytes no value may hold.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(prop_oneof![0x20u8..=0x7e, Just(b'\t'), 0x80u8..=0xff], 0..30),
        prop::sample::subsequence(
            vec![
                "keep-alive",
                "X-Secret",
                "cookie",
                "Origin",
                "host",
                "x-opencode-directory",
                "bad token",
                "",
                " upgrade "
            ],
            0..5
        )
        .prop_map(|t| t.join(",").into_bytes()),
        prop::sample::subsequence(
            vec!["a=1", "__Host-ocgw=s3cret", "__HOST-OCGWx=2", "b=2 ", " ", "c"],
            0..5
        )
        .prop_map(|c| c.join(";").into_bytes()),
        Just(b"bad\x01value".to_vec()),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        prop::collection::vec((name(), value()), 0..14),
        prop_oneof![
            Just("198.51.100.4"),
            Just("10.0.0.255"),
            Just("2001:db8::1"),
            Just("::ffff:1.2.3.4")
        ],
        prop::option::of(prop_oneof![
            Just("gw.example:8443".to_string()),
            Just("bad\u{1}host".to_string()),
            "[ -~]{0,12}",
        ]),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(head_only, fields, ip, original_host, (upstream_auth, upgrade, pinned))| Case {
                head_only,
                fields,
                client_ip: ip.parse::<IpAddr>().unwrap(),
                original_host,
                upstream_auth,
                upgrade,
                pinned,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_written_head_is_the_edited_maps(case in case()) {
        let (edited, written) = both(&case);
        let reference = fields(&edited).expect("the map's head reads back");
        let ours = fields(&written);
        prop_assert_eq!(ours.as_ref(), Some(&reference),
            "\nmap's:    {}\nwriter's: {}", String::from_utf8_lossy(&edited), String::from_utf8_lossy(&written));
    }
}

/// The comparison can fail: a head that differs in one value is told apart.
#[test]
fn a_head_with_one_value_changed_is_told_apart() {
    let case = Case {
        head_only: false,
        fields: vec![
            ("cookie".into(), b"a=1; __Host-ocgw=x".to_vec()),
            ("accept".into(), b"*/*".to_vec()),
        ],
        client_ip: "198.51.100.4".parse().unwrap(),
        original_host: Some("gw:8443".into()),
        upstream_auth: true,
        upgrade: false,
        pinned: true,
    };
    let (edited, written) = both(&case);
    assert_eq!(fields(&written), fields(&edited));
    let text = String::from_utf8(written).unwrap();
    assert!(text.contains("cookie: a=1\r\n") && !text.contains("ocgw"), "{text}");
    let changed = text.replace("accept: */*", "accept: */x");
    assert_ne!(fields(changed.as_bytes()), fields(&edited));
}
