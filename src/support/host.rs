//! This machine as others on its network see it: its host name, its multicast-DNS name and its
//! LAN addresses (for certificate names, printed URLs and the LAN mode's public URL).

use std::net::IpAddr;

/// This machine's host name (for certificate names and printed URLs).
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// This machine's multicast-DNS name, `<host>.local` (none for a host name with a dot or none).
pub(crate) fn local_name() -> Option<String> {
    let host = host_name();
    (!host.is_empty() && host != "localhost" && !host.contains('.'))
        .then(|| format!("{}.local", host.to_ascii_lowercase()))
}

/// This machine's addresses another device on its network can use: every interface address that
/// is up and neither loopback nor link-local (an IPv6 link-local address needs a zone a URL
/// cannot carry portably).
pub fn lan_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free with freeifaddrs below; every
    // node and its address are read only while the list is alive.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return out;
        }
        let mut node = list;
        while !node.is_null() {
            let ifa = &*node;
            node = ifa.ifa_next;
            let up = ifa.ifa_flags & (libc::IFF_UP as libc::c_uint) != 0;
            if ifa.ifa_addr.is_null() || !up {
                continue;
            }
            let ip = match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let a = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    IpAddr::from(a.sin6_addr.s6_addr)
                }
                _ => continue,
            };
            let link_local = match ip {
                IpAddr::V4(v4) => v4.is_link_local(),
                IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
            };
            if !ip.is_loopback() && !ip.is_unspecified() && !link_local && !out.contains(&ip) {
                out.push(ip);
            }
        }
        libc::freeifaddrs(list);
    }
    out
}
