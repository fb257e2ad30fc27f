//! SIDR_REQ and SIDR_REP: service ID resolution for UD (IBTA Tables 119-120; Linux
//! `CM_SIDR_REQ_*`, `CM_SIDR_REP_*`).
//!
//! ```text
//! SIDR_REQ  0..4 Request ID  4..6 Partition Key  6..8 reserved  8..16 Service ID
//!           16..232 Private Data (216; rdma_cm: 36-byte cma_hdr + user data)
//! SIDR_REP  0..4 Request ID  4 Status  5 Additional Information Length
//!           6..8 ECE vendor ID high (Linux writes (vendor_id >> 8) & 0xff as a u16)
//!           8..11 QPN  11 ECE vendor ID low  12..20 Service ID  20..24 Q_Key
//!           24..96 Additional Information (72)  96..232 Private Data (136)
//! ```

use crate::wire::Field::{Bits32, U8, U16, U32, U64};

field_message! {
    /// A zero-copy view of a SIDR_REQ.
    SidrReq,
    /// An owned SIDR_REQ. Lossless.
    SidrReqRepr,
    232;
    fields {
        /// Request ID (the sender's local communication ID).
        request_id, set_request_id: u32 = U32(0);
        /// Partition Key.
        partition_key, set_partition_key: u16 = U16(4);
        /// Reserved.
        reserved6, set_reserved6: u16 = U16(6);
        /// Service ID.
        service_id, set_service_id: u64 = U64(8);
    }
    bytes {
        /// Private Data (216 bytes).
        private_data, set_private_data: [216] = 16;
    }
}

field_message! {
    /// A zero-copy view of a SIDR_REP.
    SidrRep,
    /// An owned SIDR_REP. Lossless.
    SidrRepRepr,
    232;
    fields {
        /// Request ID, echoed from the SIDR_REQ.
        request_id, set_request_id: u32 = U32(0);
        /// Status ([`SidrStatus`]).
        status, set_status: u8 = U8(4);
        /// Additional Information Length.
        additional_info_length, set_additional_info_length: u8 = U8(5);
        /// ECE vendor ID, high part (`CM_SIDR_REP_VENDOR_ID_H`, a 16-bit field).
        vendor_id_h, set_vendor_id_h: u16 = U16(6);
        /// QPN (24 bits) of the replier's UD QP.
        qpn, set_qpn: u32 = Bits32(8, 0xffff_ff00);
        /// ECE vendor ID, low byte.
        vendor_id_l, set_vendor_id_l: u8 = U8(11);
        /// Service ID (echoed).
        service_id, set_service_id: u64 = U64(12);
        /// Q_Key of the replier's UD QP (rdma_cm: 0x01234567, `RDMA_UDP_QKEY`).
        qkey, set_qkey: u32 = U32(20);
    }
    bytes {
        /// Additional Information (72 bytes).
        additional_info, set_additional_info: [72] = 24;
        /// Private Data (136 bytes).
        private_data, set_private_data: [136] = 96;
    }
}

/// SIDR_REP status values (`enum ib_cm_sidr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SidrStatus {
    /// The service is there: QPN and Q_Key are valid.
    Success = 0,
    /// No listener for the service ID.
    Unsupported = 1,
    /// The application rejected the request.
    Reject = 2,
    /// No QP.
    NoQp = 3,
    /// Redirect.
    Redirect = 4,
    /// Unsupported class version.
    UnsupportedVersion = 5,
}

impl SidrStatus {
    /// The status for a wire value.
    pub fn from_u8(v: u8) -> Option<SidrStatus> {
        Some(match v {
            0 => SidrStatus::Success,
            1 => SidrStatus::Unsupported,
            2 => SidrStatus::Reject,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::UnsupportedVersion,
            _ => return None,
        })
    }
}
