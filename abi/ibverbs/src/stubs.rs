//! The public verbs not implemented yet, each with its exact C signature and the answer the
//! real library gives for a device without the capability: `EOPNOTSUPP`, in the error style
//! of the verb (NULL + errno, a positive errno, or -1 + errno; ABI note §2.7). None aborts.
//!
//! Implementing a verb: write it in its own module (pd.rs, mr.rs, cq.rs, qp.rs, …) with this
//! signature, point its row in `exports.rs` at it, delete the stub here.

#![allow(clippy::missing_safety_doc)]

use libc::{c_int, c_uint, c_void, size_t};

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

/// `ibv_alloc_pd`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_alloc_pd(_ctx: *mut ibv_context) -> *mut ibv_pd {
    null()
}
/// `ibv_dealloc_pd`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_dealloc_pd(_pd: *mut ibv_pd) -> c_int {
    err()
}
/// `ibv_reg_mr` (the header macro calls this for compile-time access flags without optional
/// bits): NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_reg_mr(
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: size_t,
    _access: c_int,
) -> *mut ibv_mr {
    null()
}
/// `ibv_reg_mr_iova`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_reg_mr_iova(
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: size_t,
    _iova: u64,
    _access: c_int,
) -> *mut ibv_mr {
    null()
}
/// `ibv_reg_mr_iova2`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: size_t,
    _iova: u64,
    _access: c_uint,
) -> *mut ibv_mr {
    null()
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
/// `ibv_rereg_mr`: `IBV_REREG_MR_ERR_INPUT`, errno `EOPNOTSUPP` (the real library's answer
/// when the provider lacks rereg).
pub unsafe extern "C" fn ibv_rereg_mr(
    _mr: *mut ibv_mr,
    _flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: size_t,
    _access: c_int,
) -> c_int {
    set_errno(E);
    IBV_REREG_MR_ERR_INPUT
}
/// `ibv_dereg_mr`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_dereg_mr(_mr: *mut ibv_mr) -> c_int {
    err()
}
/// `ibv_create_comp_channel`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_create_comp_channel(_ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    null()
}
/// `ibv_destroy_comp_channel`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_destroy_comp_channel(_ch: *mut ibv_comp_channel) -> c_int {
    err()
}
/// `ibv_create_cq`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_create_cq(
    _ctx: *mut ibv_context,
    _cqe: c_int,
    _cq_context: *mut c_void,
    _channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    null()
}
/// `ibv_resize_cq`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    err()
}
/// `ibv_destroy_cq`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_destroy_cq(_cq: *mut ibv_cq) -> c_int {
    err()
}
/// `ibv_get_cq_event`: -1, `EOPNOTSUPP`. (When implemented: the blocking read belongs in an
/// `extern "C-unwind"` frame with nothing to drop, as `context::ibv_get_async_event`.)
pub unsafe extern "C" fn ibv_get_cq_event(
    _ch: *mut ibv_comp_channel,
    _cq: *mut *mut ibv_cq,
    _cq_context: *mut *mut c_void,
) -> c_int {
    minus1()
}
/// `ibv_ack_cq_events`: nothing to acknowledge.
pub unsafe extern "C" fn ibv_ack_cq_events(_cq: *mut ibv_cq, _nevents: c_uint) {}
/// `ibv_create_srq`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_create_srq(_pd: *mut ibv_pd, _attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    null()
}
/// `ibv_modify_srq`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_modify_srq(_srq: *mut ibv_srq, _attr: *mut ibv_srq_attr, _mask: c_int) -> c_int {
    err()
}
/// `ibv_query_srq`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_query_srq(_srq: *mut ibv_srq, _attr: *mut ibv_srq_attr) -> c_int {
    err()
}
/// `ibv_destroy_srq`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_destroy_srq(_srq: *mut ibv_srq) -> c_int {
    err()
}
/// `ibv_create_qp`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_create_qp(_pd: *mut ibv_pd, _attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    null()
}
/// `ibv_query_qp`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_query_qp(
    _qp: *mut ibv_qp,
    _attr: *mut ibv_qp_attr,
    _mask: c_int,
    _init: *mut ibv_qp_init_attr,
) -> c_int {
    err()
}
/// `ibv_modify_qp`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_modify_qp(_qp: *mut ibv_qp, _attr: *mut ibv_qp_attr, _mask: c_int) -> c_int {
    err()
}
/// `ibv_destroy_qp`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_destroy_qp(_qp: *mut ibv_qp) -> c_int {
    err()
}
/// `ibv_qp_to_qp_ex`: NULL (the real one sets no errno: "not created through the ex path").
pub unsafe extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    std::ptr::null_mut()
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
/// `ibv_create_ah`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_create_ah(_pd: *mut ibv_pd, _attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    null()
}
/// `ibv_destroy_ah`: `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_destroy_ah(_ah: *mut ibv_ah) -> c_int {
    err()
}
/// `ibv_init_ah_from_wc`: -1, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    _ctx: *mut ibv_context,
    _port: u8,
    _wc: *mut ibv_wc,
    _grh: *mut ibv_grh,
    _attr: *mut ibv_ah_attr,
) -> c_int {
    minus1()
}
/// `ibv_create_ah_from_wc`: NULL, `EOPNOTSUPP`.
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    _pd: *mut ibv_pd,
    _wc: *mut ibv_wc,
    _grh: *mut ibv_grh,
    _port: u8,
) -> *mut ibv_ah {
    null()
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
