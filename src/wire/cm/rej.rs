//! REJ, the reject message (IBTA Table 108; Linux `CM_REJ_*`), and the reasons Linux uses
//! (`enum ib_cm_rej_reason`, `include/rdma/ib_cm.h`).
//!
//! ```text
//!  0..4   Local Communication ID (0 when rejecting a REQ from state REQ_RCVD)
//!  4..8   Remote Communication ID
//!  8      Message Rejected:2 reserved:6      9  Rejected Info Length:7 reserved:1
//!  10..12 Reason                              12..84  ARI (72 bytes)
//!  84..232 Private Data (148 bytes)
//! ```

use crate::wire::Field::{Bits8, U16, U32};

field_message! {
    /// A zero-copy view of a REJ.
    Rej,
    /// An owned REJ. Lossless.
    RejRepr,
    232;
    fields {
        /// Local Communication ID of the rejecting side.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID: the rejected side's identifier.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
        /// Message Rejected (2 bits): 0 REQ, 1 REP, 2 other ([`super::MsgResponse`]).
        message_rejected, set_message_rejected: u8 = Bits8(8, 0xc0);
        /// Reserved 6 bits of byte 8.
        reserved8, set_reserved8: u8 = Bits8(8, 0x3f);
        /// Rejected Info Length (7 bits): bytes of ARI that are meaningful.
        rejected_info_length, set_rejected_info_length: u8 = Bits8(9, 0xfe);
        /// Reserved bit of byte 9.
        reserved9, set_reserved9: u8 = Bits8(9, 0x01);
        /// Reason ([`RejReason`]).
        reason, set_reason: u16 = U16(10);
    }
    bytes {
        /// Additional Rejection Information (72 bytes).
        ari, set_ari: [72] = 12;
        /// Private Data (148 bytes).
        private_data, set_private_data: [148] = 84;
    }
}

macro_rules! reasons {
    ($( $(#[$m:meta])* $name:ident = $v:expr, $s:expr; )+) => {
        /// Reject reasons (IBTA Table 109), with the kernel's strings (`ibcm_rej_reason_strs`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum RejReason {
            $( $(#[$m])* $name = $v, )+
        }

        impl RejReason {
            /// The reason for a wire value, if it is one IBTA defines.
            pub fn from_u16(v: u16) -> Option<RejReason> {
                match v {
                    $( $v => Some(RejReason::$name), )+
                    _ => None,
                }
            }
            /// The kernel's text for the reason (`ibcm_reject_msg`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $( RejReason::$name => $s, )+
                }
            }
        }
    };
}

reasons! {
    /// No QP available.
    NoQp = 1, "no QP";
    /// No EE context available.
    NoEec = 2, "no EEC";
    /// No resources.
    NoResources = 3, "no resources";
    /// Timeout: the active side gave up (ARI: its node GUID).
    Timeout = 4, "timeout";
    /// Unsupported request.
    Unsupported = 5, "unsupported";
    /// Invalid communication ID.
    InvalidCommId = 6, "invalid comm ID";
    /// Invalid communication instance.
    InvalidCommInstance = 7, "invalid comm instance";
    /// No listener for the service ID (rdma_cm reports it as "connection refused").
    InvalidServiceId = 8, "invalid service ID";
    /// Invalid transport service type.
    InvalidTransportType = 9, "invalid transport type";
    /// Stale connection.
    StaleConn = 10, "stale conn";
    /// RDC does not exist.
    RdcNotExist = 11, "RDC not exist";
    /// Invalid GID.
    InvalidGid = 12, "invalid GID";
    /// Invalid LID.
    InvalidLid = 13, "invalid LID";
    /// Invalid SL.
    InvalidSl = 14, "invalid SL";
    /// Invalid traffic class.
    InvalidTrafficClass = 15, "invalid traffic class";
    /// Invalid hop limit.
    InvalidHopLimit = 16, "invalid hop limit";
    /// Invalid packet rate.
    InvalidPacketRate = 17, "invalid packet rate";
    /// Invalid alternate GID.
    InvalidAltGid = 18, "invalid alt GID";
    /// Invalid alternate LID.
    InvalidAltLid = 19, "invalid alt LID";
    /// Invalid alternate SL.
    InvalidAltSl = 20, "invalid alt SL";
    /// Invalid alternate traffic class.
    InvalidAltTrafficClass = 21, "invalid alt traffic class";
    /// Invalid alternate hop limit.
    InvalidAltHopLimit = 22, "invalid alt hop limit";
    /// Invalid alternate packet rate.
    InvalidAltPacketRate = 23, "invalid alt packet rate";
    /// Port CM redirect.
    PortCmRedirect = 24, "port CM redirect";
    /// Port redirect.
    PortRedirect = 25, "port redirect";
    /// Invalid MTU.
    InvalidMtu = 26, "invalid MTU";
    /// Insufficient responder resources.
    InsufficientRespResources = 27, "insufficient resp resources";
    /// Consumer defined: the application rejected (rdma_reject, or rdma_cm's own checks).
    ConsumerDefined = 28, "consumer defined";
    /// Invalid RNR retry.
    InvalidRnrRetry = 29, "invalid RNR retry";
    /// Duplicate local communication ID.
    DuplicateLocalCommId = 30, "duplicate local comm ID";
    /// Invalid class version.
    InvalidClassVersion = 31, "invalid class version";
    /// Invalid flow label.
    InvalidFlowLabel = 32, "invalid flow label";
    /// Invalid alternate flow label.
    InvalidAltFlowLabel = 33, "invalid alt flow label";
    /// Vendor option not supported (ECE).
    VendorOptionNotSupported = 35, "vendor option is not supported";
}
