//! Development certificates with rcgen: a local CA (`ca.crt`, `ca.key`) and a server certificate
//! signed by it, written next to the configured `tls.cert`. Private keys are created 0600.
//!
//! The CA is rebuilt from its key and fixed parameters when only the server certificate is missing,
//! so adding names never invalidates a CA a client already trusts. The CA carries critical name
//! constraints: it can only vouch for the names the gateway's certificate has (see
//! [`name_constraints`]), so its key, if it ever leaked, cannot impersonate any other site.

use std::path::{Path, PathBuf};

use std::net::IpAddr;

pub use crate::config::protected::DevCertPaths;
use crate::support::files::{create_private_dir, write_private};
use crate::support::host::{host_name, lan_addresses, local_name};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, GeneralSubtree, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, NameConstraints,
};
use time::{Duration, OffsetDateTime};

/// What a dev CA made before CAs were named after their host and day was called.
const OLD_CA_NAME: &str = "opencode-gateway development CA";

/// The names a dev server certificate covers: loopback in every spelling, this host, and the
/// base domain with a wildcard and each project's host spelled out (some clients refuse wildcards
/// directly under a single-label domain such as `localhost`).
pub fn server_names(base_domain: Option<&str>, projects: &[String]) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    let host = host_name();
    if !host.is_empty() && host != "localhost" {
        names.push(host);
    }
    if let Some(d) = base_domain {
        names.push(d.to_string());
        names.push(format!("*.{d}"));
        for p in projects {
            names.push(format!("{p}.{d}"));
        }
    }
    names.dedup();
    names
}

/// What the dev CA may vouch for (X.509 name constraints, critical): the DNS names of the server
/// certificate (a DNS constraint covers its subdomains, so `gw.localhost` covers
/// `*.gw.localhost`). A leaked `ca.key` then cannot mint a certificate a client accepts for any
/// other domain.
///
/// No IP-address constraint: OpenCode's own CLI (Bun's TLS) refuses a CA that has one ("unsupported
/// name constraint type", seen with `opencode run --attach` and Bun's `fetch`, for loopback-only
/// IP subtrees too), and the CLI is the client that matters most. DNS-only constraints leave IP
/// addresses unconstrained (RFC 5280 constrains only the name types listed), stated in the threat
/// model.
pub(crate) fn name_constraints(names: &[String]) -> NameConstraints {
    let dns: Vec<String> = names
        .iter()
        .filter(|n| n.parse::<IpAddr>().is_err())
        .map(|n| n.trim_start_matches("*.").to_ascii_lowercase())
        .collect();
    // Drop names a shorter constraint already covers (`demo.gw.localhost` under `gw.localhost`).
    let covered = |n: &String, by: &String| n != by && n.ends_with(&format!(".{by}"));
    let kept: Vec<String> = dns
        .iter()
        .filter(|n| !dns.iter().any(|b| covered(n, b)))
        .cloned()
        .collect();
    let mut permitted: Vec<GeneralSubtree> = Vec::new();
    for n in kept {
        let t = GeneralSubtree::DnsName(n);
        if !permitted.contains(&t) {
            permitted.push(t);
        }
    }
    NameConstraints {
        permitted_subtrees: permitted,
        excluded_subtrees: Vec::new(),
    }
}

/// `names` split into those the dev CA on disk may vouch for and those its name constraints
/// refuse (a CA made before a name was wanted: its constraints are fixed, and trusted as they
/// are). Without a CA yet, every name is fine: the new CA is made for them. IP addresses are never
/// constrained (see [`name_constraints`]).
pub(crate) fn vouchable(paths: &DevCertPaths, names: &[String]) -> (Vec<String>, Vec<String>) {
    let Ok(key) = std::fs::read_to_string(&paths.ca_key) else {
        return (names.to_vec(), Vec::new());
    };
    let (Ok(ca_key), true) = (KeyPair::from_pem(&key), paths.ca_cert.exists()) else {
        return (names.to_vec(), Vec::new());
    };
    let ca_pem = std::fs::read_to_string(&paths.ca_cert).unwrap_or_default();
    let issuer = Issuer::new(ca_params(&ca_name(&ca_pem)), ca_key);
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for name in names {
        let bare = name.trim_start_matches("*.");
        let fine = bare.parse::<IpAddr>().is_ok()
            || (|| -> Option<()> {
                let key = KeyPair::generate().ok()?;
                let mut params = CertificateParams::new(vec![bare.to_string()]).ok()?;
                params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
                params.use_authority_key_identifier_extension = true;
                let cert = params.signed_by(&key, &issuer).ok()?;
                verify_chain(&paths.ca_cert, &[cert.der().clone()], bare).ok()
            })()
            .is_some();
        if fine {
            ok.push(name.clone())
        } else {
            refused.push(name.clone())
        }
    }
    (ok, refused)
}

/// The DNS names of the server certificate on disk (none when there is none).
fn dns_names(paths: &DevCertPaths) -> Vec<String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let Some(Ok(leaf)) = CertificateDer::pem_file_iter(&paths.cert)
        .ok()
        .and_then(|mut i| i.next())
    else {
        return Vec::new();
    };
    match webpki::EndEntityCert::try_from(&leaf) {
        Ok(cert) => cert.valid_dns_names().map(str::to_string).collect(),
        Err(_) => Vec::new(),
    }
}

/// The names in `names` the server certificate on disk does not cover (all when it is unreadable).
pub(crate) fn missing_names(paths: &DevCertPaths, names: &[String]) -> Vec<String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let concrete: Vec<String> = names.iter().filter(|n| !n.starts_with("*.")).cloned().collect();
    match CertificateDer::pem_file_iter(&paths.cert)
        .ok()
        .and_then(|mut i| i.next())
    {
        Some(Ok(leaf)) => crate::gateway::certs::uncovered(&leaf, &concrete),
        _ => concrete,
    }
}

/// A new dev CA's name: after this machine and the day it was made, so that two of them on one
/// phone (a CA made again, two dev boxes) can be told apart in its list of trusted CAs.
fn new_ca_name(now: OffsetDateTime) -> String {
    format!(
        "opencode-gateway dev CA ({}, {:04}-{:02}-{:02})",
        crate::support::host::host_name(),
        now.year(),
        u8::from(now.month()),
        now.day()
    )
}

/// The name of the CA in `ca_pem` (what the certificates it issues name as their issuer).
pub(crate) fn ca_name(ca_pem: &str) -> String {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .ok()
        .and_then(|der| crate::support::der::subject_common_name(&der))
        .unwrap_or_else(|| OLD_CA_NAME.into())
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationName, "opencode-gateway");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// Every name the dev certificate must cover for `settings`: the gateway's names
/// ([`server_names`]), `<host>.local` when a listener takes other devices (a phone on the same
/// Wi-Fi may find this machine by multicast DNS), the public URL's host, each listener's address when it is a specific one, this machine's
/// LAN addresses when a listener takes every address (`0.0.0.0`, `::`), `tls.dev_names`, and the
/// names added with `cert dev --name`.
pub(crate) fn names_for(settings: &crate::config::Settings) -> Vec<String> {
    let projects: Vec<String> = settings.projects.iter().map(|p| p.name.clone()).collect();
    let mut names = server_names(settings.server.base_domain.as_deref(), &projects);
    names.extend(crate::reach::client_names(settings));
    let listeners: Vec<std::net::SocketAddr> = [Some(settings.server.listen), settings.server.http_listen]
        .into_iter()
        .flatten()
        .chain(settings.projects.iter().filter_map(|p| p.listen))
        .collect();
    // `<host>.local` only when another device may connect: a loopback gateway does not need it
    // (and a CA made before it was wanted would warn at every start). New CAs permit it anyway.
    if listeners.iter().any(|a| !a.ip().is_loopback())
        && let Some(local) = local_name()
    {
        names.push(local);
    }
    for addr in listeners {
        if addr.ip().is_unspecified() {
            names.extend(lan_addresses().iter().map(IpAddr::to_string));
        } else if !addr.ip().is_loopback() {
            names.push(addr.ip().to_string());
        }
    }
    names.extend(settings.tls.dev_names.iter().cloned());
    let paths = DevCertPaths::beside(&settings.tls.cert, &settings.tls.key);
    names.extend(added_names(&paths));
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.to_ascii_lowercase()));
    names
}

/// The file beside the certificate that keeps the names `cert dev --name` added, one per line.
pub(crate) fn added_names_file(paths: &DevCertPaths) -> PathBuf {
    paths.cert.with_file_name("added-names.txt")
}

/// The names `cert dev --name` added (none when the file is missing).
pub(crate) fn added_names(paths: &DevCertPaths) -> Vec<String> {
    std::fs::read_to_string(added_names_file(paths))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Remember `name` for every later dev certificate (`cert dev --name`).
pub(crate) fn add_name(paths: &DevCertPaths, name: &str) -> std::io::Result<()> {
    let mut names = added_names(paths);
    if names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        return Ok(());
    }
    names.push(name.to_ascii_lowercase());
    if let Some(dir) = paths.cert.parent() {
        create_private_dir(dir)?;
    }
    std::fs::write(
        added_names_file(paths),
        format!(
            "# names added with `opencode-gateway cert dev --name`\n{}\n",
            names.join("\n")
        ),
    )
}

/// Make whatever of the CA and server certificate is missing, and a new server certificate (same
/// CA) when the one there does not cover every name in `names`. Returns what was written.
pub fn ensure(paths: &DevCertPaths, names: &[String]) -> anyhow::Result<Made> {
    if paths.cert.exists() && paths.key.exists() && missing_names(paths, names).is_empty() {
        return Ok(Made::Nothing);
    }
    // A new certificate keeps the DNS names the one it replaces had (the same CA vouched for
    // them), so configs sharing the dev certificates (config/gateway.toml and its LAN variant)
    // do not take each other's names away when they are served in turn.
    let mut names = names.to_vec();
    for kept in dns_names(paths) {
        if !names.iter().any(|n| n.eq_ignore_ascii_case(&kept)) {
            names.push(kept);
        }
    }
    let names = &names[..];
    if let Some(dir) = paths.cert.parent() {
        create_private_dir(dir)?;
    }
    let now = OffsetDateTime::now_utc();
    let kept_ca = paths.ca_key.exists() && paths.ca_cert.exists();
    let ca_key = if kept_ca {
        KeyPair::from_pem(&std::fs::read_to_string(&paths.ca_key)?)?
    } else {
        let key = KeyPair::generate()?;
        let mut params = ca_params(&new_ca_name(now));
        // A new CA also permits `<host>.local`, so the LAN mode can use it later without a new CA.
        let mut permitted = names.to_vec();
        permitted.extend(local_name());
        params.name_constraints = Some(name_constraints(&permitted));
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(3650);
        let cert = params.self_signed(&key)?;
        write_private(&paths.ca_key, &key.serialize_pem())?;
        std::fs::write(&paths.ca_cert, cert.pem())?;
        key
    };
    let issuer = Issuer::new(ca_params(&ca_name(&std::fs::read_to_string(&paths.ca_cert)?)), ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "opencode-gateway dev server");
    params.not_before = now - Duration::days(1);
    params.not_after = now + Duration::days(397);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &issuer)?;
    write_private(&paths.key, &key.serialize_pem())?;
    // The server presents the chain: leaf first, then the CA.
    let ca_pem = std::fs::read_to_string(&paths.ca_cert)?;
    std::fs::write(&paths.cert, format!("{}{}", cert.pem(), ca_pem))?;
    // A CA kept from an earlier run is limited to the names it was made for: say so plainly
    // when the new certificate needs a name it does not cover (a changed base_domain or host).
    for name in names.iter().filter(|n| !n.starts_with("*.")) {
        if let Err(e) = verify(paths, name) {
            anyhow::bail!(
                "{} does not verify for {name} against {}: {e}. The dev CA only vouches for the names it was made for. Fix: remove {} and {} (then trust the new CA)",
                paths.cert.display(),
                paths.ca_cert.display(),
                paths.ca_cert.display(),
                paths.ca_key.display()
            );
        }
    }
    Ok(if kept_ca {
        Made::Certificate
    } else {
        Made::CaAndCertificate
    })
}

/// What [`ensure`] wrote: the log says which (a new server certificate from the CA already
/// trusted is not a new CA to trust).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Made {
    Nothing,
    /// A server certificate from the CA that was there.
    Certificate,
    CaAndCertificate,
}

impl Made {
    pub fn wrote(self) -> bool {
        self != Made::Nothing
    }
}

/// Verify the server certificate chain for `name` against the dev CA as a TLS client would
/// (webpki, which enforces name constraints).
pub fn verify(paths: &DevCertPaths, name: &str) -> Result<(), rustls::Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let chain = CertificateDer::pem_file_iter(&paths.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| rustls::Error::General(format!("{}: {e}", paths.cert.display())))?;
    verify_chain(&paths.ca_cert, &chain, name)
}

/// Verify `chain` (leaf first) for `name` with the CA in `ca` as the only root.
fn verify_chain(
    ca: &Path,
    chain: &[rustls::pki_types::CertificateDer<'static>],
    name: &str,
) -> Result<(), rustls::Error> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    let cas = CertificateDer::pem_file_iter(ca)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| rustls::Error::General(format!("{}: {e}", ca.display())))?;
    for c in cas {
        roots.add(c)?;
    }
    let (leaf, rest) = chain
        .split_first()
        .ok_or_else(|| rustls::Error::General("the chain holds no certificate".into()))?;
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), crate::support::tls::provider())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
    let server_name =
        ServerName::try_from(name.to_string()).map_err(|e| rustls::Error::General(format!("{name}: {e}")))?;
    verifier
        .verify_server_cert(leaf, rest, &server_name, &[], UnixTime::now())
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A certificate for `name` signed with the dev CA's key, as someone holding `ca.key` would make.
    pub(crate) fn forge(paths: &DevCertPaths, name: &str, out: &Path) {
        let ca_key = KeyPair::from_pem(&std::fs::read_to_string(&paths.ca_key).unwrap()).unwrap();
        let issuer = Issuer::new(
            ca_params(&ca_name(&std::fs::read_to_string(&paths.ca_cert).unwrap())),
            ca_key,
        );
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(out, cert.pem()).unwrap();
    }

    #[test]
    fn the_dev_ca_vouches_only_for_the_gateways_names() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DevCertPaths::beside(&dir.path().join("server.crt"), &dir.path().join("server.key"));
        let names = server_names(Some("gw.localhost"), &["demo".into()]);
        assert!(ensure(&paths, &names).unwrap().wrote());
        for ok in [
            "localhost",
            "127.0.0.1",
            "::1",
            "gw.localhost",
            "demo.gw.localhost",
            "other.gw.localhost",
        ] {
            verify(&paths, ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let host = host_name();
        if host != "localhost" && !host.is_empty() {
            verify(&paths, &host).unwrap();
        }
        // The CA's own key signs for another domain: a client refuses it for the constraint.
        let evil = DevCertPaths {
            cert: dir.path().join("evil.crt"),
            ..paths.clone()
        };
        for (name, forged) in [("evil.example", "evil.example"), ("www.google.com", "www.google.com")] {
            forge(&paths, forged, &evil.cert);
            let err = verify(&evil, name).expect_err(name);
            assert!(
                format!("{err:?}").contains("NameConstraintViolation"),
                "{name}: refused for the name constraint, not another reason: {err:?}"
            );
        }
        // Only the constraints listed, marked critical (rcgen always marks them so).
        let c = name_constraints(&names);
        assert!(
            c.permitted_subtrees
                .contains(&GeneralSubtree::DnsName("localhost".into()))
        );
        assert!(
            c.permitted_subtrees
                .iter()
                .all(|t| matches!(t, GeneralSubtree::DnsName(_))),
            "DNS names only: OpenCode's CLI refuses IP constraints"
        );
        assert!(
            !c.permitted_subtrees
                .contains(&GeneralSubtree::DnsName("demo.gw.localhost".into())),
            "covered by gw.localhost"
        );
    }

    #[test]
    fn a_new_name_gets_a_new_certificate_from_the_same_ca_and_the_old_names_stay() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DevCertPaths::beside(&dir.path().join("server.crt"), &dir.path().join("server.key"));
        assert!(
            ensure(&paths, &server_names(Some("gw.localhost"), &["demo".into()]))
                .unwrap()
                .wrote()
        );
        let ca = std::fs::read(&paths.ca_cert).unwrap();
        // Named after this machine and the day: two such CAs on one phone can be told apart.
        let name = ca_name(&String::from_utf8(ca.clone()).unwrap());
        let now = OffsetDateTime::now_utc();
        let day = format!("{:04}-{:02}-{:02}", now.year(), u8::from(now.month()), now.day());
        assert_eq!(
            name,
            format!("opencode-gateway dev CA ({}, {day})", crate::support::host::host_name())
        );
        verify(&paths, "198.18.0.1").expect_err("not yet");
        // The LAN variant of the config: an address and no base domain.
        let lan = vec!["localhost".to_string(), "198.18.0.1".into()];
        assert_eq!(
            ensure(&paths, &lan).unwrap(),
            Made::Certificate,
            "a name was missing: a new certificate from the same CA, not a new CA"
        );
        for name in ["198.18.0.1", "demo.gw.localhost", "localhost"] {
            verify(&paths, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert_eq!(std::fs::read(&paths.ca_cert).unwrap(), ca, "the same CA");
        assert!(!ensure(&paths, &lan).unwrap().wrote(), "covered now: nothing to do");
        // The CA was made without `<host>.local` among the names, yet permits it (LAN mode later).
        if let Some(local) = local_name() {
            assert_eq!(
                vouchable(&paths, std::slice::from_ref(&local)).1,
                Vec::<String>::new(),
                "{local}"
            );
        }
        // A DNS name the CA was not made for cannot be added: it says so before writing anything.
        let (ok, refused) = vouchable(
            &paths,
            &["198.18.0.9".into(), "other.example".into(), "gw.localhost".into()],
        );
        assert_eq!(ok, vec!["198.18.0.9".to_string(), "gw.localhost".into()]);
        assert_eq!(refused, vec!["other.example".to_string()]);
        // Without a CA yet, any name is fine (the CA is made for it).
        let fresh = DevCertPaths::beside(&dir.path().join("n/server.crt"), &dir.path().join("n/server.key"));
        assert_eq!(vouchable(&fresh, &["other.example".into()]).1, Vec::<String>::new());
    }

    #[test]
    fn makes_a_ca_and_a_server_cert_with_private_keys() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DevCertPaths::beside(&dir.path().join("server.crt"), &dir.path().join("server.key"));
        let names = server_names(Some("gw.localhost"), &["demo".into()]);
        assert!(names.contains(&"*.gw.localhost".to_string()) && names.contains(&"demo.gw.localhost".to_string()));
        assert!(ensure(&paths, &names).unwrap().wrote());
        for key in [&paths.key, &paths.ca_key] {
            let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", key.display());
        }
        let nested = DevCertPaths::beside(&dir.path().join("a/b/server.crt"), &dir.path().join("a/b/server.key"));
        assert!(ensure(&nested, &names).unwrap().wrote());
        for d in ["a", "a/b"] {
            let mode = std::fs::metadata(dir.path().join(d)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{d}");
        }
        let ca_before = std::fs::read(&paths.ca_cert).unwrap();
        assert!(
            !ensure(&paths, &names).unwrap().wrote(),
            "nothing to do the second time"
        );
        std::fs::remove_file(&paths.cert).unwrap();
        assert!(ensure(&paths, &names).unwrap().wrote());
        assert_eq!(std::fs::read(&paths.ca_cert).unwrap(), ca_before, "the CA is kept");
    }
}
