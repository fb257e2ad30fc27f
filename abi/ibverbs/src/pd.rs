//! Protection domains and memory regions: `ibv_alloc_pd` … `ibv_dereg_mr`.
//!
//! A PD is an `Obj<ibv_pd, Pd>` holding a softroce [`ProtectionDomain`] (the first PD of a
//! device starts its engine). An MR is an `Obj<ibv_mr, Mr>`: the application's own memory,
//! registered in place with [`ProtectionDomain::register_raw_iova`] (no copy: the engine reads
//! and writes the caller's buffer), its keys copied into the C part where the header inlines
//! and applications read them.

use libc::{c_int, c_uint, c_void, size_t};
use parking_lot::Mutex;
use softroce::verbs::{Access, MemoryRegion, ProtectionDomain};

use crate::context::Context;
use crate::ffi::*;
use crate::object::Obj;
use crate::util::{Errno, errno_of, ptr_or_errno, set_errno, zero_or_errno};

const PD_MAGIC: u64 = 0x736f_6674_5f70_6400;
const MR_MAGIC: u64 = 0x736f_6674_5f6d_7200;

/// The Rust side of a PD.
pub struct Pd {
    /// The softroce protection domain.
    pub pd: ProtectionDomain,
}

/// The Rust side of an MR (behind a lock for `ibv_rereg_mr`; the data path never touches it:
/// the engine finds regions by key).
pub struct Mr {
    mr: Mutex<MemoryRegion>,
}

/// A PD of ours behind `p`, or `None`.
///
/// # Safety
/// `p` is NULL or a `ibv_pd *` (anything else is undefined, as with the real library).
pub unsafe fn pd_of<'a>(p: *const ibv_pd) -> Option<&'a Obj<ibv_pd, Pd>> {
    // SAFETY: per the caller.
    unsafe { Obj::from_c(p, PD_MAGIC) }
}

/// `ibv_alloc_pd`: NULL + errno (`EINVAL` for a context that is not ours; the engine's start
/// errors: `EADDRINUSE`, `EPERM`, …).
///
/// # Safety
/// `ctx` is NULL or a context from `ibv_open_device`.
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    ptr_or_errno(|| {
        // SAFETY: per the caller.
        let c = unsafe { Context::from_ibv(ctx) }.ok_or(libc::EINVAL)?;
        let dev = c.rt.device()?;
        let pd = dev.alloc_pd().map_err(|e| errno_of(&e))?;
        let handle = crate::object::next_handle();
        Ok(Obj::into_c(ibv_pd { context: c.as_ibv(), handle }, PD_MAGIC, Pd { pd }))
    })
}

/// `ibv_dealloc_pd`: 0, or `EINVAL` for a pointer that is not a PD of ours. Objects created on
/// the PD keep what they need alive (the real library answers `EBUSY` instead; softroce has no
/// kernel object to leak).
///
/// # Safety
/// `pd` is NULL or a PD from `ibv_alloc_pd`, not used again.
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        unsafe { Obj::<ibv_pd, Pd>::take(pd, PD_MAGIC) }.ok_or(libc::EINVAL)?;
        Ok(())
    })
}

const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
const IBV_ACCESS_REMOTE_WRITE: u32 = 2;
const IBV_ACCESS_REMOTE_ATOMIC: u32 = 8;
const IBV_ACCESS_ON_DEMAND: u32 = 0x40;

/// The access bits as softroce takes them: remote write or atomic need local write (`EINVAL`,
/// as the kernel's `ib_check_mr_access`); on-demand paging is not offered (`EOPNOTSUPP`, as
/// for a device without ODP); the other bits (MW bind, zero-based, huge pages, relaxed
/// ordering and the other optional bits) change nothing here.
fn access_of(bits: u32) -> Result<Access, Errno> {
    if bits & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0 && bits & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return Err(libc::EINVAL);
    }
    if bits & IBV_ACCESS_ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(Access::from_bits(bits))
}

fn register(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    iova: u64,
    access: u32,
) -> Result<*mut ibv_mr, Errno> {
    // SAFETY: the caller passes a PD (or NULL).
    let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
    let access = access_of(access)?;
    if addr.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    // SAFETY: the application registers its own buffer: `addr .. addr + len` stays valid until
    // ibv_dereg_mr, and it accepts that the device reads and writes it at any time (the
    // contract of ibv_reg_mr). The alignment rule is checked by register_raw_iova.
    let mr = unsafe { p.rust.pd.register_raw_iova(addr.cast::<u8>(), len, iova, access) }
        .map_err(|e| errno_of(&e))?;
    let c = ibv_mr {
        context: p.c.context,
        pd,
        addr,
        length: len,
        handle: mr.lkey().value(),
        lkey: mr.lkey().value(),
        rkey: mr.rkey().value(),
    };
    Ok(Obj::into_c(c, MR_MAGIC, Mr { mr: Mutex::new(mr) }))
}

/// `ibv_reg_mr` (the function; the header's macro calls it when no optional access bit is
/// given): the region is `addr .. addr + len`, named by its own addresses.
///
/// # Safety
/// `pd` is a PD of ours; `addr .. addr + len` is the caller's memory, valid until dereg.
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    access: c_int,
) -> *mut ibv_mr {
    ptr_or_errno(|| register(pd, addr, len, addr as u64, access as u32))
}

/// `ibv_reg_mr_iova`: as `ibv_reg_mr`, peers naming the first byte `iova`.
///
/// # Safety
/// As for [`ibv_reg_mr`].
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    ptr_or_errno(|| register(pd, addr, len, iova, access as u32))
}

/// `ibv_reg_mr_iova2` (what the header's `ibv_reg_mr` macro calls with optional access bits).
///
/// # Safety
/// As for [`ibv_reg_mr`].
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ptr_or_errno(|| register(pd, addr, len, iova, access))
}

const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
const IBV_REREG_MR_CHANGE_PD: c_int = 2;
const IBV_REREG_MR_CHANGE_ACCESS: c_int = 4;
const IBV_REREG_MR_FLAGS_SUPPORTED: c_int = 7;

/// `ibv_rereg_mr`: 0, or `IBV_REREG_MR_ERR_INPUT` with errno (`EINVAL`: bad flags, a pointer
/// not ours, a bad new PD or access; the region is then unchanged). The region is registered
/// anew with the changed translation, PD or access and takes the new keys (the `ibv_mr` keeps
/// its address; `lkey`/`rkey` change, as rxe's do).
///
/// # Safety
/// `mr` is an MR of ours; a new `pd`/`addr`/`len` follow `ibv_reg_mr`'s rules.
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    access: c_int,
) -> c_int {
    crate::util::guard(IBV_REREG_MR_ERR_INPUT, || {
        let r = (|| -> Result<(), Errno> {
            if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 || flags == 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: per the caller.
            let m = unsafe { Obj::<ibv_mr, Mr>::from_c(mr, MR_MAGIC) }.ok_or(libc::EINVAL)?;
            let mut cur = m.rust.mr.lock();
            // SAFETY: mr is ours (checked); its C part is read and written only here and by
            // the application, which must not race with rereg.
            let c = unsafe { &mut *mr };
            let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 { pd } else { c.pd };
            // SAFETY: a PD pointer from the application (or the MR's own).
            let p = unsafe { pd_of(new_pd) }.ok_or(libc::EINVAL)?;
            let (new_addr, new_len) =
                if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 { (addr, len) } else { (c.addr, c.length) };
            let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
                access_of(access as u32)?
            } else {
                cur.access()
            };
            if new_addr.is_null() && new_len > 0 {
                return Err(libc::EFAULT);
            }
            // SAFETY: as in `register`: the application's memory, valid until dereg.
            let fresh = unsafe {
                p.rust.pd.register_raw_iova(new_addr.cast::<u8>(), new_len, new_addr as u64, new_access)
            }
            .map_err(|e| errno_of(&e))?;
            c.pd = new_pd;
            c.addr = new_addr;
            c.length = new_len;
            c.lkey = fresh.lkey().value();
            c.rkey = fresh.rkey().value();
            c.handle = c.lkey;
            *cur = fresh;
            Ok(())
        })();
        match r {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                IBV_REREG_MR_ERR_INPUT
            }
        }
    })
}

/// `ibv_dereg_mr`: 0, or `EINVAL` for a pointer that is not an MR of ours. The keys stop
/// working at once (work requests still queued that name them complete with a protection
/// error).
///
/// # Safety
/// `mr` is NULL or an MR of ours, not used again.
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        unsafe { Obj::<ibv_mr, Mr>::take(mr, MR_MAGIC) }.ok_or(libc::EINVAL)?;
        Ok(())
    })
}
