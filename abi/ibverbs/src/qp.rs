//! Queue pairs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`, and the
//! `ops.post_send` / `ops.post_recv` slots the `ibv_post_send` / `ibv_post_recv` inlines call.
//!
//! A QP is an `Obj<ibv_qp_ex, Qp>` (every QP has the extended shape, so `ibv_qp_to_qp_ex` can
//! later always answer) holding a softroce [`QueuePair`]. Each work request is translated
//! into a softroce [`SendWr`]/[`RecvWr`] and posted through the Rust API, which checks it
//! (keys, PD, bounds, queue depth) exactly as for Rust callers.

use libc::{c_int, c_void, size_t};
use parking_lot::Mutex;
use softroce::transport::PostError;
use softroce::verbs::Lkey;
use softroce::verbs::{
    Access, AddressVector, Error, Gid, GidIndex, Mtu, Payload, Psn, Qkey, QpAttrs, QpCaps, QpInitAttr,
    QpState, QpType, Qpn, QueuePair, RecvWr, RemoteAddr, Rkey, SendOp, SendWr, Sge,
};

use crate::cq::cq_of;
use crate::ffi::*;
use crate::object::Obj;
use crate::pd::pd_of;
use crate::util::{Errno, errno_of, guard, ptr_or_errno, zero_or_errno};

const QP_MAGIC: u64 = 0x736f_6674_5f71_7000;

/// The Rust side of a QP.
pub struct Qp {
    /// The softroce queue pair.
    pub qp: std::sync::Arc<QueuePair>,
    sq_sig_all: bool,
    cap: ibv_qp_cap,
    /// The QP has been moved to INIT (rxe reports port 0 before).
    inited: std::sync::atomic::AtomicBool,
    /// The work requests built since `wr_start` (the new post API).
    batch: Mutex<Batch>,
}

/// What `ibv_wr_*` calls have built since `wr_start`.
#[derive(Default)]
struct Batch {
    wrs: Vec<SendWr>,
    /// The first error met while building (returned by `wr_complete`).
    err: Option<Errno>,
}

/// A QP of ours behind `p`, or `None`.
///
/// # Safety
/// `p` is NULL or an `ibv_qp *`.
pub unsafe fn qp_of<'a>(p: *const ibv_qp) -> Option<&'a Obj<ibv_qp_ex, Qp>> {
    // SAFETY: per the caller; every QP of ours is an Obj<ibv_qp_ex, Qp>.
    unsafe { Obj::from_c(p.cast::<ibv_qp_ex>(), QP_MAGIC) }
}

const IBV_QPT_RC: u32 = 2;
const IBV_QPT_UC: u32 = 3;
const IBV_QPT_UD: u32 = 4;

fn qp_type_of(t: u32) -> Result<QpType, Errno> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        // raw packet, XRC send and receive, driver QPs: what a device without them answers
        8 | 9 | 10 | 0xff => Err(libc::EOPNOTSUPP),
        // a type that does not exist (the kernel's answer)
        _ => Err(libc::EINVAL),
    }
}

fn ibv_qp_type(t: QpType) -> u32 {
    match t {
        QpType::Rc => IBV_QPT_RC,
        QpType::Uc => IBV_QPT_UC,
        _ => IBV_QPT_UD,
    }
}

/// Makes a QP from the fields of `ibv_qp_init_attr(_ex)` common to both.
pub(crate) fn create(
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    send_ops: Option<u64>,
) -> Result<*mut ibv_qp_ex, Errno> {
    if let Some(ops) = send_ops
        && ops & !SUPPORTED_SEND_OPS != 0
    {
        return Err(libc::EOPNOTSUPP);
    }
    // SAFETY: the caller passes a PD (or NULL).
    let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
    let qp_type = qp_type_of(a.qp_type)?;
    // SAFETY: CQ and SRQ pointers from the application.
    let send_cq = unsafe { cq_of(a.send_cq) }.ok_or(libc::EINVAL)?;
    // SAFETY: as above.
    let recv_cq = unsafe { cq_of(a.recv_cq) }.ok_or(libc::EINVAL)?;
    let srq = if a.srq.is_null() {
        None
    } else {
        // SAFETY: as above.
        Some(unsafe { crate::srq::srq_of(a.srq) }.ok_or(libc::EINVAL)?)
    };
    // (rxe accepts 0 work requests and grants a queue of at least one)
    let cap = QpCaps {
        max_send_wr: a.cap.max_send_wr.max(1),
        max_recv_wr: if srq.is_some() { 0 } else { a.cap.max_recv_wr.max(1) },
        max_send_sge: a.cap.max_send_sge.max(1),
        max_recv_sge: if srq.is_some() { 0 } else { a.cap.max_recv_sge.max(1) },
        max_inline_data: a.cap.max_inline_data,
    };
    let init = QpInitAttr {
        qp_type,
        send_cq: &send_cq.rust.cq,
        recv_cq: &recv_cq.rust.cq,
        cap,
        sq_sig_all: a.sq_sig_all != 0,
        srq: srq.map(|s| &s.rust.srq),
    };
    // Capacities above the device's are EINVAL (rxe's rxe_qp_chk_cap); the QP count limit
    // stays ENOMEM.
    let qp = p.rust.pd.create_qp(&init).map_err(|e| match e {
        Error::Limit { what, .. } if what != "max_qp" => libc::EINVAL,
        e => errno_of(&e),
    })?;
    // With an SRQ the receive capacities are the SRQ's: the caller's stay as given (rxe).
    let out_cap = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: if srq.is_some() { a.cap.max_recv_wr } else { cap.max_recv_wr },
        max_send_sge: cap.max_send_sge,
        max_recv_sge: if srq.is_some() { a.cap.max_recv_sge } else { cap.max_recv_sge },
        max_inline_data: cap.max_inline_data,
    };
    a.cap = out_cap;
    // SAFETY: ibv_qp_ex holds integers, raw pointers, `Option<fn>` slots and pthread objects
    // (initialised in place below): all-zero is valid.
    let mut c: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let b = &mut c.qp_base;
    b.context = p.c.context;
    b.qp_context = a.qp_context;
    b.pd = pd;
    b.send_cq = a.send_cq;
    b.recv_cq = a.recv_cq;
    b.srq = a.srq;
    b.handle = crate::object::next_handle();
    b.qp_num = qp.qp_num().value();
    b.state = 0;
    b.qp_type = a.qp_type;
    if send_ops.is_some() {
        c.wr_start = Some(wr_start);
        c.wr_complete = Some(wr_complete);
        c.wr_abort = Some(wr_abort);
        c.wr_send = Some(wr_send);
        c.wr_send_imm = Some(wr_send_imm);
        c.wr_send_inv = Some(wr_send_inv);
        c.wr_bind_mw = Some(wr_bind_mw);
        c.wr_local_inv = Some(wr_local_inv);
        c.wr_rdma_write = Some(wr_rdma_write);
        c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
        c.wr_rdma_read = Some(wr_rdma_read);
        c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
        c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
        c.wr_set_sge = Some(wr_set_sge);
        c.wr_set_sge_list = Some(wr_set_sge_list);
        c.wr_set_inline_data = Some(wr_set_inline_data);
        c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
        c.wr_set_ud_addr = Some(wr_set_ud_addr);
    }
    let rust = Qp {
        qp: std::sync::Arc::new(qp),
        sq_sig_all: a.sq_sig_all != 0,
        cap: out_cap,
        inited: Default::default(),
        batch: Mutex::new(Batch::default()),
    };
    // The QP holds its PD, CQs and SRQ (destroying them meanwhile is EBUSY).
    p.rust.users.hold();
    send_cq.rust.users.hold();
    recv_cq.rust.users.hold();
    if let Some(s) = srq {
        s.rust.users.hold();
    }
    let o = Obj::into_c(c, QP_MAGIC, rust);
    // SAFETY: o is a fresh, boxed (pinned) QP; its pthread objects are initialised in place.
    unsafe {
        libc::pthread_mutex_init(&raw mut (*o).qp_base.mutex, std::ptr::null());
        libc::pthread_cond_init(&raw mut (*o).qp_base.cond, std::ptr::null());
    }
    // SAFETY: o is the fresh QP, its context set.
    unsafe { crate::events::register_qp(o) };
    Ok(o)
}

/// `ibv_create_qp`: NULL + errno (`EINVAL`: a PD, CQ or SRQ not ours, capacities above the
/// device's; `EOPNOTSUPP`: a QP type softroce lacks; `ENOMEM` at the QP limit). On success
/// `attr->cap` holds the capacities granted.
///
/// # Safety
/// `pd` is a PD of ours; `attr` is readable and writable.
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    ptr_or_errno(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let a = unsafe { &mut *attr };
        create(pd, a, None).map(|p| p.cast::<ibv_qp>())
    })
}

/// `ibv_destroy_qp`: 0 or `EINVAL`; waits until every asynchronous event delivered for the QP
/// has been acknowledged (as rdma-core). Outstanding work requests are dropped.
///
/// # Safety
/// `qp` is NULL or a QP of ours, not used again on success.
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { qp_of(qp) }.ok_or(libc::EINVAL)?;
        let reported = crate::events::unregister_qp_of(o.c.qp_base.context, o.rust.qp.qp_num().value());
        // SAFETY: the QP's own initialised mutex/cond; the counter is written under it.
        unsafe {
            libc::pthread_mutex_lock(&raw mut (*qp).mutex);
            while (*qp).events_completed != reported {
                libc::pthread_cond_wait(&raw mut (*qp).cond, &raw mut (*qp).mutex);
            }
            libc::pthread_mutex_unlock(&raw mut (*qp).mutex);
            let mut b = Obj::<ibv_qp_ex, Qp>::take(qp.cast(), QP_MAGIC).ok_or(libc::EINVAL)?;
            libc::pthread_mutex_destroy(&raw mut b.c.qp_base.mutex);
            libc::pthread_cond_destroy(&raw mut b.c.qp_base.cond);
            let base = &b.c.qp_base;
            crate::pd::release_pd(base.pd);
            crate::cq::release_cq(base.send_cq);
            crate::cq::release_cq(base.recv_cq);
            if let Some(s) = crate::srq::srq_of(base.srq) {
                s.rust.users.release();
            }
        }
        Ok(())
    })
}

/// `enum ibv_qp_attr_mask`.
mod mask {
    pub const STATE: i32 = 1 << 0;
    pub const CUR_STATE: i32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: i32 = 1 << 2;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const QKEY: i32 = 1 << 6;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const ALT_PATH: i32 = 1 << 14;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const PATH_MIG_STATE: i32 = 1 << 18;
    pub const CAP: i32 = 1 << 19;
    pub const DEST_QPN: i32 = 1 << 20;
}

pub(crate) fn state_of(s: u32) -> Result<QpState, Errno> {
    QpState::from_ibv(s).ok_or(libc::EINVAL)
}

pub(crate) fn ibv_state(s: QpState) -> u32 {
    u32::from(s.ibv())
}

/// An `ibv_ah_attr` as a softroce address vector: RoCE needs the GRH (`is_global`), else
/// `EINVAL` (the kernel's answer for a RoCE port).
pub(crate) fn av_of(ah: &ibv_ah_attr) -> Result<AddressVector, Errno> {
    // (the kernel's rdma_is_port_valid: the device has port 1 only)
    if ah.is_global == 0 || ah.port_num != 1 {
        return Err(libc::EINVAL);
    }
    // SAFETY: ibv_gid is a union of plain bytes; `raw` views all of it.
    let dgid = Gid(unsafe { ah.grh.dgid.raw });
    let mut av = AddressVector::new(dgid, GidIndex::new(ah.grh.sgid_index));
    av.hop_limit = ah.grh.hop_limit;
    av.traffic_class = ah.grh.traffic_class;
    av.flow_label = ah.grh.flow_label;
    av.sl = ah.sl;
    Ok(av)
}

/// A softroce address vector as an `ibv_ah_attr`.
pub(crate) fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: av.dgid.0 },
            flow_label: av.flow_label,
            sgid_index: av.sgid_index.value(),
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: av.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

fn attrs_of(a: &ibv_qp_attr, m: c_int) -> Result<QpAttrs, Errno> {
    if m & (mask::ALT_PATH | mask::PATH_MIG_STATE) != 0 {
        // No alternate paths (APM) in softroce, as in rxe.
        return Err(libc::EINVAL);
    }
    if m & mask::CAP != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if m & !((1 << 21) - 1) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let _ = mask::EN_SQD_ASYNC_NOTIFY;
    let has = |bit| m & bit != 0;
    let mut q = QpAttrs::default();
    if has(mask::STATE) {
        q.state = Some(state_of(a.qp_state)?);
    }
    if has(mask::ACCESS_FLAGS) {
        q.access = Some(Access::from_bits(a.qp_access_flags).intersect(Access::ALL));
    }
    if has(mask::PKEY_INDEX) {
        // The kernel does not check the index (rxe keeps it); the one P_Key is index 0.
        q.pkey_index = Some(0);
    }
    if has(mask::PORT) {
        q.port_num = Some(a.port_num);
    }
    if has(mask::QKEY) {
        q.qkey = Some(Qkey::new(a.qkey));
    }
    if has(mask::AV) {
        q.av = Some(av_of(&a.ah_attr)?);
    }
    if has(mask::PATH_MTU) {
        q.path_mtu = Some(Mtu::from_ibv(a.path_mtu).ok_or(libc::EINVAL)?);
    }
    if has(mask::TIMEOUT) {
        q.timeout = Some(a.timeout);
    }
    // The 3-bit counts and the 5-bit timer as the kernel takes them: not range-checked (rxe
    // keeps the byte); softroce uses the largest value the field holds.
    if has(mask::RETRY_CNT) {
        q.retry_cnt = Some(a.retry_cnt.min(7));
    }
    if has(mask::RNR_RETRY) {
        q.rnr_retry = Some(a.rnr_retry.min(7));
    }
    if has(mask::RQ_PSN) {
        q.rq_psn = Some(Psn::new(a.rq_psn & 0xff_ffff));
    }
    if has(mask::MAX_QP_RD_ATOMIC) {
        q.max_rd_atomic = Some(a.max_rd_atomic);
    }
    if has(mask::MIN_RNR_TIMER) {
        q.min_rnr_timer = Some(a.min_rnr_timer & 0x1f);
    }
    if has(mask::SQ_PSN) {
        q.sq_psn = Some(Psn::new(a.sq_psn & 0xff_ffff));
    }
    if has(mask::MAX_DEST_RD_ATOMIC) {
        // (rxe does not check it against max_qp_rd_atom; softroce serves at most that many)
        q.max_dest_rd_atomic = Some(a.max_dest_rd_atomic.min(softroce::transport::MAX_RD_ATOMIC));
    }
    if has(mask::DEST_QPN) {
        q.dest_qpn = Some(Qpn::new(a.dest_qp_num & 0xff_ffff));
    }
    Ok(q)
}

/// The `ibv_qp_attr` and attribute mask of softroce's modify attributes (the inverse of
/// `attrs_of`): every field the attributes name, the others zero.
pub(crate) fn ibv_attr_of(q: &QpAttrs) -> (ibv_qp_attr, c_int) {
    // SAFETY: ibv_qp_attr is plain data: all-zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mut m = 0;
    let mut set = |bit: c_int, present: bool| {
        if present {
            m |= bit;
        }
    };
    set(mask::STATE, q.state.is_some());
    set(mask::ACCESS_FLAGS, q.access.is_some());
    set(mask::PKEY_INDEX, q.pkey_index.is_some());
    set(mask::PORT, q.port_num.is_some());
    set(mask::QKEY, q.qkey.is_some());
    set(mask::AV, q.av.is_some());
    set(mask::PATH_MTU, q.path_mtu.is_some());
    set(mask::TIMEOUT, q.timeout.is_some());
    set(mask::RETRY_CNT, q.retry_cnt.is_some());
    set(mask::RNR_RETRY, q.rnr_retry.is_some());
    set(mask::RQ_PSN, q.rq_psn.is_some());
    set(mask::MAX_QP_RD_ATOMIC, q.max_rd_atomic.is_some());
    set(mask::MIN_RNR_TIMER, q.min_rnr_timer.is_some());
    set(mask::SQ_PSN, q.sq_psn.is_some());
    set(mask::MAX_DEST_RD_ATOMIC, q.max_dest_rd_atomic.is_some());
    set(mask::DEST_QPN, q.dest_qpn.is_some());
    a.qp_state = q.state.map_or(0, ibv_state);
    a.qp_access_flags = q.access.map_or(0, |x| x.bits());
    a.pkey_index = q.pkey_index.unwrap_or(0);
    a.port_num = q.port_num.unwrap_or(0);
    a.qkey = q.qkey.map_or(0, |k| k.value());
    if let Some(av) = &q.av {
        a.ah_attr = ah_attr_of(av);
    }
    a.path_mtu = q.path_mtu.map_or(0, |x| x as u32);
    a.timeout = q.timeout.unwrap_or(0);
    a.retry_cnt = q.retry_cnt.unwrap_or(0);
    a.rnr_retry = q.rnr_retry.unwrap_or(0);
    a.rq_psn = q.rq_psn.map_or(0, |p| p.value());
    a.max_rd_atomic = q.max_rd_atomic.unwrap_or(0);
    a.min_rnr_timer = q.min_rnr_timer.unwrap_or(0);
    a.sq_psn = q.sq_psn.map_or(0, |p| p.value());
    a.max_dest_rd_atomic = q.max_dest_rd_atomic.unwrap_or(0);
    a.dest_qp_num = q.dest_qpn.map_or(0, |x| x.value());
    (a, m)
}

/// `ibv_modify_qp`: 0 or a positive errno (`EINVAL` for a transition or attribute the state
/// machine refuses, a missing required attribute, a GID index not in the table; `EOPNOTSUPP`
/// for `IBV_QP_CAP` and the rate limit). `IBV_QP_CUR_STATE` must name the current state.
///
/// # Safety
/// `qp` is a QP of ours; `attr` is readable.
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { qp_of(qp) }.ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let a = unsafe { &*attr };
        if mask & mask::CUR_STATE != 0 {
            // The kernel's ib_modify_qp_is_ok with the state the caller says the QP is in:
            // only RTR, RTS, SQD and SQE may be named, only moving to RTS takes it, and SQE
            // exists for UC and UD only. (The actual state is then the one checked.)
            let cur = state_of(a.cur_qp_state)?;
            let to = if mask & mask::STATE != 0 { state_of(a.qp_state)? } else { cur };
            let ok = matches!(cur, QpState::Rtr | QpState::Rts | QpState::Sqd)
                || (cur == QpState::Sqe && o.rust.qp.qp_type() != QpType::Rc);
            if !ok || to != QpState::Rts {
                return Err(libc::EINVAL);
            }
        }
        let q = attrs_of(a, mask)?;
        let r = o.rust.qp.modify(&q).map_err(|e| errno_of(&e));
        // SAFETY: the context of one of our live objects (or the caller's).
        unsafe { crate::events::drain_ctx(o.c.qp_base.context) };
        r?;
        if let Some(s) = q.state {
            if s == QpState::Init {
                o.rust.inited.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            // SAFETY: the C part's state is the application's view, updated as rdma-core does.
            unsafe { (*qp).state = ibv_state(s) };
        }
        Ok(())
    })
}

/// `ibv_query_qp`: 0 or a positive errno; fills every field softroce knows whatever the mask
/// (as providers do), and `init_attr` with the creation attributes.
///
/// # Safety
/// `qp` is a QP of ours; `attr` and `init` are writable.
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { qp_of(qp) }.ok_or(libc::EINVAL)?;
        if attr.is_null() || init.is_null() {
            return Err(libc::EINVAL);
        }
        let info = o.rust.qp.query().map_err(|e| errno_of(&e))?;
        // SAFETY: ibv_qp_attr is plain data: all-zero is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_state(info.state);
        a.cur_qp_state = a.qp_state;
        a.path_mtu = info.attr.path_mtu as u32;
        a.qkey = info.attr.qkey.value();
        a.rq_psn = info.rq_psn.value();
        a.sq_psn = info.sq_psn.value();
        a.dest_qp_num = info.attr.dest_qpn.value();
        a.qp_access_flags = info.attr.access.bits();
        a.cap = o.rust.cap;
        if let Some(av) = &info.av {
            a.ah_attr = ah_attr_of(av);
        }
        // (RoCE always has the GRH; rxe reports it so whatever the state)
        a.ah_attr.is_global = 1;
        // (the port once the QP was moved to INIT, as rxe reports it)
        a.port_num = u8::from(
            info.state != QpState::Reset || o.rust.inited.load(std::sync::atomic::Ordering::Relaxed),
        );
        a.max_rd_atomic = info.attr.max_rd_atomic;
        a.max_dest_rd_atomic = info.attr.max_dest_rd_atomic;
        a.min_rnr_timer = info.attr.min_rnr_timer;
        a.timeout = info.attr.timeout;
        a.retry_cnt = info.attr.retry_cnt;
        a.rnr_retry = info.attr.rnr_retry;
        let b = &o.c.qp_base;
        // SAFETY: per the caller, both are writable.
        unsafe {
            attr.write(a);
            init.write(ibv_qp_init_attr {
                qp_context: b.qp_context,
                send_cq: b.send_cq,
                recv_cq: b.recv_cq,
                srq: b.srq,
                cap: o.rust.cap,
                qp_type: ibv_qp_type(o.rust.qp.qp_type()),
                sq_sig_all: o.rust.sq_sig_all as c_int,
            });
        }
        Ok(())
    })
}

/// The errno of a refused post: a full queue is `ENOMEM` (as rxe), anything else `EINVAL`.
pub(crate) fn post_errno(e: &Error) -> Errno {
    if matches!(e, Error::Post(PostError::QueueFull)) { libc::ENOMEM } else { libc::EINVAL }
}

/// The scatter/gather list of a C work request.
///
/// # Safety
/// `sg` points to `n` readable `ibv_sge`s (or `n` is 0).
pub(crate) unsafe fn sges(sg: *const ibv_sge, n: c_int) -> Result<Vec<Sge>, Errno> {
    if n < 0 || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: per the caller.
        let s = unsafe { sg.add(i).read() };
        v.push(Sge { addr: s.addr, length: s.length, lkey: Lkey::new(s.lkey) });
    }
    Ok(v)
}

/// Copies the bytes an inline work request names (its SGEs are plain addresses then).
///
/// # Safety
/// Every SGE names readable memory of the caller (the contract of `IBV_SEND_INLINE`).
pub(crate) unsafe fn inline_bytes(sg: &[Sge], max: u32) -> Result<Box<[u8]>, Errno> {
    let total: u64 = sg.iter().map(|s| s.length as u64).sum();
    if total > max as u64 {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(total as usize);
    for s in sg {
        // An empty SGE adds nothing and may name NULL (UCX posts such): no slice of it.
        if s.length == 0 {
            continue;
        }
        if s.addr == 0 {
            return Err(libc::EFAULT);
        }
        // SAFETY: per the caller; the address is not NULL and the length not 0.
        v.extend_from_slice(unsafe {
            std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
        });
    }
    Ok(v.into_boxed_slice())
}

const IBV_SEND_FENCE: u32 = 1;
const IBV_SEND_SIGNALED: u32 = 2;
const IBV_SEND_SOLICITED: u32 = 4;
const IBV_SEND_INLINE: u32 = 8;

/// One C send work request as a softroce one.
///
/// # Safety
/// `w` is a readable work request whose pointers follow `ibv_post_send`'s contract.
unsafe fn send_wr_of(o: &Obj<ibv_qp_ex, Qp>, w: &ibv_send_wr) -> Result<SendWr, Errno> {
    // SAFETY: per the caller.
    let sg = unsafe { sges(w.sg_list, w.num_sge) }?;
    // SAFETY: the union member the opcode names.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let op = match w.opcode {
        0 => SendOp::RdmaWrite(RemoteAddr { addr: rdma.remote_addr, rkey: Rkey::new(rdma.rkey) }),
        1 => SendOp::RdmaWriteWithImm(
            RemoteAddr { addr: rdma.remote_addr, rkey: Rkey::new(rdma.rkey) },
            u32::from_be(w.imm_data),
        ),
        2 => SendOp::Send,
        3 => SendOp::SendWithImm(u32::from_be(w.imm_data)),
        4 => SendOp::RdmaRead(RemoteAddr { addr: rdma.remote_addr, rkey: Rkey::new(rdma.rkey) }),
        5 => SendOp::CompareSwap {
            remote: RemoteAddr { addr: atomic.remote_addr, rkey: Rkey::new(atomic.rkey) },
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        6 => SendOp::FetchAdd {
            remote: RemoteAddr { addr: atomic.remote_addr, rkey: Rkey::new(atomic.rkey) },
            add: atomic.compare_add,
        },
        // `invalidate_rkey` shares its bytes with `imm_data` (a union), in host order.
        7 => SendOp::LocalInv(Rkey::new(w.imm_data)),
        8 => {
            // SAFETY: the union member the opcode names; its window and region pointers are
            // the application's.
            let b = unsafe { w.ext.bind_mw };
            // SAFETY: as above.
            unsafe { crate::mw::bind_op(b.mw, b.rkey, &b.bind_info) }?
        }
        9 => SendOp::SendWithInv(Rkey::new(w.imm_data)),
        // TSO, driver ops, atomic write.
        _ => return Err(libc::EINVAL),
    };
    let payload = if w.send_flags & IBV_SEND_INLINE != 0 && !op.is_read_or_atomic() {
        // SAFETY: the application's inline data, per IBV_SEND_INLINE's contract.
        Payload::Inline(unsafe { inline_bytes(&sg, o.rust.cap.max_inline_data) }?)
    } else {
        Payload::Sges(sg.as_slice().into())
    };
    let ud = if o.rust.qp.qp_type() == QpType::Ud {
        // SAFETY: the AH pointer from the application's UD work request.
        let ah = unsafe { crate::ah::ah_of(ud.ah) }.ok_or(libc::EINVAL)?;
        Some(ah.rust.ah.dest(Qpn::new(ud.remote_qpn & 0xff_ffff), Qkey::new(ud.remote_qkey)))
    } else {
        None
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        payload,
        signaled: w.send_flags & IBV_SEND_SIGNALED != 0,
        fence: w.send_flags & IBV_SEND_FENCE != 0,
        solicited: w.send_flags & IBV_SEND_SOLICITED != 0,
        ud,
    })
}

/// `ops.post_send` (`ibv_post_send`): posts the list in order; on the first refused request,
/// `*bad_wr` names it and the errno is returned (`EINVAL`, `ENOMEM` when the queue is full,
/// `EOPNOTSUPP` for memory-window operations).
///
/// # Safety
/// Called through the header inline with the application's object and arrays, as the C
/// contract says (NULL or foreign objects are refused).
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let set_bad = |w: *mut ibv_send_wr| {
        if !bad.is_null() {
            // SAFETY: the caller's bad_wr is writable.
            unsafe { *bad = w };
        }
    };
    let mut cur = wr;
    let r = guard(libc::EIO, || {
        // SAFETY: the inline passes the application's QP.
        let Some(o) = (unsafe { qp_of(qp) }) else {
            return libc::EINVAL;
        };
        while !cur.is_null() {
            // SAFETY: the application's work request list.
            let w = unsafe { &*cur };
            // SAFETY: its pointers follow ibv_post_send's contract.
            let r =
                unsafe { send_wr_of(o, w) }.and_then(|s| o.rust.qp.post_send(s).map_err(|e| post_errno(&e)));
            if let Err(e) = r {
                return e;
            }
            cur = w.next;
        }
        0
    });
    if r != 0 {
        set_bad(cur);
    }
    r
}

/// `ops.post_recv` (`ibv_post_recv`): as [`post_send`] for receive work requests.
///
/// # Safety
/// Called through the header inline with the application's object and arrays, as the C
/// contract says (NULL or foreign objects are refused).
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let mut cur = wr;
    let r = guard(libc::EIO, || {
        // SAFETY: the inline passes the application's QP.
        let Some(o) = (unsafe { qp_of(qp) }) else {
            return libc::EINVAL;
        };
        while !cur.is_null() {
            // SAFETY: the application's work request list.
            let w = unsafe { &*cur };
            // SAFETY: its SGE array follows ibv_post_recv's contract.
            let r = unsafe { sges(w.sg_list, w.num_sge) }.and_then(|sg| {
                o.rust
                    .qp
                    .post_recv_checked_on_use(RecvWr { wr_id: w.wr_id, sg_list: sg.as_slice().into() })
                    .map_err(|e| post_errno(&e))
            });
            if let Err(e) = r {
                return e;
            }
            cur = w.next;
        }
        0
    });
    if r != 0 && !bad.is_null() {
        // SAFETY: the caller's bad_wr is writable.
        unsafe { *bad = cur };
    }
    r
}

/// The `send_ops_flags` softroce offers: WRITE (with immediate), SEND (with immediate, with
/// invalidate), READ, both atomics, LOCAL_INV and BIND_MW. TSO is for raw packet QPs; atomic
/// write (rxe has it since Linux 6.2) is not offered.
const SUPPORTED_SEND_OPS: u64 = 0x3ff;

const IBV_QP_INIT_ATTR_PD: u32 = 1;
const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 4;
const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 64;

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex`): a PD is required (`EINVAL`); with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` the QP gets the new post API (`ibv_qp_to_qp_ex`,
/// `ibv_wr_*`). XRC domains, RSS tables, TSO and creation flags are `EOPNOTSUPP`.
///
/// # Safety
/// Called through the header inline with the application's object and arrays, as the C
/// contract says (NULL or foreign objects are refused).
pub unsafe extern "C" fn create_qp_ex(_ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    ptr_or_errno(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let x = unsafe { &mut *attr };
        if x.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        let known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if x.comp_mask & !known != 0
            || (x.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && x.create_flags != 0)
        {
            return Err(libc::EOPNOTSUPP);
        }
        let mut a = ibv_qp_init_attr {
            qp_context: x.qp_context,
            send_cq: x.send_cq,
            recv_cq: x.recv_cq,
            srq: x.srq,
            cap: x.cap,
            qp_type: x.qp_type,
            sq_sig_all: x.sq_sig_all,
        };
        let ops = (x.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(x.send_ops_flags);
        let p = create(x.pd, &mut a, ops)?;
        x.cap = a.cap;
        Ok(p.cast::<ibv_qp>())
    })
}

/// `ibv_qp_to_qp_ex`: the QP's extended form if it was created with send ops (the new post
/// API), else NULL. For a QP that is not ours, what rdma-core reads: the `comp_mask` of the
/// `struct verbs_qp` it is the start of (`VERBS_QP_EX` set: the QP itself).
///
/// # Safety
/// `qp` is NULL, a QP of ours, or the start of a `struct verbs_qp`.
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    /// rdma-core's `VERBS_QP_EX` bit of `struct verbs_qp`'s `comp_mask`.
    const VERBS_QP_EX: u32 = 1 << 1;
    guard(std::ptr::null_mut(), || {
        if qp.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: per the caller.
        match unsafe { qp_of(qp) } {
            Some(o) if o.c.wr_start.is_some() => qp.cast(),
            Some(_) => std::ptr::null_mut(),
            None => {
                // SAFETY: per the caller, a struct verbs_qp: its comp_mask follows the union of
                // ibv_qp and ibv_qp_ex.
                let mask = unsafe {
                    qp.cast::<u8>().add(std::mem::size_of::<ibv_qp_ex>()).cast::<u32>().read_unaligned()
                };
                if mask & VERBS_QP_EX != 0 { qp.cast() } else { std::ptr::null_mut() }
            }
        }
    })
}

/// Runs `f` on the QP and its batch (nothing for a QP that is not ours).
fn with_batch(qpx: *mut ibv_qp_ex, f: impl FnOnce(&Obj<ibv_qp_ex, Qp>, &mut Batch)) {
    guard((), || {
        // SAFETY: the slot is called by the header inline with the application's QP.
        if let Some(o) = unsafe { Obj::<ibv_qp_ex, Qp>::from_c(qpx, QP_MAGIC) } {
            f(o, &mut o.rust.batch.lock());
        }
    })
}

/// Starts a new work request with `op`, from the QP's `wr_id` and `wr_flags`.
fn push(qpx: *mut ibv_qp_ex, op: SendOp) {
    with_batch(qpx, |o, b| {
        let flags = o.c.wr_flags;
        b.wrs.push(SendWr {
            wr_id: o.c.wr_id,
            op,
            payload: Payload::Sges(Default::default()),
            signaled: flags & IBV_SEND_SIGNALED != 0,
            fence: flags & IBV_SEND_FENCE != 0,
            solicited: flags & IBV_SEND_SOLICITED != 0,
            ud: None,
        });
    })
}

/// Edits the last work request (an error if there is none).
fn last(qpx: *mut ibv_qp_ex, f: impl FnOnce(&Obj<ibv_qp_ex, Qp>, &mut SendWr) -> Result<(), Errno>) {
    with_batch(qpx, |o, b| {
        let r = match b.wrs.last_mut() {
            Some(w) => f(o, w),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.err.get_or_insert(e);
        }
    })
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    with_batch(qpx, |_, b| *b = Batch::default());
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    with_batch(qpx, |_, b| *b = Batch::default());
}

/// `wr_complete`: posts what was built, all or nothing (as rxe's provider, which advances
/// the queue's producer index only when the whole batch was built); 0 or the errno of the
/// first request that failed to build or to pass the post checks (`ENOMEM` when the queue
/// has no room for the whole batch). The batch is gone either way.
unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    let mut r = 0;
    with_batch(qpx, |o, b| {
        let batch = std::mem::take(b);
        if let Some(e) = batch.err {
            r = e;
            return;
        }
        if let Err((_, e)) = o.rust.qp.post_send_all(batch.wrs) {
            r = post_errno(&e);
        }
    });
    r
}

fn remote(rkey: u32, addr: u64) -> RemoteAddr {
    RemoteAddr { addr, rkey: Rkey::new(rkey) }
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    push(qpx, SendOp::Send);
}
unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    push(qpx, SendOp::SendWithImm(u32::from_be(imm)));
}
unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, rkey: u32) {
    push(qpx, SendOp::SendWithInv(Rkey::new(rkey)));
}
unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if info.is_null() {
        with_batch(qpx, |_, b| {
            b.err.get_or_insert(libc::EINVAL);
        });
        return;
    }
    // SAFETY: the application's window and bind description.
    match unsafe { crate::mw::bind_op(mw, rkey, &*info) } {
        Ok(op) => push(qpx, op),
        Err(e) => with_batch(qpx, |_, b| {
            b.err.get_or_insert(e);
        }),
    }
}
unsafe extern "C" fn wr_local_inv(qpx: *mut ibv_qp_ex, rkey: u32) {
    push(qpx, SendOp::LocalInv(Rkey::new(rkey)));
}
unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    push(qpx, SendOp::RdmaWrite(remote(rkey, addr)));
}
unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    push(qpx, SendOp::RdmaWriteWithImm(remote(rkey, addr), u32::from_be(imm)));
}
unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    push(qpx, SendOp::RdmaRead(remote(rkey, addr)));
}
unsafe extern "C" fn wr_atomic_cmp_swp(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64, compare: u64, swap: u64) {
    push(qpx, SendOp::CompareSwap { remote: remote(rkey, addr), compare, swap });
}
unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    push(qpx, SendOp::FetchAdd { remote: remote(rkey, addr), add });
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    last(qpx, |_, w| {
        w.payload = Payload::Sges([Sge { addr, length, lkey: Lkey::new(lkey) }].as_slice().into());
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, n: size_t, list: *const ibv_sge) {
    last(qpx, |_, w| {
        let n = c_int::try_from(n).map_err(|_| libc::EINVAL)?;
        // SAFETY: the application's SGE array of n entries.
        let sg = unsafe { sges(list, n) }?;
        w.payload = Payload::Sges(sg.as_slice().into());
        Ok(())
    });
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: size_t) {
    last(qpx, |o, w| {
        let len = u32::try_from(length).map_err(|_| libc::EINVAL)?;
        let sg = [Sge { addr: addr as u64, length: len, lkey: Lkey::new(0) }];
        // SAFETY: the application's inline buffer.
        w.payload = Payload::Inline(unsafe { inline_bytes(&sg, o.rust.cap.max_inline_data) }?);
        Ok(())
    });
}

unsafe extern "C" fn wr_set_inline_data_list(qpx: *mut ibv_qp_ex, n: size_t, bufs: *const ibv_data_buf) {
    last(qpx, |o, w| {
        if n > 0 && bufs.is_null() {
            return Err(libc::EINVAL);
        }
        let mut sg = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the application's array of n buffers.
            let b = unsafe { bufs.add(i).read() };
            let len = u32::try_from(b.length).map_err(|_| libc::EINVAL)?;
            sg.push(Sge { addr: b.addr as u64, length: len, lkey: Lkey::new(0) });
        }
        // SAFETY: the application's inline buffers.
        w.payload = Payload::Inline(unsafe { inline_bytes(&sg, o.rust.cap.max_inline_data) }?);
        Ok(())
    });
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
    last(qpx, |_, w| {
        // SAFETY: the application's AH.
        let ah = unsafe { crate::ah::ah_of(ah) }.ok_or(libc::EINVAL)?;
        w.ud = Some(ah.rust.ah.dest(Qpn::new(remote_qpn & 0xff_ffff), Qkey::new(remote_qkey)));
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UCX posts inline sends whose empty SGEs carry a NULL address (Open MPI over `pml ucx`):
    /// they add nothing, and making a slice of them was undefined behaviour (a debug build
    /// aborted the process).
    #[test]
    fn an_empty_inline_sge_may_have_a_null_address() {
        let data = *b"payload";
        let sg = [
            Sge { addr: 0, length: 0, lkey: Lkey::new(0) },
            Sge { addr: data.as_ptr() as u64, length: 7, lkey: Lkey::new(0) },
            Sge { addr: 0, length: 0, lkey: Lkey::new(0) },
        ];
        // SAFETY: the one non-empty SGE names `data`.
        assert_eq!(&*unsafe { inline_bytes(&sg, 64) }.unwrap(), b"payload");
        let null = [Sge { addr: 0, length: 1, lkey: Lkey::new(0) }];
        // SAFETY: a NULL address with a length is refused before it is read.
        assert_eq!(unsafe { inline_bytes(&null, 64) }, Err(libc::EFAULT));
    }
}
