//! softroce: a userspace Soft-RoCE (RoCEv2) stack in pure Rust.
//!
//! It speaks the packets of the Linux kernel's rxe driver and of RDMA NICs — InfiniBand
//! transport headers over UDP port 4791 with a valid ICRC — and gives Rust programs a
//! verbs-like API, with no RDMA NIC and no kernel module.
//!
//! # Example
//!
//! Two devices in one process, each its own RoCEv2 endpoint on a loopback address (UDP port
//! 4791, the same packets kernel rxe sends); an RC queue pair on each, connected, and a SEND
//! that lands in the peer's posted receive buffer. Two programs on two machines do the same,
//! exchanging the two [`verbs::QpEndpoint`]s over their own socket (as `ibv_rc_pingpong` does).
//!
//! ```
//! use std::time::Duration;
//! use softroce::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let n = std::process::id() % 250 + 1;
//! # let (ip_a, ip_b) = (format!("127.77.{n}.1"), format!("127.77.{n}.2"));
//! // let (ip_a, ip_b) = ("127.0.0.1", "127.0.0.2");
//! let a = Device::open(DeviceConfig::new(ip_a))?; // softroce over UDP: no NIC, no root
//! let b = Device::open(DeviceConfig::new(ip_b))?;
//! let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
//! let qa = pa.create_qp(&QpInitAttr::rc(&ca, &ca))?;
//! let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb))?;
//!
//! // Each side's GID, QP number and first PSN; a real program sends its own to the peer.
//! let (ea, eb) = (qa.endpoint(random_psn()), qb.endpoint(random_psn()));
//! qa.connect(&ea, &eb, &ConnectOptions::default())?;
//! qb.connect(&eb, &ea, &ConnectOptions::default())?;
//!
//! let dst = pb.alloc_mr(4096, Access::LOCAL_WRITE)?;
//! qb.post_recv(RecvWr::new(7, &[dst.sge(0, 4096)]))?; // the receiver posts first
//! let src = pa.alloc_mr(4096, Access::LOCAL_WRITE)?;
//! src.write(0, b"hello, RoCE")?;
//! qa.post_send(SendWr::send(1, &[src.sge(0, 11)]))?;
//!
//! let got = cb.poll_one_wait(Duration::from_secs(5))?.expect("a receive completion");
//! assert_eq!((got.wr_id, got.status, got.byte_len), (7, WcStatus::Success, 11));
//! assert_eq!(&dst.to_vec()[..11], b"hello, RoCE");
//! let sent = ca.poll_one_wait(Duration::from_secs(5))?.expect("a send completion");
//! assert_eq!((sent.wr_id, sent.status), (1, WcStatus::Success));
//! # Ok(()) }
//! ```
//!
//! `cargo run --example send_recv` does the same between two processes; [`verbs`] shows
//! one-sided operations (WRITE, READ, atomics) and datagrams (UD).
//!
//! # Modules
//!
//! - [`wire`]: zero-copy packet views, owned representations, the opcode table and the ICRC.
//! - [`transport`]: the RC, UC and UD state machines, sans-IO.
//! - [`verbs`]: the user-facing API, shaped like ibverbs; [`prelude`] for a glob import.
//! - [`faults`]: the fault SPEC (`SOFTROCE_FAULTS`) and the fate of a packet under it.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod engine;
pub mod faults;
pub mod prelude;
pub mod rsocket;
pub mod transport;
pub mod verbs;
pub mod wire;
