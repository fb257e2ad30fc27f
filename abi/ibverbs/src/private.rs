//! `SOFTROCE_PRIVATE_1`: softroce's own versioned interface, for its `librdmacm.so.1` (issue
//! 13).
//!
//! That library is a second cdylib and must **not** link the softroce crate: two copies would
//! mean two device tables and two engines, and an `ibv_context *` from one would mean nothing
//! to the other (Rust statics are per cdylib). It has `DT_NEEDED libibverbs.so.1`, opens its
//! one shared context per device with the public `ibv_open_device`, and reaches everything
//! else of this runtime through functions exported under this node (bound by version, so a
//! mismatched pair fails at load time rather than misbehaving).
//!
//! What the node holds: every librdmacm function, as `softroce_<name>` (implemented in
//! [`crate::rdmacm`]), which `abi/rdmacm`'s trampolines jump to, plus
//! [`softroce_private_version`]. The RDMA CM itself (address → device, the IB CM on QP1, QP
//! transitions) is softroce's Rust CM inside this library, so nothing lower-level needs to
//! cross.

/// The version of the private interface (1); librdmacm checks it at start.
pub extern "C" fn softroce_private_version() -> u32 {
    1
}
