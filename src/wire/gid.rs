//! GIDs, the GID table and the UDP source port, as kernel rxe builds them.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 128-bit global identifier. On RoCEv2 it is an IPv6 address, or an IPv4 address mapped
/// as `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address (IPv4 is mapped into `::ffff:0:0/96`).
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
    /// The IP address a RoCEv2 GID stands for.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
    /// True for the all-zero GID.
    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
    /// The default GID rxe puts at index 0: `fe80::` plus the modified EUI-64 of the MAC.
    pub fn link_local_from_mac(mac: [u8; 6]) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8] = mac[0] ^ 0x02;
        g[9] = mac[1];
        g[10] = mac[2];
        g[11] = 0xff;
        g[12] = 0xfe;
        g[13] = mac[3];
        g[14] = mac[4];
        g[15] = mac[5];
        Gid(g)
    }
    /// The eight 16-bit groups as `ibv_devinfo` prints them
    /// (`0000:0000:0000:0000:0000:ffff:0a4d:0002`).
    pub fn to_ibv_string(self) -> String {
        self.0.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        Gid::from_ip(ip)
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(ip))
    }
}

/// An index into a device's GID table (`sgid_index`, `-g`, `-x`).
///
/// softroce's table is laid out as kernel rxe's: index 0 is the default GID, the interface's
/// IPv6 link-local address for a device opened on an interface, and the device's own addresses
/// follow (index 1 is its IPv4 address: the index perftest and `-g 1` users pass). A device
/// that serves no link-local address (loopback, a device opened on one address) lists its own
/// address at index 0 as well: every entry is an address the device sends from and receives
/// on. Rather than writing the number, ask the device:
/// [`crate::verbs::Device::default_gid_index`] (its own address) or
/// [`crate::verbs::Device::gid_index_for`] (a given local address).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct GidIndex(u8);

impl GidIndex {
    /// Index 0: the default GID every port has (the link-local address where the device
    /// serves one, else the device's own address, as at index 1).
    pub const LINK_LOCAL: GidIndex = GidIndex(0);

    /// Wraps a raw index (checked against the table when used).
    pub const fn new(index: u8) -> GidIndex {
        GidIndex(index)
    }
    /// The raw index.
    pub const fn value(self) -> u8 {
        self.0
    }
}

impl From<GidIndex> for u8 {
    fn from(i: GidIndex) -> u8 {
        i.0
    }
}

impl fmt::Display for GidIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for GidIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GidIndex({})", self.0)
    }
}

/// The kind of a GID table entry (rxe has only RoCE v2 entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// RoCE v2 (IP/UDP encapsulation).
    RoceV2,
}

/// rdma-core's flow label for a connection between two QPs (`rdma_calc_flow_label`):
/// symmetric in the two QPNs, so both ends pick the same UDP source port.
pub fn flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// The UDP source port of a flow label (`rdma_flow_label_to_udp_sport`).
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = fl & 0x3fff;
    let high = (fl & 0xf_c000) >> 14;
    ((low ^ high) as u16) | 0xc000
}

/// The UDP source port rxe uses for an RC/UC QP once its peer is known
/// (`rdma_get_udp_sport` with a zero flow label unless the AV names one).
pub fn rc_udp_sport(flow_label_attr: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label_attr != 0 { flow_label_attr } else { flow_label(lqpn, rqpn) };
    flow_label_to_udp_sport(fl)
}

/// The UDP source port rxe gives a QP at creation, kept by UD QPs:
/// `0xc000 + (hash_32(qpn, 14) & 0x3fff)`.
pub fn ud_udp_sport(qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x61c8_8647) >> (32 - 14);
    0xc000 + (h & 0x3fff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_forms() {
        let g = Gid::from_ip("10.77.0.2".parse().unwrap());
        assert_eq!(g.to_ibv_string(), "0000:0000:0000:0000:0000:ffff:0a4d:0002");
        assert_eq!(g.to_string(), "::ffff:10.77.0.2");
        assert_eq!(g.to_ip(), "10.77.0.2".parse::<IpAddr>().unwrap());
        let ll = Gid::link_local_from_mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(ll.to_string(), "fe80::5054:ff:fe12:3456");
    }

    #[test]
    fn udp_source_ports_match_rxe() {
        // From docs/design/rxe-behaviour.md §2.3 and the captures (imm.pcap: both QPNs 0x17,
        // source port 49681).
        assert_eq!(rc_udp_sport(0, 17, 18), 0xc132);
        assert_eq!(rc_udp_sport(0, 18, 17), 0xc132);
        assert_eq!(rc_udp_sport(0, 1000, 2000), 0xc4bb);
        assert_eq!(rc_udp_sport(0x12345, 1, 2), 0xe341);
        assert_eq!(rc_udp_sport(0, 0x17, 0x17), 49681);
        assert_eq!(ud_udp_sport(17), 0xdf94);
        assert_eq!(ud_udp_sport(18), 0xf806);
        assert_eq!(ud_udp_sport(1), 0xd872);
    }
}
