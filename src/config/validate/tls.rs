//! `[tls]`: the certificate files, or the dev CA, or ACME, and the names a dev certificate covers.

use std::path::{Path, PathBuf};

use super::checker::Checker;
use crate::config::file::RawTls;
use crate::config::settings::{Acme, Tls};

pub(super) fn tls(c: &mut Checker<'_>, raw: &RawTls, state_dir: &Path) -> Tls {
    let acme = acme(c, raw, state_dir);
    let path_or = |c: &mut Checker, key: &str, v: &Option<String>, file: &str| match (v, &acme) {
        (Some(p), _) => c.path(p),
        (None, Some(a)) => a.dir.join(file),
        (None, None) => {
            c.problem(
                key,
                "is missing",
                "point it at your PEM file, or set tls.dev_ca = true, or set tls.acme",
            );
            PathBuf::new()
        }
    };
    let cert = path_or(c, "tls.cert", &raw.cert, "cert.pem");
    let key = path_or(c, "tls.key", &raw.key, "key.pem");
    let tls = Tls {
        cert,
        key,
        dev_ca: raw.dev_ca,
        dev_names: dev_names(c, &raw.dev_names),
        acme,
    };
    if !tls.dev_ca && tls.acme.is_none() {
        for (key, p) in [("tls.cert", &tls.cert), ("tls.key", &tls.key)] {
            if !p.as_os_str().is_empty() && !p.is_file() {
                c.problem(
                    key,
                    format!("{} does not exist", p.display()),
                    "point it at your PEM file, or set tls.dev_ca = true to have a dev certificate made",
                );
            }
        }
    }
    tls
}

fn acme(c: &mut Checker<'_>, raw: &RawTls, state_dir: &Path) -> Option<Acme> {
    let a = raw.acme.as_ref()?;
    if !a.directory.starts_with("https://") {
        c.problem(
            "tls.acme.directory",
            format!("{:?} is not an https:// URL", a.directory),
            "write the CA's directory URL, e.g. \"https://acme-v02.api.letsencrypt.org/directory\"",
        );
    }
    if a.email.as_deref().is_some_and(|e| !e.contains('@')) {
        c.problem(
            "tls.acme.email",
            "is not an email address",
            "write the address the CA may send expiry notices to, or leave it out",
        );
    }
    if raw.dev_ca {
        c.problem(
            "tls.acme",
            "is set together with tls.dev_ca",
            "remove dev_ca: ACME obtains a trusted certificate instead",
        );
    }
    Some(Acme {
        directory: a.directory.clone(),
        email: a.email.clone(),
        ca_bundle: a.ca_bundle.as_deref().map(|p| c.path(p)),
        dir: state_dir.join("acme"),
    })
}

/// `tls.dev_names`: each an IP address or a DNS name (a leading `*.` allowed), lower-cased.
fn dev_names(c: &mut Checker<'_>, raw: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    for n in raw {
        let bare = n.trim_start_matches("*.");
        let dns_ok = !bare.is_empty()
            && bare.len() <= 253
            && bare.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if n.parse::<std::net::IpAddr>().is_ok() || dns_ok {
            names.push(n.to_ascii_lowercase());
        } else {
            c.problem(
                "tls.dev_names",
                format!("{n:?} is neither an IP address nor a DNS name"),
                "write addresses such as \"192.168.1.20\" and names such as \"mybox.local\"",
            );
        }
    }
    names
}
