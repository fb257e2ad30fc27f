//! MRA, Message Receipt Acknowledgement (IBTA Table 107; Linux `CM_MRA_*`).
//!
//! ```text
//!  0..4  Local Communication ID   4..8  Remote Communication ID
//!  8     Message MRAed:2 reserved:6
//!  9     Service Timeout:5 reserved:3
//!  10..232 Private Data (222 bytes)
//! ```

use crate::wire::Field::{Bits8, U32};

field_message! {
    /// A zero-copy view of an MRA.
    Mra,
    /// An owned MRA. Lossless.
    MraRepr,
    232;
    fields {
        /// Local Communication ID of the sender.
        local_comm_id, set_local_comm_id: u32 = U32(0);
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = U32(4);
        /// Message MRAed (2 bits): 0 REQ, 1 REP, 2 other (LAP).
        message_mraed, set_message_mraed: u8 = Bits8(8, 0xc0);
        /// Reserved 6 bits of byte 8.
        reserved8, set_reserved8: u8 = Bits8(8, 0x3f);
        /// Service Timeout (5 bits): how long the sender needs, 4.096 us * 2^n.
        service_timeout, set_service_timeout: u8 = Bits8(9, 0xf8);
        /// Reserved 3 bits of byte 9.
        reserved9, set_reserved9: u8 = Bits8(9, 0x07);
    }
    bytes {
        /// Private Data (222 bytes).
        private_data, set_private_data: [222] = 10;
    }
}
