//! The libibverbs 1.0 ABI (`@IBVERBS_1.0` compat symbols, the pre-2006 `ibv_*_1_0` wrapper
//! structs of rdma-core's `compat-1_0.c`). softroce offers no devices through it:
//! `ibv_get_device_list@IBVERBS_1.0` fails with `ENOSYS` (what the real library says on a
//! system without the RDMA subsystem), so a 1.0 program stops there; the rest fail the same
//! way in their own error style should they be called. No Debian binary imports any of them.
//! They take no arguments here: on x86-64 a callee may ignore its arguments.

use libc::{c_int, c_void};

use crate::util::set_errno;

macro_rules! compat {
    ($kind:ident: $($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: the 1.0 ABI is not offered (see the module docs).")]
        pub extern "C" fn $name() -> compat!(@ret $kind) {
            set_errno(libc::ENOSYS);
            compat!(@val $kind)
        }
    )*};
    (@ret ptr) => { *mut c_void };
    (@ret errno) => { c_int };
    (@ret minus1) => { c_int };
    (@ret zero64) => { u64 };
    (@ret void) => { () };
    (@val ptr) => { std::ptr::null_mut() };
    (@val errno) => { libc::ENOSYS };
    (@val minus1) => { -1 };
    (@val zero64) => { 0 };
    (@val void) => { () };
}

compat!(ptr:
    ibv_get_device_list_1_0, ibv_get_device_name_1_0, ibv_open_device_1_0, ibv_alloc_pd_1_0,
    ibv_reg_mr_1_0, ibv_create_cq_1_0, ibv_create_srq_1_0, ibv_create_qp_1_0, ibv_create_ah_1_0,
);
compat!(errno:
    ibv_close_device_1_0, ibv_query_device_1_0, ibv_query_port_1_0, ibv_dealloc_pd_1_0,
    ibv_dereg_mr_1_0, ibv_resize_cq_1_0, ibv_destroy_cq_1_0, ibv_modify_srq_1_0,
    ibv_query_srq_1_0, ibv_destroy_srq_1_0, ibv_query_qp_1_0, ibv_modify_qp_1_0,
    ibv_destroy_qp_1_0, ibv_destroy_ah_1_0, ibv_attach_mcast_1_0, ibv_detach_mcast_1_0,
);
compat!(minus1: ibv_get_async_event_1_0, ibv_query_gid_1_0, ibv_query_pkey_1_0, ibv_get_cq_event_1_0);
compat!(zero64: ibv_get_device_guid_1_0);
compat!(void: ibv_free_device_list_1_0, ibv_ack_async_event_1_0, ibv_ack_cq_events_1_0);
