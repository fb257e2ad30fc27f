//! Memory windows: the `alloc_mw`, `bind_mw` and `dealloc_mw` slots of `ibv_context.ops`
//! (what the header inlines `ibv_alloc_mw`, `ibv_bind_mw` and `ibv_dealloc_mw` call), and
//! the bind operands of `IBV_WR_BIND_MW` work requests.
//!
//! An MW is an `Obj<ibv_mw, Mw>` holding a softroce [`MemoryWindow`]. As in rdma-core's rxe
//! provider, `ibv_bind_mw` (type 1 only: the inline refuses type 2 with `EINVAL` before it
//! calls us) posts a bind work request whose new rkey is `ibv_inc_rkey(mw->rkey)` and, once
//! posted, stores that rkey in `mw->rkey`; a type 2 window is bound by the application's own
//! `IBV_WR_BIND_MW` request, whose `bind_mw.rkey` is the window's rkey afterwards (its
//! `mw->rkey` stays the allocation's, as with rxe).

use libc::{c_int, c_uint};
use softroce::verbs::{Access, MemoryWindow, MwType, SendWr};
use softroce::verbs::{Lkey, MwBind, Rkey, SendOp};

use crate::ffi::*;
use crate::object::Obj;
use crate::util::{Errno, errno_of, guard, ptr_or_errno};

const MW_MAGIC: u64 = 0x736f_6674_5f6d_7700;

/// The Rust side of an MW.
pub struct Mw {
    /// The softroce memory window.
    pub mw: MemoryWindow,
}

/// `ibv_alloc_mw` (`ops.alloc_mw`): `EINVAL` for a type other than 1 or 2 (the kernel's
/// answer), `ENOMEM` past `max_mw`.
///
/// # Safety
/// `pd` is NULL or a `ibv_pd *`.
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw {
    ptr_or_errno(|| {
        // SAFETY: per the caller.
        let p = unsafe { crate::pd::pd_of(pd) }.ok_or(libc::EINVAL)?;
        let t = match mw_type {
            1 => MwType::Type1,
            2 => MwType::Type2,
            _ => return Err(libc::EINVAL),
        };
        let mw = p.rust.pd.alloc_mw(t).map_err(|e| errno_of(&e))?;
        let c = ibv_mw {
            context: p.c.context,
            pd,
            rkey: mw.rkey().value(),
            handle: crate::object::next_handle(),
            type_: mw_type,
        };
        p.rust.users.hold();
        Ok(Obj::into_c(c, MW_MAGIC, Mw { mw }))
    })
}

/// `ibv_dealloc_mw` (`ops.dealloc_mw`): 0, or `EINVAL` for a pointer that is not an MW of
/// ours. The window's rkey stops working at once.
///
/// # Safety
/// `mw` is NULL or an MW of ours, not used again.
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: per the caller.
        match unsafe { Obj::<ibv_mw, Mw>::take(mw, MW_MAGIC) } {
            Some(o) => {
                // SAFETY: the object's own PD (or NULL).
                unsafe { crate::pd::release_pd(o.c.pd) };
                0
            }
            None => libc::EINVAL,
        }
    })
}

/// The softroce bind of a C window, new rkey and bind info.
///
/// # Safety
/// `mw` is NULL or a `ibv_mw *`; `info.mr` is NULL or a `ibv_mr *`.
pub unsafe fn bind_op(mw: *mut ibv_mw, new_rkey: u32, info: &ibv_mw_bind_info) -> Result<SendOp, Errno> {
    // SAFETY: per the caller.
    let w = unsafe { Obj::<ibv_mw, Mw>::from_c(mw, MW_MAGIC) }.ok_or(libc::EINVAL)?;
    let lkey = if info.length == 0 {
        0
    } else if info.mr.is_null() {
        return Err(libc::EINVAL);
    } else {
        // SAFETY: the application's MR (its C part is all we read).
        unsafe { (*info.mr).lkey }
    };
    Ok(SendOp::BindMw(MwBind {
        mw_rkey: Rkey::new(w.c.rkey),
        new_rkey: Rkey::new(new_rkey),
        lkey: Lkey::new(lkey),
        addr: info.addr,
        length: info.length,
        access: Access::from_bits(info.mw_access_flags),
    }))
}

const IBV_SEND_SIGNALED: u32 = 2;

/// `ibv_bind_mw` (`ops.bind_mw`) for a type 1 window: posts the bind on `qp` and sets
/// `mw->rkey` to the window's next rkey. 0 or an errno (`EINVAL` for a zero-based type 1
/// window, as the rxe provider; the post's errors).
///
/// # Safety
/// Called through the header inline with the application's objects.
pub unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int {
    guard(libc::EIO, || {
        if bind.is_null() || mw.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the application's bind description and window.
        let (b, old) = unsafe { (&*bind, (*mw).rkey) };
        if b.bind_info.mw_access_flags & Access::ZERO_BASED.bits() != 0 {
            return libc::EINVAL;
        }
        let new_rkey = softroce::verbs::mw::inc_rkey(Rkey::new(old)).value();
        // SAFETY: per the caller.
        let op = match unsafe { bind_op(mw, new_rkey, &b.bind_info) } {
            Ok(op) => op,
            Err(e) => return e,
        };
        // SAFETY: the inline passes the application's QP.
        let Some(o) = (unsafe { crate::qp::qp_of(qp) }) else {
            return libc::EINVAL;
        };
        let mut wr = SendWr::new(b.wr_id, op, &[]);
        wr.signaled = b.send_flags & IBV_SEND_SIGNALED != 0;
        if let Err(e) = o.rust.qp.post_send(wr) {
            return crate::qp::post_errno(&e);
        }
        // SAFETY: the window is the application's; rxe's provider updates it the same way.
        unsafe { (*mw).rkey = new_rkey };
        0
    })
}
