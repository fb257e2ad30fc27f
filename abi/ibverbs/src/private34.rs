//! `IBVERBS_PRIVATE_34`: the interface rdma-core's provider libraries (libmlx5, libefa, …)
//! link against. perftest has libmlx5 and libefa as DT_NEEDED, so their imports must resolve
//! (BIND_NOW) and their constructors' `verbs_register_driver_34` must return; their code is
//! never reached with softroce devices (it runs only for mlx5/efa devices). Every command
//! (`ibv_cmd_*`, `execute_ioctl`) fails with `EOPNOTSUPP`; the context constructors return
//! NULL with `EOPNOTSUPP`; registration and the other `void` calls do nothing;
//! `verbs_init_cq` does its real, self-contained job. (`ibv_query_gid_type`, also in this
//! node, is a device verb: `device.rs`.)

use libc::{c_int, c_uint, c_void};

use crate::ffi::*;
use crate::util::set_errno;

/// `bool verbs_allow_disassociate_destroy`, the one OBJECT export (1 byte; libmlx5 imports it).
/// Its row in `exports.rs` defines it: a zero byte in `.bss` carrying the versioned name.
/// Nothing in this library reads it (the real one sets it from `RDMAV_ALLOW_DISASSOC_DESTROY`
/// for its providers). This item only names the row.
pub const VERBS_ALLOW_DISASSOCIATE_DESTROY: () = ();

/// `verbs_register_driver_34(const struct verbs_device_ops *)`: accepted and ignored — providers
/// match kernel devices, and softroce has none.
pub extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}

/// `ibv_register_driver@IBVERBS_1.1` (compat only; empty in the real library too).
pub extern "C" fn ibv_register_driver(_name: *const libc::c_char, _init: *const c_void) {}

/// `verbs_init_cq(cq, context, channel, cq_context)`: fills a CQ's common fields as the real
/// one does: pointers, zero event counts, a fresh mutex and condition, and one more reference
/// on the channel (under the context's mutex).
///
/// # Safety
/// `cq` is writable; `context` is a live context; `channel` is NULL or a live channel.
pub unsafe extern "C" fn verbs_init_cq(
    cq: *mut ibv_cq,
    context: *mut ibv_context,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
) {
    if cq.is_null() {
        return;
    }
    // SAFETY: per the caller.
    unsafe {
        (*cq).context = context;
        (*cq).channel = channel;
        if !channel.is_null() && !context.is_null() {
            libc::pthread_mutex_lock(&mut (*context).mutex);
            (*channel).refcnt += 1;
            libc::pthread_mutex_unlock(&mut (*context).mutex);
        }
        (*cq).cq_context = cq_context;
        (*cq).comp_events_completed = 0;
        (*cq).async_events_completed = 0;
        libc::pthread_mutex_init(&mut (*cq).mutex, std::ptr::null());
        libc::pthread_cond_init(&mut (*cq).cond, std::ptr::null());
    }
}

/// `verbs_open_device(device, private_data)`: NULL, `EOPNOTSUPP` (providers open kernel
/// devices; applications use `ibv_open_device`).
pub extern "C" fn verbs_open_device(_device: *mut ibv_device, _private: *mut c_void) -> *mut ibv_context {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `_verbs_init_and_alloc_context(...)`: NULL, `EOPNOTSUPP` (as above).
pub extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `verbs_set_ops(vctx, ops)`: ignored (no provider contexts exist).
pub extern "C" fn verbs_set_ops(_vctx: *mut c_void, _ops: *const c_void) {}

/// `verbs_uninit_context(vctx)`: ignored (as above).
pub extern "C" fn verbs_uninit_context(_vctx: *mut c_void) {}

/// `execute_ioctl(context, cmd)`: `EOPNOTSUPP` (there is no kernel uverbs device).
pub extern "C" fn execute_ioctl() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// `__ioctl_final_num_attrs(num_attrs, link)`: the attribute count of an ioctl command buffer
/// chain; returns `num_attrs` (no chain is ever executed).
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, _link: *const c_void) -> c_uint {
    num_attrs
}

/// `__verbs_log(ctx, fmt, ...)`: provider debug logging; nothing is logged.
pub extern "C" fn __verbs_log() {}

/// `ibv_read_ibdev_sysfs_file(buf, size, sysfs_dev, fmt, ...)`: -1, `ENOENT` (providers read
/// their kernel device's sysfs; there is none).
pub extern "C" fn ibv_read_ibdev_sysfs_file() -> c_int {
    set_errno(libc::ENOENT);
    -1
}

macro_rules! cmd_stubs {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: a kernel uverbs command; `EOPNOTSUPP` (no kernel device).")]
        pub extern "C" fn $name() -> c_int {
            set_errno(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
    )*};
}

cmd_stubs!(
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);
