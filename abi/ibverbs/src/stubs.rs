//! The public verbs not implemented yet, each with its exact C signature and the answer the
//! real library gives for a device without the capability: `EOPNOTSUPP`, in the error style
//! of the verb (NULL + errno, a positive errno, or -1 + errno; ABI note §2.7). None aborts.
//!
//! Implementing a verb: write it in its own module (pd.rs, mr.rs, cq.rs, qp.rs, …) with this
//! signature, point its row in `exports.rs` at it, delete the stub here.

#![allow(clippy::missing_safety_doc)]

use libc::{c_int, size_t};

use crate::ffi::*;
use crate::util::set_errno;

const E: c_int = libc::EOPNOTSUPP;

fn null<T>() -> *mut T {
    set_errno(E);
    std::ptr::null_mut()
}

fn err() -> c_int {
    set_errno(E);
    E
}

fn minus1() -> c_int {
    set_errno(E);
    -1
}

/// `ibv_reg_dmabuf_mr`: NULL, `EOPNOTSUPP` (softroce has no device memory to import a dma-buf
/// into; this is the permanent answer).
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _len: size_t,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    null()
}
/// `ibv_query_qp_data_in_order`: 0, "no ordering guarantee" (what the real library says when
/// the provider cannot tell).
pub unsafe extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}
/// `ibv_query_ece`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    err()
}
/// `ibv_set_ece`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    err()
}
/// `ibv_attach_mcast`: `EOPNOTSUPP` (softroce has no multicast).
pub unsafe extern "C" fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    err()
}
/// `ibv_detach_mcast`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    err()
}
/// `ibv_resolve_eth_l2_from_gid` (used by providers to fill an AH's MAC): -1, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    minus1()
}
/// `ibv_import_device`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
    null()
}
/// `ibv_import_pd`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_import_pd(_ctx: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    null()
}
/// `ibv_unimport_pd`: nothing was imported.
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}
/// `ibv_import_mr`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    null()
}
/// `ibv_unimport_mr`: nothing was imported.
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}
/// `ibv_import_dm`: NULL, `EOPNOTSUPP` (no device memory; permanent).
pub unsafe extern "C" fn ibv_import_dm(_ctx: *mut ibv_context, _handle: u32) -> *mut ibv_dm {
    null()
}
/// `ibv_unimport_dm`: nothing was imported.
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut ibv_dm) {}
