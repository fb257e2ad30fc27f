//! Every field of the [`crate::ffi`] types, with its offset and size on the Rust side, and the
//! C program that prints the same from the installed `<infiniband/verbs.h>`. The test
//! `layout_matches_installed_header` compiles and runs that program with gcc and compares
//! the two, field by field (it skips, saying so, where gcc or libibverbs-dev is missing; under
//! `CI` it fails instead).

use crate::ffi::*;
use crate::kern::*;
use crate::rdmacm::ffi::*;

/// One field: the Rust type and path, the C member path, and where it sits.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The Rust (and C) type name, without `struct`/`union`.
    pub ty: &'static str,
    /// Member path in Rust (`ops.poll_cq`).
    pub rust: &'static str,
    /// Member path in C (differs where C has an anonymous union or a keyword name).
    pub c: &'static str,
    /// `offset_of!`.
    pub offset: usize,
    /// `size_of` of the field's type.
    pub size: usize,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    std::mem::size_of::<T>()
}

macro_rules! layout {
    ($( $ty:ident { $( $($f:ident).+ $(=> $c:literal)? ),* $(,)? } )*) => {
        /// The sizes of the types, `(name, size_of)`.
        pub fn sizes() -> Vec<(&'static str, usize)> {
            vec![$( (stringify!($ty), std::mem::size_of::<$ty>()) ),*]
        }
        /// Every field listed.
        pub fn fields() -> Vec<Field> {
            let mut v = Vec::new();
            $( $(
                v.push(Field {
                    ty: stringify!($ty),
                    rust: stringify!($($f).+),
                    c: layout!(@c $($f).+ $(=> $c)?),
                    offset: std::mem::offset_of!($ty, $($f).+),
                    size: {
                        let u = std::mem::MaybeUninit::<$ty>::uninit();
                        let p = u.as_ptr();
                        // SAFETY: a raw borrow of a field place of uninitialised memory; nothing
                        // is read.
                        size_of_pointee(unsafe { &raw const (*p).$($f).+ })
                    },
                });
            )* )*
            for f in &mut v {
                f.rust = leak_compact(f.rust);
                f.c = leak_compact(f.c);
            }
            v
        }
    };
    (@c $($f:ident).+ => $c:literal) => { $c };
    (@c $($f:ident).+) => { stringify!($($f).+) };
}

/// `stringify!` may space out `a.b`: remove the spaces (test-only, so leaking is fine).
fn leak_compact(s: &'static str) -> &'static str {
    if s.contains(' ') { Box::leak(s.replace(' ', "").into_boxed_str()) } else { s }
}

layout! {
    ibv_gid { raw, global.subnet_prefix, global.interface_id }
    ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
    ibv_device { _ops, _ops._dummy1, _ops._dummy2, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
    ibv_context_ops {
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
        _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
        _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
    }
    ibv_context {
        device, ops, ops.alloc_mw, ops.bind_mw, ops.dealloc_mw, ops.poll_cq, ops.req_notify_cq,
        ops.post_srq_recv, ops.post_send, ops.post_recv, cmd_fd, async_fd, num_comp_vectors,
        mutex, abi_compat,
    }
    verbs_context {
        query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
        create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm, modify_flow_action_esp,
        destroy_flow_action, create_flow_action_esp, modify_qp_rate_limit, alloc_parent_domain,
        dealloc_td, alloc_td, modify_cq, post_srq_ops, destroy_rwq_ind_table,
        create_rwq_ind_table, destroy_wq, modify_wq, create_wq, query_rt_values, create_cq_ex,
        priv_ => "priv", query_device_ex, ibv_destroy_flow, ABI_placeholder2, ibv_create_flow,
        ABI_placeholder1, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd,
        close_xrcd, _ABI_placeholder3, sz, context, context.ops.poll_cq, context.abi_compat,
    }
    ibv_device_attr {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq,
        max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
    }
    ibv_query_device_ex_input { comp_mask }
    ibv_odp_caps { general_caps, per_transport_caps.rc_odp_caps, per_transport_caps.uc_odp_caps, per_transport_caps.ud_odp_caps }
    ibv_tso_caps { max_tso, supported_qpts }
    ibv_rss_caps { supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, rx_hash_fields_mask, rx_hash_function }
    ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
    ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
    ibv_cq_moderation_caps { max_cq_count, max_cq_period }
    ibv_pci_atomic_caps { fetch_add, swap, compare_swap }
    ibv_device_attr_ex {
        orig_attr, orig_attr.phys_port_cnt, comp_mask, odp_caps, completion_timestamp_mask,
        hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq,
        packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps,
        xrc_odp_caps, phys_port_cnt_ex,
    }
    ibv_port_attr {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2,
    }
    ibv_async_event { element, element.cq, element.qp, element.srq, element.wq, element.port_num, event_type }
    ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len, imm_data, imm_data => "invalidated_rkey",
        qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits,
    }
    ibv_sge { addr, length, lkey }
    ibv_data_buf { addr, length }
    ibv_send_wr {
        wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data,
        imm_data => "invalidate_rkey", wr, wr.rdma.remote_addr, wr.rdma.rkey,
        wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap, wr.atomic.rkey, wr.ud.ah,
        wr.ud.remote_qpn, wr.ud.remote_qkey, qp_type.xrc.remote_srqn,
        ext.bind_mw.mw => "bind_mw.mw", ext.bind_mw.rkey => "bind_mw.rkey",
        ext.bind_mw.bind_info => "bind_mw.bind_info",
        ext.bind_mw.bind_info.mr => "bind_mw.bind_info.mr",
        ext.bind_mw.bind_info.addr => "bind_mw.bind_info.addr",
        ext.bind_mw.bind_info.length => "bind_mw.bind_info.length",
        ext.bind_mw.bind_info.mw_access_flags => "bind_mw.bind_info.mw_access_flags",
        ext.tso.hdr => "tso.hdr", ext.tso.hdr_sz => "tso.hdr_sz", ext.tso.mss => "tso.mss",
    }
    ibv_recv_wr { wr_id, next, sg_list, num_sge }
    ibv_mw_bind_info { mr, addr, length, mw_access_flags }
    ibv_mw_bind { wr_id, send_flags, bind_info }
    ibv_pd { context, handle }
    ibv_mr { context, pd, addr, length, handle, lkey, rkey }
    ibv_mw { context, pd, rkey, handle, type_ => "type" }
    ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
    ibv_ah_attr { grh, grh.dgid, grh.flow_label, grh.sgid_index, grh.hop_limit, grh.traffic_class, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    ibv_ah { context, pd, handle }
    ibv_srq_attr { max_wr, max_sge, srq_limit }
    ibv_srq_init_attr { srq_context, attr }
    ibv_tm_cap { max_num_tags, max_ops }
    ibv_srq_init_attr_ex { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap }
    ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
    ibv_wq { context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond, events_completed, comp_mask }
    ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    ibv_rx_hash_conf { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
    ibv_qp_init_attr_ex {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
        create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
    }
    ibv_qp_open_attr { comp_mask, qp_num, xrcd, qp_context, qp_type }
    ibv_qp_attr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
    }
    ibv_qp_rate_limit_attr { rate_limit, max_burst_sz, typical_pkt_sz, comp_mask }
    ibv_qp { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed }
    ibv_qp_ex {
        qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw,
        wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm,
        wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data,
        wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort,
        wr_atomic_write,
    }
    ibv_ece { vendor_id, options, comp_mask }
    ibv_comp_channel { context, fd, refcnt }
    ibv_cq { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed }
    ibv_poll_cq_attr { comp_mask }
    ibv_wc_tm_info { tag, priv_ => "priv" }
    ibv_cq_ex {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
        read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
        read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan,
        read_flow_tag, read_tm_info, read_completion_wallclock_ns,
    }
    ibv_cq_init_attr_ex { cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain }
    ibv_moderate_cq { cq_count, cq_period }
    ibv_modify_cq_attr { attr_mask, moderate }
    ib_uverbs_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved }
    ib_uverbs_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved }
    ib_uverbs_qp_attr {
        qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
        dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr, max_recv_wr,
        max_send_sge, max_recv_sge, max_inline_data, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, reserved,
    }
    ib_user_path_rec {
        dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey, hop_limit,
        traffic_class, numb_path, sl, mtu_selector, rate_selector, rate,
        packet_life_time_selector, packet_life_time, preference,
    }
    ibv_sa_path_rec {
        dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible,
        numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector,
        packet_life_time, preference,
    }
    rdma_event_channel { fd }
    rdma_ib_addr { sgid, dgid, pkey }
    rdma_addr { src_storage, dst_storage, ibaddr => "addr.ibaddr" }
    rdma_route { addr, addr.dst_storage, path_rec, num_paths }
    rdma_cm_id {
        verbs, channel, context, qp, route, route.addr.src_storage, route.addr.dst_storage,
        route.addr.ibaddr => "route.addr.addr.ibaddr", route.path_rec, route.num_paths, ps,
        port_num, event, send_cq_channel, send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type,
    }
    rdma_conn_param {
        private_data, private_data_len, responder_resources, initiator_depth, flow_control,
        retry_count, rnr_retry_count, srq, qp_num,
    }
    rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
    rdma_cm_event {
        id, listen_id, event, status, param, param.conn.private_data,
        param.conn.private_data_len, param.conn.qp_num, param.ud.private_data,
        param.ud.private_data_len, param.ud.ah_attr, param.ud.qp_num, param.ud.qkey,
    }
    rdma_addrinfo {
        ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
        ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len,
        ai_connect, ai_next,
    }
}

/// Constants whose values come from the header: `(name, value here)`.
pub fn constants() -> Vec<(&'static str, i64)> {
    vec![
        ("IBV_NODE_CA", IBV_NODE_CA as i64),
        ("RDMA_PS_IPOIB", i64::from(RDMA_PS_IPOIB)),
        ("RDMA_PS_TCP", i64::from(RDMA_PS_TCP)),
        ("RDMA_PS_UDP", i64::from(RDMA_PS_UDP)),
        ("RDMA_PS_IB", i64::from(RDMA_PS_IB)),
        ("RAI_PASSIVE", i64::from(RAI_PASSIVE)),
        ("RAI_NUMERICHOST", i64::from(RAI_NUMERICHOST)),
        ("RAI_NOROUTE", i64::from(RAI_NOROUTE)),
        ("RAI_FAMILY", i64::from(RAI_FAMILY)),
        ("RDMA_OPTION_ID", i64::from(RDMA_OPTION_ID)),
        ("RDMA_OPTION_IB", i64::from(RDMA_OPTION_IB)),
        ("RDMA_OPTION_ID_TOS", i64::from(RDMA_OPTION_ID_TOS)),
        ("RDMA_OPTION_ID_REUSEADDR", i64::from(RDMA_OPTION_ID_REUSEADDR)),
        ("RDMA_OPTION_ID_AFONLY", i64::from(RDMA_OPTION_ID_AFONLY)),
        ("RDMA_OPTION_ID_ACK_TIMEOUT", i64::from(RDMA_OPTION_ID_ACK_TIMEOUT)),
        ("RDMA_OPTION_IB_PATH", i64::from(RDMA_OPTION_IB_PATH)),
        ("RDMA_CM_EVENT_ESTABLISHED", 9),
        ("RDMA_CM_EVENT_TIMEWAIT_EXIT", 15),
        ("IBV_TRANSPORT_IB", IBV_TRANSPORT_IB as i64),
        ("IBV_PORT_NOP", IBV_PORT_NOP as i64),
        ("IBV_PORT_DOWN", IBV_PORT_DOWN as i64),
        ("IBV_PORT_ACTIVE", IBV_PORT_ACTIVE as i64),
        ("IBV_PORT_ACTIVE_DEFER", IBV_PORT_ACTIVE_DEFER as i64),
        ("IBV_LINK_LAYER_ETHERNET", IBV_LINK_LAYER_ETHERNET as i64),
        ("IBV_ATOMIC_NONE", IBV_ATOMIC_NONE as i64),
        ("IBV_ATOMIC_HCA", IBV_ATOMIC_HCA as i64),
        ("IBV_GID_TYPE_IB", IBV_GID_TYPE_IB as i64),
        ("IBV_GID_TYPE_ROCE_V1", IBV_GID_TYPE_ROCE_V1 as i64),
        ("IBV_GID_TYPE_ROCE_V2", IBV_GID_TYPE_ROCE_V2 as i64),
        ("IBV_FORK_DISABLED", IBV_FORK_DISABLED as i64),
        ("IBV_FORK_ENABLED", IBV_FORK_ENABLED as i64),
        ("IBV_FORK_UNNEEDED", IBV_FORK_UNNEEDED as i64),
        ("IBV_REREG_MR_ERR_INPUT", IBV_REREG_MR_ERR_INPUT as i64),
        ("IBV_REREG_MR_ERR_CMD", IBV_REREG_MR_ERR_CMD as i64),
        ("IBV_PORT_CM_SUP", IBV_PORT_CM_SUP as i64),
        ("IBV_PORT_IP_BASED_GIDS", IBV_PORT_IP_BASED_GIDS as i64),
        ("IBV_DEVICE_BAD_PKEY_CNTR", IBV_DEVICE_BAD_PKEY_CNTR as i64),
        ("IBV_DEVICE_BAD_QKEY_CNTR", IBV_DEVICE_BAD_QKEY_CNTR as i64),
        ("IBV_DEVICE_UD_AV_PORT_ENFORCE", IBV_DEVICE_UD_AV_PORT_ENFORCE as i64),
        ("IBV_DEVICE_CURR_QP_STATE_MOD", IBV_DEVICE_CURR_QP_STATE_MOD as i64),
        ("IBV_DEVICE_SYS_IMAGE_GUID", IBV_DEVICE_SYS_IMAGE_GUID as i64),
        ("IBV_DEVICE_RC_RNR_NAK_GEN", IBV_DEVICE_RC_RNR_NAK_GEN as i64),
        ("IBV_DEVICE_SRQ_RESIZE", IBV_DEVICE_SRQ_RESIZE as i64),
        ("IBV_DEVICE_N_NOTIFY_CQ", IBV_DEVICE_N_NOTIFY_CQ as i64),
        ("IBV_EVENT_CQ_ERR", IBV_EVENT_CQ_ERR as i64),
        ("IBV_EVENT_QP_FATAL", IBV_EVENT_QP_FATAL as i64),
        ("IBV_EVENT_QP_REQ_ERR", IBV_EVENT_QP_REQ_ERR as i64),
        ("IBV_EVENT_QP_ACCESS_ERR", IBV_EVENT_QP_ACCESS_ERR as i64),
        ("IBV_EVENT_COMM_EST", IBV_EVENT_COMM_EST as i64),
        ("IBV_EVENT_SQ_DRAINED", IBV_EVENT_SQ_DRAINED as i64),
        ("IBV_EVENT_PATH_MIG", IBV_EVENT_PATH_MIG as i64),
        ("IBV_EVENT_PATH_MIG_ERR", IBV_EVENT_PATH_MIG_ERR as i64),
        ("IBV_EVENT_DEVICE_FATAL", IBV_EVENT_DEVICE_FATAL as i64),
        ("IBV_EVENT_PORT_ACTIVE", IBV_EVENT_PORT_ACTIVE as i64),
        ("IBV_EVENT_PORT_ERR", IBV_EVENT_PORT_ERR as i64),
        ("IBV_EVENT_LID_CHANGE", IBV_EVENT_LID_CHANGE as i64),
        ("IBV_EVENT_PKEY_CHANGE", IBV_EVENT_PKEY_CHANGE as i64),
        ("IBV_EVENT_SM_CHANGE", IBV_EVENT_SM_CHANGE as i64),
        ("IBV_EVENT_SRQ_ERR", IBV_EVENT_SRQ_ERR as i64),
        ("IBV_EVENT_SRQ_LIMIT_REACHED", IBV_EVENT_SRQ_LIMIT_REACHED as i64),
        ("IBV_EVENT_QP_LAST_WQE_REACHED", IBV_EVENT_QP_LAST_WQE_REACHED as i64),
        ("IBV_EVENT_CLIENT_REREGISTER", IBV_EVENT_CLIENT_REREGISTER as i64),
        ("IBV_EVENT_GID_CHANGE", IBV_EVENT_GID_CHANGE as i64),
        ("IBV_EVENT_WQ_FATAL", IBV_EVENT_WQ_FATAL as i64),
        ("IBV_SYSFS_NAME_MAX", IBV_SYSFS_NAME_MAX as i64),
        ("IBV_SYSFS_PATH_MAX", IBV_SYSFS_PATH_MAX as i64),
        ("sizeof(struct verbs_context)", VERBS_CONTEXT_SZ as i64),
        ("offsetof(struct ibv_port_attr, port_cap_flags2)", COMPAT_PORT_ATTR_LEN as i64),
        ("(intptr_t)__VERBS_ABI_IS_EXTENDED", VERBS_ABI_IS_EXTENDED as usize as i64),
    ]
}

/// The C program printing, for the installed header, one line per size (`S type size`), field
/// (`F type path offset size`) and constant (`C name value`).
pub fn c_program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <infiniband/verbs.h>\n\
         #include <infiniband/sa.h>\n#include <rdma/rdma_cma.h>\n#include <rdma/ib_user_verbs.h>\n#include <rdma/ib_user_sa.h>\n\
         #define F(T, N, f) printf(\"F %s %s %zu %zu\\n\", #N, #f, offsetof(T, f), sizeof(((T *)0)->f));\n\
         int main(void) {\n",
    );
    let cty = |t: &str| if t == "ibv_gid" { format!("union {t}") } else { format!("struct {t}") };
    for (t, _) in sizes() {
        c += &format!("  printf(\"S %s %zu\\n\", \"{t}\", sizeof({}));\n", cty(t));
    }
    for f in fields() {
        c += &format!("  F({}, {}, {})\n", cty(f.ty), f.ty, f.c);
    }
    for (name, _) in constants() {
        c += &format!("  printf(\"C %s %lld\\n\", \"{name}\", (long long)({name}));\n");
    }
    c += "  return 0;\n}\n";
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// gcc and the installed header, or `None` after printing why the test is skipped (under
    /// `CI` a missing prerequisite fails the test instead).
    pub(crate) fn have_gcc_and_headers() -> bool {
        let header = std::path::Path::new("/usr/include/infiniband/verbs.h").exists();
        let gcc = std::process::Command::new("gcc").arg("--version").output().is_ok();
        if header && gcc {
            return true;
        }
        let why = format!(
            "SKIPPED: needs gcc and Debian's libibverbs-dev (/usr/include/infiniband/verbs.h): gcc {}, header {}",
            if gcc { "found" } else { "missing" },
            if header { "found" } else { "missing" }
        );
        assert!(std::env::var_os("CI").is_none(), "{why} (fatal under CI)");
        eprintln!("{why}");
        println!("{why}");
        false
    }

    #[test]
    fn layout_matches_installed_header() {
        if !have_gcc_and_headers() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("softroce-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("layout.c");
        let exe = dir.join("layout");
        std::fs::write(&src, c_program()).unwrap();
        let out = std::process::Command::new("gcc").arg("-o").arg(&exe).arg(&src).output().unwrap();
        assert!(out.status.success(), "gcc failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let out = std::process::Command::new(&exe).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let _ = std::fs::remove_dir_all(&dir);

        let mut c_sizes = HashMap::new();
        let mut c_fields = HashMap::new();
        let mut c_consts = HashMap::new();
        for line in text.lines() {
            let w: Vec<&str> = line.splitn(2, ' ').collect();
            match w[0] {
                "S" => {
                    let (t, s) = w[1].rsplit_once(' ').unwrap();
                    c_sizes.insert(t.to_string(), s.parse::<usize>().unwrap());
                }
                "F" => {
                    let p: Vec<&str> = w[1].split(' ').collect();
                    c_fields.insert(
                        (p[0].to_string(), p[1].to_string()),
                        (p[2].parse().unwrap(), p[3].parse().unwrap()),
                    );
                }
                "C" => {
                    let (n, v) = w[1].rsplit_once(' ').unwrap();
                    c_consts.insert(n.to_string(), v.parse::<i64>().unwrap());
                }
                _ => panic!("unexpected line {line:?}"),
            }
        }
        let mut bad = Vec::new();
        let sizes = sizes();
        for (t, s) in &sizes {
            if c_sizes.get(*t) != Some(s) {
                bad.push(format!("sizeof {t}: Rust {s}, C {:?}", c_sizes.get(*t)));
            }
        }
        let fields = fields();
        for f in &fields {
            let c = c_fields.get(&(f.ty.to_string(), f.c.to_string()));
            if c != Some(&(f.offset, f.size)) {
                bad.push(format!(
                    "{}.{} (C {}): Rust offset {} size {}, C {:?}",
                    f.ty, f.rust, f.c, f.offset, f.size, c
                ));
            }
        }
        for (n, v) in constants() {
            if c_consts.get(n) != Some(&v) {
                bad.push(format!("{n}: Rust {v}, C {:?}", c_consts.get(n)));
            }
        }
        assert!(bad.is_empty(), "layout differs from the installed header:\n{}", bad.join("\n"));
        println!(
            "{} types, {} fields and {} constants match the installed verbs.h",
            sizes.len(),
            fields.len(),
            constants().len()
        );
    }
}
