//! The chunked transfer coding read from RFC 9112 §7.1's grammar, written apart from the
//! gateway's decoder (src/upstream/chunked.rs) and reading the whole input at once: the property
//! tests (tests/properties/chunked.rs) and the fuzz target (fuzz/fuzz_targets/chunked.rs) hold
//! the decoder, fed in any pieces, to it.
//!
//! ```text
//! chunked-body = *chunk last-chunk trailer-section CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! last-chunk   = 1*("0") [ chunk-ext ] CRLF
//! ```
//! The gateway's policy on top of the grammar: at most 15 hex digits; what follows the size up to
//! CR (whitespace, extensions) is skipped, at most 4 096 bytes counted from the line's start, and
//! holds no bare LF; trailer lines hold no bare LF and 16 KiB at most, counted without their CRLF.

#![allow(dead_code)]

/// What the whole input decodes to: the data and how many bytes the coded body took; `Err` when
/// it is malformed before its end; `Ok(None)` when it is well formed so far but not ended.
pub fn decode(input: &[u8]) -> Result<Option<(Vec<u8>, usize)>, ()> {
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        // The size: hex digits, then anything but a bare LF up to CR.
        let digits = input[at..].iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if digits == 0 {
            return if at == input.len() { Ok(None) } else { Err(()) };
        }
        if digits > 15 {
            return Err(());
        }
        if at + digits == input.len() {
            return Ok(None);
        }
        let size = u64::from_str_radix(std::str::from_utf8(&input[at..at + digits]).unwrap(), 16).unwrap();
        let line_start = at;
        at += digits;
        match input[at] {
            b'\r' => {}
            b';' | b' ' | b'\t' => {
                let rest = &input[at..];
                let cr = rest.iter().position(|&b| b == b'\r' || b == b'\n');
                let Some(cr) = cr else {
                    // Not ended: too long already, or not yet known.
                    return if at - line_start + rest.len() > 4096 {
                        Err(())
                    } else {
                        Ok(None)
                    };
                };
                if rest[cr] == b'\n' || at - line_start + cr > 4096 {
                    return Err(());
                }
                at += cr;
            }
            _ => return Err(()),
        }
        // CR LF
        match input.get(at + 1) {
            None => return Ok(None),
            Some(b'\n') => at += 2,
            Some(_) => return Err(()),
        }
        if size == 0 {
            return trailers(input, at).map(|end| end.map(|end| (data, end)));
        }
        let end = at as u64 + size;
        if end > input.len() as u64 {
            return Ok(None);
        }
        data.extend_from_slice(&input[at..end as usize]);
        at = end as usize;
        match (input.get(at), input.get(at + 1)) {
            (Some(b'\r'), Some(b'\n')) => at += 2,
            (Some(b'\r'), None) | (None, _) => return Ok(None),
            _ => return Err(()),
        }
    }
}

/// The trailer section from `at`: its end (after the empty line), `None` while not ended.
fn trailers(input: &[u8], mut at: usize) -> Result<Option<usize>, ()> {
    let mut counted = 0;
    loop {
        let rest = &input[at..];
        let Some(end) = rest.iter().position(|&b| b == b'\r' || b == b'\n') else {
            return if counted + rest.len() > 16 * 1024 {
                Err(())
            } else {
                Ok(None)
            };
        };
        if rest[end] == b'\n' || counted + end > 16 * 1024 {
            return Err(());
        }
        match rest.get(end + 1) {
            None => return Ok(None),
            Some(b'\n') => {}
            Some(_) => return Err(()),
        }
        if end == 0 {
            return Ok(Some(at + 2));
        }
        counted += end;
        at += end + 2;
    }
}
