//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq` and the `ops.post_srq_recv` slot (`ibv_post_srq_recv`).
//!
//! An SRQ is an `Obj<ibv_srq, Srq>` holding a softroce [`SharedReceiveQueue`].

use libc::c_int;
use softroce::verbs::{RecvWr, SharedReceiveQueue, SrqInitAttr};

use crate::ffi::*;
use crate::object::Obj;
use crate::pd::pd_of;
use crate::util::{errno_of, guard, ptr_or_errno, zero_or_errno};

const SRQ_MAGIC: u64 = 0x736f_6674_5f73_7200;

/// The Rust side of an SRQ.
pub struct Srq {
    /// The softroce shared receive queue.
    pub srq: SharedReceiveQueue,
    /// The QPs using the SRQ.
    pub users: crate::object::Users,
}

/// An SRQ of ours behind `p`, or `None`.
///
/// # Safety
/// `p` is NULL or an `ibv_srq *`.
pub unsafe fn srq_of<'a>(p: *const ibv_srq) -> Option<&'a Obj<ibv_srq, Srq>> {
    // SAFETY: per the caller.
    unsafe { Obj::from_c(p, SRQ_MAGIC) }
}

/// `ibv_create_srq`: NULL + errno (`EINVAL`: a PD not ours, `max_wr` 0 or above the device's
/// `max_srq_wr`, `max_sge` above `max_srq_sge`, as rxe's `rxe_srq_chk_init`; a limit above
/// `max_wr` is taken as `max_wr`). On success `attr->attr` holds what was granted.
///
/// # Safety
/// `pd` is a PD of ours; `attr` is readable and writable.
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    ptr_or_errno(|| {
        // SAFETY: per the caller.
        let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let a = unsafe { &mut *attr };
        // SAFETY: a PD of ours points to its (live) context.
        let ctx = unsafe { crate::context::Context::from_ibv(p.c.context) }.ok_or(libc::EINVAL)?;
        let dev = &ctx.rt.info.attr;
        if a.attr.max_wr == 0
            || a.attr.max_wr as u64 > dev.max_srq_wr as u64
            || a.attr.max_sge as u64 > dev.max_srq_sge as u64
        {
            return Err(libc::EINVAL);
        }
        let init = SrqInitAttr {
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge.max(1),
            srq_limit: a.attr.srq_limit.min(a.attr.max_wr),
        };
        let srq = p.rust.pd.create_srq(&init).map_err(|e| errno_of(&e))?;
        a.attr.max_sge = init.max_sge;
        // SAFETY: ibv_srq holds pointers, integers and pthread objects (initialised in place
        // below): all-zero is valid.
        let mut c: ibv_srq = unsafe { std::mem::zeroed() };
        c.context = p.c.context;
        c.srq_context = a.srq_context;
        c.pd = pd;
        c.handle = crate::object::next_handle();
        let srqn = srq.srq_num();
        let o = Obj::into_c(c, SRQ_MAGIC, Srq { srq, users: Default::default() });
        p.rust.users.hold();
        // SAFETY: o is fresh and boxed; its pthread objects are initialised in place.
        unsafe {
            libc::pthread_mutex_init(&raw mut (*o).mutex, std::ptr::null());
            libc::pthread_cond_init(&raw mut (*o).cond, std::ptr::null());
        }
        crate::events::register_srq(p.c.context, srqn, o);
        Ok(o)
    })
}

const IBV_SRQ_MAX_WR: c_int = 1;
const IBV_SRQ_LIMIT: c_int = 2;

/// `ibv_modify_srq`: `IBV_SRQ_MAX_WR` resizes, `IBV_SRQ_LIMIT` arms the limit event; 0 or
/// `EINVAL`, as rxe's `rxe_srq_chk_attr` checks them before either applies: a size of 0, above
/// the device's, or below the armed limit; a limit above the queue's size. Other mask bits
/// are ignored.
///
/// # Safety
/// `srq` is an SRQ of ours; `attr` is readable.
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { srq_of(srq) }.ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let a = unsafe { *attr };
        let cur = o.rust.srq.query().map_err(|e| errno_of(&e))?;
        // SAFETY: an SRQ of ours points to its (live) context.
        let ctx = unsafe { crate::context::Context::from_ibv(o.c.context) }.ok_or(libc::EINVAL)?;
        let max = ctx.rt.info.attr.max_srq_wr as u64;
        if mask & IBV_SRQ_MAX_WR != 0
            && (a.max_wr == 0 || a.max_wr as u64 > max || (cur.srq_limit != 0 && a.max_wr < cur.srq_limit))
        {
            return Err(libc::EINVAL);
        }
        if mask & IBV_SRQ_LIMIT != 0 && (a.srq_limit as u64 > max || a.srq_limit > cur.max_wr) {
            return Err(libc::EINVAL);
        }
        if mask & IBV_SRQ_MAX_WR != 0 {
            o.rust.srq.resize(a.max_wr).map_err(|e| errno_of(&e))?;
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            o.rust.srq.arm_limit(a.srq_limit).map_err(|e| errno_of(&e))?;
        }
        Ok(())
    })
}

/// `ibv_query_srq`: 0 or `EINVAL`.
///
/// # Safety
/// `srq` is an SRQ of ours; `attr` is writable.
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { srq_of(srq) }.ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let q = o.rust.srq.query().map_err(|e| errno_of(&e))?;
        // SAFETY: per the caller.
        unsafe { attr.write(ibv_srq_attr { max_wr: q.max_wr, max_sge: q.max_sge, srq_limit: q.srq_limit }) };
        Ok(())
    })
}

/// `ibv_destroy_srq`: 0, `EBUSY` while a QP uses it (the kernel's answer), or `EINVAL`; waits
/// until every asynchronous event delivered for it has been acknowledged.
///
/// # Safety
/// `srq` is NULL or an SRQ of ours, not used again on success.
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { srq_of(srq) }.ok_or(libc::EINVAL)?;
        if o.rust.users.busy() {
            return Err(libc::EBUSY);
        }
        let pd = o.c.pd;
        let reported = crate::events::unregister_srq(o.c.context, o.rust.srq.srq_num());
        // SAFETY: the SRQ's own initialised mutex/cond.
        unsafe {
            libc::pthread_mutex_lock(&raw mut (*srq).mutex);
            while (*srq).events_completed != reported {
                libc::pthread_cond_wait(&raw mut (*srq).cond, &raw mut (*srq).mutex);
            }
            libc::pthread_mutex_unlock(&raw mut (*srq).mutex);
            let mut b = Obj::<ibv_srq, Srq>::take(srq, SRQ_MAGIC).ok_or(libc::EINVAL)?;
            libc::pthread_mutex_destroy(&raw mut b.c.mutex);
            libc::pthread_cond_destroy(&raw mut b.c.cond);
        }
        // SAFETY: the object's own PD (or NULL).
        unsafe { crate::pd::release_pd(pd) };
        Ok(())
    })
}

/// `ops.post_srq_recv` (`ibv_post_srq_recv`): posts the list in order; `*bad_wr` names the
/// first refused request (`EINVAL`, `ENOMEM` when full).
///
/// # Safety
/// Called through the header inline with the application's object and arrays, as the C
/// contract says (NULL or foreign objects are refused).
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let mut cur = wr;
    let r = guard(libc::EIO, || {
        // SAFETY: the inline passes the application's SRQ.
        let Some(o) = (unsafe { srq_of(srq) }) else {
            return libc::EINVAL;
        };
        while !cur.is_null() {
            // SAFETY: the application's work request list.
            let w = unsafe { &*cur };
            // SAFETY: its SGE array follows ibv_post_srq_recv's contract.
            let r = unsafe { crate::qp::sges(w.sg_list, w.num_sge) }.and_then(|sg| {
                o.rust
                    .srq
                    .post_recv_checked_on_use(RecvWr { wr_id: w.wr_id, sg_list: sg.as_slice().into() })
                    .map_err(|e| crate::qp::post_errno(&e))
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
