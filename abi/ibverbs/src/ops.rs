//! The function-pointer slots of a context: what the header inlines call.
//!
//! `ibv_context.ops` (called with no NULL check by `ibv_poll_cq`, `ibv_req_notify_cq`,
//! `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_dealloc_mw`; with one by
//! `ibv_alloc_mw`; `ibv_bind_mw` after its own checks) must never hold NULL in a called slot:
//! each points at the real implementation (`cq.rs`, `qp.rs`, `srq.rs`, `mw.rs`), which
//! refuses objects that are not ours.
//! `_compat_query_device`/`_compat_query_port` point at the real queries, as in rdma-core.
//!
//! `verbs_context` slots: `query_port` and `query_device_ex` are implemented. Everything else is
//! left NULL on purpose: a NULL slot makes the header inline fail with `EOPNOTSUPP` — exactly
//! the real library's answer for a device without the feature (XRC, flow steering, device
//! memory, counters, WQs and RSS tables, thread and parent domains, rate limits, CQ moderation,
//! `advise_mr`, null MRs, `query_rt_values`) — and, for `create_qp_ex` and `create_srq_ex`,
//! makes the inline fall back to the exported `ibv_create_qp`/`ibv_create_srq` when only a PD
//! is asked for. The next slots to fill are `create_cq_ex`, `create_qp_ex` (perftest and
//! `ibv_rc_pingpong -N` use the new post API), `create_srq_ex`, `modify_cq` if wanted.

use crate::ffi::*;

/// Fills the slots of a new context.
pub fn fill(v: &mut verbs_context) {
    v.query_port = Some(crate::device::query_port);
    v.query_device_ex = Some(crate::device::query_device_ex);
    v.create_cq_ex = Some(crate::cq::create_cq_ex);
    v.create_qp_ex = Some(crate::qp::create_qp_ex);
    let ops = &mut v.context.ops;
    ops._compat_query_device = Some(crate::device::ibv_query_device);
    ops._compat_query_port = Some(crate::device::ibv_query_port);
    ops.alloc_mw = Some(crate::mw::alloc_mw);
    ops.bind_mw = Some(crate::mw::bind_mw);
    ops.dealloc_mw = Some(crate::mw::dealloc_mw);
    ops.poll_cq = Some(crate::cq::poll_cq);
    ops.req_notify_cq = Some(crate::cq::req_notify_cq);
    ops.post_srq_recv = Some(crate::srq::post_srq_recv);
    ops.post_send = Some(crate::qp::post_send);
    ops.post_recv = Some(crate::qp::post_recv);
}
