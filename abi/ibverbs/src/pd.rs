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
    /// The MRs, MWs, QPs, SRQs and AHs on it.
    pub users: crate::object::Users,
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
        Ok(Obj::into_c(
            ibv_pd { context: c.as_ibv(), handle },
            PD_MAGIC,
            Pd { pd, users: Default::default() },
        ))
    })
}

/// `ibv_dealloc_pd`: 0, `EBUSY` while objects (MRs, MWs, QPs, SRQs, AHs) use the PD, as the
/// kernel, or `EINVAL` for a pointer that is not a PD of ours.
///
/// # Safety
/// `pd` is NULL or a PD from `ibv_alloc_pd`, not used again.
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        if unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?.rust.users.busy() {
            return Err(libc::EBUSY);
        }
        // SAFETY: per the caller.
        unsafe { Obj::<ibv_pd, Pd>::take(pd, PD_MAGIC) }.ok_or(libc::EINVAL)?;
        Ok(())
    })
}

/// Releases a child's hold on its PD (the child's `pd` field; nothing for NULL or not ours).
///
/// # Safety
/// `pd` is NULL or a child's PD pointer.
pub unsafe fn release_pd(pd: *const ibv_pd) {
    // SAFETY: per the caller: a PD of ours cannot be freed while the child holds it.
    if let Some(p) = unsafe { pd_of(pd) } {
        p.rust.users.release();
    }
}

const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
const IBV_ACCESS_REMOTE_WRITE: u32 = 2;
const IBV_ACCESS_REMOTE_ATOMIC: u32 = 8;
const IBV_ACCESS_MW_BIND: u32 = 0x10;
const IBV_ACCESS_ON_DEMAND: u32 = 0x40;
/// The access bits the kernel knows (`IB_ACCESS_SUPPORTED`: local write … huge pages) and the
/// optional range (bits 20-29, relaxed ordering first), which it accepts and may ignore.
const ACCESS_KNOWN: u32 = 0xff | (0x3ff << 20);

/// The access bits as the kernel's `ib_check_mr_access` takes them: remote write or atomic
/// need local write, a bit it does not know is refused, on-demand paging too (a device
/// without it): each `EINVAL`. MW bind and zero-based are kept; huge pages, relaxed ordering
/// and the other optional bits change nothing here.
fn access_of(bits: u32) -> Result<Access, Errno> {
    if bits & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0 && bits & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return Err(libc::EINVAL);
    }
    if bits & !ACCESS_KNOWN != 0 || bits & IBV_ACCESS_ON_DEMAND != 0 {
        return Err(libc::EINVAL);
    }
    Ok(Access::from_bits(bits & 0x3f))
}

/// What the kernel's `ib_umem_get` checks of the memory to register: a length of at least one
/// page's worth and at most 2^32 pages (`EINVAL`), and every page mapped, and writable when the
/// access allows writing it (`EFAULT`: the pages could not be pinned).
fn check_memory(addr: *mut c_void, len: size_t, access: u32) -> Result<(), Errno> {
    const PAGE: u64 = 4096;
    let start = addr as u64;
    let end = start.checked_add(len as u64).ok_or(libc::EINVAL)?;
    let (first, last) = (start & !(PAGE - 1), end.checked_add(PAGE - 1).ok_or(libc::EINVAL)? & !(PAGE - 1));
    let pages = (last - first) / PAGE;
    if len == 0 || pages == 0 || pages > u64::from(u32::MAX) {
        return Err(libc::EINVAL);
    }
    let write = access
        & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)
        != 0;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return Ok(()) };
    let mut at = first;
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
        if b <= at || a > at {
            if a > at {
                break;
            }
            continue;
        }
        let p = perms.as_bytes();
        if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return Err(libc::EFAULT);
        }
        at = b;
        if at >= last {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
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
    let bits = access;
    let access = access_of(access)?;
    check_memory(addr, len, bits)?;
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
        // (rxe gives a region without remote access rkey 0; softroce, as mlx5, its key: an
        // ibv_rereg_mr that adds remote access then works with the rkey the peer already has,
        // which rdma-core's tests expect)
        rkey: mr.rkey().value(),
    };
    p.rust.users.hold();
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

/// `ibv_rereg_mr`: 0, or an `IBV_REREG_MR_ERR_*` code with errno.
///
/// `IBV_REREG_MR_CHANGE_PD` and `IBV_REREG_MR_CHANGE_ACCESS` change the region in place and
/// keep its memory and its `lkey`/`rkey` (kernel rxe's `rxe_rereg_user_mr`); work requests
/// executed afterwards, also ones already posted, see the new PD and rights.
/// `IBV_REREG_MR_CHANGE_TRANSLATION` is `IBV_REREG_MR_ERR_CMD` + `EOPNOTSUPP` (rxe refuses it
/// too), and so is any call including it. Input errors as libibverbs' own checks give them
/// (`IBV_REREG_MR_ERR_INPUT` + `EINVAL`: unknown flags, translation without address or length,
/// access bits without `CHANGE_ACCESS`, a pointer not ours); errors the kernel would give
/// (`IBV_REREG_MR_ERR_CMD`: no flags, a bad PD, remote write/atomic without local write:
/// `EINVAL`; on-demand paging: `EOPNOTSUPP`). On any error the region is unchanged.
///
/// # Safety
/// `mr` is an MR of ours; a new `pd` is NULL or a PD.
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    access: c_int,
) -> c_int {
    crate::util::guard(IBV_REREG_MR_ERR_INPUT, || {
        let r = (|| -> Result<(), (c_int, Errno)> {
            let input = |e| (IBV_REREG_MR_ERR_INPUT, e);
            let cmd = |e| (IBV_REREG_MR_ERR_CMD, e);
            if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
                return Err(input(libc::EINVAL));
            }
            if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (len == 0 || addr.is_null()) {
                return Err(input(libc::EINVAL));
            }
            if access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0 {
                return Err(input(libc::EINVAL));
            }
            // SAFETY: per the caller.
            let m = unsafe { Obj::<ibv_mr, Mr>::from_c(mr, MR_MAGIC) }.ok_or(input(libc::EINVAL))?;
            if flags == 0 {
                return Err(cmd(libc::EINVAL));
            }
            if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
                return Err(cmd(libc::EOPNOTSUPP));
            }
            let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
                // SAFETY: a PD pointer from the application.
                Some(unsafe { pd_of(pd) }.ok_or(cmd(libc::EINVAL))?)
            } else {
                None
            };
            let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
                Some(access_of(access as u32).map_err(cmd)?)
            } else {
                None
            };
            let mut cur = m.rust.mr.lock();
            cur.rereg(new_pd.map(|p| &p.rust.pd), new_access).map_err(|e| cmd(errno_of(&e)))?;
            if let Some(np) = new_pd {
                np.rust.users.hold();
                // SAFETY: mr is ours (checked); its C part is written only here and by the
                // application, which must not race with rereg.
                unsafe {
                    release_pd((*mr).pd);
                    (*mr).pd = pd;
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => 0,
            Err((code, e)) => {
                set_errno(e);
                code
            }
        }
    })
}

/// `ibv_dereg_mr`: 0, or `EINVAL` for a pointer that is not an MR of ours or a region with
/// memory windows bound (IBA 10.6.7.2.6, as rxe: unbind or deallocate them first). The keys stop
/// working at once (work requests still queued that name them complete with a protection
/// error).
///
/// # Safety
/// `mr` is NULL or an MR of ours, not used again.
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { Obj::<ibv_mr, Mr>::from_c(mr, MR_MAGIC) }.ok_or(libc::EINVAL)?;
        // A region with memory windows bound stays (IBA 10.6.7.2.6; rxe: EINVAL).
        if o.rust.mr.lock().bound_windows() > 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let o = unsafe { Obj::<ibv_mr, Mr>::take(mr, MR_MAGIC) }.ok_or(libc::EINVAL)?;
        // SAFETY: the object's own PD (or NULL).
        unsafe { release_pd(o.c.pd) };
        Ok(())
    })
}
