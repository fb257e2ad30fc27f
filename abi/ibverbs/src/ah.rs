//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`.
//!
//! An AH is an `Obj<ibv_ah, Ah>` holding a softroce [`AddressHandle`]; UD work requests name
//! it and `post_send` turns it into the destination.

use libc::c_int;
use softroce::verbs::AddressHandle;

use crate::ffi::*;
use crate::object::Obj;
use crate::pd::pd_of;
use crate::util::{Errno, errno_of, ptr_or_errno, zero_or_errno, zero_or_minus1};

const AH_MAGIC: u64 = 0x736f_6674_5f61_6800;

/// The Rust side of an AH.
pub struct Ah {
    /// The softroce address handle.
    pub ah: AddressHandle,
}

/// An AH of ours behind `p`, or `None`.
///
/// # Safety
/// `p` is NULL or an `ibv_ah *`.
pub unsafe fn ah_of<'a>(p: *const ibv_ah) -> Option<&'a Obj<ibv_ah, Ah>> {
    // SAFETY: per the caller.
    unsafe { Obj::from_c(p, AH_MAGIC) }
}

fn create(pd: *mut ibv_pd, attr: &ibv_ah_attr) -> Result<*mut ibv_ah, Errno> {
    // SAFETY: the caller passes a PD (or NULL).
    let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
    if attr.port_num > 1 {
        return Err(libc::EINVAL);
    }
    let av = crate::qp::av_of(attr)?;
    let ah = p.rust.pd.create_ah(&av).map_err(|e| errno_of(&e))?;
    let c = ibv_ah { context: p.c.context, pd, handle: ah.id() };
    Ok(Obj::into_c(c, AH_MAGIC, Ah { ah }))
}

/// `ibv_create_ah`: NULL + errno (`EINVAL`: a PD not ours, no GRH — RoCE needs one —, a GID
/// index not in the table, a destination of the other IP family).
///
/// # Safety
/// `pd` is a PD of ours; `attr` is readable.
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ptr_or_errno(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        create(pd, unsafe { &*attr })
    })
}

/// `ibv_destroy_ah`: 0 or `EINVAL`.
///
/// # Safety
/// `ah` is NULL or an AH of ours, not used again on success.
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        unsafe { Obj::<ibv_ah, Ah>::take(ah, AH_MAGIC) }.ok_or(libc::EINVAL)?;
        Ok(())
    })
}

const IBV_WC_GRH: u32 = 1;

/// `ibv_init_ah_from_wc`: the reply address of a received UD (or RC) message: the GRH's
/// source GID as destination, the local GID it was sent to as source (its index in our
/// table). -1 with `EINVAL` without a GRH or for a GID not ours.
///
/// # Safety
/// `ctx` is a context of ours; `wc`, `grh` readable; `attr` writable.
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    zero_or_minus1(|| {
        // SAFETY: per the caller.
        let c = unsafe { crate::context::Context::from_ibv(ctx) }.ok_or(libc::EINVAL)?;
        if wc.is_null() || grh.is_null() || attr.is_null() || port != 1 {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let (w, g) = unsafe { (*wc, *grh) };
        if w.wc_flags & IBV_WC_GRH == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: ibv_gid is plain bytes.
        let (sgid, dgid) = unsafe { (g.sgid.raw, g.dgid.raw) };
        let local = softroce::verbs::Gid(dgid);
        let idx = c.rt.info.gids.iter().position(|gid| gid.0 == local.0).ok_or(libc::EINVAL)?;
        let vtf = u32::from_be(g.version_tclass_flow);
        // SAFETY: per the caller.
        unsafe {
            attr.write(ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: ibv_gid { raw: sgid },
                    flow_label: vtf & 0xf_ffff,
                    sgid_index: idx as u8,
                    hop_limit: 0xff,
                    traffic_class: ((vtf >> 20) & 0xff) as u8,
                },
                dlid: w.slid,
                sl: w.sl,
                src_path_bits: w.dlid_path_bits,
                static_rate: 0,
                is_global: 1,
                port_num: port,
            })
        };
        Ok(())
    })
}

/// `ibv_create_ah_from_wc`: `ibv_init_ah_from_wc` then `ibv_create_ah`; NULL + errno.
///
/// # Safety
/// As for [`ibv_init_ah_from_wc`], with `pd` a PD of ours.
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    ptr_or_errno(|| {
        // SAFETY: per the caller.
        let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
        // SAFETY: ibv_ah_attr is plain data.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: per the caller.
        if unsafe { ibv_init_ah_from_wc(p.c.context, port, wc, grh, &mut attr) } != 0 {
            return Err(crate::util::errno());
        }
        create(pd, &attr)
    })
}
