//! Management datagrams (IBTA 13.4): the 24-byte common MAD header and the 256-byte MAD that
//! travels as the payload of a UD SEND to QP1 (`struct ib_mad_hdr`, `include/rdma/ib_mad.h`).
//!
//! ```text
//!  0      BaseVersion (1)          1  MgmtClass (0x07 = CM)
//!  2      ClassVersion (CM: 2)     3  R:1 Method:7 (CM messages are Send, 0x03)
//!  4..6   Status                   6..8  ClassSpecific
//!  8..16  TransactionID            16..18 AttributeID     18..20 reserved
//!  20..24 AttributeModifier (ECE attr_mod on REQ/REP/SIDR_REP)
//!  24..256 data (232 bytes)
//! ```
//!
//! The MAD layer Linux runs over every GSI QP reads exactly 256 bytes, whatever the UD
//! payload length (`ib_mad_recv_done`: `mad_len = sizeof(struct ib_mad)`), so a MAD is always
//! sent whole, zero-filled.

use super::cm::{
    Apr, AprRepr, ClassPortInfo, ClassPortInfoRepr, CmAttr, Drep, DrepRepr, Dreq, DreqRepr, Lap, LapRepr,
    MGMT_CLASS_CM, Mra, MraRepr, Rej, RejRepr, Rep, RepRepr, Req, ReqRepr, Rtu, RtuRepr, SidrRep,
    SidrRepRepr, SidrReq, SidrReqRepr,
};
use super::{Error, Result};

/// Length of a MAD (`sizeof(struct ib_mad)`).
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header (`IB_MGMT_MAD_HDR`).
pub const MAD_HEADER_LEN: usize = 24;
/// Length of the data after the header (`IB_MGMT_MAD_DATA`).
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The only base version Linux accepts on RoCE (`IB_MGMT_BASE_VERSION`).
pub const BASE_VERSION: u8 = 1;

/// MAD methods (`IB_MGMT_METHOD_*`).
pub mod method {
    /// Get.
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// Send: every CM message.
    pub const SEND: u8 = 0x03;
    /// The response bit.
    pub const RESP: u8 = 0x80;
    /// GetResp.
    pub const GET_RESP: u8 = 0x81;
}

/// MAD status values the MAD layer generates.
pub mod status {
    /// "Unsupported method/attribute combination" (`IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB`).
    pub const UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000c;
}

/// The ClassPortInfo attribute ID, common to every class.
pub const ATTR_CLASS_PORT_INFO: u16 = 0x0001;

mod header {

    simple_header! {
        /// A zero-copy view of the common MAD header.
        MadHeader,
        /// An owned MAD header. Lossless.
        MadHeaderRepr,
        24;
        /// BaseVersion.
        base_version, set_base_version: u8 = 0..1, be_u8, put_u8;
        /// MgmtClass.
        mgmt_class, set_mgmt_class: u8 = 1..2, be_u8, put_u8;
        /// ClassVersion.
        class_version, set_class_version: u8 = 2..3, be_u8, put_u8;
        /// Method, with the response bit (0x80).
        method, set_method: u8 = 3..4, be_u8, put_u8;
        /// Status.
        status, set_status: u16 = 4..6, be_u16, put_u16;
        /// ClassSpecific.
        class_specific, set_class_specific: u16 = 6..8, be_u16, put_u16;
        /// TransactionID.
        transaction_id, set_transaction_id: u64 = 8..16, be_u64, put_u64;
        /// AttributeID.
        attribute_id, set_attribute_id: u16 = 16..18, be_u16, put_u16;
        /// Reserved.
        reserved, set_reserved: u16 = 18..20, be_u16, put_u16;
        /// AttributeModifier.
        attribute_modifier, set_attribute_modifier: u32 = 20..24, be_u32, put_u32;
    }
}

pub use header::{MadHeader, MadHeaderRepr};

impl MadHeaderRepr {
    /// The header of a CM message: base version 1, class 0x07 version 2, method Send, as
    /// `cm_format_mad_hdr` writes it.
    pub fn cm(attr: CmAttr, transaction_id: u64) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: super::cm::CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id: attr as u16,
            reserved: 0,
            attribute_modifier: 0,
        }
    }
}

/// A zero-copy view of a whole MAD (at least [`MAD_LEN`] bytes).
#[derive(Debug, Clone, Copy)]
pub struct Mad<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Mad<T> {
    /// Wraps a buffer without checking its length (accessors panic if it is short).
    pub const fn new_unchecked(buffer: T) -> Mad<T> {
        Mad { buffer }
    }
    /// Wraps a buffer after checking that it holds a whole MAD. Longer buffers are accepted;
    /// only the first [`MAD_LEN`] bytes are the MAD.
    pub fn new_checked(buffer: T) -> Result<Mad<T>> {
        if buffer.as_ref().len() < MAD_LEN {
            return Err(Error::Truncated);
        }
        Ok(Mad { buffer })
    }
    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The common header.
    pub fn header(&self) -> MadHeader<&[u8]> {
        MadHeader::new_unchecked(&self.buffer.as_ref()[..MAD_HEADER_LEN])
    }
    /// The 232 data bytes after the header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[MAD_HEADER_LEN..MAD_LEN]
    }
    /// The 256 bytes of the MAD.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..MAD_LEN]
    }
    /// The CM attribute, if the MAD is of the CM class and the attribute is one the CM defines.
    pub fn cm_attr(&self) -> Option<CmAttr> {
        let h = self.header();
        if h.mgmt_class() != MGMT_CLASS_CM {
            return None;
        }
        CmAttr::from_u16(h.attribute_id())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    /// The common header, writable.
    pub fn header_mut(&mut self) -> MadHeader<&mut [u8]> {
        MadHeader::new_unchecked(&mut self.buffer.as_mut()[..MAD_HEADER_LEN])
    }
    /// The data bytes, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[MAD_HEADER_LEN..MAD_LEN]
    }
}

/// What follows the header, decoded by class and attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)]
pub enum MadBody {
    /// CM REQ.
    Req(ReqRepr),
    /// CM MRA.
    Mra(MraRepr),
    /// CM REJ.
    Rej(RejRepr),
    /// CM REP.
    Rep(RepRepr),
    /// CM RTU.
    Rtu(RtuRepr),
    /// CM DREQ.
    Dreq(DreqRepr),
    /// CM DREP.
    Drep(DrepRepr),
    /// CM SIDR_REQ.
    SidrReq(SidrReqRepr),
    /// CM SIDR_REP.
    SidrRep(SidrRepRepr),
    /// CM LAP.
    Lap(LapRepr),
    /// CM APR.
    Apr(AprRepr),
    /// ClassPortInfo of the CM class.
    ClassPortInfo(ClassPortInfoRepr),
    /// Another class, or an attribute the CM does not define: the raw data.
    Other([u8; MAD_DATA_LEN]),
}

/// An owned MAD: the header and the decoded body. Lossless: `emit` after `parse` gives back
/// the same 256 bytes, whatever they were.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MadRepr {
    /// The common header.
    pub header: MadHeaderRepr,
    /// The data.
    pub body: MadBody,
}

impl MadRepr {
    /// A CM message with the header `cm_format_mad_hdr` writes and the given transaction ID.
    pub fn cm(transaction_id: u64, body: MadBody) -> MadRepr {
        let attr = body.cm_attr().unwrap_or(CmAttr::ClassPortInfo);
        MadRepr { header: MadHeaderRepr::cm(attr, transaction_id), body }
    }

    /// Decodes a MAD. Never fails once the view is checked: unknown classes and attributes
    /// become [`MadBody::Other`].
    pub fn parse<T: AsRef<[u8]>>(mad: &Mad<T>) -> MadRepr {
        let header = MadHeaderRepr::parse(&mad.header());
        let d = mad.data();
        let body = match mad.cm_attr() {
            Some(CmAttr::Req) => MadBody::Req(ReqRepr::parse(&Req::new_unchecked(d))),
            Some(CmAttr::Mra) => MadBody::Mra(MraRepr::parse(&Mra::new_unchecked(d))),
            Some(CmAttr::Rej) => MadBody::Rej(RejRepr::parse(&Rej::new_unchecked(d))),
            Some(CmAttr::Rep) => MadBody::Rep(RepRepr::parse(&Rep::new_unchecked(d))),
            Some(CmAttr::Rtu) => MadBody::Rtu(RtuRepr::parse(&Rtu::new_unchecked(d))),
            Some(CmAttr::Dreq) => MadBody::Dreq(DreqRepr::parse(&Dreq::new_unchecked(d))),
            Some(CmAttr::Drep) => MadBody::Drep(DrepRepr::parse(&Drep::new_unchecked(d))),
            Some(CmAttr::SidrReq) => MadBody::SidrReq(SidrReqRepr::parse(&SidrReq::new_unchecked(d))),
            Some(CmAttr::SidrRep) => MadBody::SidrRep(SidrRepRepr::parse(&SidrRep::new_unchecked(d))),
            Some(CmAttr::Lap) => MadBody::Lap(LapRepr::parse(&Lap::new_unchecked(d))),
            Some(CmAttr::Apr) => MadBody::Apr(AprRepr::parse(&Apr::new_unchecked(d))),
            Some(CmAttr::ClassPortInfo) => {
                MadBody::ClassPortInfo(ClassPortInfoRepr::parse(&ClassPortInfo::new_unchecked(d)))
            }
            None => {
                let mut raw = [0u8; MAD_DATA_LEN];
                raw.copy_from_slice(d);
                MadBody::Other(raw)
            }
        };
        MadRepr { header, body }
    }

    /// Length of the emitted MAD.
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the MAD into a view of at least [`MAD_LEN`] bytes. The header is written as it
    /// is: build it with [`MadRepr::cm`] to get the attribute ID that matches the body.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<T>) {
        self.header.emit(&mut mad.header_mut());
        let d = mad.data_mut();
        match &self.body {
            MadBody::Req(r) => r.emit(&mut Req::new_unchecked(d)),
            MadBody::Mra(r) => r.emit(&mut Mra::new_unchecked(d)),
            MadBody::Rej(r) => r.emit(&mut Rej::new_unchecked(d)),
            MadBody::Rep(r) => r.emit(&mut Rep::new_unchecked(d)),
            MadBody::Rtu(r) => r.emit(&mut Rtu::new_unchecked(d)),
            MadBody::Dreq(r) => r.emit(&mut Dreq::new_unchecked(d)),
            MadBody::Drep(r) => r.emit(&mut Drep::new_unchecked(d)),
            MadBody::SidrReq(r) => r.emit(&mut SidrReq::new_unchecked(d)),
            MadBody::SidrRep(r) => r.emit(&mut SidrRep::new_unchecked(d)),
            MadBody::Lap(r) => r.emit(&mut Lap::new_unchecked(d)),
            MadBody::Apr(r) => r.emit(&mut Apr::new_unchecked(d)),
            MadBody::ClassPortInfo(r) => r.emit(&mut ClassPortInfo::new_unchecked(d)),
            MadBody::Other(raw) => d.copy_from_slice(raw),
        }
    }

    /// Emits into a fresh 256-byte array.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut Mad::new_unchecked(&mut b[..]));
        b
    }
}

impl MadBody {
    /// The CM attribute of a decoded CM body (`None` for [`MadBody::Other`]).
    pub fn cm_attr(&self) -> Option<CmAttr> {
        Some(match self {
            MadBody::Req(_) => CmAttr::Req,
            MadBody::Mra(_) => CmAttr::Mra,
            MadBody::Rej(_) => CmAttr::Rej,
            MadBody::Rep(_) => CmAttr::Rep,
            MadBody::Rtu(_) => CmAttr::Rtu,
            MadBody::Dreq(_) => CmAttr::Dreq,
            MadBody::Drep(_) => CmAttr::Drep,
            MadBody::SidrReq(_) => CmAttr::SidrReq,
            MadBody::SidrRep(_) => CmAttr::SidrRep,
            MadBody::Lap(_) => CmAttr::Lap,
            MadBody::Apr(_) => CmAttr::Apr,
            MadBody::ClassPortInfo(_) => CmAttr::ClassPortInfo,
            MadBody::Other(_) => return None,
        })
    }
}

/// The answer Linux's MAD layer gives to a `Get` or `Set` no agent is registered for — which
/// includes a ClassPortInfo `Get` to the CM class, whose agent registers only Send
/// (`generate_unmatched_resp`): the request itself, with method GetResp and status 0x000c.
/// `None` for any other method, which the MAD layer drops.
pub fn unsupported_method_response(request: &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let m = request[3];
    if m != method::GET && m != method::SET {
        return None;
    }
    let mut resp = *request;
    let mut h = MadHeader::new_unchecked(&mut resp[..MAD_HEADER_LEN]);
    h.set_method(method::GET_RESP);
    h.set_status(status::UNSUPPORTED_METHOD_ATTRIB);
    Some(resp)
}

/// Which end of a device a CM MAD is for, by the field that names it: what a device shared
/// by several processes (each with its own connections and listeners) needs to hand the MAD
/// to the right one. A new request names a service; every other message names the receiver's
/// own communication ID (`Remote Communication ID`, data bytes 4..8: REP, RTU, DREQ, DREP,
/// REJ, MRA, LAP, APR) or its SIDR request ID (SIDR_REP, bytes 0..4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipient {
    /// Whoever listens on this service ID (REQ: data bytes 8..16; SIDR_REQ: 8..16).
    Service(u64),
    /// The end whose communication ID (or SIDR request ID) this is.
    Id(u32),
    /// The device as a whole: ClassPortInfo, other classes, or a MAD too short to tell.
    Device,
}

/// The [`Recipient`] of MAD `mad` (header and data). Never panics.
pub fn recipient(mad: &[u8]) -> Recipient {
    let (Some(&class), Some(attr)) = (mad.get(1), mad.get(16..18)) else { return Recipient::Device };
    if class != MGMT_CLASS_CM {
        return Recipient::Device;
    }
    let data = &mad[MAD_HEADER_LEN.min(mad.len())..];
    let u32_at = |at: usize| data.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at =
        |at: usize| data.get(at..at + 8).map(|b| u64::from_be_bytes(b.try_into().unwrap_or_default()));
    let r = match CmAttr::from_u16(u16::from_be_bytes([attr[0], attr[1]])) {
        Some(CmAttr::Req | CmAttr::SidrReq) => u64_at(8).map(Recipient::Service),
        Some(CmAttr::SidrRep) => u32_at(0).map(Recipient::Id),
        Some(
            CmAttr::Rep
            | CmAttr::Rtu
            | CmAttr::Dreq
            | CmAttr::Drep
            | CmAttr::Rej
            | CmAttr::Mra
            | CmAttr::Lap
            | CmAttr::Apr,
        ) => u32_at(4).map(Recipient::Id),
        Some(CmAttr::ClassPortInfo) | None => None,
    };
    r.unwrap_or(Recipient::Device)
}
