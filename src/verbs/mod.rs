//! The user-facing API, shaped like ibverbs: [`Device`] (`ibv_context`), [`ProtectionDomain`],
//! [`MemoryRegion`], [`CompletionQueue`], [`QueuePair`] (RC, UC and UD), [`AddressHandle`],
//! [`SharedReceiveQueue`], work requests and completions. `use softroce::prelude::*` imports
//! all of it without shadowing `std`'s `Result` and `Error`.
//!
//! # A SEND and its receive
//!
//! Two devices (here on an in-process network; [`DeviceConfig::new`] takes a local IP address
//! or interface name for real packets), an RC QP on each, connected with the endpoints they
//! would exchange out of band, then one SEND into a posted receive:
//!
//! ```
//! use std::time::Duration;
//! use softroce::prelude::*;
//! use softroce::verbs::MemoryNetwork;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let net = MemoryNetwork::new(Default::default(), 1);
//! let (a, b) = (Device::open(DeviceConfig::in_memory(&net, "10.0.0.1"))?,
//!               Device::open(DeviceConfig::in_memory(&net, "10.0.0.2"))?);
//! let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
//! let qa = pa.create_qp(&QpInitAttr::rc(&ca, &ca))?;
//! let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb))?;
//! let (src, dst) = (pa.alloc_mr(4096, Access::LOCAL_WRITE)?, pb.alloc_mr(4096, Access::LOCAL_WRITE)?);
//!
//! // What each side sends the other (over TCP, say): GID, QP number, first PSN.
//! let (ea, eb) = (qa.endpoint(random_psn()), qb.endpoint(random_psn()));
//! qa.connect(&ea, &eb, &ConnectOptions::default())?;
//! qb.connect(&eb, &ea, &ConnectOptions::default())?;
//!
//! // The receiver posts a buffer first; the sender's SEND lands in it.
//! qb.post_recv(RecvWr::new(7, &[dst.sge(0, 4096)]))?;
//! src.write(0, b"ping")?;
//! qa.post_send(SendWr::send(1, &[src.sge(0, 4)]))?;
//!
//! let sent = ca.poll_one_wait(Duration::from_secs(5))?.expect("send completion");
//! assert_eq!((sent.wr_id, sent.status, sent.opcode), (1, WcStatus::Success, WcOpcode::Send));
//! let got = cb.poll_one_wait(Duration::from_secs(5))?.expect("receive completion");
//! assert_eq!((got.wr_id, got.status, got.opcode), (7, WcStatus::Success, WcOpcode::Recv));
//! assert_eq!((got.byte_len, got.qp_num), (4, qb.qp_num()));
//! let mut text = [0u8; 4];
//! dst.read(0, &mut text)?;
//! assert_eq!(&text, b"ping");
//! # Ok(()) }
//! ```
//!
//! # One-sided operations
//!
//! The target hands out [`MemoryRegion::remote`] (address and rkey); the initiator names it:
//!
//! ```
//! # use std::time::Duration;
//! # use softroce::prelude::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let net = softroce::verbs::MemoryNetwork::new(Default::default(), 2);
//! # let (a, b) = (Device::open(DeviceConfig::in_memory(&net, "10.0.0.1"))?,
//! #               Device::open(DeviceConfig::in_memory(&net, "10.0.0.2"))?);
//! # let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//! # let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
//! # let qa = pa.create_qp(&QpInitAttr::rc(&ca, &ca))?;
//! # let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb))?;
//! # let (ea, eb) = (qa.endpoint(random_psn()), qb.endpoint(random_psn()));
//! # qa.connect(&ea, &eb, &ConnectOptions::default())?;
//! # qb.connect(&eb, &ea, &ConnectOptions::default())?;
//! let local = pa.alloc_mr(64, Access::LOCAL_WRITE)?;
//! let target = pb.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)?;
//! let there = target.remote(0); // sent to the initiator out of band
//!
//! local.write(0, b"hello, RDMA")?;
//! qa.post_send(SendWr::write(1, &[local.sge(0, 11)], there))?;
//! qa.post_send(SendWr::fetch_add(2, local.sge(16, 8), target.remote(32), 5))?;
//! for _ in 0..2 {
//!     let wc = ca.poll_one_wait(Duration::from_secs(5))?.expect("a completion");
//!     assert_eq!(wc.status, WcStatus::Success);
//! }
//! assert_eq!(&target.to_vec()[..11], b"hello, RDMA");
//! assert_eq!(target.atomic_u64(32)?.load(std::sync::atomic::Ordering::Relaxed), 5);
//! # Ok(()) }
//! ```
//!
//! # Datagrams (UD)
//!
//! A UD QP needs no peer: each send names an address handle, the peer's QP number and Q_Key;
//! each receive buffer starts with the 40-byte GRH area ([`GRH_LEN`]):
//!
//! ```
//! # use std::time::Duration;
//! # use softroce::prelude::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let net = softroce::verbs::MemoryNetwork::new(Default::default(), 3);
//! # let (a, b) = (Device::open(DeviceConfig::in_memory(&net, "10.0.0.1"))?,
//! #               Device::open(DeviceConfig::in_memory(&net, "10.0.0.2"))?);
//! # let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//! # let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
//! const QKEY: Qkey = Qkey::new(0x1111_1111);
//! let (qa, qb) = (pa.create_qp(&QpInitAttr::ud(&ca, &ca))?, pb.create_qp(&QpInitAttr::ud(&cb, &cb))?);
//! for qp in [&qa, &qb] {
//!     qp.modify(&QpAttrs::init_ud(QKEY))?;
//!     qp.modify(&QpAttrs::rtr_ud())?;
//!     qp.modify(&QpAttrs::rts_unreliable(random_psn()))?;
//! }
//! let (src, dst) = (pa.alloc_mr(64, Access::LOCAL_WRITE)?, pb.alloc_mr(GRH_LEN + 64, Access::LOCAL_WRITE)?);
//! qb.post_recv(RecvWr::new(1, &[dst.sge(0, (GRH_LEN + 64) as u32)]))?;
//!
//! let ah = pa.create_ah(&AddressVector::new(b.own_gid(), a.default_gid_index()))?;
//! src.write(0, b"datagram")?;
//! qa.post_send(SendWr::send(2, &[src.sge(0, 8)]).to(ah.dest(qb.qp_num(), QKEY)))?;
//!
//! let wc = cb.poll_one_wait(Duration::from_secs(5))?.expect("a receive completion");
//! assert_eq!((wc.status, wc.byte_len, wc.src_qp, wc.grh), (WcStatus::Success, 40 + 8, qa.qp_num(), true));
//! assert_eq!(&dst.to_vec()[GRH_LEN..GRH_LEN + 8], b"datagram");
//! # Ok(()) }
//! ```
//!
//! Numbers that sit side by side have their own types ([`Qpn`], [`Psn`], [`Lkey`], [`Rkey`],
//! [`Qkey`], [`GidIndex`]); `new`/`value` convert from and to the raw integers. Every
//! attribute ibverbs has stays reachable: [`QueuePair::modify`] takes any subset
//! ([`QpAttrs`], `None` = not in the mask), [`QueuePair::query`] reports them, work requests
//! are plain structs ([`SendWr`], [`RecvWr`]), and
//! [`ProtectionDomain::register_raw`] registers memory the application owns.
//!
//! Every misuse is a typed [`Error`], never a panic, and the safe API has no raw pointers.
//! How application threads and remote peers share registered memory soundly is described in
//! [`mr`]; how progress happens in [`engine`](crate::engine).

pub mod ah;
pub mod cm;
pub mod cq;
pub mod device;
pub use crate::engine::error;
pub use crate::wire::gid;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
#[doc(hidden)]
pub use crate::engine::share::bench as share_bench;
pub mod srq;

pub use crate::engine::backend::memory::MemoryNetwork;
pub use crate::engine::injector::FaultCounters;
pub use ah::AddressHandle;
pub use cq::CompletionQueue;
pub use device::{
    AsyncEvent, BackendKind, Device, DeviceAttr, DeviceConfig, DeviceCounters, JunkCounters, PortAttr,
    PortState, Sharing,
};
pub use error::{Error, Result};
pub use gid::{Gid, GidIndex, GidType};
pub use mr::{MemoryRegion, OutOfRegion};
pub use mw::{MemoryWindow, MwType};
pub use pd::ProtectionDomain;
pub use qp::{AddressVector, ConnectOptions, QpAttrs, QpEndpoint, QpInfo, QpInitAttr, QueuePair, random_psn};
pub use srq::{SharedReceiveQueue, SrqAttr, SrqInitAttr};

pub use crate::transport::{
    Access, GRH_LEN, Lkey, Mtu, MwBind, NetworkHdr, Payload, Qkey, QpCaps, QpEvent, QpState, QpType, Qpn,
    RecvWr, RemoteAddr, Rkey, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
};
pub use crate::wire::Psn;
