//! RoCEv2 framing: a transport packet inside UDP (destination port 4791) inside IPv4 or IPv6,
//! optionally inside Ethernet. IP and UDP headers are parsed and built with etherparse.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    EtherType, Ethernet2HeaderSlice, IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv6FlowLabel,
    Ipv6Header, Ipv6HeaderSlice, SingleVlanHeaderSlice, UdpHeader, UdpHeaderSlice,
};

use super::packet::{ICRC_LEN, Packet, PacketRepr};
use super::{Error, Malformed, Result, icrc};

/// The IANA-assigned UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Length of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of the IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;

/// A checked view of a RoCEv2 datagram: IP header, UDP header and transport packet.
#[derive(Debug, Clone, Copy)]
pub struct RoceFrame<'a> {
    ip: &'a [u8],
    udp: &'a [u8],
    packet: Packet<'a>,
}

impl<'a> RoceFrame<'a> {
    /// Parses an IP packet (starting at the IP header) carrying a RoCEv2 datagram. Bytes after
    /// the IP total length (Ethernet padding) are ignored. The destination port must be 4791.
    pub fn parse_ip(bytes: &'a [u8]) -> Result<RoceFrame<'a>> {
        let (ip, rest) = match bytes.first().map(|b| b >> 4) {
            Some(4) => {
                let h = Ipv4HeaderSlice::from_slice(bytes).map_err(|_| Malformed::BadIp)?;
                let ihl = h.slice().len();
                let total = h.total_len() as usize;
                if total < ihl || total > bytes.len() || h.is_fragmenting_payload() {
                    return Err(Malformed::BadIp.into());
                }
                if h.protocol() != IpNumber::UDP {
                    return Err(Malformed::NotUdp.into());
                }
                (&bytes[..ihl], &bytes[ihl..total])
            }
            Some(6) => {
                let h = Ipv6HeaderSlice::from_slice(bytes).map_err(|_| Malformed::BadIp)?;
                let total = IPV6_HEADER_LEN + h.payload_length() as usize;
                if total > bytes.len() {
                    return Err(Malformed::BadIp.into());
                }
                if h.next_header() != IpNumber::UDP {
                    return Err(Malformed::NotUdp.into());
                }
                (&bytes[..IPV6_HEADER_LEN], &bytes[IPV6_HEADER_LEN..total])
            }
            _ => return Err(Malformed::BadIp.into()),
        };
        let udp = UdpHeaderSlice::from_slice(rest).map_err(|_| Error::Truncated)?;
        if udp.length() as usize != rest.len() {
            return Err(Malformed::BadUdpLength.into());
        }
        if udp.destination_port() != ROCEV2_UDP_PORT {
            return Err(Error::NotRoce);
        }
        let packet = Packet::new_checked(&rest[UDP_HEADER_LEN..])?;
        Ok(RoceFrame { ip, udp: &rest[..UDP_HEADER_LEN], packet })
    }

    /// Parses an Ethernet II frame (with at most one VLAN tag) carrying a RoCEv2 datagram.
    pub fn parse_ethernet(bytes: &'a [u8]) -> Result<RoceFrame<'a>> {
        let eth = Ethernet2HeaderSlice::from_slice(bytes).map_err(|_| Error::Truncated)?;
        let mut rest = &bytes[eth.slice().len()..];
        let mut ty = eth.ether_type();
        if ty == EtherType::VLAN_TAGGED_FRAME {
            let v = SingleVlanHeaderSlice::from_slice(rest).map_err(|_| Error::Truncated)?;
            ty = v.ether_type();
            rest = &rest[v.slice().len()..];
        }
        if ty != EtherType::IPV4 && ty != EtherType::IPV6 {
            return Err(Malformed::NotIpUdp.into());
        }
        Self::parse_ip(rest)
    }

    /// The IP header.
    pub fn ip_header(&self) -> &'a [u8] {
        self.ip
    }
    /// The UDP header.
    pub fn udp_header(&self) -> &'a [u8] {
        self.udp
    }
    /// The transport packet.
    pub fn packet(&self) -> Packet<'a> {
        self.packet
    }
    /// True for IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.ip.len() == IPV6_HEADER_LEN && self.ip[0] >> 4 == 6
    }
    /// Source address.
    pub fn src_addr(&self) -> IpAddr {
        if self.is_ipv6() {
            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&self.ip[8..24]).unwrap_or_default()))
        } else {
            IpAddr::V4(Ipv4Addr::new(self.ip[12], self.ip[13], self.ip[14], self.ip[15]))
        }
    }
    /// Destination address.
    pub fn dst_addr(&self) -> IpAddr {
        if self.is_ipv6() {
            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&self.ip[24..40]).unwrap_or_default()))
        } else {
            IpAddr::V4(Ipv4Addr::new(self.ip[16], self.ip[17], self.ip[18], self.ip[19]))
        }
    }
    /// UDP source port.
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.udp[0], self.udp[1]])
    }
    /// UDP destination port.
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.udp[2], self.udp[3]])
    }
    /// UDP checksum as carried (rxe sends 0 over IPv4).
    pub fn udp_checksum(&self) -> u16 {
        u16::from_be_bytes([self.udp[6], self.udp[7]])
    }
    /// IPv4 identification (`None` for IPv6).
    pub fn ip_id(&self) -> Option<u16> {
        (!self.is_ipv6()).then(|| u16::from_be_bytes([self.ip[4], self.ip[5]]))
    }
    /// IPv4 Don't Fragment flag (`None` for IPv6).
    pub fn df(&self) -> Option<bool> {
        (!self.is_ipv6()).then(|| self.ip[6] & 0x40 != 0)
    }
    /// IPv4 TOS byte or IPv6 traffic class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        if self.is_ipv6() { (self.ip[0] << 4) | (self.ip[1] >> 4) } else { self.ip[1] }
    }
    /// IPv4 TTL or IPv6 hop limit.
    pub fn hop_limit(&self) -> u8 {
        if self.is_ipv6() { self.ip[7] } else { self.ip[8] }
    }
    /// IPv6 flow label (`None` for IPv4).
    pub fn flow_label(&self) -> Option<u32> {
        self.is_ipv6().then(|| u32::from_be_bytes([0, self.ip[1] & 0x0f, self.ip[2], self.ip[3]]))
    }
    /// The IP and UDP fields of this frame as a builder, such that
    /// `frame_repr().emit(buf, &PacketRepr::parse(&packet()), packet().payload())` reproduces
    /// the frame (for well-formed frames: zero pad bytes, a valid UDP checksum or none).
    pub fn frame_repr(&self) -> RoceFrameRepr {
        let ip = match (self.src_addr(), self.dst_addr()) {
            (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6 {
                src,
                dst,
                traffic_class: self.traffic_class(),
                flow_label: self.flow_label().unwrap_or(0),
                hop_limit: self.hop_limit(),
            },
            (src, dst) => IpRepr::V4 {
                src: ipv4_of(src),
                dst: ipv4_of(dst),
                tos: self.traffic_class(),
                ttl: self.hop_limit(),
                id: self.ip_id().unwrap_or(0),
                df: self.df().unwrap_or(false),
            },
        };
        RoceFrameRepr {
            ip,
            src_port: self.src_port(),
            dst_port: self.dst_port(),
            udp_checksum: self.udp_checksum() != 0,
        }
    }

    /// The ICRC computed over this frame.
    pub fn computed_icrc(&self) -> u32 {
        // Cannot fail: the parts were checked by the constructor.
        icrc::compute(self.ip, self.udp, self.packet.without_icrc()).unwrap_or(!self.packet.icrc())
    }
    /// True when the carried ICRC matches.
    pub fn icrc_ok(&self) -> bool {
        self.computed_icrc() == self.packet.icrc()
    }
}

/// Both addresses of a frame come from one header, so a frame is never mixed-family.
fn ipv4_of(a: IpAddr) -> Ipv4Addr {
    match a {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}

/// The IP layer of a frame to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// TOS byte (DSCP << 2 | ECN).
        tos: u8,
        /// Time to live.
        ttl: u8,
        /// Identification (covered by the ICRC).
        id: u16,
        /// Don't Fragment (covered by the ICRC).
        df: bool,
    },
    /// IPv6.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// Traffic class (DSCP << 2 | ECN).
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl IpRepr {
    /// The IP header the kernel gives a datagram from an unconnected UDP socket between two
    /// addresses of one family (IPv4: ID 0 and DF, as under `IP_PMTUDISC_DO`); `None` for
    /// mixed families.
    pub fn for_udp_socket(
        src: IpAddr,
        dst: IpAddr,
        tos: u8,
        hop_limit: u8,
        flow_label: u32,
    ) -> Option<IpRepr> {
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                Some(IpRepr::V4 { src, dst, tos, ttl: hop_limit, id: 0, df: true })
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                Some(IpRepr::V6 { src, dst, traffic_class: tos, flow_label, hop_limit })
            }
            _ => None,
        }
    }

    /// Length of the IP header.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => IPV4_HEADER_LEN,
            IpRepr::V6 { .. } => IPV6_HEADER_LEN,
        }
    }
}

/// The IP and UDP layers of a RoCEv2 frame to build around a transport packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFrameRepr {
    /// IP header fields.
    pub ip: IpRepr,
    /// UDP source port (rxe derives it from the QPNs; see the transport).
    pub src_port: u16,
    /// UDP destination port (4791).
    pub dst_port: u16,
    /// Whether to fill the UDP checksum over IPv4 (rxe sends 0 there; a plain UDP socket
    /// fills it). Over IPv6 the checksum is always filled, as UDP over IPv6 requires.
    pub udp_checksum: bool,
}

impl RoceFrameRepr {
    /// Length of the IP and UDP headers in front of the transport packet.
    pub fn header_len(&self) -> usize {
        self.ip.header_len() + UDP_HEADER_LEN
    }

    /// Writes the IP and UDP headers for a transport packet of `ib_len` bytes (ICRC
    /// included) into `buf[..header_len()]`, with a zero UDP checksum that
    /// [`RoceFrameRepr::finish`] fills when it is wanted (it covers the ICRC).
    fn emit_ip_udp(&self, buf: &mut [u8], ib_len: usize) -> Result<()> {
        let udp_len = UDP_HEADER_LEN + ib_len;
        let udp_len16 = u16::try_from(udp_len).map_err(|_| Malformed::BadUdpLength)?;
        let hl = self.ip.header_len();
        let out = buf.get_mut(..hl + UDP_HEADER_LEN).ok_or(Error::Truncated)?;
        match self.ip {
            IpRepr::V4 { src, dst, tos, ttl, id, df } => {
                let mut h = Ipv4Header::new(udp_len16, ttl, IpNumber::UDP, src.octets(), dst.octets())
                    .map_err(|_| Malformed::BadIp)?;
                h.dscp = IpDscp::try_new(tos >> 2).unwrap_or_default();
                h.ecn = IpEcn::try_new(tos & 3).unwrap_or(IpEcn::NotEct);
                h.identification = id;
                h.dont_fragment = df;
                h.header_checksum = h.calc_header_checksum();
                out[..hl].copy_from_slice(&h.to_bytes());
            }
            IpRepr::V6 { src, dst, traffic_class, flow_label, hop_limit } => {
                let h = Ipv6Header {
                    traffic_class,
                    flow_label: Ipv6FlowLabel::try_new(flow_label & 0xf_ffff).unwrap_or_default(),
                    payload_length: udp_len16,
                    next_header: IpNumber::UDP,
                    hop_limit,
                    source: src.octets(),
                    destination: dst.octets(),
                };
                out[..hl].copy_from_slice(&h.to_bytes());
            }
        }
        let u = UdpHeader {
            source_port: self.src_port,
            destination_port: self.dst_port,
            length: udp_len16,
            checksum: 0,
        };
        out[hl..].copy_from_slice(&u.to_bytes());
        Ok(())
    }

    /// Writes only the IP header of a frame carrying a transport packet of `ib_len` bytes
    /// (ICRC included) into `buf`: what ibverbs puts in a UD receive's GRH area. Returns its
    /// length (20 or 40).
    pub fn emit_ip_header(&self, buf: &mut [u8], ib_len: usize) -> Result<usize> {
        let mut tmp = [0u8; 40 + UDP_HEADER_LEN];
        self.emit_ip_udp(&mut tmp, ib_len)?;
        let hl = self.ip.header_len();
        buf.get_mut(..hl).ok_or(Error::Truncated)?.copy_from_slice(&tmp[..hl]);
        Ok(hl)
    }

    /// Completes a frame whose transport packet (headers, payload, pad: `ib_len` bytes with
    /// the ICRC trailer) already sits at `buf[header_len()..]`: writes the IP and UDP headers,
    /// the ICRC and the UDP checksum when one is wanted. Returns the frame length.
    pub fn finish(&self, buf: &mut [u8], ib_len: usize) -> Result<usize> {
        let hl = self.header_len();
        let total = hl + ib_len;
        if buf.len() < total || ib_len < super::bth::HEADER_LEN + ICRC_LEN {
            return Err(Error::Truncated);
        }
        self.emit_ip_udp(buf, ib_len)?;
        let iph = self.ip.header_len();
        let (hdrs, ib) = buf[..total].split_at_mut(hl);
        let ib_body = ib_len - ICRC_LEN;
        let crc = icrc::compute(&hdrs[..iph], &hdrs[iph..], &ib[..ib_body])?;
        ib[ib_body..].copy_from_slice(&crc.to_le_bytes());
        let udp = match self.ip {
            IpRepr::V6 { .. } => {
                let ip6 = Ipv6Header::from_slice(&hdrs[..iph]).map_err(|_| Malformed::BadIp)?.0;
                Some(UdpHeader::with_ipv6_checksum(self.src_port, self.dst_port, &ip6, ib))
            }
            IpRepr::V4 { .. } if self.udp_checksum => {
                let ip4 = Ipv4Header::from_slice(&hdrs[..iph]).map_err(|_| Malformed::BadIp)?.0;
                Some(UdpHeader::with_ipv4_checksum(self.src_port, self.dst_port, &ip4, ib))
            }
            IpRepr::V4 { .. } => None,
        };
        if let Some(u) = udp {
            let u = u.map_err(|_| Malformed::BadUdpLength)?;
            hdrs[iph..].copy_from_slice(&u.to_bytes());
        }
        Ok(total)
    }

    /// Builds a whole frame (IP, UDP, transport packet with `payload`, ICRC) into `buf`.
    /// Returns the frame length.
    pub fn emit(&self, buf: &mut [u8], packet: &PacketRepr, payload: &[u8]) -> Result<usize> {
        let hl = self.header_len();
        let ib = buf.get_mut(hl..).ok_or(Error::Truncated)?;
        let n = packet.emit(ib, payload)?;
        self.finish(buf, n)
    }

    /// The ICRC of a transport packet sent with these headers, for senders that hand only the
    /// UDP payload to the kernel (the UDP-socket backend): `ib` runs from the BTH through the
    /// pad. The kernel must then produce exactly these IP fields (see the UDP backend's
    /// documentation: IP ID 0 and DF set under `IP_PMTUDISC_DO`).
    pub fn icrc(&self, ib: &[u8]) -> Result<u32> {
        let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
        let hl = self.header_len();
        let iph = self.ip.header_len();
        match self.ip {
            IpRepr::V4 { src, dst, id, df, .. } => {
                // Per packet (the engine's transmit path): the header fields the ICRC covers,
                // written directly; TOS, TTL and the header checksum are masked out of the CRC,
                // so they are neither set nor computed here.
                let udp_len = u16::try_from(UDP_HEADER_LEN + ib.len() + ICRC_LEN)
                    .map_err(|_| Malformed::BadUdpLength)?;
                let total = udp_len.checked_add(IPV4_HEADER_LEN as u16).ok_or(Malformed::BadIp)?;
                let h = &mut hdr[..IPV4_HEADER_LEN + UDP_HEADER_LEN];
                h[0] = 0x45;
                h[2..4].copy_from_slice(&total.to_be_bytes());
                h[4..6].copy_from_slice(&id.to_be_bytes());
                h[6] = if df { 0x40 } else { 0 };
                h[9] = 17; // UDP
                h[12..16].copy_from_slice(&src.octets());
                h[16..20].copy_from_slice(&dst.octets());
                h[20..22].copy_from_slice(&self.src_port.to_be_bytes());
                h[22..24].copy_from_slice(&self.dst_port.to_be_bytes());
                h[24..26].copy_from_slice(&udp_len.to_be_bytes());
            }
            IpRepr::V6 { .. } => self.emit_ip_udp(&mut hdr, ib.len() + ICRC_LEN)?,
        }
        icrc::compute(&hdr[..iph], &hdr[iph..hl], ib)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_icrc_written_directly_equals_the_one_over_the_emitted_headers() {
        // `icrc` writes the covered IPv4 fields itself (the transmit path); it must agree with
        // the ICRC over the headers `emit_ip_udp` builds, whatever the masked fields hold.
        let ib: Vec<u8> = (0..(12 + 16 + 100)).map(|i| (i * 7) as u8).collect();
        for (id, df, tos, ttl) in
            [(0, true, 0, 64), (5, true, 0x2a, 1), (0xffff, false, 3, 255), (63, false, 0, 0)]
        {
            let f = RoceFrameRepr {
                ip: IpRepr::V4 { src: [10, 0, 0, 1].into(), dst: [10, 0, 0, 2].into(), tos, ttl, id, df },
                src_port: 0xc0de,
                dst_port: 4791,
                udp_checksum: false,
            };
            let mut hdr = [0u8; 28];
            f.emit_ip_udp(&mut hdr, ib.len() + ICRC_LEN).unwrap();
            let want = icrc::compute(&hdr[..20], &hdr[20..], &ib).unwrap();
            assert_eq!(f.icrc(&ib).unwrap(), want, "id {id} df {df} tos {tos} ttl {ttl}");
        }
    }
}
