//! ClassPortInfo (IBTA 13.4.8.1; Linux `struct ib_class_port_info`), the attribute every
//! management class may answer. The CM's 72 bytes start at the MAD data area.
//!
//! Linux's CM does not implement it: the CM agent registers only the Send method, so a `Get`
//! or `Set` of ClassPortInfo to the CM class is answered by the MAD layer with a `GetResp`
//! whose status is 0x000c, "unsupported method/attribute" (`generate_unmatched_resp` in
//! `mad.c`), and the data is the request's own. This view decodes what a peer sends.
//!
//! ```text
//!  0 BaseVersion  1 ClassVersion  2..4 CapabilityMask  4..8 CapabilityMask2:27 RespTimeValue:5
//!  8..24 RedirectGID  24..28 RedirectTC:8 SL:4 FL:20  28..30 RedirectLID  30..32 RedirectP_Key
//!  32 reserved  33..36 RedirectQP  36..40 RedirectQ_Key  40..56 TrapGID
//!  56..60 TrapTC:8 SL:4 FL:20  60..62 TrapLID  62..64 TrapP_Key  64 TrapHL  65..68 TrapQP
//!  68..72 TrapQ_Key  72..232 reserved
//! ```

use crate::wire::Field::{Bits32, U8, U16, U32};

field_message! {
    /// A zero-copy view of ClassPortInfo in a MAD data area.
    ClassPortInfo,
    /// An owned ClassPortInfo. Lossless (the reserved tail is kept).
    ClassPortInfoRepr,
    232;
    fields {
        /// BaseVersion.
        base_version, set_base_version: u8 = U8(0);
        /// ClassVersion.
        class_version, set_class_version: u8 = U8(1);
        /// CapabilityMask.
        capability_mask, set_capability_mask: u16 = U16(2);
        /// CapabilityMask2 (27 bits).
        capability_mask2, set_capability_mask2: u32 = Bits32(4, 0xffff_ffe0);
        /// RespTimeValue (5 bits).
        resp_time_value, set_resp_time_value: u8 = Bits32(4, 0x0000_001f);
        /// RedirectTC.
        redirect_tc, set_redirect_tc: u8 = Bits32(24, 0xff00_0000);
        /// RedirectSL.
        redirect_sl, set_redirect_sl: u8 = Bits32(24, 0x00f0_0000);
        /// RedirectFL (20 bits).
        redirect_fl, set_redirect_fl: u32 = Bits32(24, 0x000f_ffff);
        /// RedirectLID.
        redirect_lid, set_redirect_lid: u16 = U16(28);
        /// RedirectP_Key.
        redirect_pkey, set_redirect_pkey: u16 = U16(30);
        /// Reserved byte before RedirectQP.
        reserved32, set_reserved32: u8 = U8(32);
        /// RedirectQP (24 bits).
        redirect_qp, set_redirect_qp: u32 = Bits32(32, 0x00ff_ffff);
        /// RedirectQ_Key.
        redirect_qkey, set_redirect_qkey: u32 = U32(36);
        /// TrapTC.
        trap_tc, set_trap_tc: u8 = Bits32(56, 0xff00_0000);
        /// TrapSL.
        trap_sl, set_trap_sl: u8 = Bits32(56, 0x00f0_0000);
        /// TrapFL (20 bits).
        trap_fl, set_trap_fl: u32 = Bits32(56, 0x000f_ffff);
        /// TrapLID.
        trap_lid, set_trap_lid: u16 = U16(60);
        /// TrapP_Key.
        trap_pkey, set_trap_pkey: u16 = U16(62);
        /// TrapHL.
        trap_hl, set_trap_hl: u8 = U8(64);
        /// TrapQP (24 bits).
        trap_qp, set_trap_qp: u32 = Bits32(64, 0x00ff_ffff);
        /// TrapQ_Key.
        trap_qkey, set_trap_qkey: u32 = U32(68);
    }
    bytes {
        /// RedirectGID.
        redirect_gid, set_redirect_gid: [16] = 8;
        /// TrapGID.
        trap_gid, set_trap_gid: [16] = 40;
        /// The reserved rest of the data area.
        reserved72, set_reserved72: [160] = 72;
    }
}
