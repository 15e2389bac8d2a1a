//! The direct road's answer-head reader (src/upstream/direct/head.rs), which keeps each value as
//! a slice of the head's bytes found by offsets, held to the plain reading that copies them
//! (tests/oracle/answer_head.rs): for any bytes, the same status, version, fields, length or
//! refusal; and a head a server may write is read whole, never from a part of it.

use opencode_gateway::upstream::direct::{MAX_HEAD, MAX_HEADERS};
use proptest::prelude::*;

use crate::answer_head_reading::{gateway, settled_matches_full};
use crate::answer_head_reference::read;

fn reference(buf: &[u8]) -> crate::answer_head_reference::Reading {
    read(buf, MAX_HEAD, MAX_HEADERS)
}

/// A field name a server may send: common ones in any case, and custom ones.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "Content-Type",
            "content-length",
            "TRANSFER-ENCODING",
            "Connection",
            "x-opencode-directory",
            "Set-Cookie",
            "vary",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,20}",
    ]
}

/// A field value: visible bytes, spaces and tabs inside, obs-text.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![0x21u8..=0x7e, Just(b' '), Just(b'\t'), 0x80u8..=0xff],
        0..40,
    )
}

fn head_of(status: u16, minor: u8, fields: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut head = format!("HTTP/1.{minor} {status} Reason\r\n").into_bytes();
    for (n, v) in fields {
        head.extend_from_slice(n.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_read_as_the_plain_reading_reads_them(
        start in prop::sample::select(vec![&b""[..], b"HTTP/1.1 ", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 404 X\r\nA: b\r\n"]),
        rest in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let buf = [start, &rest[..]].concat();
        prop_assert_eq!(gateway(&buf), reference(&buf));
    }

    #[test]
    fn a_written_head_is_read_whole_and_never_from_a_part(
        status in 100u16..=599,
        minor in 0u8..=1,
        fields in prop::collection::vec((name(), value()), 0..12),
        body in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let head = head_of(status, minor, &fields);
        let buf = [&head[..], &body[..]].concat();
        let read = gateway(&buf);
        prop_assert_eq!(&read, &reference(&buf));
        if let Ok(Some((code, version, _, len))) = &read {
            prop_assert_eq!((*code, *version, *len), (status, minor, head.len()));
        }
        for cut in 0..head.len() {
            prop_assert_eq!(gateway(&head[..cut]), reference(&head[..cut]), "cut at {}", cut);
            prop_assert!(!matches!(gateway(&head[..cut]), Ok(Some(_))), "a part of a head read whole at {}", cut);
        }
    }

    #[test]
    fn any_bytes_read_by_the_direct_road_agree_with_the_full_reading(
        start in prop::sample::select(vec![&b""[..], b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nConnection: "]),
        rest in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let buf = [start, &rest[..]].concat();
        prop_assert_eq!(settled_matches_full(&buf), Ok(()));
    }

    #[test]
    fn connection_fields_settled_by_the_direct_road_leave_what_the_answers_rules_leave(
        status in prop::sample::select(vec![200u16, 204, 304, 404, 101, 103]),
        minor in 0u8..=1,
        fields in prop::collection::vec((connection_name(), connection_value()), 0..8),
    ) {
        let head = head_of(status, minor, &fields);
        prop_assert_eq!(settled_matches_full(&head), Ok(()));
    }
}

/// Names of the fields the direct road settles, others the tokens may name, and framing ones,
/// in any case.
fn connection_name() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "connection",
            "keep-alive",
            "proxy-connection",
            "x-custom",
            "content-length",
            "transfer-encoding",
            "set-cookie",
        ]),
        any::<u64>(),
    )
        .prop_map(|(n, caps)| {
            n.chars()
                .enumerate()
                .map(|(i, c)| {
                    if caps >> (i % 64) & 1 == 1 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect()
        })
}

/// Values: lists of connection tokens (naming fields or not), lengths and codings, odd bytes.
fn connection_value() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        "keep-alive",
        "Keep-Alive",
        "close",
        "CLOSE",
        "x-custom",
        "set-cookie",
        "",
        " ",
        "upgrade",
        "timeout=5",
        "chunked",
        "5",
        "\u{e9}",
    ]);
    prop::collection::vec(token, 0..4).prop_map(|t| t.join(",").into_bytes())
}
