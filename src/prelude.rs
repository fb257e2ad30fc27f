//! The names a verbs program uses, for a glob import that leaves `std`'s `Result` and `Error`
//! alone:
//!
//! ```no_run
//! use softroce::prelude::*;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dev = Device::open(DeviceConfig::new("127.0.0.1"))?;
//!     let pd = dev.alloc_pd()?;
//!     let cq = dev.create_cq(16)?;
//!     let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq).max_send_wr(32))?;
//!     let me = qp.endpoint(random_psn()); // send this to the peer
//!     # Ok(())
//! }
//! ```
//!
//! The verbs error type is [`VerbsError`] here (`softroce::verbs::Error`), its result
//! [`VerbsResult`].

pub use crate::transport::{
    Access, GRH_LEN, Lkey, Mtu, Payload, Qkey, QpCaps, QpEvent, QpState, QpType, Qpn, RecvWr, RemoteAddr,
    Rkey, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
};
pub use crate::verbs::{
    AddressHandle, AddressVector, AsyncEvent, BackendKind, CompletionQueue, ConnectOptions, Device,
    DeviceConfig, Gid, GidIndex, MemoryRegion, ProtectionDomain, QpAttrs, QpEndpoint, QpInitAttr, QueuePair,
    SharedReceiveQueue, SrqInitAttr, random_psn,
};
pub use crate::verbs::{Error as VerbsError, Result as VerbsResult};
pub use crate::wire::Psn;
