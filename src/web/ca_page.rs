//! The dev CA for a phone, on the plain-HTTP listener (`server.http_listen`, with `tls.dev_ca`):
//! a phone cannot open the HTTPS pages until it trusts the CA, so it fetches the CA where no
//! trust is needed and compares the SHA-256 fingerprint the page shows with the one the gateway
//! printed in its terminal (plain HTTP can be tampered with on the way; the fingerprint cannot be
//! forged to match). `/ca` explains the steps, `/ca.crt` is the certificate (DER, what Android's
//! "CA certificate" installer and iOS's download both take), `/ca.mobileconfig` an iOS
//! configuration profile holding it. Only public data is served here; nothing asks for a
//! credential or sets a cookie.

use base64::Engine;

/// The CA's SHA-256 fingerprint as browsers and phones show it: `AB:CD:…`, upper case.
pub(crate) fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The CA certificate (DER) from its PEM file.
pub(crate) fn der_from_pem(pem: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes()).ok().map(|c| c.to_vec())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The `/ca` page: the fingerprint, the two downloads, the steps per platform, and where to go next.
/// The CA's own name (after its host and day, or the old fixed name), as a phone lists it.
pub(crate) fn name_of(der: &[u8]) -> String {
    crate::support::der::subject_common_name(der).unwrap_or_else(|| "opencode-gateway development CA".into())
}

pub(crate) fn page(name: &str, fingerprint: &str, next: &str) -> String {
    let name = escape(name);
    // A break chance after each colon only: the fingerprint wraps between bytes, never inside one.
    let fp = escape(fingerprint).replace(':', ":<wbr>");
    let next = escape(next);
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Trust this gateway's development CA</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;margin:1rem;max-width:40rem}}code{{font-size:.9rem}}
a.b{{display:inline-block;min-height:44px;line-height:44px;padding:0 1rem;margin:.25rem 0;border:1px solid #888;border-radius:.5rem;text-decoration:none}}</style>
</head><body>
<h1>Trust this gateway's development CA</h1>
<p>This gateway uses a certificate from its own development CA. Before your phone can open it over HTTPS, it must trust that CA.</p>
<p><strong>First compare this fingerprint</strong> with the one the gateway printed in its terminal. If they differ, stop: someone on this network changed the page.</p>
<p id="fingerprint">SHA-256: <code class="fp">{fp}</code></p>
<p><a class="b" id="crt" href="/ca.crt" download="opencode-gateway-dev-ca.crt">Download the certificate (Android, others)</a><br>
<a class="b" id="mobileconfig" href="/ca.mobileconfig">Install the profile (iPhone, iPad)</a></p>
<h2>iPhone and iPad</h2>
<ol><li>Open this page in Safari and tap "Install the profile"; allow the download.</li>
<li>Settings → General → VPN &amp; Device Management → the profile → Install.</li>
<li>Settings → General → About → Certificate Trust Settings → switch on full trust for "{name}".</li></ol>
<h2>Android</h2>
<ol><li>Tap "Download the certificate".</li>
<li>Settings → Security → Encryption &amp; credentials → Install a certificate → CA certificate, and pick the file. Chrome trusts it; some other apps do not trust user CAs.</li></ol>
<p>The CA can vouch only for this gateway's names (its certificate carries name constraints). Remove it from the phone when you no longer use the gateway.</p>
<p><a class="b" id="next" href="{next}">Then open the gateway</a></p>
</body></html>
"#
    )
}

/// A UUID-shaped string derived from the fingerprint, so the profile is stable across requests
/// (installing it again replaces it rather than adding a second).
fn uuid_from(fingerprint: &str, salt: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, format!("{salt}{fingerprint}").as_bytes());
    let h: String = d.as_ref()[..16].iter().map(|b| format!("{b:02X}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// An iOS configuration profile (unsigned; iOS says so) with one root certificate payload.
pub(crate) fn mobileconfig(der: &[u8], fingerprint: &str) -> String {
    let data = base64::engine::general_purpose::STANDARD.encode(der);
    let cert_uuid = uuid_from(fingerprint, "cert");
    let profile_uuid = uuid_from(fingerprint, "profile");
    let short: String = fingerprint.replace(':', "").chars().take(16).collect();
    // The CA's own name (after its host and day), as the phone lists it once trusted.
    let name = escape(&name_of(der));
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>PayloadContent</key>
  <array>
    <dict>
      <key>PayloadCertificateFileName</key><string>opencode-gateway-dev-ca.cer</string>
      <key>PayloadContent</key><data>{data}</data>
      <key>PayloadDescription</key><string>Adds {name}</string>
      <key>PayloadDisplayName</key><string>{name}</string>
      <key>PayloadIdentifier</key><string>dev.opencode-gateway.ca.{short}.cert</string>
      <key>PayloadType</key><string>com.apple.security.root</string>
      <key>PayloadUUID</key><string>{cert_uuid}</string>
      <key>PayloadVersion</key><integer>1</integer>
    </dict>
  </array>
  <key>PayloadDisplayName</key><string>{name}</string>
  <key>PayloadIdentifier</key><string>dev.opencode-gateway.ca.{short}</string>
  <key>PayloadRemovalDisallowed</key><false/>
  <key>PayloadType</key><string>Configuration</string>
  <key>PayloadUUID</key><string>{profile_uuid}</string>
  <key>PayloadVersion</key><integer>1</integer>
</dict>
</plist>
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_sha256_in_colon_hex_and_the_profile_carries_the_certificate() {
        let fp = fingerprint(b"abc");
        assert_eq!(
            fp,
            "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
        );
        let p = mobileconfig(b"\x30\x03\x02\x01\x01", &fp);
        assert!(p.contains("<data>MAMCAQE=</data>"), "{p}");
        assert!(p.contains("com.apple.security.root"));
        assert_eq!(
            p,
            mobileconfig(b"\x30\x03\x02\x01\x01", &fp),
            "stable: a second install replaces"
        );
        assert_ne!(uuid_from(&fp, "cert"), uuid_from(&fp, "profile"));
        let page = page("dev CA (<box>, 2026-12-03)", &fp, "https://198.18.0.1:8443/\"><script>");
        assert!(page.replace("<wbr>", "").contains(&fp));
        assert!(!page.contains("<script>") && !page.contains("<box>"), "escaped");
        // iOS's last step names the CA as the phone lists it.
        assert!(
            page.contains("full trust for \"dev CA (&lt;box&gt;, 2026-12-03)\""),
            "{page}"
        );
    }

    /// On a narrow phone the fingerprint wraps between bytes, never inside one (issue 38: it
    /// broke in the middle of a byte): no break-anywhere rule, a break chance after each colon.
    #[test]
    fn the_fingerprint_wraps_only_between_bytes() {
        let fp = fingerprint(b"abc");
        let page = page("a CA", &fp, "https://198.18.0.1:8443/");
        assert!(!page.contains("break-all"), "{page}");
        let shown = page
            .split("<code class=\"fp\">")
            .nth(1)
            .and_then(|r| r.split("</code>").next());
        assert_eq!(shown, Some(fp.replace(':', ":<wbr>").as_str()), "{page}");
    }
}
