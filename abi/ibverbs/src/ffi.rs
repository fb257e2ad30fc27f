//! The C types of `<infiniband/verbs.h>` (Debian 12, rdma-core 44, x86-64) that this library
//! hands out or reads, written by hand from the installed header.
//!
//! Names, field order and types follow the header exactly, so that `offset_of!` here equals
//! `offsetof` there; a test in `layout.rs` compiles a C program against the installed header and
//! compares every field listed in `layout.rs`. Anonymous C unions get a field name here
//! (noted on the field); unions of same-sized integers (`imm_data`/`invalidated_rkey`) are one
//! integer field.
//!
//! Function pointer slots are `Option<unsafe extern "C" fn(..)>` (NULL is `None`): a slot we
//! never fill, or whose signature nothing here needs, is an opaque `Option<unsafe extern "C"
//! fn()>` of the same size.

#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, size_t};

/// A slot whose exact signature this library does not need.
pub type AnyFn = Option<unsafe extern "C" fn()>;

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        /// Opaque here: only pointers to it cross this library.
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}

opaque!(
    ibv_flow,
    ibv_flow_attr,
    ibv_flow_action,
    ibv_flow_action_esp_attr,
    ibv_dm,
    ibv_alloc_dm_attr,
    ibv_counters,
    ibv_counters_init_attr,
    ibv_counter_attach_attr,
    ibv_td,
    ibv_td_init_attr,
    ibv_parent_domain_init_attr,
    ibv_rwq_ind_table,
    ibv_rwq_ind_table_init_attr,
    ibv_wq_init_attr,
    ibv_wq_attr,
    ibv_values_ex,
    ibv_ops_wr,
    ibv_xrcd,
    ibv_xrcd_init_attr,
    verbs_ex_private,
);

// ---------------------------------------------------------------------------------------------
// Enumerations and flags (values checked against the header by the layout test).

pub const IBV_NODE_CA: c_int = 1;
pub const IBV_TRANSPORT_IB: c_int = 0;

pub const IBV_PORT_NOP: u32 = 0;
pub const IBV_PORT_DOWN: u32 = 1;
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_PORT_ACTIVE_DEFER: u32 = 5;

pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

pub const IBV_ATOMIC_NONE: u32 = 0;
pub const IBV_ATOMIC_HCA: u32 = 1;

pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
/// `enum ibv_gid_type_sysfs` (the private `driver.h`; not in the installed headers).
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_int = 0;
/// See [`IBV_GID_TYPE_SYSFS_IB_ROCE_V1`].
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: c_int = 1;

pub const IBV_FORK_DISABLED: c_int = 0;
pub const IBV_FORK_ENABLED: c_int = 1;
pub const IBV_FORK_UNNEEDED: c_int = 2;

pub const IBV_REREG_MR_ERR_INPUT: c_int = -1;
pub const IBV_REREG_MR_ERR_CMD: c_int = -4;

pub const IBV_PORT_CM_SUP: u32 = 1 << 16;
pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;

pub const IBV_DEVICE_BAD_PKEY_CNTR: u32 = 1 << 1;
pub const IBV_DEVICE_BAD_QKEY_CNTR: u32 = 1 << 2;
pub const IBV_DEVICE_UD_AV_PORT_ENFORCE: u32 = 1 << 6;
pub const IBV_DEVICE_CURR_QP_STATE_MOD: u32 = 1 << 7;
pub const IBV_DEVICE_SYS_IMAGE_GUID: u32 = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
pub const IBV_DEVICE_SRQ_RESIZE: u32 = 1 << 13;
/// `IBV_DEVICE_MEM_WINDOW`.
pub const IBV_DEVICE_MEM_WINDOW: u32 = 1 << 17;
/// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
pub const IBV_DEVICE_N_NOTIFY_CQ: u32 = 1 << 14;

pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_PATH_MIG: u32 = 6;
pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
pub const IBV_EVENT_PORT_ERR: u32 = 10;
pub const IBV_EVENT_LID_CHANGE: u32 = 11;
pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
pub const IBV_EVENT_SM_CHANGE: u32 = 13;
pub const IBV_EVENT_SRQ_ERR: u32 = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
pub const IBV_EVENT_GID_CHANGE: u32 = 18;
pub const IBV_EVENT_WQ_FATAL: u32 = 19;

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

// ---------------------------------------------------------------------------------------------
// GIDs

/// `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

/// The `global` member of `union ibv_gid` (both big-endian).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_global {
    pub subnet_prefix: u64,
    pub interface_id: u64,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

// ---------------------------------------------------------------------------------------------
// Device and context

/// `struct _ibv_device_ops`: obsolete, must be zero.
#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: AnyFn,
    pub _dummy2: AnyFn,
}

/// `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

pub type AllocMwFn = unsafe extern "C" fn(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw;
pub type BindMwFn = unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int;
pub type DeallocMwFn = unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int;
pub type PollCqFn = unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
pub type ReqNotifyCqFn = unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int;
pub type CompatQueryDeviceFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
/// The header's argument is `struct _compat_ibv_port_attr *` (an `ibv_port_attr` without
/// `port_cap_flags2`).
pub type CompatQueryPortFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;

/// `struct ibv_context_ops`: 32 slots. The header inlines call `alloc_mw`, `bind_mw`,
/// `dealloc_mw`, `poll_cq`, `req_notify_cq`, `post_srq_recv`, `post_send` and `post_recv`;
/// the `_compat_*` slots exist for binaries built against pre-rdma-core headers.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<CompatQueryDeviceFn>,
    pub _compat_query_port: Option<CompatQueryPortFn>,
    pub _compat_alloc_pd: AnyFn,
    pub _compat_dealloc_pd: AnyFn,
    pub _compat_reg_mr: AnyFn,
    pub _compat_rereg_mr: AnyFn,
    pub _compat_dereg_mr: AnyFn,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: AnyFn,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: AnyFn,
    pub _compat_resize_cq: AnyFn,
    pub _compat_destroy_cq: AnyFn,
    pub _compat_create_srq: AnyFn,
    pub _compat_modify_srq: AnyFn,
    pub _compat_query_srq: AnyFn,
    pub _compat_destroy_srq: AnyFn,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: AnyFn,
    pub _compat_query_qp: AnyFn,
    pub _compat_modify_qp: AnyFn,
    pub _compat_destroy_qp: AnyFn,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: AnyFn,
    pub _compat_destroy_ah: AnyFn,
    pub _compat_attach_mcast: AnyFn,
    pub _compat_detach_mcast: AnyFn,
    pub _compat_async_event: AnyFn,
}

/// `struct ibv_context`. Always the last member of a [`verbs_context`].
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `__VERBS_ABI_IS_EXTENDED` (`UINTPTR_MAX`): the inlines may use the `verbs_context`.
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

pub type QueryPortFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr, len: size_t) -> c_int;
pub type QueryDeviceExFn = unsafe extern "C" fn(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: size_t,
) -> c_int;
pub type CreateCqExFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
pub type CreateQpExFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
pub type CreateSrqExFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
pub type OpenQpFn = unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp;
pub type GetSrqNumFn = unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int;
pub type OpenXrcdFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
pub type CloseXrcdFn = unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int;
pub type ModifyCqFn = unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int;
pub type AdviseMrFn = unsafe extern "C" fn(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sges: u32,
) -> c_int;
pub type AllocNullMrFn = unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr;
pub type ReadCountersFn =
    unsafe extern "C" fn(c: *mut ibv_counters, values: *mut u64, n: u32, flags: u32) -> c_int;
pub type AttachCountersPointFlowFn = unsafe extern "C" fn(
    c: *mut ibv_counters,
    attr: *mut ibv_counter_attach_attr,
    flow: *mut ibv_flow,
) -> c_int;
pub type CreateCountersFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_counters_init_attr) -> *mut ibv_counters;
pub type DestroyCountersFn = unsafe extern "C" fn(c: *mut ibv_counters) -> c_int;
pub type RegDmMrFn = unsafe extern "C" fn(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    offset: u64,
    length: size_t,
    access: c_uint,
) -> *mut ibv_mr;
pub type AllocDmFn = unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm;
pub type FreeDmFn = unsafe extern "C" fn(dm: *mut ibv_dm) -> c_int;
pub type ModifyFlowActionEspFn =
    unsafe extern "C" fn(a: *mut ibv_flow_action, attr: *mut ibv_flow_action_esp_attr) -> c_int;
pub type DestroyFlowActionFn = unsafe extern "C" fn(a: *mut ibv_flow_action) -> c_int;
pub type CreateFlowActionEspFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_flow_action_esp_attr) -> *mut ibv_flow_action;
pub type ModifyQpRateLimitFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_rate_limit_attr) -> c_int;
pub type AllocParentDomainFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;
pub type DeallocTdFn = unsafe extern "C" fn(td: *mut ibv_td) -> c_int;
pub type AllocTdFn = unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_td_init_attr) -> *mut ibv_td;
pub type PostSrqOpsFn =
    unsafe extern "C" fn(srq: *mut ibv_srq, op: *mut ibv_ops_wr, bad: *mut *mut ibv_ops_wr) -> c_int;
pub type DestroyRwqIndTableFn = unsafe extern "C" fn(t: *mut ibv_rwq_ind_table) -> c_int;
pub type CreateRwqIndTableFn = unsafe extern "C" fn(
    ctx: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table;
pub type DestroyWqFn = unsafe extern "C" fn(wq: *mut ibv_wq) -> c_int;
pub type ModifyWqFn = unsafe extern "C" fn(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int;
pub type CreateWqFn = unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_wq_init_attr) -> *mut ibv_wq;
pub type QueryRtValuesFn = unsafe extern "C" fn(ctx: *mut ibv_context, values: *mut ibv_values_ex) -> c_int;
pub type DestroyFlowFn = unsafe extern "C" fn(flow: *mut ibv_flow) -> c_int;
pub type CreateFlowFn = unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_flow_attr) -> *mut ibv_flow;

/// `struct verbs_context`: the extended operations, laid out *before* the `ibv_context`
/// applications hold (its last member). The header's `verbs_get_ctx_op()` uses a slot only
/// when `sz >= sizeof(struct verbs_context) - offsetof(slot)` and the slot is non-NULL; a NULL
/// slot makes the inline fail with `EOPNOTSUPP` (or fall back, see the ABI note §2.5).
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: Option<AdviseMrFn>,
    pub alloc_null_mr: Option<AllocNullMrFn>,
    pub read_counters: Option<ReadCountersFn>,
    pub attach_counters_point_flow: Option<AttachCountersPointFlowFn>,
    pub create_counters: Option<CreateCountersFn>,
    pub destroy_counters: Option<DestroyCountersFn>,
    pub reg_dm_mr: Option<RegDmMrFn>,
    pub alloc_dm: Option<AllocDmFn>,
    pub free_dm: Option<FreeDmFn>,
    pub modify_flow_action_esp: Option<ModifyFlowActionEspFn>,
    pub destroy_flow_action: Option<DestroyFlowActionFn>,
    pub create_flow_action_esp: Option<CreateFlowActionEspFn>,
    pub modify_qp_rate_limit: Option<ModifyQpRateLimitFn>,
    pub alloc_parent_domain: Option<AllocParentDomainFn>,
    pub dealloc_td: Option<DeallocTdFn>,
    pub alloc_td: Option<AllocTdFn>,
    pub modify_cq: Option<ModifyCqFn>,
    pub post_srq_ops: Option<PostSrqOpsFn>,
    pub destroy_rwq_ind_table: Option<DestroyRwqIndTableFn>,
    pub create_rwq_ind_table: Option<CreateRwqIndTableFn>,
    pub destroy_wq: Option<DestroyWqFn>,
    pub modify_wq: Option<ModifyWqFn>,
    pub create_wq: Option<CreateWqFn>,
    pub query_rt_values: Option<QueryRtValuesFn>,
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut verbs_ex_private,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: Option<DestroyFlowFn>,
    pub ABI_placeholder2: AnyFn,
    pub ibv_create_flow: Option<CreateFlowFn>,
    pub ABI_placeholder1: AnyFn,
    pub open_qp: Option<OpenQpFn>,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Option<GetSrqNumFn>,
    pub create_srq_ex: Option<CreateSrqExFn>,
    pub open_xrcd: Option<OpenXrcdFn>,
    pub close_xrcd: Option<CloseXrcdFn>,
    pub _ABI_placeholder3: u64,
    /// Must be immediately before `context`.
    pub sz: size_t,
    /// Must be last.
    pub context: ibv_context,
}

/// `sizeof(struct verbs_context)` in rdma-core 44: what the real library stores in `sz`.
pub const VERBS_CONTEXT_SZ: usize = 648;

// ---------------------------------------------------------------------------------------------
// Device and port attributes

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// Big-endian.
    pub node_guid: u64,
    /// Big-endian.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// The `per_transport_caps` member of `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_per_transport_caps,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr` (52 bytes in rdma-core 44; applications built against older headers
/// pass a shorter length, newer ones a longer one).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `sizeof(struct _compat_ibv_port_attr)`: `ibv_port_attr` up to `flags`, what
/// `ibv_query_port@IBVERBS_1.1` (the exported, non-inline one) fills.
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

/// The `element` union of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut ibv_wq,
    pub port_num: c_int,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

// ---------------------------------------------------------------------------------------------
// Work completions and requests

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Anonymous union: `__be32 imm_data` (with `IBV_WC_WITH_IMM`) or `uint32_t
    /// invalidated_rkey` (with `IBV_WC_WITH_INV`).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: size_t,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `qp_type.xrc` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// The `qp_type` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// `bind_mw` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The last (anonymous) union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    pub send_flags: c_uint,
    /// Anonymous union: `__be32 imm_data` or `uint32_t invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// Anonymous union in C (`bind_mw` / `tso` are reached without a member name there).
    pub ext: ibv_send_wr_ext,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

// ---------------------------------------------------------------------------------------------
// Objects

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: size_t,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type` (1 or 2).
    pub type_: c_uint,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_grh` (the 40 bytes at the start of a UD receive buffer).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_wq`.
#[repr(C)]
pub struct ibv_wq {
    pub context: *mut ibv_context,
    pub wq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub wq_num: u32,
    pub handle: u32,
    /// `enum ibv_wq_state`.
    pub state: u32,
    /// `enum ibv_wq_type`.
    pub wq_type: u32,
    pub post_recv: Option<
        unsafe extern "C" fn(wq: *mut ibv_wq, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub comp_mask: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_open_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_qp_rate_limit_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_rate_limit_attr {
    pub rate_limit: u32,
    pub max_burst_sz: u32,
    pub typical_pkt_sz: u16,
    pub comp_mask: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_ex`: a full `ibv_qp`, then the new post API the application calls through
/// (`ibv_wr_*` inlines); the application writes `wr_id` and `wr_flags` directly.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, compare: u64, swap: u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64)>,
    pub wr_bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, mw: *mut ibv_mw, rkey: u32, info: *const ibv_mw_bind_info),
    >,
    pub wr_local_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, addr: u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, addr: u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32)>,
    pub wr_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, imm: u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_send_tso:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16)>,
    pub wr_set_ud_addr:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, remote_srqn: u32)>,
    pub wr_set_inline_data:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, addr: *mut c_void, length: size_t)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_buf: size_t, buf_list: *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32)>,
    pub wr_set_sge_list:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_sge: size_t, sg_list: *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_atomic_write:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, atomic_wr: *const c_void)>,
}

/// `struct ibv_ece`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info`.
#[repr(C)]
pub struct ibv_wc_tm_info {
    pub tag: u64,
    pub priv_: u32,
}

/// `struct ibv_cq_ex`: the `ibv_cq` layout for its first 128 bytes (`ibv_cq_ex_to_cq` is a
/// cast), then the extended poll API; the application reads `status` and `wr_id` directly.
#[repr(C)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    /// `enum ibv_wc_status`.
    pub status: u32,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_vendor_err: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(cq: *mut ibv_cq_ex) -> u64>,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_moderate_cq`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_moderate_cq {
    pub cq_count: u16,
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_modify_cq_attr {
    pub attr_mask: u32,
    pub moderate: ibv_moderate_cq,
}
