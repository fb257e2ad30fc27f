//! The export table: every symbol of Debian 12's libibverbs.so.1 (rdma-core 44), its version
//! node, default (`@@`) or compat (`@`), and the Rust function behind it — plus softroce's own
//! `SOFTROCE_PRIVATE_1` node.
//!
//! Each row becomes a `global_asm!` block (recipe G of the ABI note §2.3, adapted): a global
//! trampoline `__softroce_d_<name>: jmp <impl>` (`_c_` for compat rows) with
//! `.symver __softroce_d_<name>, <name>@@<NODE>`. The implementation keeps its mangled name;
//! rustc's own version script (`local: *`) hides it and the trampoline's own name, and the
//! versioned alias is the exported symbol; the node is declared (empty) in `libibverbs.map`.
//! The trampoline is there because the assembler wants the target of a `@@` `.symver` defined
//! in the same object, and the Rust function may sit in another codegen unit; it costs one
//! direct jump, on calls that are never the data path (those go through function pointers). `tests/exports.rs` compares the built library's `objdump -T` with the
//! installed one's, row by row.
//!
//! To implement a verb, write the function (with the signature in `stubs.rs`) in its module
//! and point its row here at it; the stub goes away.
//!
//! The rows are emitted only in the cdylib, not in `cargo test`'s unit-test executable (no
//! version script there).

/// One exported symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    /// Symbol name.
    pub name: &'static str,
    /// Version node.
    pub node: &'static str,
    /// `@@` (what new links bind to) rather than `@` (compat only).
    pub default: bool,
    /// A data object rather than a function.
    pub object: bool,
}

macro_rules! exports {
    ($( $kind:ident $name:literal $node:literal => $f:path; )*) => {
        $( exports!(@asm $kind $name $node $f); )*
        /// Every exported symbol, in table order.
        pub const EXPORTS: &[Export] = &[$(
            Export {
                name: $name,
                node: $node,
                default: exports!(@default $kind),
                object: exports!(@object $kind),
            }
        ),*];
    };
    // A default (`@@`) function: a 5-byte trampoline `__softroce_d_<name>: jmp <impl>` that
    // carries the versioned name. (The assembler wants the target of a `@@` .symver defined
    // in the same object; the Rust function may live in another codegen unit.)
    (@asm default $name:literal $node:literal $f:path) => {
        #[cfg(not(test))]
        core::arch::global_asm!(
            concat!(
                ".pushsection .text.__softroce_d_", $name, ",\"ax\",@progbits\n",
                ".globl __softroce_d_", $name, "\n",
                ".type __softroce_d_", $name, ",@function\n",
                "__softroce_d_", $name, ":\n",
                "  jmp {0}\n",
                ".size __softroce_d_", $name, ",.-__softroce_d_", $name, "\n",
                ".symver __softroce_d_", $name, ",", $name, "@@", $node, "\n",
                ".popsection"
            ),
            sym $f
        );
    };
    // A compat (`@`) function: the same with `__softroce_c_<name>`.
    (@asm compat $name:literal $node:literal $f:path) => {
        #[cfg(not(test))]
        core::arch::global_asm!(
            concat!(
                ".pushsection .text.__softroce_c_", $name, ",\"ax\",@progbits\n",
                ".globl __softroce_c_", $name, "\n",
                ".type __softroce_c_", $name, ",@function\n",
                "__softroce_c_", $name, ":\n",
                "  jmp {0}\n",
                ".size __softroce_c_", $name, ",.-__softroce_c_", $name, "\n",
                ".symver __softroce_c_", $name, ",", $name, "@", $node, "\n",
                ".popsection"
            ),
            sym $f
        );
    };
    // A one-byte data object (a C `bool`), defined here in .bss; `$f` only names its
    // documentation item.
    (@asm object $name:literal $node:literal $f:path) => {
        #[cfg(not(test))]
        core::arch::global_asm!(concat!(
            ".pushsection .bss.__softroce_o_", $name, ",\"aw\",@nobits\n",
            ".globl __softroce_o_", $name, "\n",
            ".type __softroce_o_", $name, ",@object\n",
            ".size __softroce_o_", $name, ",1\n",
            "__softroce_o_", $name, ":\n",
            "  .zero 1\n",
            ".symver __softroce_o_", $name, ",", $name, "@@", $node, "\n",
            ".popsection"
        ));
    };
    (@default compat) => { false };
    (@default $kind:ident) => { true };
    (@object object) => { true };
    (@object $kind:ident) => { false };
}

#[cfg_attr(test, allow(unused_imports))]
use crate::{
    ah, compat, context, cq, device, kern, misc, pd, private, private34, qp, rdmacm, srq, stubs, sysfs,
};

exports! {
    // Devices, contexts, ports, GIDs, strings, fork: implemented.
    default "ibv_get_device_list"                "IBVERBS_1.1"          => device::ibv_get_device_list;
    default "ibv_free_device_list"               "IBVERBS_1.1"          => device::ibv_free_device_list;
    default "ibv_get_device_name"                "IBVERBS_1.1"          => device::ibv_get_device_name;
    default "ibv_get_device_guid"                "IBVERBS_1.1"          => device::ibv_get_device_guid;
    default "ibv_get_device_index"               "IBVERBS_1.9"          => device::ibv_get_device_index;
    default "ibv_open_device"                    "IBVERBS_1.1"          => context::ibv_open_device;
    default "ibv_close_device"                   "IBVERBS_1.1"          => context::ibv_close_device;
    default "ibv_get_async_event"                "IBVERBS_1.1"          => context::ibv_get_async_event;
    default "ibv_ack_async_event"                "IBVERBS_1.1"          => context::ibv_ack_async_event;
    default "ibv_query_device"                   "IBVERBS_1.1"          => device::ibv_query_device;
    default "ibv_query_port"                     "IBVERBS_1.1"          => device::ibv_query_port;
    default "ibv_query_gid"                      "IBVERBS_1.1"          => device::ibv_query_gid;
    default "ibv_query_pkey"                     "IBVERBS_1.1"          => device::ibv_query_pkey;
    default "ibv_get_pkey_index"                 "IBVERBS_1.5"          => device::ibv_get_pkey_index;
    default "_ibv_query_gid_ex"                  "IBVERBS_1.11"         => device::_ibv_query_gid_ex;
    default "_ibv_query_gid_table"               "IBVERBS_1.11"         => device::_ibv_query_gid_table;
    default "ibv_get_sysfs_path"                 "IBVERBS_1.0"          => sysfs::ibv_get_sysfs_path;
    default "ibv_read_sysfs_file"                "IBVERBS_1.0"          => sysfs::ibv_read_sysfs_file;
    default "ibv_wc_status_str"                  "IBVERBS_1.1"          => misc::ibv_wc_status_str;
    default "ibv_node_type_str"                  "IBVERBS_1.1"          => misc::ibv_node_type_str;
    default "ibv_port_state_str"                 "IBVERBS_1.1"          => misc::ibv_port_state_str;
    default "ibv_event_type_str"                 "IBVERBS_1.1"          => misc::ibv_event_type_str;
    default "ibv_rate_to_mult"                   "IBVERBS_1.0"          => misc::ibv_rate_to_mult;
    default "mult_to_ibv_rate"                   "IBVERBS_1.0"          => misc::mult_to_ibv_rate;
    default "ibv_rate_to_mbps"                   "IBVERBS_1.1"          => misc::ibv_rate_to_mbps;
    default "mbps_to_ibv_rate"                   "IBVERBS_1.1"          => misc::mbps_to_ibv_rate;
    default "ibv_fork_init"                      "IBVERBS_1.1"          => misc::ibv_fork_init;
    default "ibv_is_fork_initialized"            "IBVERBS_1.13"         => misc::ibv_is_fork_initialized;
    default "ibv_dontfork_range"                 "IBVERBS_1.1"          => misc::ibv_dontfork_range;
    default "ibv_dofork_range"                   "IBVERBS_1.1"          => misc::ibv_dofork_range;
    // PD, MR, CQ, QP, SRQ, AH, MW, multicast, import: not yet (stubs.rs says what each returns).
    default "ibv_alloc_pd"                       "IBVERBS_1.1"          => pd::ibv_alloc_pd;
    default "ibv_dealloc_pd"                     "IBVERBS_1.1"          => pd::ibv_dealloc_pd;
    default "ibv_reg_mr"                         "IBVERBS_1.1"          => pd::ibv_reg_mr;
    default "ibv_reg_mr_iova"                    "IBVERBS_1.7"          => pd::ibv_reg_mr_iova;
    default "ibv_reg_mr_iova2"                   "IBVERBS_1.8"          => pd::ibv_reg_mr_iova2;
    default "ibv_reg_dmabuf_mr"                  "IBVERBS_1.12"         => stubs::ibv_reg_dmabuf_mr;
    default "ibv_rereg_mr"                       "IBVERBS_1.1"          => pd::ibv_rereg_mr;
    default "ibv_dereg_mr"                       "IBVERBS_1.1"          => pd::ibv_dereg_mr;
    default "ibv_create_comp_channel"            "IBVERBS_1.0"          => cq::ibv_create_comp_channel;
    default "ibv_destroy_comp_channel"           "IBVERBS_1.0"          => cq::ibv_destroy_comp_channel;
    default "ibv_create_cq"                      "IBVERBS_1.1"          => cq::ibv_create_cq;
    default "ibv_resize_cq"                      "IBVERBS_1.1"          => cq::ibv_resize_cq;
    default "ibv_destroy_cq"                     "IBVERBS_1.1"          => cq::ibv_destroy_cq;
    default "ibv_get_cq_event"                   "IBVERBS_1.1"          => cq::ibv_get_cq_event;
    default "ibv_ack_cq_events"                  "IBVERBS_1.1"          => cq::ibv_ack_cq_events;
    default "ibv_create_srq"                     "IBVERBS_1.1"          => srq::ibv_create_srq;
    default "ibv_modify_srq"                     "IBVERBS_1.1"          => srq::ibv_modify_srq;
    default "ibv_query_srq"                      "IBVERBS_1.1"          => srq::ibv_query_srq;
    default "ibv_destroy_srq"                    "IBVERBS_1.1"          => srq::ibv_destroy_srq;
    default "ibv_create_qp"                      "IBVERBS_1.1"          => qp::ibv_create_qp;
    default "ibv_query_qp"                       "IBVERBS_1.1"          => qp::ibv_query_qp;
    default "ibv_modify_qp"                      "IBVERBS_1.1"          => qp::ibv_modify_qp;
    default "ibv_destroy_qp"                     "IBVERBS_1.1"          => qp::ibv_destroy_qp;
    default "ibv_qp_to_qp_ex"                    "IBVERBS_1.6"          => qp::ibv_qp_to_qp_ex;
    default "ibv_query_qp_data_in_order"         "IBVERBS_1.14"         => stubs::ibv_query_qp_data_in_order;
    default "ibv_query_ece"                      "IBVERBS_1.10"         => stubs::ibv_query_ece;
    default "ibv_set_ece"                        "IBVERBS_1.10"         => stubs::ibv_set_ece;
    default "ibv_create_ah"                      "IBVERBS_1.1"          => ah::ibv_create_ah;
    default "ibv_destroy_ah"                     "IBVERBS_1.1"          => ah::ibv_destroy_ah;
    default "ibv_init_ah_from_wc"                "IBVERBS_1.1"          => ah::ibv_init_ah_from_wc;
    default "ibv_create_ah_from_wc"              "IBVERBS_1.1"          => ah::ibv_create_ah_from_wc;
    default "ibv_attach_mcast"                   "IBVERBS_1.1"          => stubs::ibv_attach_mcast;
    default "ibv_detach_mcast"                   "IBVERBS_1.1"          => stubs::ibv_detach_mcast;
    default "ibv_resolve_eth_l2_from_gid"        "IBVERBS_1.1"          => stubs::ibv_resolve_eth_l2_from_gid;
    default "ibv_import_device"                  "IBVERBS_1.10"         => stubs::ibv_import_device;
    default "ibv_import_pd"                      "IBVERBS_1.10"         => stubs::ibv_import_pd;
    default "ibv_unimport_pd"                    "IBVERBS_1.10"         => stubs::ibv_unimport_pd;
    default "ibv_import_mr"                      "IBVERBS_1.10"         => stubs::ibv_import_mr;
    default "ibv_unimport_mr"                    "IBVERBS_1.10"         => stubs::ibv_unimport_mr;
    default "ibv_import_dm"                      "IBVERBS_1.13"         => stubs::ibv_import_dm;
    default "ibv_unimport_dm"                    "IBVERBS_1.13"         => stubs::ibv_unimport_dm;
    // Conversions of kernel command structures (only the kernel rdma_cm path calls them): implemented.
    default "ibv_copy_ah_attr_from_kern"         "IBVERBS_1.1"          => kern::ibv_copy_ah_attr_from_kern;
    default "ibv_copy_qp_attr_from_kern"         "IBVERBS_1.0"          => kern::ibv_copy_qp_attr_from_kern;
    default "ibv_copy_path_rec_from_kern"        "IBVERBS_1.0"          => kern::ibv_copy_path_rec_from_kern;
    default "ibv_copy_path_rec_to_kern"          "IBVERBS_1.0"          => kern::ibv_copy_path_rec_to_kern;
    // The libibverbs 1.0 ABI (pre-2006 wrapper structs): fail with ENOSYS, as on a system
    // with no devices of that ABI. No Debian binary imports them.
    compat  "ibv_get_device_list"                "IBVERBS_1.0"          => compat::ibv_get_device_list_1_0;
    compat  "ibv_free_device_list"               "IBVERBS_1.0"          => compat::ibv_free_device_list_1_0;
    compat  "ibv_get_device_name"                "IBVERBS_1.0"          => compat::ibv_get_device_name_1_0;
    compat  "ibv_get_device_guid"                "IBVERBS_1.0"          => compat::ibv_get_device_guid_1_0;
    compat  "ibv_open_device"                    "IBVERBS_1.0"          => compat::ibv_open_device_1_0;
    compat  "ibv_close_device"                   "IBVERBS_1.0"          => compat::ibv_close_device_1_0;
    compat  "ibv_get_async_event"                "IBVERBS_1.0"          => compat::ibv_get_async_event_1_0;
    compat  "ibv_ack_async_event"                "IBVERBS_1.0"          => compat::ibv_ack_async_event_1_0;
    compat  "ibv_query_device"                   "IBVERBS_1.0"          => compat::ibv_query_device_1_0;
    compat  "ibv_query_port"                     "IBVERBS_1.0"          => compat::ibv_query_port_1_0;
    compat  "ibv_query_gid"                      "IBVERBS_1.0"          => compat::ibv_query_gid_1_0;
    compat  "ibv_query_pkey"                     "IBVERBS_1.0"          => compat::ibv_query_pkey_1_0;
    compat  "ibv_alloc_pd"                       "IBVERBS_1.0"          => compat::ibv_alloc_pd_1_0;
    compat  "ibv_dealloc_pd"                     "IBVERBS_1.0"          => compat::ibv_dealloc_pd_1_0;
    compat  "ibv_reg_mr"                         "IBVERBS_1.0"          => compat::ibv_reg_mr_1_0;
    compat  "ibv_dereg_mr"                       "IBVERBS_1.0"          => compat::ibv_dereg_mr_1_0;
    compat  "ibv_create_cq"                      "IBVERBS_1.0"          => compat::ibv_create_cq_1_0;
    compat  "ibv_resize_cq"                      "IBVERBS_1.0"          => compat::ibv_resize_cq_1_0;
    compat  "ibv_destroy_cq"                     "IBVERBS_1.0"          => compat::ibv_destroy_cq_1_0;
    compat  "ibv_get_cq_event"                   "IBVERBS_1.0"          => compat::ibv_get_cq_event_1_0;
    compat  "ibv_ack_cq_events"                  "IBVERBS_1.0"          => compat::ibv_ack_cq_events_1_0;
    compat  "ibv_create_srq"                     "IBVERBS_1.0"          => compat::ibv_create_srq_1_0;
    compat  "ibv_modify_srq"                     "IBVERBS_1.0"          => compat::ibv_modify_srq_1_0;
    compat  "ibv_query_srq"                      "IBVERBS_1.0"          => compat::ibv_query_srq_1_0;
    compat  "ibv_destroy_srq"                    "IBVERBS_1.0"          => compat::ibv_destroy_srq_1_0;
    compat  "ibv_create_qp"                      "IBVERBS_1.0"          => compat::ibv_create_qp_1_0;
    compat  "ibv_query_qp"                       "IBVERBS_1.0"          => compat::ibv_query_qp_1_0;
    compat  "ibv_modify_qp"                      "IBVERBS_1.0"          => compat::ibv_modify_qp_1_0;
    compat  "ibv_destroy_qp"                     "IBVERBS_1.0"          => compat::ibv_destroy_qp_1_0;
    compat  "ibv_create_ah"                      "IBVERBS_1.0"          => compat::ibv_create_ah_1_0;
    compat  "ibv_destroy_ah"                     "IBVERBS_1.0"          => compat::ibv_destroy_ah_1_0;
    compat  "ibv_attach_mcast"                   "IBVERBS_1.0"          => compat::ibv_attach_mcast_1_0;
    compat  "ibv_detach_mcast"                   "IBVERBS_1.0"          => compat::ibv_detach_mcast_1_0;
    // Private to rdma-core's providers (perftest's libmlx5/libefa import them at load time);
    // ibv_query_gid_type is used by ibv_devinfo and pyverbs.
    compat  "ibv_register_driver"                "IBVERBS_1.1"          => private34::ibv_register_driver;
    default "ibv_query_gid_type"                 "IBVERBS_PRIVATE_34"   => device::ibv_query_gid_type;
    default "verbs_register_driver_34"           "IBVERBS_PRIVATE_34"   => private34::verbs_register_driver_34;
    default "verbs_init_cq"                      "IBVERBS_PRIVATE_34"   => private34::verbs_init_cq;
    default "verbs_open_device"                  "IBVERBS_PRIVATE_34"   => private34::verbs_open_device;
    default "_verbs_init_and_alloc_context"      "IBVERBS_PRIVATE_34"   => private34::_verbs_init_and_alloc_context;
    default "verbs_set_ops"                      "IBVERBS_PRIVATE_34"   => private34::verbs_set_ops;
    default "verbs_uninit_context"               "IBVERBS_PRIVATE_34"   => private34::verbs_uninit_context;
    default "execute_ioctl"                      "IBVERBS_PRIVATE_34"   => private34::execute_ioctl;
    default "__ioctl_final_num_attrs"            "IBVERBS_PRIVATE_34"   => private34::__ioctl_final_num_attrs;
    default "__verbs_log"                        "IBVERBS_PRIVATE_34"   => private34::__verbs_log;
    default "ibv_read_ibdev_sysfs_file"          "IBVERBS_PRIVATE_34"   => private34::ibv_read_ibdev_sysfs_file;
    object  "verbs_allow_disassociate_destroy"   "IBVERBS_PRIVATE_34"   => private34::VERBS_ALLOW_DISASSOCIATE_DESTROY;
    default "ibv_cmd_advise_mr"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_advise_mr;
    default "ibv_cmd_alloc_dm"                   "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_alloc_dm;
    default "ibv_cmd_alloc_mw"                   "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_alloc_mw;
    default "ibv_cmd_alloc_pd"                   "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_alloc_pd;
    default "ibv_cmd_attach_mcast"               "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_attach_mcast;
    default "ibv_cmd_close_xrcd"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_close_xrcd;
    default "ibv_cmd_create_ah"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_ah;
    default "ibv_cmd_create_counters"            "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_counters;
    default "ibv_cmd_create_cq"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_cq;
    default "ibv_cmd_create_cq_ex"               "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_cq_ex;
    default "ibv_cmd_create_flow"                "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_flow;
    default "ibv_cmd_create_flow_action_esp"     "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_flow_action_esp;
    default "ibv_cmd_create_qp"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_qp;
    default "ibv_cmd_create_qp_ex"               "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_qp_ex;
    default "ibv_cmd_create_qp_ex2"              "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_qp_ex2;
    default "ibv_cmd_create_rwq_ind_table"       "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_rwq_ind_table;
    default "ibv_cmd_create_srq"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_srq;
    default "ibv_cmd_create_srq_ex"              "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_srq_ex;
    default "ibv_cmd_create_wq"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_create_wq;
    default "ibv_cmd_dealloc_mw"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_dealloc_mw;
    default "ibv_cmd_dealloc_pd"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_dealloc_pd;
    default "ibv_cmd_dereg_mr"                   "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_dereg_mr;
    default "ibv_cmd_destroy_ah"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_ah;
    default "ibv_cmd_destroy_counters"           "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_counters;
    default "ibv_cmd_destroy_cq"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_cq;
    default "ibv_cmd_destroy_flow"               "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_flow;
    default "ibv_cmd_destroy_flow_action"        "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_flow_action;
    default "ibv_cmd_destroy_qp"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_qp;
    default "ibv_cmd_destroy_rwq_ind_table"      "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_rwq_ind_table;
    default "ibv_cmd_destroy_srq"                "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_srq;
    default "ibv_cmd_destroy_wq"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_destroy_wq;
    default "ibv_cmd_detach_mcast"               "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_detach_mcast;
    default "ibv_cmd_free_dm"                    "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_free_dm;
    default "ibv_cmd_get_context"                "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_get_context;
    default "ibv_cmd_modify_cq"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_modify_cq;
    default "ibv_cmd_modify_flow_action_esp"     "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_modify_flow_action_esp;
    default "ibv_cmd_modify_qp"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_modify_qp;
    default "ibv_cmd_modify_qp_ex"               "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_modify_qp_ex;
    default "ibv_cmd_modify_srq"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_modify_srq;
    default "ibv_cmd_modify_wq"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_modify_wq;
    default "ibv_cmd_open_qp"                    "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_open_qp;
    default "ibv_cmd_open_xrcd"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_open_xrcd;
    default "ibv_cmd_poll_cq"                    "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_poll_cq;
    default "ibv_cmd_post_recv"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_post_recv;
    default "ibv_cmd_post_send"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_post_send;
    default "ibv_cmd_post_srq_recv"              "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_post_srq_recv;
    default "ibv_cmd_query_context"              "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_query_context;
    default "ibv_cmd_query_device_any"           "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_query_device_any;
    default "ibv_cmd_query_mr"                   "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_query_mr;
    default "ibv_cmd_query_port"                 "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_query_port;
    default "ibv_cmd_query_qp"                   "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_query_qp;
    default "ibv_cmd_query_srq"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_query_srq;
    default "ibv_cmd_read_counters"              "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_read_counters;
    default "ibv_cmd_reg_dm_mr"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_reg_dm_mr;
    default "ibv_cmd_reg_dmabuf_mr"              "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_reg_dmabuf_mr;
    default "ibv_cmd_reg_mr"                     "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_reg_mr;
    default "ibv_cmd_req_notify_cq"              "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_req_notify_cq;
    default "ibv_cmd_rereg_mr"                   "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_rereg_mr;
    default "ibv_cmd_resize_cq"                  "IBVERBS_PRIVATE_34"   => private34::ibv_cmd_resize_cq;
    // softroce's interface for its own librdmacm.so.1 (private.rs).
    default "softroce_private_version"           "SOFTROCE_PRIVATE_1"   => private::softroce_private_version;
    // librdmacm (rdmacm/): what softroce's librdmacm.so.1 forwards each of its exports to.
    default "softroce_raccept"                   "SOFTROCE_PRIVATE_1"   => rdmacm::raccept;
    default "softroce_rbind"                     "SOFTROCE_PRIVATE_1"   => rdmacm::rbind;
    default "softroce_rclose"                    "SOFTROCE_PRIVATE_1"   => rdmacm::rclose;
    default "softroce_rconnect"                  "SOFTROCE_PRIVATE_1"   => rdmacm::rconnect;
    default "softroce_rdma_accept"               "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_accept;
    default "softroce_rdma_ack_cm_event"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_ack_cm_event;
    default "softroce_rdma_bind_addr"            "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_bind_addr;
    default "softroce_rdma_connect"              "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_connect;
    default "softroce_rdma_create_ep"            "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_create_ep;
    default "softroce_rdma_create_event_channel" "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_create_event_channel;
    default "softroce_rdma_create_id"            "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_create_id;
    default "softroce_rdma_create_qp"            "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_create_qp;
    default "softroce_rdma_create_qp_ex"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_create_qp_ex;
    default "softroce_rdma_create_srq"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_create_srq;
    default "softroce_rdma_create_srq_ex"        "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_create_srq_ex;
    default "softroce_rdma_destroy_ep"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_destroy_ep;
    default "softroce_rdma_destroy_event_channel" "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_destroy_event_channel;
    default "softroce_rdma_destroy_id"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_destroy_id;
    default "softroce_rdma_destroy_qp"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_destroy_qp;
    default "softroce_rdma_destroy_srq"          "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_destroy_srq;
    default "softroce_rdma_disconnect"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_disconnect;
    default "softroce_rdma_establish"            "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_establish;
    default "softroce_rdma_event_str"            "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_event_str;
    default "softroce_rdma_free_devices"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_free_devices;
    default "softroce_rdma_freeaddrinfo"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_freeaddrinfo;
    default "softroce_rdma_get_cm_event"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_get_cm_event;
    default "softroce_rdma_get_devices"          "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_get_devices;
    default "softroce_rdma_get_dst_port"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_get_dst_port;
    default "softroce_rdma_get_remote_ece"       "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_get_remote_ece;
    default "softroce_rdma_get_request"          "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_get_request;
    default "softroce_rdma_get_src_port"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_get_src_port;
    default "softroce_rdma_getaddrinfo"          "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_getaddrinfo;
    default "softroce_rdma_init_qp_attr"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_init_qp_attr;
    default "softroce_rdma_join_multicast"       "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_join_multicast;
    default "softroce_rdma_join_multicast_ex"    "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_join_multicast_ex;
    default "softroce_rdma_leave_multicast"      "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_leave_multicast;
    default "softroce_rdma_listen"               "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_listen;
    default "softroce_rdma_migrate_id"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_migrate_id;
    default "softroce_rdma_notify"               "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_notify;
    default "softroce_rdma_reject"               "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_reject;
    default "softroce_rdma_reject_ece"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_reject_ece;
    default "softroce_rdma_resolve_addr"         "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_resolve_addr;
    default "softroce_rdma_resolve_route"        "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_resolve_route;
    default "softroce_rdma_set_local_ece"        "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_set_local_ece;
    default "softroce_rdma_set_option"           "SOFTROCE_PRIVATE_1"   => rdmacm::rdma_set_option;
    default "softroce_rfcntl"                    "SOFTROCE_PRIVATE_1"   => rdmacm::rfcntl;
    default "softroce_rgetpeername"              "SOFTROCE_PRIVATE_1"   => rdmacm::rgetpeername;
    default "softroce_rgetsockname"              "SOFTROCE_PRIVATE_1"   => rdmacm::rgetsockname;
    default "softroce_rgetsockopt"               "SOFTROCE_PRIVATE_1"   => rdmacm::rgetsockopt;
    default "softroce_riomap"                    "SOFTROCE_PRIVATE_1"   => rdmacm::riomap;
    default "softroce_riounmap"                  "SOFTROCE_PRIVATE_1"   => rdmacm::riounmap;
    default "softroce_riowrite"                  "SOFTROCE_PRIVATE_1"   => rdmacm::riowrite;
    default "softroce_rlisten"                   "SOFTROCE_PRIVATE_1"   => rdmacm::rlisten;
    default "softroce_rpoll"                     "SOFTROCE_PRIVATE_1"   => rdmacm::rpoll;
    default "softroce_rread"                     "SOFTROCE_PRIVATE_1"   => rdmacm::rread;
    default "softroce_rreadv"                    "SOFTROCE_PRIVATE_1"   => rdmacm::rreadv;
    default "softroce_rrecv"                     "SOFTROCE_PRIVATE_1"   => rdmacm::rrecv;
    default "softroce_rrecvfrom"                 "SOFTROCE_PRIVATE_1"   => rdmacm::rrecvfrom;
    default "softroce_rrecvmsg"                  "SOFTROCE_PRIVATE_1"   => rdmacm::rrecvmsg;
    default "softroce_rselect"                   "SOFTROCE_PRIVATE_1"   => rdmacm::rselect;
    default "softroce_rsend"                     "SOFTROCE_PRIVATE_1"   => rdmacm::rsend;
    default "softroce_rsendmsg"                  "SOFTROCE_PRIVATE_1"   => rdmacm::rsendmsg;
    default "softroce_rsendto"                   "SOFTROCE_PRIVATE_1"   => rdmacm::rsendto;
    default "softroce_rsetsockopt"               "SOFTROCE_PRIVATE_1"   => rdmacm::rsetsockopt;
    default "softroce_rshutdown"                 "SOFTROCE_PRIVATE_1"   => rdmacm::rshutdown;
    default "softroce_rsocket"                   "SOFTROCE_PRIVATE_1"   => rdmacm::rsocket;
    default "softroce_rwrite"                    "SOFTROCE_PRIVATE_1"   => rdmacm::rwrite;
    default "softroce_rwritev"                   "SOFTROCE_PRIVATE_1"   => rdmacm::rwritev;
}
