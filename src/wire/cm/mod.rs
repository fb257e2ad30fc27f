//! The InfiniBand Communication Manager's messages (IBTA vol. 1 chapter 12), as Linux sends
//! and parses them (`drivers/infiniband/core/cm.c`, `cm_msgs.h`,
//! `include/rdma/ibta_vol1_c12.h`).
//!
//! Each message is a view over the 232-byte data area of a MAD (the bytes after the 24-byte
//! MAD header, [`super::mad`]) plus a lossless owned representation; every offset in these
//! modules is from the start of that data area, as the kernel's `CM_FIELD*_LOC` macros count
//! them before adding the MAD header's 24 bytes. Bits follow the IBTA `Byte[Bit]` numbering
//! the kernel's masks encode: the 5-bit timeouts are the *top* bits of their byte, the 24-bit
//! QPNs and PSNs the *top* three bytes of a big-endian word.
//!
//! Private data is never length-prefixed: a message always carries its full private data
//! area, zero-filled past what the sender supplied, and Linux reports the full length to the
//! receiver.

mod class_port_info;
mod lap;
mod mra;
mod rej;
mod rep;
mod req;
mod rtu;
mod sidr;

pub use class_port_info::{ClassPortInfo, ClassPortInfoRepr};
pub use lap::{Apr, AprRepr, Lap, LapRepr};
pub use mra::{Mra, MraRepr};
pub use rej::{Rej, RejReason, RejRepr};
pub use rep::{Rep, RepRepr};
pub use req::{Req, ReqRepr};
pub use rtu::{Drep, DrepRepr, Dreq, DreqRepr, Rtu, RtuRepr};
pub use sidr::{SidrRep, SidrRepRepr, SidrReq, SidrReqRepr, SidrStatus};

/// The management class of the CM (`IB_MGMT_CLASS_CM`).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version Linux speaks and registers for (`IB_CM_CLASS_VERSION`, IBTA 1.2).
pub const CLASS_VERSION: u8 = 2;
/// The Q_Key of QP1, the GSI QP that carries CM MADs (`IB_QP1_QKEY`).
pub const QP1_QKEY: u32 = 0x8001_0000;
/// The QP number of the GSI QP.
pub const GSI_QPN: u32 = 1;

/// Private data sizes of each message (`IB_CM_*_PRIVATE_DATA_SIZE`, `include/rdma/ib_cm.h`).
pub mod private_data_len {
    /// REQ: 92 bytes.
    pub const REQ: usize = 92;
    /// MRA: 222 bytes.
    pub const MRA: usize = 222;
    /// REJ: 148 bytes.
    pub const REJ: usize = 148;
    /// REP: 196 bytes.
    pub const REP: usize = 196;
    /// RTU: 224 bytes.
    pub const RTU: usize = 224;
    /// DREQ: 220 bytes.
    pub const DREQ: usize = 220;
    /// DREP: 224 bytes.
    pub const DREP: usize = 224;
    /// SIDR_REQ: 216 bytes.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP: 136 bytes.
    pub const SIDR_REP: usize = 136;
    /// LAP: 168 bytes.
    pub const LAP: usize = 168;
    /// APR: 148 bytes.
    pub const APR: usize = 148;
    /// REJ's Additional Rejection Information: 72 bytes.
    pub const REJ_ARI: usize = 72;
    /// SIDR_REP's Additional Information: 72 bytes.
    pub const SIDR_REP_INFO: usize = 72;
}

/// The CM attribute IDs (`CM_*_ATTR_ID`, `cm_msgs.h`), plus ClassPortInfo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum CmAttr {
    /// ClassPortInfo (0x0001).
    ClassPortInfo = 0x0001,
    /// Connection request.
    Req = 0x0010,
    /// Message receipt acknowledgement.
    Mra = 0x0011,
    /// Reject.
    Rej = 0x0012,
    /// Reply to a REQ.
    Rep = 0x0013,
    /// Ready to use.
    Rtu = 0x0014,
    /// Disconnect request.
    Dreq = 0x0015,
    /// Disconnect reply.
    Drep = 0x0016,
    /// Service ID resolution request.
    SidrReq = 0x0017,
    /// Service ID resolution reply.
    SidrRep = 0x0018,
    /// Load alternate path.
    Lap = 0x0019,
    /// Alternate path response.
    Apr = 0x001a,
}

impl CmAttr {
    /// The attribute for a wire value.
    pub fn from_u16(v: u16) -> Option<CmAttr> {
        Some(match v {
            0x0001 => CmAttr::ClassPortInfo,
            0x0010 => CmAttr::Req,
            0x0011 => CmAttr::Mra,
            0x0012 => CmAttr::Rej,
            0x0013 => CmAttr::Rep,
            0x0014 => CmAttr::Rtu,
            0x0015 => CmAttr::Dreq,
            0x0016 => CmAttr::Drep,
            0x0017 => CmAttr::SidrReq,
            0x0018 => CmAttr::SidrRep,
            0x0019 => CmAttr::Lap,
            0x001a => CmAttr::Apr,
            _ => return None,
        })
    }

    /// The message name as captures and the kernel spell it.
    pub fn name(self) -> &'static str {
        match self {
            CmAttr::ClassPortInfo => "ClassPortInfo",
            CmAttr::Req => "REQ",
            CmAttr::Mra => "MRA",
            CmAttr::Rej => "REJ",
            CmAttr::Rep => "REP",
            CmAttr::Rtu => "RTU",
            CmAttr::Dreq => "DREQ",
            CmAttr::Drep => "DREP",
            CmAttr::SidrReq => "SIDR_REQ",
            CmAttr::SidrRep => "SIDR_REP",
            CmAttr::Lap => "LAP",
            CmAttr::Apr => "APR",
        }
    }
}

/// Which message a REJ rejects or an MRA acknowledges (`enum cm_msg_response`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MsgResponse {
    /// A REQ.
    Req = 0,
    /// A REP.
    Rep = 1,
    /// Anything else (LAP; Linux also uses it for a REJ from TIMEWAIT).
    Other = 2,
}

impl MsgResponse {
    /// The value for a 2-bit wire field (3 is reserved).
    pub fn from_u8(v: u8) -> Option<MsgResponse> {
        Some(match v {
            0 => MsgResponse::Req,
            1 => MsgResponse::Rep,
            2 => MsgResponse::Other,
            _ => return None,
        })
    }
}

/// The transport a REQ asks for, from its Transport Service Type and Extended Transport Type
/// (`cm_req_get_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmTransport {
    /// Reliable Connected (type 0).
    Rc,
    /// Unreliable Connected (type 1).
    Uc,
    /// XRC (type 3, extended type 1).
    Xrc,
    /// Anything else: Linux maps it to QP type 0, which no rdma_cm listener accepts.
    Invalid,
}

impl CmTransport {
    /// Decodes the two REQ fields.
    pub fn from_req(transport_service_type: u8, extended_transport_type: u8) -> CmTransport {
        match (transport_service_type, extended_transport_type) {
            (0, _) => CmTransport::Rc,
            (1, _) => CmTransport::Uc,
            (3, 1) => CmTransport::Xrc,
            _ => CmTransport::Invalid,
        }
    }

    /// The (transport service type, extended transport type) a REQ carries for it
    /// (`cm_req_set_qp_type`; `Invalid` encodes as reserved type 2).
    pub fn to_req(self) -> (u8, u8) {
        match self {
            CmTransport::Rc => (0, 0),
            CmTransport::Uc => (1, 0),
            CmTransport::Xrc => (3, 1),
            CmTransport::Invalid => (2, 0),
        }
    }
}

/// The kernel's approximation of an IBTA time value (4.096 us * 2^n) in milliseconds:
/// `1 << max(n - 8, 0)` (`cm_convert_to_ms`). 20 gives 4096 ms, 19 gives 2048 ms.
pub const fn iba_time_to_ms(n: u8) -> u64 {
    let n = if n > 63 { 63 } else { n };
    if n <= 8 { 1 } else { 1u64 << (n - 8) }
}

/// The local ACK timeout the CM derives from a CA ACK delay and a packet life time
/// (`cm_ack_timeout`): the larger of `ca_ack_delay` and `packet_life_time + 1`, one more when
/// the other is within one step, at most 31. `cm_ack_timeout(15, 18)` is 19.
pub const fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let ca = ca_ack_delay as i32;
    let mut t = packet_life_time as i32 + 1;
    if t >= ca {
        t += (ca >= t - 1) as i32;
    } else {
        t = ca + (t >= ca - 1) as i32;
    }
    if t > 31 { 31 } else { t as u8 }
}

#[cfg(test)]
mod tests;
