//! The RDMA CM's wire conventions (`drivers/infiniband/core/cma.c`): port spaces and service
//! IDs, the 36-byte `cma_hdr` that starts the private data of a REQ or SIDR_REQ, and the
//! flow label rdma_cm puts in a RoCEv2 REQ.
//!
//! ```text
//! cma_hdr  0 cma_version (0)   1 ip_version:4 (high nibble: 4 or 6) reserved:4
//!          2..4 port (the active side's source port)
//!          4..20 src_addr   20..36 dst_addr
//!          IPv4 addresses sit in the *last* four bytes after 12 zero bytes
//!          (`union cma_ip_addr`), not IPv4-mapped.
//! ```

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::Field::{Bits8, U8, U16};

/// Length of the `cma_hdr`.
pub const CMA_HDR_LEN: usize = 36;
/// The only `cma_version` Linux accepts (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0;
/// The Q_Key rdma_cm gives UD QPs in the UDP and IB port spaces (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

field_message! {
    /// A zero-copy view of a `cma_hdr` at the start of REQ or SIDR_REQ private data.
    CmaHdr,
    /// An owned `cma_hdr`. Lossless.
    CmaHdrRepr,
    36;
    fields {
        /// `cma_version`; Linux rejects anything but 0 (`cma_save_ip_info`).
        cma_version, set_cma_version: u8 = U8(0);
        /// IP version, the high nibble of byte 1 (`cma_get_ip_ver`): 4 or 6.
        ip_version, set_ip_version: u8 = Bits8(1, 0xf0);
        /// The low nibble of byte 1 (unused, kept).
        ip_version_low, set_ip_version_low: u8 = Bits8(1, 0x0f);
        /// The active side's source port.
        port, set_port: u16 = U16(2);
    }
    bytes {
        /// Source address (`union cma_ip_addr`).
        src_addr, set_src_addr: [16] = 4;
        /// Destination address.
        dst_addr, set_dst_addr: [16] = 20;
    }
}

fn encode_ip(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl CmaHdrRepr {
    /// The header `cma_format_hdr` writes for a connection from `src` (address and port) to
    /// `dst`. Both addresses must be of the same family; `None` otherwise.
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr) -> Option<CmaHdrRepr> {
        let ip_version = match (src, dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return None,
        };
        Some(CmaHdrRepr {
            cma_version: CMA_VERSION,
            ip_version,
            ip_version_low: 0,
            port: src_port,
            src_addr: encode_ip(src),
            dst_addr: encode_ip(dst),
        })
    }

    fn decode(&self, b: &[u8; 16]) -> Option<IpAddr> {
        match self.ip_version {
            4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
            6 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
            _ => None,
        }
    }

    /// The source address (`cma_save_ip4_info`/`cma_save_ip6_info`), `None` for an IP version
    /// other than 4 or 6.
    pub fn src_ip(&self) -> Option<IpAddr> {
        self.decode(&self.src_addr)
    }

    /// The destination address.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        self.decode(&self.dst_addr)
    }
}

/// RDMA CM port spaces (`enum rdma_ucm_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum PortSpace {
    /// IPoIB (0x0002).
    Ipoib = 0x0002,
    /// TCP: connected QPs, RC/UC (0x0106).
    Tcp = 0x0106,
    /// UDP: UD QPs through SIDR (0x0111).
    Udp = 0x0111,
    /// IB (0x013f), AF_IB addressing.
    Ib = 0x013f,
}

impl PortSpace {
    /// The port space for a value.
    pub fn from_u16(v: u16) -> Option<PortSpace> {
        Some(match v {
            0x0002 => PortSpace::Ipoib,
            0x0106 => PortSpace::Tcp,
            0x0111 => PortSpace::Udp,
            0x013f => PortSpace::Ib,
            _ => return None,
        })
    }

    /// The service ID of a port in this space: `(ps << 16) + port` (`rdma_get_service_id`).
    pub const fn service_id(self, port: u16) -> u64 {
        ((self as u64) << 16) + port as u64
    }
}

/// The port-space half of a service ID: `(sid >> 16) & 0xffff` (`rdma_ps_from_service_id`).
pub const fn ps_from_service_id(service_id: u64) -> u16 {
    ((service_id >> 16) & 0xffff) as u16
}

/// The port half of a service ID: its low 16 bits (`cma_port_from_service_id`).
pub const fn port_from_service_id(service_id: u64) -> u16 {
    service_id as u16
}

/// True when a service ID is in rdma_cm's IP range: the top 32 bits zero
/// (`RDMA_IB_IP_PS_MASK` 0xffffffffffff0000 with a known port space).
pub fn is_ip_service_id(service_id: u64) -> bool {
    service_id >> 32 == 0 && PortSpace::from_u16(ps_from_service_id(service_id)).is_some()
}

/// The flow label rdma_cm puts in a RoCEv2 REQ when the source has no IPv6 flow label:
/// `(sport * 31 + dport) & 0xfffff` (`cma_get_roce_udp_flow_label`), with `sport` the active
/// side's port and `dport` the service port. Both sides then derive their RC UDP source port
/// from it, as rxe does.
pub const fn roce_udp_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (src_port as u32).wrapping_mul(31).wrapping_add(dst_port as u32) & 0xf_ffff
}

/// The GID of an IP address on a RoCEv2 port (`rdma_ip2gid`): IPv4 addresses are mapped
/// (`::ffff:a.b.c.d`), IPv6 ones are the GID.
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a RoCEv2 GID stands for: IPv4-mapped GIDs give the IPv4 address.
pub fn gid_to_ip(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rping_capture_values() {
        // rping_cm.pcap frame 1: private data starts 00 40 97 83, src 10.77.0.3, dst 10.77.0.2.
        let mut pd = [0u8; 36];
        pd[..4].copy_from_slice(&[0x00, 0x40, 0x97, 0x83]);
        pd[16..20].copy_from_slice(&[10, 77, 0, 3]);
        pd[32..36].copy_from_slice(&[10, 77, 0, 2]);
        let h = CmaHdrRepr::parse(&CmaHdr::new_checked(&pd[..]).unwrap());
        assert_eq!(h.ip_version, 4);
        assert_eq!(h.port, 38787);
        assert_eq!(h.src_ip(), Some(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3))));
        assert_eq!(h.dst_ip(), Some(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2))));
        let built =
            CmaHdrRepr::new("10.77.0.3".parse().unwrap(), 38787, "10.77.0.2".parse().unwrap()).unwrap();
        assert_eq!(built, h);
        let mut out = [0xffu8; 36];
        built.emit(&mut CmaHdr::new_unchecked(&mut out[..]));
        assert_eq!(out, pd);
        // (38787 * 31 + 7174) & 0xfffff is the REQ's flow label 0x274e3.
        assert_eq!(roce_udp_flow_label(38787, 7174), 0x274e3);
        assert_eq!(PortSpace::Tcp.service_id(7174), 0x0000_0000_0106_1c06);
        assert_eq!(PortSpace::Udp.service_id(7174), 0x0000_0000_0111_1c06);
        assert_eq!(ps_from_service_id(0x0106_1f3f), 0x0106);
        assert_eq!(port_from_service_id(0x0106_1f3f), 7999);
        assert!(is_ip_service_id(0x0106_4853));
        assert!(!is_ip_service_id(0x1_0106_4853));
        assert!(CmaHdrRepr::new("10.0.0.1".parse().unwrap(), 1, "::1".parse().unwrap()).is_none());
    }

    #[test]
    fn gids() {
        let ip: IpAddr = "10.77.0.3".parse().unwrap();
        let g = ip_to_gid(ip);
        assert_eq!(g, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 3]);
        assert_eq!(gid_to_ip(&g), ip);
        let v6: IpAddr = "fd77::2".parse().unwrap();
        assert_eq!(gid_to_ip(&ip_to_gid(v6)), v6);
    }
}
