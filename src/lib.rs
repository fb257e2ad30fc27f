//! softroce: a userspace Soft-RoCE (RoCEv2) stack in pure Rust.
//!
//! It speaks the packets of the Linux kernel's rxe driver and of RDMA NICs — InfiniBand
//! transport headers over UDP port 4791 with a valid ICRC — and gives Rust programs a
//! verbs-like API, with no RDMA NIC and no kernel module.
//!
//! - [`wire`]: zero-copy packet views, owned representations, the opcode table and the ICRC.
//! - [`transport`]: the RC, UC and UD state machines, sans-IO.
//! - [`verbs`]: the user-facing API, shaped like ibverbs; [`prelude`] for a glob import.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod prelude;
pub mod transport;
pub mod verbs;
pub mod wire;
