//! REP, the connection reply (IBTA Table 110; Linux `CM_REP_*`). Offsets from the MAD data
//! area.
//!
//! ```text
//!  0..4   Local Communication ID     4..8   Remote Communication ID
//!  8..12  Local Q_Key
//!  12..15 Local QPN                  15     ECE vendor ID, high byte
//!  16..19 Local EE Context Number    19     ECE vendor ID, middle byte
//!  20..23 Starting PSN               23     ECE vendor ID, low byte
//!  24     Responder Resources        25     Initiator Depth
//!  26     Target ACK Delay:5 Failover Accepted:2 End-to-End Flow Control:1
//!  27     RNR Retry Count:3 SRQ:1 reserved:4
//!  28..36 Local CA GUID              36..232 Private Data (196 bytes)
//! ```

use crate::wire::Field::{Bits8, Bits32, U8, U32, U64};

field_message! {
    /// A zero-copy view of a REP.
    Rep,
    /// An owned REP. Lossless.
    RepRepr,
    232;
    fields {
        /// Local Communication ID: the replier's identifier.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID: the REQ's Local Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
        /// Local Q_Key (0 for RC).
        local_qkey, set_local_qkey: u32 = U32(8);
        /// Local QPN (24 bits): the replier's QP.
        local_qpn, set_local_qpn: u32 = Bits32(12, 0xffff_ff00);
        /// ECE vendor ID, high byte (`CM_REP_VENDOR_ID_H`).
        vendor_id_h, set_vendor_id_h: u8 = U8(15);
        /// Local EE Context Number (24 bits; XRC targets put their QPN here).
        local_eecn, set_local_eecn: u32 = Bits32(16, 0xffff_ff00);
        /// ECE vendor ID, middle byte.
        vendor_id_m, set_vendor_id_m: u8 = U8(19);
        /// Starting PSN (24 bits): the PSN the *replier* expects to receive.
        starting_psn, set_starting_psn: u32 = Bits32(20, 0xffff_ff00);
        /// ECE vendor ID, low byte.
        vendor_id_l, set_vendor_id_l: u8 = U8(23);
        /// Responder Resources.
        responder_resources, set_responder_resources: u8 = U8(24);
        /// Initiator Depth.
        initiator_depth, set_initiator_depth: u8 = U8(25);
        /// Target ACK Delay (5 bits): the replier's `local_ca_ack_delay` (rxe: 15).
        target_ack_delay, set_target_ack_delay: u8 = Bits8(26, 0xf8);
        /// Failover Accepted (2 bits).
        failover_accepted, set_failover_accepted: u8 = Bits8(26, 0x06);
        /// End-to-End Flow Control.
        end_to_end_flow_control, set_end_to_end_flow_control: u8 = Bits8(26, 0x01);
        /// RNR Retry Count (3 bits): used by the *active* side's send queue.
        rnr_retry_count, set_rnr_retry_count: u8 = Bits8(27, 0xe0);
        /// SRQ.
        srq, set_srq: u8 = Bits8(27, 0x10);
        /// Reserved 4 bits of byte 27.
        reserved27, set_reserved27: u8 = Bits8(27, 0x0f);
        /// Local CA GUID (the replier's node GUID).
        local_ca_guid, set_local_ca_guid: u64 = U64(28);
    }
    bytes {
        /// Private Data (196 bytes; rdma_cm puts only user data here).
        private_data, set_private_data: [196] = 36;
    }
}

impl RepRepr {
    /// The 24-bit ECE vendor ID assembled from its three bytes.
    pub fn vendor_id(&self) -> u32 {
        u32::from(self.vendor_id_h) << 16 | u32::from(self.vendor_id_m) << 8 | u32::from(self.vendor_id_l)
    }
}
