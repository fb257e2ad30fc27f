//! LAP and APR, alternate path load and response (IBTA Tables 115-116; Linux `CM_LAP_*`,
//! `CM_APR_*`). Recognised and decoded only: on RoCE ports Linux ignores both
//! (`cm_lap_handler` and `cm_apr_handler` return at once when `rdma_protocol_roce()`).
//!
//! ```text
//! LAP  0..4 Local Comm ID  4..8 Remote Comm ID  8..12 reserved  12..15 Remote QPN/EECN
//!      15 Remote CM Response Timeout:5 reserved:3  16..20 reserved
//!      20..22 Alt Local LID  22..24 Alt Remote LID  24..40 Alt Local GID  40..56 Alt Remote GID
//!      56..59 Alt Flow Label:20 reserved:4  59 Alt Traffic Class  60 Alt Hop Limit
//!      61 reserved:2 Alt Packet Rate:6  62 Alt SL:4 Subnet Local:1 reserved:3
//!      63 Alt Local ACK Timeout:5 reserved:3  64..232 Private Data (168)
//! APR  0..4 Local Comm ID  4..8 Remote Comm ID  8 Additional Info Length  9 AP Status
//!      10..12 reserved  12..84 Additional Info (72)  84..232 Private Data (148)
//! ```

use crate::wire::Field::{Bits8, Bits32, U8, U16, U32};

field_message! {
    /// A zero-copy view of a LAP.
    Lap,
    /// An owned LAP. Lossless.
    LapRepr,
    232;
    fields {
        /// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
        /// Reserved word at 8.
        reserved8, set_reserved8: u32 = U32(8);
        /// Remote QPN/EECN (24 bits).
        remote_qpn, set_remote_qpn: u32 = Bits32(12, 0xffff_ff00);
        /// Remote CM Response Timeout (5 bits).
        remote_cm_response_timeout, set_remote_cm_response_timeout: u8 = Bits8(15, 0xf8);
        /// Reserved 3 bits of byte 15.
        reserved15, set_reserved15: u8 = Bits8(15, 0x07);
        /// Reserved word at 16.
        reserved16, set_reserved16: u32 = U32(16);
        /// Alternate Local Port LID.
        alternate_local_lid, set_alternate_local_lid: u16 = U16(20);
        /// Alternate Remote Port LID.
        alternate_remote_lid, set_alternate_remote_lid: u16 = U16(22);
        /// Alternate Flow Label (20 bits).
        alternate_flow_label, set_alternate_flow_label: u32 = Bits32(56, 0xffff_f000);
        /// Reserved 4 bits after the flow label.
        reserved58, set_reserved58: u8 = Bits32(56, 0x0000_0f00);
        /// Alternate Traffic Class.
        alternate_traffic_class, set_alternate_traffic_class: u8 = U8(59);
        /// Alternate Hop Limit.
        alternate_hop_limit, set_alternate_hop_limit: u8 = U8(60);
        /// Reserved 2 bits of byte 61.
        reserved61, set_reserved61: u8 = Bits8(61, 0xc0);
        /// Alternate Packet Rate (6 bits).
        alternate_packet_rate, set_alternate_packet_rate: u8 = Bits8(61, 0x3f);
        /// Alternate SL (4 bits).
        alternate_sl, set_alternate_sl: u8 = Bits8(62, 0xf0);
        /// Alternate Subnet Local.
        alternate_subnet_local, set_alternate_subnet_local: u8 = Bits8(62, 0x08);
        /// Reserved 3 bits of byte 62.
        reserved62, set_reserved62: u8 = Bits8(62, 0x07);
        /// Alternate Local ACK Timeout (5 bits).
        alternate_local_ack_timeout, set_alternate_local_ack_timeout: u8 = Bits8(63, 0xf8);
        /// Reserved 3 bits of byte 63.
        reserved63, set_reserved63: u8 = Bits8(63, 0x07);
    }
    bytes {
        /// Alternate Local Port GID.
        alternate_local_gid, set_alternate_local_gid: [16] = 24;
        /// Alternate Remote Port GID.
        alternate_remote_gid, set_alternate_remote_gid: [16] = 40;
        /// Private Data (168 bytes).
        private_data, set_private_data: [168] = 64;
    }
}

field_message! {
    /// A zero-copy view of an APR.
    Apr,
    /// An owned APR. Lossless.
    AprRepr,
    232;
    fields {
        /// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
        /// Additional Information Length.
        additional_info_length, set_additional_info_length: u8 = U8(8);
        /// AP Status.
        ap_status, set_ap_status: u8 = U8(9);
        /// Reserved.
        reserved10, set_reserved10: u16 = U16(10);
    }
    bytes {
        /// Additional Information (72 bytes).
        additional_info, set_additional_info: [72] = 12;
        /// Private Data (148 bytes).
        private_data, set_private_data: [148] = 84;
    }
}
