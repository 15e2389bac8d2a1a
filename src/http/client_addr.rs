//! Who the client is, network-wise. By default the TCP peer. Behind a proxy or tunnel the operator
//! lists in `trusted_proxies`, the `X-Forwarded-For` chain is believed, read from the right: the
//! first address that is not a trusted proxy is the client. From anyone else the header is noise
//! (and the rewrite removes it before the upstream sees it).

use std::net::IpAddr;

use http::HeaderMap;

use crate::config::Cidr;

pub(crate) fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if trusted.is_empty() || !is_trusted(peer) {
        return peer;
    }
    let chain: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .collect();
    chain
        .iter()
        .rev()
        .copied()
        .find(|ip| !is_trusted(*ip))
        .or(chain.first().copied())
        .unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert("x-forwarded-for", v.parse().unwrap());
        m
    }

    #[test]
    fn only_trusted_proxies_are_believed() {
        let proxy: IpAddr = "10.0.0.5".parse().unwrap();
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        assert_eq!(
            client_ip(proxy, &h("203.0.113.9"), &trusted),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        // A client cannot choose its address by prepending one: the rightmost untrusted wins.
        assert_eq!(
            client_ip(proxy, &h("1.1.1.1, 203.0.113.9, 10.0.0.7"), &trusted),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(client_ip(stranger, &h("203.0.113.9"), &trusted), stranger);
        assert_eq!(
            client_ip(proxy, &h("203.0.113.9"), &[]),
            proxy,
            "nothing is trusted by default"
        );
        assert_eq!(client_ip(proxy, &HeaderMap::new(), &trusted), proxy);
        assert_eq!(client_ip(proxy, &h("garbage"), &trusted), proxy);
    }
}
