//! A push endpoint is a URL a browser (so, a client) chooses and the gateway then POSTs to: a
//! door to requests on the gateway's network if taken as it comes. So: `https` only, at most
//! 2 KiB, no user info; and where it goes is checked when the gateway sends, not only when it is
//! given (a name may resolve elsewhere later): every address the name resolves to must be a
//! public one, unless the config allows private ones (tests, a push service on the LAN), and the
//! connection goes to an address that was checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// An endpoint's length, at most (push services use about 200 characters).
const MAX_LEN: usize = 2048;

/// An endpoint as a browser gave it: refused unless it is an `https` URL with a host.
pub(crate) fn parse(url: &str) -> Result<http::Uri, String> {
    if url.len() > MAX_LEN {
        return Err(format!("a push endpoint is at most {MAX_LEN} characters"));
    }
    let uri: http::Uri = url.parse().map_err(|_| "the push endpoint is not a URL".to_string())?;
    if uri.scheme_str() != Some("https") {
        return Err("a push endpoint must be an https URL".into());
    }
    let authority = uri.authority().ok_or("the push endpoint has no host")?;
    if authority.as_str().contains('@') {
        return Err("a push endpoint carries no user name or password".into());
    }
    if authority.host().is_empty() {
        return Err("the push endpoint has no host".into());
    }
    Ok(uri)
}

/// An address any push service may have: not this machine, not a private network, not a
/// link-local, shared (CGNAT), documentation, multicast or unspecified one.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => public_v4(v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || first == 0x2001 && ip.segments()[1] == 0x0db8
        || first == 0x0064)
}

/// Where to connect for `uri`: its host's addresses, each checked (all must be public unless
/// `allow_private`); the first of them.
pub(crate) async fn resolve(uri: &http::Uri, allow_private: bool) -> Result<SocketAddr, String> {
    let host = uri.host().ok_or("no host")?.trim_matches(|c| c == '[' || c == ']');
    let port = uri.port_u16().unwrap_or(443);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve the push service's name: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err("the push service's name resolves to no address".into());
    }
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(format!(
            "the push service's name resolves to {}, which is not a public address (`[push] allow_private_endpoints = true` allows it)",
            bad.ip()
        ));
    }
    Ok(addrs[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_with_a_host_are_endpoints() {
        assert!(parse("https://fcm.googleapis.com/fcm/send/abc:def").is_ok());
        assert!(parse("https://updates.push.services.mozilla.com/wpush/v2/gAAA").is_ok());
        for (bad, says) in [
            ("http://push.example/x", "https"),
            ("file:///etc/passwd", "not a URL"),
            ("ftp://push.example/x", "https"),
            ("https://user:pw@push.example/x", "user name"),
            ("not a url", "not a URL"),
            ("/relative", "https"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(parse(&format!("https://push.example/{}", "a".repeat(MAX_LEN))).is_err());
    }

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.20",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "2001:db8::1",
            "64:ff9b::a00:1",
            "ff02::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["142.250.74.106", "2a00:1450:4001:80b::200a", "8.8.8.8"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    /// The name is resolved and each address checked when sending: loopback is refused unless
    /// the config allows private endpoints.
    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_unless_allowed() {
        let uri = parse("https://localhost:8443/push/1").unwrap();
        let e = resolve(&uri, false).await.unwrap_err();
        assert!(e.contains("not a public address"), "{e}");
        let addr = resolve(&uri, true).await.unwrap();
        assert!(addr.ip().is_loopback() && addr.port() == 8443, "{addr}");
        let literal = parse("https://[::1]:9/x").unwrap();
        assert!(resolve(&literal, false).await.is_err());
    }
}
