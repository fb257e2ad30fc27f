//! REQ, the connection request (IBTA 12.6.5, Table 106; Linux `CM_REQ_*` in
//! `include/rdma/ibta_vol1_c12.h`). Offsets are from the start of the MAD data area
//! (`D+n` = MAD byte `24+n`); bit masks are the kernel's `IBA_FIELD*_LOC` masks.
//!
//! ```text
//!  0..4    Local Communication ID
//!  4       reserved            5..8  ECE vendor ID (kernels >= 5.8; 0 without ECE)
//!  8..16   Service ID          16..24 Local CA GUID
//!  24..28  reserved            28..32 Local Q_Key
//!  32..35  Local QPN           35    Responder Resources
//!  36..39  Local EECN          39    Initiator Depth
//!  40..43  Remote EECN         43    Remote CM Response Timeout:5 Transport Service Type:2 E2E:1
//!  44..47  Starting PSN        47    Local CM Response Timeout:5 Retry Count:3
//!  48..50  Partition Key       50    Path MTU:4 RDC Exists:1 RNR Retry Count:3
//!  51      Max CM Retries:4 SRQ:1 Extended Transport Type:3
//!  52..96  primary path: local LID, remote LID, local GID, remote GID,
//!          Flow Label:20 reserved:6 Packet Rate:6, Traffic Class, Hop Limit,
//!          SL:4 Subnet Local:1 reserved:3, Local ACK Timeout:5 reserved:3
//!  96..140 alternate path (same layout; byte 139 also holds SAP Supported, 0x04)
//!  140..232 Private Data (92 bytes; rdma_cm puts its 36-byte `cma_hdr` first)
//! ```

use crate::wire::Field::{Bits8, Bits32, U8, U16, U32, U64};

field_message! {
    /// A zero-copy view of a REQ (the 232-byte MAD data area).
    Req,
    /// An owned REQ. Lossless: reserved bits are kept.
    ReqRepr,
    232;
    fields {
        /// Local Communication ID: the sender's connection identifier.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Reserved byte before the ECE vendor ID.
        reserved4, set_reserved4: u8 = U8(4);
        /// ECE vendor ID (24 bits; Linux `CM_REQ_VENDOR_ID`, 0 when ECE is not used).
        vendor_id, set_vendor_id: u32 = Bits32(4, 0x00ff_ffff);
        /// Service ID (rdma_cm: port space << 16 | port).
        service_id, set_service_id: u64 = U64(8);
        /// Local CA GUID (the sender's node GUID).
        local_ca_guid, set_local_ca_guid: u64 = U64(16);
        /// Reserved word.
        reserved24, set_reserved24: u32 = U32(24);
        /// Local Q_Key (UD/RD only; 0 for RC).
        local_qkey, set_local_qkey: u32 = U32(28);
        /// Local QPN (24 bits): the sender's QP.
        local_qpn, set_local_qpn: u32 = Bits32(32, 0xffff_ff00);
        /// Responder Resources the sender offers (its RDMA READ/atomic target depth).
        responder_resources, set_responder_resources: u8 = U8(35);
        /// Local EE context number (RD only).
        local_eecn, set_local_eecn: u32 = Bits32(36, 0xffff_ff00);
        /// Initiator Depth the sender wants.
        initiator_depth, set_initiator_depth: u8 = U8(39);
        /// Remote EE context number (RD only).
        remote_eecn, set_remote_eecn: u32 = Bits32(40, 0xffff_ff00);
        /// Remote CM Response Timeout (5 bits, 4.096 us * 2^n).
        remote_cm_response_timeout, set_remote_cm_response_timeout: u8 = Bits8(43, 0xf8);
        /// Transport Service Type (2 bits): 0 RC, 1 UC, 3 see extended type.
        transport_service_type, set_transport_service_type: u8 = Bits8(43, 0x06);
        /// End-to-End Flow Control.
        end_to_end_flow_control, set_end_to_end_flow_control: u8 = Bits8(43, 0x01);
        /// Starting PSN (24 bits): Linux puts the PSN the *sender* expects to receive here.
        starting_psn, set_starting_psn: u32 = Bits32(44, 0xffff_ff00);
        /// Local CM Response Timeout (5 bits).
        local_cm_response_timeout, set_local_cm_response_timeout: u8 = Bits8(47, 0xf8);
        /// Retry Count (3 bits).
        retry_count, set_retry_count: u8 = Bits8(47, 0x07);
        /// Partition Key.
        partition_key, set_partition_key: u16 = U16(48);
        /// Path Packet Payload MTU (4 bits, IBTA enum: 1 = 256 ... 5 = 4096).
        path_mtu, set_path_mtu: u8 = Bits8(50, 0xf0);
        /// RDC Exists.
        rdc_exists, set_rdc_exists: u8 = Bits8(50, 0x08);
        /// RNR Retry Count (3 bits): used by the *passive* side's send queue.
        rnr_retry_count, set_rnr_retry_count: u8 = Bits8(50, 0x07);
        /// Max CM Retries (4 bits).
        max_cm_retries, set_max_cm_retries: u8 = Bits8(51, 0xf0);
        /// SRQ.
        srq, set_srq: u8 = Bits8(51, 0x08);
        /// Extended Transport Type (3 bits; 1 = XRC).
        extended_transport_type, set_extended_transport_type: u8 = Bits8(51, 0x07);
        /// Primary Local Port LID (0xffff, permissive, on routed RoCE paths).
        primary_local_lid, set_primary_local_lid: u16 = U16(52);
        /// Primary Remote Port LID.
        primary_remote_lid, set_primary_remote_lid: u16 = U16(54);
        /// Primary Flow Label (the top 20 bits of the word at 88).
        primary_flow_label, set_primary_flow_label: u32 = Bits32(88, 0xffff_f000);
        /// Reserved 6 bits after the primary flow label.
        primary_reserved88, set_primary_reserved88: u8 = Bits32(88, 0x0000_0fc0);
        /// Primary Packet Rate (6 bits, the low bits of byte 91).
        primary_packet_rate, set_primary_packet_rate: u8 = Bits8(91, 0x3f);
        /// Primary Traffic Class.
        primary_traffic_class, set_primary_traffic_class: u8 = U8(92);
        /// Primary Hop Limit.
        primary_hop_limit, set_primary_hop_limit: u8 = U8(93);
        /// Primary SL (4 bits).
        primary_sl, set_primary_sl: u8 = Bits8(94, 0xf0);
        /// Primary Subnet Local.
        primary_subnet_local, set_primary_subnet_local: u8 = Bits8(94, 0x08);
        /// Reserved 3 bits of byte 94.
        primary_reserved94, set_primary_reserved94: u8 = Bits8(94, 0x07);
        /// Primary Local ACK Timeout (5 bits).
        primary_local_ack_timeout, set_primary_local_ack_timeout: u8 = Bits8(95, 0xf8);
        /// Reserved 3 bits of byte 95.
        primary_reserved95, set_primary_reserved95: u8 = Bits8(95, 0x07);
        /// Alternate Local Port LID (non-zero means "there is an alternate path" to Linux).
        alternate_local_lid, set_alternate_local_lid: u16 = U16(96);
        /// Alternate Remote Port LID.
        alternate_remote_lid, set_alternate_remote_lid: u16 = U16(98);
        /// Alternate Flow Label.
        alternate_flow_label, set_alternate_flow_label: u32 = Bits32(132, 0xffff_f000);
        /// Reserved 6 bits after the alternate flow label.
        alternate_reserved132, set_alternate_reserved132: u8 = Bits32(132, 0x0000_0fc0);
        /// Alternate Packet Rate.
        alternate_packet_rate, set_alternate_packet_rate: u8 = Bits8(135, 0x3f);
        /// Alternate Traffic Class.
        alternate_traffic_class, set_alternate_traffic_class: u8 = U8(136);
        /// Alternate Hop Limit.
        alternate_hop_limit, set_alternate_hop_limit: u8 = U8(137);
        /// Alternate SL.
        alternate_sl, set_alternate_sl: u8 = Bits8(138, 0xf0);
        /// Alternate Subnet Local.
        alternate_subnet_local, set_alternate_subnet_local: u8 = Bits8(138, 0x08);
        /// Reserved 3 bits of byte 138.
        alternate_reserved138, set_alternate_reserved138: u8 = Bits8(138, 0x07);
        /// Alternate Local ACK Timeout.
        alternate_local_ack_timeout, set_alternate_local_ack_timeout: u8 = Bits8(139, 0xf8);
        /// SAP Supported.
        sap_supported, set_sap_supported: u8 = Bits8(139, 0x04);
        /// Reserved 2 bits of byte 139.
        alternate_reserved139, set_alternate_reserved139: u8 = Bits8(139, 0x03);
    }
    bytes {
        /// Primary Local Port GID (the sender's GID; the passive side replies there).
        primary_local_gid, set_primary_local_gid: [16] = 56;
        /// Primary Remote Port GID.
        primary_remote_gid, set_primary_remote_gid: [16] = 72;
        /// Alternate Local Port GID.
        alternate_local_gid, set_alternate_local_gid: [16] = 100;
        /// Alternate Remote Port GID.
        alternate_remote_gid, set_alternate_remote_gid: [16] = 116;
        /// Private Data (92 bytes).
        private_data, set_private_data: [92] = 140;
    }
}

impl<T: AsRef<[u8]>> Req<T> {
    /// True when the REQ describes an alternate path: Linux tests the alternate local LID
    /// (`cm_req_has_alt_path`; the OPA GID case does not arise on RoCE).
    pub fn has_alternate_path(&self) -> bool {
        self.alternate_local_lid() != 0
    }
}
