//! RTU, DREQ and DREP (IBTA Tables 111-113; Linux `CM_RTU_*`, `CM_DREQ_*`, `CM_DREP_*`).
//!
//! ```text
//! RTU   0..4 Local Comm ID  4..8 Remote Comm ID  8..232 Private Data (224)
//! DREQ  0..4 Local Comm ID  4..8 Remote Comm ID  8..11 Remote QPN/EECN  11 reserved
//!       12..232 Private Data (220)
//! DREP  0..4 Local Comm ID  4..8 Remote Comm ID  8..232 Private Data (224)
//! ```

use crate::wire::Field::{Bits32, U8, U32};

field_message! {
    /// A zero-copy view of an RTU (Ready To Use).
    Rtu,
    /// An owned RTU.
    RtuRepr,
    232;
    fields {
        /// Local Communication ID of the sender (the active side).
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
    }
    bytes {
        /// Private Data (224 bytes).
        private_data, set_private_data: [224] = 8;
    }
}

field_message! {
    /// A zero-copy view of a DREQ (Disconnect Request).
    Dreq,
    /// An owned DREQ. Lossless.
    DreqRepr,
    232;
    fields {
        /// Local Communication ID of the sender.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
        /// Remote QPN/EECN (24 bits): the *receiver's* QPN. Linux ignores a DREQ whose value is
        /// not its local QPN (`cm_dreq_handler`).
        remote_qpn, set_remote_qpn: u32 = Bits32(8, 0xffff_ff00);
        /// Reserved byte 11.
        reserved11, set_reserved11: u8 = U8(11);
    }
    bytes {
        /// Private Data (220 bytes).
        private_data, set_private_data: [220] = 12;
    }
}

field_message! {
    /// A zero-copy view of a DREP (Disconnect Reply).
    Drep,
    /// An owned DREP.
    DrepRepr,
    232;
    fields {
        /// Local Communication ID of the sender.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
    }
    bytes {
        /// Private Data (224 bytes).
        private_data, set_private_data: [224] = 8;
    }
}
