//! The rsocket protocol's messages, as rdma-core 44's `librdmacm/rsocket.c` puts them on the
//! wire: pure encodings, no I/O. Every parser takes untrusted bytes and never panics.
//!
//! * The connection's private data ([`ConnData`], 40 bytes, big-endian): protocol version 1,
//!   flags, the receive credits, the iomap size, where the peer writes credit updates (the
//!   "target SGL") and the first half of the receive buffer.
//! * The immediate data of every RDMA WRITE WITH IMMEDIATE ([`Msg`]): 3 bits of operation
//!   (data, credit update, iomap update, control) and 29 bits of argument (a length, the new
//!   credit limit, an iomap index, a control code).
//! * What credit and iomap updates write into the peer's memory ([`RsSge`], 16 bytes;
//!   [`RsIomap`], 24 bytes), in the *receiver's* byte order (the connection data's NET flag
//!   says whether that is big-endian).
//! * The datagram headers: [`DsHeader`] before each UD message (the sender's address and
//!   port), [`DsUdpHeader`] on the UDP socket that finds a peer's QP.

/// The protocol version of [`ConnData`] (rdma-core checks it and refuses anything else).
pub const VERSION: u8 = 1;
/// [`ConnData::flags`]: the sender's host is big-endian.
pub const CONN_FLAG_NET: u8 = 1 << 0;
/// [`ConnData::flags`]: the target SGL is followed by an iomap table.
pub const CONN_FLAG_IOMAP: u8 = 1 << 1;
/// The length of [`ConnData`] on the wire.
pub const CONN_DATA_LEN: usize = 40;
/// The length of an [`RsSge`] in memory.
pub const SGE_LEN: usize = 16;
/// The length of an [`RsIomap`] in memory.
pub const IOMAP_LEN: usize = 24;
/// Entries of the target SGL (credit updates cycle through them).
pub const SGL_SIZE: u32 = 2;
/// Control messages a side may have outstanding (a power of two).
pub const QP_CTRL_SIZE: u32 = 4;
/// A send needs this much free send buffer (`RS_SNDLOWAT`); a datagram at most this much.
pub const SNDLOWAT: u32 = 2048;
/// The first transfer of a send call (doubled for each next one, up to [`MAX_TRANSFER`]).
pub const OLAP_START_SIZE: u32 = 2048;
/// The largest single transfer.
pub const MAX_TRANSFER: u32 = 65536;
/// The smallest and largest queue sizes.
pub const QP_MIN_SIZE: u16 = 16;
/// See [`QP_MIN_SIZE`].
pub const QP_MAX_SIZE: u16 = 0xFFFE;

/// Operations of [`Msg`] (the top 3 bits of the immediate data).
pub mod op {
    /// Data: the argument is its length.
    pub const DATA: u8 = 0;
    /// A direct write (`riowrite`): never on the wire, only in work request ids.
    pub const WRITE: u8 = 2;
    /// A credit update: the argument is the new sequence limit; a 16-byte update also
    /// carries an [`super::RsSge`].
    pub const SGL: u8 = 4;
    /// An iomap update: the argument is the table index.
    pub const IOMAP_SGL: u8 = 6;
    /// A control message: the argument is a [`super::ctrl`] code.
    pub const CTRL: u8 = 7;
}

/// Control codes of [`op::CTRL`].
pub mod ctrl {
    /// The sender disconnects (shut down both ways).
    pub const DISCONNECT: u32 = 0;
    /// A keep-alive (sent as a zero-length RDMA WRITE without immediate: never received).
    pub const KEEPALIVE: u32 = 1;
    /// The sender will send no more (`SHUT_WR`).
    pub const SHUTDOWN: u32 = 2;
}

/// The immediate data of an rsocket message: `op << 29 | data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    /// One of [`op`] (3 bits).
    pub op: u8,
    /// The argument (29 bits).
    pub data: u32,
}

impl Msg {
    /// A message (`data` is cut to 29 bits).
    pub fn new(op: u8, data: u32) -> Msg {
        Msg { op: op & 7, data: data & 0x1FFF_FFFF }
    }
    /// The immediate data.
    pub fn encode(self) -> u32 {
        (u32::from(self.op) << 29) | self.data
    }
    /// From immediate data (every value is some message).
    pub fn decode(imm: u32) -> Msg {
        Msg { op: (imm >> 29) as u8, data: imm & 0x1FFF_FFFF }
    }
}

/// rdma-core's `rs_sge`: an address, a key and a length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RsSge {
    /// The address.
    pub addr: u64,
    /// The rkey.
    pub key: u32,
    /// The length in bytes (in the target SGL of the connection data: the number of entries).
    pub length: u32,
}

impl RsSge {
    /// In memory, in the receiver's byte order: little-endian unless `big`.
    pub fn to_bytes(self, big: bool) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        if big {
            b[..8].copy_from_slice(&self.addr.to_be_bytes());
            b[8..12].copy_from_slice(&self.key.to_be_bytes());
            b[12..].copy_from_slice(&self.length.to_be_bytes());
        } else {
            b[..8].copy_from_slice(&self.addr.to_le_bytes());
            b[8..12].copy_from_slice(&self.key.to_le_bytes());
            b[12..].copy_from_slice(&self.length.to_le_bytes());
        }
        b
    }
    /// From memory written in byte order `big` (see [`RsSge::to_bytes`]).
    pub fn from_bytes(b: &[u8; SGE_LEN], big: bool) -> RsSge {
        let (a, k, l) = (arr8(&b[..8]), arr4(&b[8..12]), arr4(&b[12..]));
        if big {
            RsSge { addr: u64::from_be_bytes(a), key: u32::from_be_bytes(k), length: u32::from_be_bytes(l) }
        } else {
            RsSge { addr: u64::from_le_bytes(a), key: u32::from_le_bytes(k), length: u32::from_le_bytes(l) }
        }
    }
}

/// rdma-core's `rs_iomap`: the offset a mapping answers to, and the memory behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RsIomap {
    /// The offset `riowrite` names.
    pub offset: u64,
    /// The registered memory.
    pub sge: RsSge,
}

impl RsIomap {
    /// In memory, in the receiver's byte order (see [`RsSge::to_bytes`]).
    pub fn to_bytes(self, big: bool) -> [u8; IOMAP_LEN] {
        let mut b = [0u8; IOMAP_LEN];
        b[..8].copy_from_slice(&if big { self.offset.to_be_bytes() } else { self.offset.to_le_bytes() });
        b[8..].copy_from_slice(&self.sge.to_bytes(big));
        b
    }
    /// From memory written in byte order `big`.
    pub fn from_bytes(b: &[u8; IOMAP_LEN], big: bool) -> RsIomap {
        let o = arr8(&b[..8]);
        let mut s = [0u8; SGE_LEN];
        s.copy_from_slice(&b[8..]);
        RsIomap {
            offset: if big { u64::from_be_bytes(o) } else { u64::from_le_bytes(o) },
            sge: RsSge::from_bytes(&s, big),
        }
    }
}

/// Why a peer's connection data was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnDataError {
    /// Fewer than 40 bytes.
    Short(usize),
    /// Not protocol version 1 (rdma-core answers `ENOTSUP`).
    Version(u8),
    /// A target SGL of no entries (credit updates would have nowhere to go).
    NoTargetSgl,
}

/// rdma-core's `rs_conn_data`: the private data of the connection request and reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnData {
    /// [`VERSION`].
    pub version: u8,
    /// [`CONN_FLAG_NET`], [`CONN_FLAG_IOMAP`].
    pub flags: u8,
    /// The sender's receive queue size: how many messages the peer may send at first.
    pub credits: u16,
    /// The iomap table size, scaled ([`value_to_scale`] with 8 bits).
    pub target_iomap_size: u8,
    /// Where the peer writes credit updates: address, rkey, and the number of entries.
    pub target_sgl: RsSge,
    /// The first half of the sender's receive buffer.
    pub data_buf: RsSge,
}

impl ConnData {
    /// The 40 bytes on the wire.
    pub fn emit(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.target_iomap_size;
        b[8..24].copy_from_slice(&self.target_sgl.to_bytes(true));
        b[24..40].copy_from_slice(&self.data_buf.to_bytes(true));
        b
    }

    /// From a connection's private data (at least 40 bytes, version 1, a target SGL).
    pub fn parse(b: &[u8]) -> Result<ConnData, ConnDataError> {
        let Some(b) = b.get(..CONN_DATA_LEN) else { return Err(ConnDataError::Short(b.len())) };
        if b[0] != VERSION {
            return Err(ConnDataError::Version(b[0]));
        }
        let mut s = [0u8; SGE_LEN];
        s.copy_from_slice(&b[8..24]);
        let target_sgl = RsSge::from_bytes(&s, true);
        s.copy_from_slice(&b[24..40]);
        let data_buf = RsSge::from_bytes(&s, true);
        if target_sgl.length == 0 {
            return Err(ConnDataError::NoTargetSgl);
        }
        Ok(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl,
            data_buf,
        })
    }

    /// Whether the peer writes into our memory with its bytes swapped relative to ours — that
    /// is, whether *we* must write its memory in the other byte order (rdma-core's
    /// `RS_OPT_SWAP_SGL`).
    pub fn peer_is_big_endian(&self) -> bool {
        self.flags & CONN_FLAG_NET != 0
    }
}

/// rdma-core's `rs_value_to_scale`: sizes up to `2^(bits-1)` as they are, larger ones
/// approximately, in `bits` bits.
pub fn value_to_scale(value: u32, bits: u32) -> u32 {
    let half = 1u32 << (bits - 1);
    if value <= half { value } else { half | (value >> bits) }
}

/// rdma-core's `rs_scale_to_value`, the inverse of [`value_to_scale`].
pub fn scale_to_value(value: u32, bits: u32) -> u32 {
    let half = 1u32 << (bits - 1);
    if value <= half { value } else { (value & !half) << bits }
}

/// The UDP tag of [`DsUdpHeader`].
pub const DS_UDP_TAG: u32 = 0x5555_5555;
/// [`DsHeader`] lengths by family.
pub const DS_IPV4_HDR_LEN: usize = 8;
/// See [`DS_IPV4_HDR_LEN`].
pub const DS_IPV6_HDR_LEN: usize = 24;
/// [`DsUdpHeader`] lengths by family.
pub const DS_UDP_IPV4_HDR_LEN: usize = 16;
/// See [`DS_UDP_IPV4_HDR_LEN`].
pub const DS_UDP_IPV6_HDR_LEN: usize = 28;

/// rdma-core's `ds_header`: what precedes every datagram on a UD QP — the address and port
/// of the sending rsocket (its UDP socket's), in network byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DsHeader {
    /// The sender's address and port.
    pub addr: std::net::SocketAddr,
}

impl DsHeader {
    /// The header's length on the wire (8 for IPv4, 24 for IPv6).
    pub fn len(&self) -> usize {
        if self.addr.is_ipv4() { DS_IPV4_HDR_LEN } else { DS_IPV6_HDR_LEN }
    }
    /// Never empty (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The header's bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.len());
        match self.addr {
            std::net::SocketAddr::V4(a) => {
                b.extend_from_slice(&[4, DS_IPV4_HDR_LEN as u8]);
                b.extend_from_slice(&a.port().to_be_bytes());
                b.extend_from_slice(&a.ip().octets());
            }
            std::net::SocketAddr::V6(a) => {
                b.extend_from_slice(&[6, DS_IPV6_HDR_LEN as u8]);
                b.extend_from_slice(&a.port().to_be_bytes());
                b.extend_from_slice(&a.flowinfo().to_be_bytes());
                b.extend_from_slice(&a.ip().octets());
            }
        }
        b
    }
    /// From the start of a received datagram: the header and its length (`None` unless
    /// version and length agree, as rdma-core's `ds_valid_recv` checks).
    pub fn parse(b: &[u8]) -> Option<DsHeader> {
        let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
        match (*b.first()?, *b.get(1)?) {
            (4, 8) => {
                let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
                Some(DsHeader { addr: std::net::SocketAddr::new(ip.into(), port) })
            }
            (6, 24) => {
                let flow = u32::from_be_bytes(b.get(4..8)?.try_into().ok()?);
                let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
                Some(DsHeader { addr: std::net::SocketAddrV6::new(ip.into(), port, flow, 0).into() })
            }
            _ => None,
        }
    }
}

/// rdma-core's `ds_udp_header`: what an rsocket sends on its UDP socket to reach a peer whose
/// QP it does not know yet (data, [`op::DATA`]) and what the peer answers (its QP number,
/// [`op::CTRL`]). The address is the sending QP's (the header's version says its family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DsUdpHeader {
    /// [`op::DATA`] or [`op::CTRL`].
    pub op: u8,
    /// The sender's UD QP number (24 bits).
    pub qpn: u32,
    /// The address of the sender's QP.
    pub addr: std::net::IpAddr,
}

impl DsUdpHeader {
    /// The header's length on the wire (16 for IPv4, 28 for IPv6).
    pub fn len(&self) -> usize {
        if self.addr.is_ipv4() { DS_UDP_IPV4_HDR_LEN } else { DS_UDP_IPV6_HDR_LEN }
    }
    /// Never empty (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The header's bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.len());
        b.extend_from_slice(&DS_UDP_TAG.to_be_bytes());
        let (v, ip): (u8, Vec<u8>) = match self.addr {
            std::net::IpAddr::V4(a) => (4, a.octets().to_vec()),
            std::net::IpAddr::V6(a) => (6, a.octets().to_vec()),
        };
        b.extend_from_slice(&[v, self.op, self.len() as u8, 0]);
        b.extend_from_slice(&(self.qpn & 0xFF_FFFF).to_be_bytes());
        b.extend_from_slice(&ip);
        b
    }
    /// From a UDP datagram that came from an address of family `v6` (rdma-core's
    /// `udp_svc_valid_udp_hdr`: the tag, and a version and length that match the family).
    pub fn parse(b: &[u8], v6: bool) -> Option<DsUdpHeader> {
        if u32::from_be_bytes(b.get(..4)?.try_into().ok()?) != DS_UDP_TAG {
            return None;
        }
        let (version, op, len) = (*b.get(4)?, *b.get(5)?, *b.get(6)? as usize);
        let qpn = u32::from_be_bytes(b.get(8..12)?.try_into().ok()?) & 0xFF_FFFF;
        let addr: std::net::IpAddr = match (version, len, v6) {
            (4, DS_UDP_IPV4_HDR_LEN, false) => <[u8; 4]>::try_from(b.get(12..16)?).ok()?.into(),
            (6, DS_UDP_IPV6_HDR_LEN, true) => <[u8; 16]>::try_from(b.get(12..28)?).ok()?.into(),
            _ => return None,
        };
        Some(DsUdpHeader { op, qpn, addr })
    }
}

fn arr8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    a
}

fn arr4(b: &[u8]) -> [u8; 4] {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    a
}

/// `SOL_RDMA` (the header's value).
pub const SOL_RDMA: i32 = 0x10000;
/// `SOL_RDMA` option names.
pub const RDMA_SQSIZE: i32 = 0;
/// See [`RDMA_SQSIZE`].
pub const RDMA_RQSIZE: i32 = 1;
/// See [`RDMA_SQSIZE`].
pub const RDMA_INLINE: i32 = 2;
/// See [`RDMA_SQSIZE`].
pub const RDMA_IOMAPSIZE: i32 = 3;
/// See [`RDMA_SQSIZE`].
pub const RDMA_ROUTE: i32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    /// The connection data rdma-core 44 sends from an x86 host (taken apart from
    /// `rs_format_conn_data`): version 1, IOMAP, 384 credits, iomap scale 1, the target SGL
    /// at 0x5555_0000_1000 (rkey 0x1234, 2 entries), the first half of a 128 KiB buffer.
    const RDMA_CORE: [u8; 40] = [
        1, 2, 0x01, 0x80, 0, 0, 0, 1, //
        0, 0, 0x55, 0x55, 0, 0, 0x10, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 2, //
        0, 0, 0x55, 0x55, 0, 1, 0, 0, 0, 0, 0x56, 0x78, 0, 1, 0, 0,
    ];

    #[test]
    fn conn_data_round_trips_rdma_cores_bytes() {
        let c = ConnData::parse(&RDMA_CORE).unwrap();
        assert_eq!(c.version, 1);
        assert_eq!(c.flags, CONN_FLAG_IOMAP);
        assert_eq!(c.credits, 384);
        assert_eq!(c.target_iomap_size, 1);
        assert_eq!(c.target_sgl, RsSge { addr: 0x5555_0000_1000, key: 0x1234, length: 2 });
        assert_eq!(c.data_buf, RsSge { addr: 0x5555_0001_0000, key: 0x5678, length: 0x10000 });
        assert!(!c.peer_is_big_endian());
        assert_eq!(c.emit(), RDMA_CORE);
        // The private data of a REQ arrives padded to 56 bytes: the rest is ignored.
        let mut padded = RDMA_CORE.to_vec();
        padded.resize(56, 0xEE);
        assert_eq!(ConnData::parse(&padded).unwrap(), c);
    }

    #[test]
    fn conn_data_refuses_garbage() {
        assert_eq!(ConnData::parse(&RDMA_CORE[..39]), Err(ConnDataError::Short(39)));
        assert_eq!(ConnData::parse(&[]), Err(ConnDataError::Short(0)));
        let mut v = RDMA_CORE;
        v[0] = 0x55;
        assert_eq!(ConnData::parse(&v), Err(ConnDataError::Version(0x55)));
        let mut v = RDMA_CORE;
        v[20..24].fill(0);
        assert_eq!(ConnData::parse(&v), Err(ConnDataError::NoTargetSgl));
    }

    #[test]
    fn messages_are_rdma_cores_immediate_data() {
        // rs_msg_set(RS_OP_SGL, 384 + 192), rs_msg_set(RS_OP_CTRL, RS_CTRL_DISCONNECT), data.
        assert_eq!(Msg::new(op::SGL, 576).encode(), 0x8000_0240);
        assert_eq!(Msg::new(op::CTRL, ctrl::DISCONNECT).encode(), 0xE000_0000);
        assert_eq!(Msg::new(op::DATA, 65536).encode(), 0x0001_0000);
        assert_eq!(Msg::decode(0xE000_0002), Msg { op: op::CTRL, data: ctrl::SHUTDOWN });
        assert_eq!(Msg::decode(0xC000_0003), Msg { op: op::IOMAP_SGL, data: 3 });
        for imm in [0u32, 1, 0x1FFF_FFFF, 0x2000_0000, u32::MAX] {
            assert_eq!(Msg::decode(imm).encode(), imm);
        }
    }

    #[test]
    fn sge_and_iomap_in_either_byte_order() {
        let s = RsSge { addr: 0x0102_0304_0506_0708, key: 0x0A0B_0C0D, length: 0x1000 };
        let le = s.to_bytes(false);
        assert_eq!(le[..8], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(RsSge::from_bytes(&le, false), s);
        assert_eq!(RsSge::from_bytes(&s.to_bytes(true), true), s);
        let m = RsIomap { offset: 77, sge: s };
        assert_eq!(RsIomap::from_bytes(&m.to_bytes(false), false), m);
        assert_eq!(RsIomap::from_bytes(&m.to_bytes(true), true), m);
    }

    #[test]
    fn scale_matches_rdma_core() {
        // rs_value_to_scale / rs_scale_to_value with 8 bits, as for RDMA_IOMAPSIZE.
        for (v, s) in [(0, 0), (1, 1), (128, 128), (129, 128), (256, 129), (1000, 131)] {
            assert_eq!(value_to_scale(v, 8), s, "{v}");
        }
        assert_eq!(scale_to_value(129, 8), 256);
        assert_eq!(scale_to_value(value_to_scale(1000, 8), 8), 768);
        for s in 0..=255 {
            assert_eq!(value_to_scale(scale_to_value(s, 8), 8), s.min(255), "{s}");
        }
    }

    #[test]
    fn datagram_headers() {
        let h = DsHeader { addr: "10.0.0.7:7174".parse().unwrap() };
        assert_eq!(h.emit(), [4, 8, 0x1C, 0x06, 10, 0, 0, 7]);
        assert_eq!(DsHeader::parse(&h.emit()), Some(h));
        let h6 = DsHeader { addr: "[fd00::1]:80".parse().unwrap() };
        assert_eq!(h6.emit().len(), 24);
        assert_eq!(DsHeader::parse(&h6.emit()), Some(h6));
        assert_eq!(DsHeader::parse(&[4, 24, 0, 0, 1, 2, 3, 4]), None);
        assert_eq!(DsHeader::parse(&[4, 8, 0]), None);

        let u = DsUdpHeader { op: op::DATA, qpn: 0x12_3456, addr: "10.0.0.7".parse().unwrap() };
        let b = u.emit();
        assert_eq!(b, [0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0, 0, 0x12, 0x34, 0x56, 10, 0, 0, 7]);
        assert_eq!(DsUdpHeader::parse(&b, false), Some(u));
        assert_eq!(DsUdpHeader::parse(&b, true), None, "an IPv4 header from an IPv6 peer");
        assert_eq!(DsUdpHeader::parse(&b[..15], false), None);
        let u6 = DsUdpHeader { op: op::CTRL, qpn: 9, addr: "fd00::2".parse().unwrap() };
        assert_eq!(DsUdpHeader::parse(&u6.emit(), true), Some(u6));
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = ConnData::parse(&b);
            let _ = DsHeader::parse(&b);
            let _ = DsUdpHeader::parse(&b, false);
            let _ = DsUdpHeader::parse(&b, true);
            if let Ok(c) = ConnData::parse(&b) {
                proptest::prop_assert_eq!(ConnData::parse(&c.emit()), Ok(c));
            }
        }
    }
}
