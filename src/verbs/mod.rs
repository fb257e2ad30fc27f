//! The user-facing API, shaped like ibverbs: [`Device`] (`ibv_context`), [`ProtectionDomain`],
//! [`MemoryRegion`], [`CompletionQueue`], [`QueuePair`] (RC, UC and UD), [`AddressHandle`],
//! [`SharedReceiveQueue`], work requests and completions.
//!
//! ```no_run
//! use softroce::verbs::*;
//! let dev = Device::open(DeviceConfig::new("127.0.0.1"))?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(64)?;
//! let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
//! qp.modify(&QpAttrs::init(Access::REMOTE_WRITE))?;
//! # Ok::<(), softroce::verbs::Error>(())
//! ```
//!
//! Every misuse is a typed [`Error`], never a panic, and the safe API has no raw pointers.
//! How application threads and remote peers share registered memory soundly is described in
//! [`mr`]; how progress happens in [`engine`].

pub mod ah;
pub mod backend;
pub mod cq;
pub mod device;
pub mod engine;
pub mod error;
pub mod gid;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod rundir;
pub mod srq;
mod stall;

pub use ah::AddressHandle;
pub use backend::memory::MemoryNetwork;
pub use cq::CompletionQueue;
pub use device::{
    AsyncEvent, BackendKind, Device, DeviceAttr, DeviceConfig, DeviceCounters, PortAttr, PortState,
};
pub use error::{Error, Result};
pub use gid::{Gid, GidType};
pub use mr::{MemoryRegion, OutOfRegion};
pub use pd::ProtectionDomain;
pub use qp::{AddressVector, QpAttrs, QpInfo, QpInitAttr, QueuePair};
pub use srq::{SharedReceiveQueue, SrqAttr, SrqInitAttr};

pub use crate::transport::{
    Access, GRH_LEN, Mtu, Payload, QpCaps, QpEvent, QpState, QpType, RecvWr, RemoteAddr, SendOp, SendWr, Sge,
    UdDest, WcOpcode, WcStatus, WorkCompletion,
};
