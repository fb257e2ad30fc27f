//! A drop-in `libibverbs.so.1` made from softroce: unmodified ibverbs programs (Debian's
//! `ibv_devinfo`, the pingpongs, perftest, pyverbs) run on softroce devices, with no kernel
//! module, no `/dev/infiniband` and no root:
//!
//! ```sh
//! cargo build --release
//! LD_LIBRARY_PATH=$(target/release/softroce lib-path) ibv_devinfo -v
//! ```
//!
//! The design is in `docs/design/libibverbs.md`; in short:
//!
//! * [`exports`]: one table of every symbol of Debian 12's libibverbs (rdma-core 44) with its
//!   version node, plus the private `SOFTROCE_PRIVATE_1` node for softroce's librdmacm.
//! * [`ffi`]: the C structs, written from the installed `<infiniband/verbs.h>` and checked
//!   field by field against it (`layout`).
//! * [`runtime`]: the device list (`SOFTROCE_DEVICES`) and one device runtime (softroce
//!   `Device`, engine thread) per device per process, shared by every context.
//! * [`context`]: a context is a `verbs_context` (its `ibv_context` at +320) followed by the
//!   Rust side; [`object::Obj`] gives every later object the same shape (C struct first).
//! * [`ops`]: the function-pointer slots the header inlines call.
//! * [`device`], [`sysfs`], [`misc`]: the device-level verbs, implemented; [`stubs`],
//!   [`compat`], [`private34`]: the rest, each failing cleanly with the real library's errno.
//!
//! No Rust panic unwinds into C: every export runs inside [`util::guard`].

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// The implementations are referenced only from `global_asm!` rows, which the unit-test build
// leaves out (it has no version script).
#![cfg_attr(test, allow(dead_code))]

pub mod ah;
pub mod compat;
pub mod context;
pub mod cq;
pub mod device;
pub mod devnode;
pub mod events;
pub mod exports;
pub mod ffi;
pub mod kern;
#[cfg(test)]
mod layout;
pub mod misc;
pub mod mw;
pub mod object;
pub mod ops;
pub mod pd;
pub mod private;
pub mod private34;
pub mod qp;
pub mod rdmacm;
pub mod runtime;
pub mod srq;
pub mod stubs;
pub mod sysfs;
pub mod util;
