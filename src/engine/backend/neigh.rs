//! Next-hop MAC addresses for the raw backend, from the kernel's routing and neighbour tables
//! (rtnetlink `RTM_GETROUTE` and `RTM_GETNEIGH`), the same tables `ip route get` and
//! `ip neigh` read.
//!
//! A packet socket bypasses the kernel's IP output path, so nothing resolves a neighbour for
//! us: when the table has no usable entry, [`Neighbours::probe`] sends one empty UDP datagram
//! to the destination's discard port (9) from an ordinary socket, which makes the kernel
//! resolve it (ARP or neighbour solicitation) as it would for any application. Packets sent
//! meanwhile are dropped and counted; RC retransmission recovers them.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::time::{Duration, Instant};

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const RTA_DST: u16 = 1;
const RTA_GATEWAY: u16 = 5;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Neighbour states without a usable link-layer address.
const NUD_INCOMPLETE: u16 = 0x01;
const NUD_FAILED: u16 = 0x20;
/// How long a looked-up MAC is trusted before the table is read again.
const TTL: Duration = Duration::from_secs(10);
/// Least time between two table reads or probes for a missing neighbour.
const RETRY: Duration = Duration::from_millis(20);

/// One rtnetlink request and its answers: calls `f(type, body)` for every message.
fn netlink(kind: u16, flags: u16, body: &[u8], mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
    let mut s = socket2::Socket::new(
        socket2::Domain::from(libc::AF_NETLINK),
        socket2::Type::from(libc::SOCK_RAW),
        Some(socket2::Protocol::from(libc::NETLINK_ROUTE)),
    )?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut req = Vec::with_capacity(NLMSG_HDR + body.len());
    req.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
    req.extend_from_slice(&kind.to_ne_bytes());
    req.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    req.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    req.extend_from_slice(body);
    s.write_all(&req)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut buf)?;
        let mut msgs = &buf[..n];
        while msgs.len() >= NLMSG_HDR {
            let len = u32::from_ne_bytes([msgs[0], msgs[1], msgs[2], msgs[3]]) as usize;
            let ty = u16::from_ne_bytes([msgs[4], msgs[5]]);
            if len < NLMSG_HDR || len > msgs.len() {
                return Ok(());
            }
            match ty {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let errno = msgs.get(16..20).map_or(0, |e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                    return if errno == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(-errno)) };
                }
                _ => f(ty, &msgs[NLMSG_HDR..len]),
            }
            if flags & NLM_F_DUMP == 0 {
                return Ok(());
            }
            msgs = &msgs[len.next_multiple_of(4).min(msgs.len())..];
        }
    }
}

/// The route attributes (`rtattr`) after a fixed header of `skip` bytes.
fn attrs(body: &[u8], skip: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = body.get(skip..).unwrap_or_default();
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let ty = u16::from_ne_bytes([rest[2], rest[3]]);
        if len < 4 || len > rest.len() {
            return None;
        }
        let v = &rest[4..len];
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
        Some((ty, v))
    })
}

fn ip_from(v: &[u8]) -> Option<IpAddr> {
    match v.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(v).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(v).ok()?)),
        _ => None,
    }
}

fn family(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { libc::AF_INET as u8 } else { libc::AF_INET6 as u8 }
}

/// The next hop towards `dst` (`ip route get`): its gateway, or `dst` itself when on-link.
pub(crate) fn next_hop(dst: IpAddr) -> io::Result<IpAddr> {
    let addr = match dst {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let mut body = vec![family(dst), (addr.len() * 8) as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&((4 + addr.len()) as u16).to_ne_bytes());
    body.extend_from_slice(&RTA_DST.to_ne_bytes());
    body.extend_from_slice(&addr);
    let mut hop = dst;
    netlink(RTM_GETROUTE, 0, &body, |ty, m| {
        if ty == RTM_NEWROUTE
            && let Some(gw) = attrs(m, 12).find(|(t, _)| *t == RTA_GATEWAY).and_then(|(_, v)| ip_from(v))
        {
            hop = gw;
        }
    })?;
    Ok(hop)
}

/// Every neighbour entry on interface `ifindex` that has a usable MAC.
pub(crate) fn neighbours(ifindex: i32) -> io::Result<Vec<(IpAddr, [u8; 6])>> {
    let mut out = Vec::new();
    for fam in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        // struct ndmsg: family, pad, pad, ifindex, state, flags, type.
        let mut body = vec![fam, 0, 0, 0];
        body.extend_from_slice(&ifindex.to_ne_bytes());
        body.extend_from_slice(&[0; 4]);
        netlink(RTM_GETNEIGH, NLM_F_DUMP, &body, |ty, m| {
            if ty != RTM_NEWNEIGH || m.len() < 12 {
                return;
            }
            let idx = i32::from_ne_bytes([m[4], m[5], m[6], m[7]]);
            let state = u16::from_ne_bytes([m[8], m[9]]);
            if idx != ifindex || state & (NUD_INCOMPLETE | NUD_FAILED) != 0 {
                return;
            }
            let mut ip = None;
            let mut mac = None;
            for (t, v) in attrs(m, 12) {
                match t {
                    NDA_DST => ip = ip_from(v),
                    NDA_LLADDR => mac = <[u8; 6]>::try_from(v).ok(),
                    _ => {}
                }
            }
            if let (Some(ip), Some(mac)) = (ip, mac) {
                out.push((ip, mac));
            }
        })?;
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: Option<[u8; 6]>,
    at: Instant,
}

/// A cache of destination → next-hop MAC over the kernel's tables.
#[derive(Debug)]
pub(crate) struct Neighbours {
    ifindex: i32,
    /// Loopback has no neighbours: every frame carries zero MACs.
    loopback: bool,
    hops: HashMap<IpAddr, (IpAddr, Instant)>,
    macs: HashMap<IpAddr, Entry>,
}

impl Neighbours {
    pub(crate) fn new(ifindex: i32, loopback: bool) -> Neighbours {
        Neighbours { ifindex, loopback, hops: HashMap::new(), macs: HashMap::new() }
    }

    /// The MAC to send a packet for `dst` to, if known; otherwise starts resolution (at most
    /// every [`RETRY`]) and returns `None`.
    pub(crate) fn lookup(&mut self, dst: IpAddr) -> Option<[u8; 6]> {
        if self.loopback {
            return Some([0; 6]);
        }
        let now = Instant::now();
        let hop = match self.hops.get(&dst) {
            Some(&(h, at)) if now - at < TTL => h,
            _ => {
                let h = next_hop(dst).unwrap_or(dst);
                self.hops.insert(dst, (h, now));
                h
            }
        };
        match self.macs.get(&hop) {
            Some(Entry { mac: Some(m), at }) if now - *at < TTL => return Some(*m),
            Some(Entry { mac: None, at }) if now - *at < RETRY => return None,
            _ => {}
        }
        // Unknown, stale, or missing for a while: read the table again.
        if let Ok(all) = neighbours(self.ifindex) {
            for (ip, mac) in all {
                self.macs.insert(ip, Entry { mac: Some(mac), at: now });
            }
        }
        if let Some(Entry { mac: Some(m), at }) = self.macs.get(&hop)
            && *at == now
        {
            return Some(*m);
        }
        self.macs.insert(hop, Entry { mac: None, at: now });
        self.probe(hop);
        None
    }

    /// Makes the kernel resolve `hop`: one empty UDP datagram to its discard port.
    fn probe(&self, hop: IpAddr) {
        let (any, to): (SocketAddr, SocketAddr) = match hop {
            IpAddr::V4(a) => (([0, 0, 0, 0], 0).into(), (a, 9).into()),
            IpAddr::V6(a) => {
                // A link-local next hop is reachable only through its interface.
                let scope = if a.is_unicast_link_local() { self.ifindex as u32 } else { 0 };
                ((std::net::Ipv6Addr::UNSPECIFIED, 0).into(), SocketAddrV6::new(a, 9, 0, scope).into())
            }
        };
        if let Ok(s) = UdpSocket::bind(any) {
            let _ = s.send_to(&[], to);
        }
    }
}
