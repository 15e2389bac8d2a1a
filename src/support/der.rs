//! Just enough DER to read a certificate's validity period (for expiry checks and `doctor`) and its subject's
//! common name (the dev CA's name, which the certificates it issues name as their issuer), so the
//! gateway needs no X.509 parsing crate: name checks go through webpki, which rustls already uses.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `(tag, contents, rest)` of the DER element at the start of `input`.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, r) = rest.split_at(n);
        rest = r;
        bytes.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as a system time.
fn time(tag: u8, s: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(s).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let y: i64 = s[..2].parse().ok()?;
            (if y < 50 { 2000 + y } else { 1900 + y }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, h, m, sec) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + m * 60 + sec;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// The `n`th field of a certificate's to-be-signed part, counted after the optional `[0]`
/// version: 0 serial, 1 signature algorithm, 2 issuer, 3 validity, 4 subject.
fn tbs_field(cert_der: &[u8], n: usize) -> Option<&[u8]> {
    let (_, cert, _) = element(cert_der)?;
    let (_, tbs, _) = element(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = element(rest)?;
    if tag == 0xa0 {
        rest = r;
    }
    for _ in 0..n {
        rest = element(rest)?.2;
    }
    Some(element(rest)?.1)
}

/// A certificate's `(not_before, not_after)`.
pub(crate) fn validity(cert_der: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let validity = tbs_field(cert_der, 3)?;
    let (t1, from, r) = element(validity)?;
    let (t2, until, _) = element(r)?;
    Some((time(t1, from)?, time(t2, until)?))
}

/// A certificate's subject common name (the CA's name, which the certificates it issues must
/// carry as their issuer).
pub(crate) fn subject_common_name(cert_der: &[u8]) -> Option<String> {
    let mut rdns = tbs_field(cert_der, 4)?;
    while let Some((_, set, r)) = element(rdns) {
        rdns = r;
        let (_, pair, _) = element(set)?;
        let (_, oid, value) = element(pair)?;
        // 2.5.4.3, commonName.
        if oid == [0x55, 0x04, 0x03] {
            let (_, name, _) = element(value)?;
            return String::from_utf8(name.to_vec()).ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_subject_common_name() {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "a CA (box, 2026-12-03)");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "opencode-gateway");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_common_name(cert.der()).as_deref(),
            Some("a CA (box, 2026-12-03)")
        );
        assert_eq!(subject_common_name(&cert.der()[..60]), None);
    }

    #[test]
    fn reads_the_validity_of_an_rcgen_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2024, 2, 29);
        params.not_after = rcgen::date_time_ymd(2061, 12, 31);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (from, until) = validity(cert.der()).unwrap();
        assert_eq!(from.duration_since(UNIX_EPOCH).unwrap().as_secs(), 1_709_164_800);
        // 2061-12-31T00:00:00Z is past 2049: a GeneralizedTime.
        assert_eq!(until.duration_since(UNIX_EPOCH).unwrap().as_secs(), 2_903_212_800);
        assert!(
            validity(&cert.der()[..40]).is_none(),
            "a truncated certificate is refused"
        );
    }
}
