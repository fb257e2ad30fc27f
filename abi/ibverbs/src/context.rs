//! The context (`ibv_open_device` … `ibv_close_device`) and its asynchronous events.
//!
//! # Layout
//!
//! A [`Context`] is one heap block that never moves:
//!
//! ```text
//! Context (repr C)
//!   +0    verbs_context           648 bytes: 40 extended slots, sz = 648, then
//!   +320    ibv_context           <- the pointer applications hold (device, ops, fds,
//!                                    num_comp_vectors, mutex, abi_compat = UINTPTR_MAX)
//!   +648  magic, the Rust side: Arc<DevRt> (the device runtime shared by every context of
//!         the device), the async event pipe's write end, ...
//! ```
//!
//! [`Context::from_ibv`] goes back from the `ibv_context *` (subtracting 320, the offset of
//! `context` in `verbs_context`) and checks the magic. Every later object (PD, MR, CQ, QP, …)
//! follows the same rule with [`crate::object::Obj`]: the C struct first, the Rust object behind
//! it, the C struct's `context` pointing here.
//!
//! # File descriptors
//!
//! * `cmd_fd`: a `memfd` of its own (only the library uses `cmd_fd`; a distinct inode per
//!   context is what `ibv_import_device(cmd_fd)` can later look up).
//! * `async_fd`: the read end of a pipe. Each asynchronous event is one 16-byte record
//!   `{u64 element; u32 event_type; u32 reserved}` (the element is the `ibv_cq/qp/srq/wq *`,
//!   or the port number), written atomically by [`Context::post_async_event`]. So
//!   `poll`/`epoll` on `async_fd`, `O_NONBLOCK` and `EAGAIN` behave as with the kernel's event
//!   file; `ibv_get_async_event` reads one record.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_int, c_void};

use crate::ffi::*;
use crate::runtime::{DevRt, device_from_ibv};
use crate::util::{Errno, guard, ptr_or_errno, set_errno};

const CONTEXT_MAGIC: u64 = 0x736f_6674_726f_6365; // "softroce"

/// A context: the C `verbs_context` (with the `ibv_context` applications hold) followed by
/// the Rust side.
#[repr(C)]
pub struct Context {
    /// The C part; `vctx.context` is what applications hold.
    pub vctx: verbs_context,
    magic: u64,
    /// The device runtime, shared by every context opened on the device in this process.
    pub rt: Arc<DevRt>,
    /// The async event pipe's write end (non-blocking).
    async_tx: OwnedFd,
    cmd: OwnedFd,
    async_rx: OwnedFd,
    /// Async events dropped because the application let the pipe fill (64 KiB: 4096 events).
    pub async_dropped: AtomicU64,
}

// SAFETY: the raw pointers in the C part point to process-wide data (the listed device) or
// are never dereferenced by Rust; everything else is Send + Sync.
unsafe impl Send for Context {}
// SAFETY: as above; the C mutex is only used through pthread calls.
unsafe impl Sync for Context {}

fn cvt(r: c_int) -> Result<c_int, Errno> {
    if r < 0 { Err(crate::util::errno()) } else { Ok(r) }
}

impl Context {
    fn open(dev: *mut ibv_device) -> Result<*mut ibv_context, Errno> {
        let sr = device_from_ibv(dev).ok_or(libc::ENODEV)?;
        let rt = sr.runtime()?;
        // SAFETY: memfd_create with a valid name; the fd is owned below.
        let cmd = cvt(unsafe { libc::memfd_create(c"softroce-context".as_ptr(), libc::MFD_CLOEXEC) })?;
        // SAFETY: cmd is a fresh fd we own.
        let cmd = unsafe { OwnedFd::from_raw_fd(cmd) };
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
        // SAFETY: pipe2 returned two fresh fds we own.
        let (async_rx, async_tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: async_tx is a valid fd.
        cvt(unsafe { libc::fcntl(async_tx.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) })?;

        // SAFETY: verbs_context holds only integers, raw pointers, `Option<fn>` slots and a
        // pthread mutex (all-zero is PTHREAD_MUTEX_INITIALIZER in glibc): all-zero is valid.
        let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
        crate::ops::fill(&mut vctx);
        vctx.sz = VERBS_CONTEXT_SZ;
        vctx.context.device = dev;
        vctx.context.cmd_fd = cmd.as_raw_fd();
        vctx.context.async_fd = async_rx.as_raw_fd();
        vctx.context.num_comp_vectors = 1;
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED;
        let ctx = Box::into_raw(Box::new(Context {
            vctx,
            magic: CONTEXT_MAGIC,
            rt,
            async_tx,
            cmd,
            async_rx,
            async_dropped: AtomicU64::new(0),
        }));
        // SAFETY: ctx is a live, pinned (boxed) Context; the mutex is initialised in place.
        unsafe {
            libc::pthread_mutex_init(&raw mut (*ctx).vctx.context.mutex, std::ptr::null());
            Ok(&raw mut (*ctx).vctx.context)
        }
    }

    /// The context behind an `ibv_context *` this library handed out, or `None` (NULL, or
    /// not ours: the magic does not match).
    ///
    /// # Safety
    /// `p` is NULL or points to an `ibv_context` (anything else is undefined, as with the real
    /// library).
    pub unsafe fn from_ibv<'a>(p: *const ibv_context) -> Option<&'a Context> {
        if p.is_null() || !(p as usize).is_multiple_of(std::mem::align_of::<Context>()) {
            return None;
        }
        let base =
            p.cast::<u8>().wrapping_sub(std::mem::offset_of!(verbs_context, context)).cast::<Context>();
        // SAFETY: if `p` is one of ours, `base` is the start of its Context; the magic check
        // reads through a pointer derived from the caller's valid `ibv_context *` whose
        // verbs_context header (320 bytes before) is readable for every context the header
        // inlines accept (`abi_compat == UINTPTR_MAX`).
        unsafe {
            if (*p).abi_compat != VERBS_ABI_IS_EXTENDED || (*base).magic != CONTEXT_MAGIC {
                return None;
            }
            Some(&*base)
        }
    }

    /// The `ibv_context *` of this context.
    pub fn as_ibv(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }

    /// Queues an asynchronous event for `ibv_get_async_event`: `element` is the object pointer
    /// (`ibv_cq *`, `ibv_qp *`, `ibv_srq *`, `ibv_wq *`) or the port number, as the event type
    /// requires. Returns false (and counts it) if the application let 4096 events pile up.
    pub fn post_async_event(&self, element: u64, event_type: u32) -> bool {
        let rec = encode_async(element, event_type);
        // SAFETY: writing 16 bytes from a live buffer to our own pipe (atomic: < PIPE_BUF).
        let n = unsafe { libc::write(self.async_tx.as_raw_fd(), rec.as_ptr().cast(), rec.len()) };
        if n != rec.len() as isize {
            self.async_dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The fds (for tests and the private interface).
    pub fn fds(&self) -> (c_int, c_int) {
        (self.cmd.as_raw_fd(), self.async_rx.as_raw_fd())
    }
}

/// One async event record as it travels through the pipe.
pub fn encode_async(element: u64, event_type: u32) -> [u8; 16] {
    let mut rec = [0u8; 16];
    rec[..8].copy_from_slice(&element.to_ne_bytes());
    rec[8..12].copy_from_slice(&event_type.to_ne_bytes());
    rec
}

/// `ibv_open_device`: NULL + errno (`ENODEV` for a device that is not ours or whose address is
/// gone, `EADDRINUSE` when no loopback address is free, …).
///
/// # Safety
/// `dev` is NULL or a pointer from `ibv_get_device_list` (it is only compared, never read).
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    ptr_or_errno(|| Context::open(dev))
}

/// `ibv_close_device`: 0, or `EINVAL` for a pointer that is not an open context of ours.
/// Objects still open on the context keep the device's engine alive until they are destroyed.
///
/// # Safety
/// `ctx` is NULL or a context from `ibv_open_device`, not used again after this call.
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the caller passes a context (or NULL).
        let Some(c) = (unsafe { Context::from_ibv(ctx) }) else {
            set_errno(libc::EINVAL);
            return libc::EINVAL;
        };
        let p = c as *const Context as *mut Context;
        // SAFETY: p came from Box::into_raw in Context::open and the caller gives it back.
        let mut boxed = unsafe { Box::from_raw(p) };
        boxed.magic = 0;
        // SAFETY: the mutex was initialised in Context::open and nobody holds it now.
        unsafe { libc::pthread_mutex_destroy(&mut boxed.vctx.context.mutex) };
        if boxed.rt.pid != std::process::id() {
            // Closing, in a fork() child, a context the parent opened: the parent's runtime
            // must never be dropped here (its engine thread does not exist in the child).
            let Context { rt, .. } = *boxed;
            std::mem::forget(rt);
        }
        0
    })
}

/// `ibv_get_async_event`: blocks (unless `async_fd` was made non-blocking) until an event is
/// queued; -1 with errno from `read` otherwise (`EAGAIN`, `EINTR`, …).
///
/// The blocking `read` runs in this frame, which holds nothing to drop, before any Rust code
/// that could unwind: a `pthread_cancel` delivered while blocked (a forced unwind) passes
/// through it cleanly, which is why this is `extern "C-unwind"`.
///
/// # Safety
/// `ctx` is a context from `ibv_open_device`; `event` is writable.
pub unsafe extern "C-unwind" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    if ctx.is_null() || event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // Engine events queued before the engine's hook was set.
    // SAFETY: the caller's context.
    guard((), || unsafe { crate::events::drain_ctx(ctx) });
    let mut rec = [0u8; 16];
    loop {
        // SAFETY: the caller's context is readable; reading into our 16-byte buffer.
        let n = unsafe { libc::read((*ctx).async_fd, rec.as_mut_ptr().cast::<c_void>(), rec.len()) };
        if n != rec.len() as isize {
            if n >= 0 {
                set_errno(libc::EIO);
            }
            return -1;
        }
        let element = u64::from_ne_bytes(rec[..8].try_into().unwrap_or_default());
        let event_type = u32::from_ne_bytes(rec[8..12].try_into().unwrap_or_default());
        if guard(true, || crate::events::take(element, event_type)) {
            break;
        }
        // The record's object was destroyed before the event was read: skip it.
    }
    guard(-1, || {
        let element = u64::from_ne_bytes(rec[..8].try_into().unwrap_or_default());
        let event_type = u32::from_ne_bytes(rec[8..12].try_into().unwrap_or_default());
        let element = match event_type {
            IBV_EVENT_PORT_ACTIVE
            | IBV_EVENT_PORT_ERR
            | IBV_EVENT_LID_CHANGE
            | IBV_EVENT_PKEY_CHANGE
            | IBV_EVENT_SM_CHANGE
            | IBV_EVENT_CLIENT_REREGISTER
            | IBV_EVENT_GID_CHANGE => ibv_async_event_element { port_num: element as c_int },
            _ => ibv_async_event_element { cq: element as usize as *mut ibv_cq },
        };
        // SAFETY: the caller's event is writable.
        unsafe { event.write(ibv_async_event { element, event_type }) };
        0
    })
}

/// Bumps an event counter the way `ibv_ack_async_event` and `ibv_ack_cq_events` do: under the
/// object's mutex, then signals its condition (destroy waits for the counts).
///
/// # Safety
/// `mutex`, `cond` and `counter` belong to one live, initialised object.
pub unsafe fn bump_under(
    mutex: *mut libc::pthread_mutex_t,
    cond: *mut libc::pthread_cond_t,
    counter: *mut u32,
    n: u32,
) {
    // SAFETY: per the caller.
    unsafe {
        libc::pthread_mutex_lock(mutex);
        *counter = (*counter).wrapping_add(n);
        libc::pthread_cond_signal(cond);
        libc::pthread_mutex_unlock(mutex);
    }
}

/// `ibv_ack_async_event`: acknowledges one event of `ibv_get_async_event`, so that destroying
/// its CQ/QP/SRQ/WQ (which waits for every delivered event to be acknowledged) can proceed.
///
/// # Safety
/// `event` is NULL or an event `ibv_get_async_event` returned, whose object is still live.
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    guard((), || {
        if event.is_null() {
            return;
        }
        // SAFETY: the caller passes an event we filled; its element is the live object the
        // event type names.
        unsafe {
            let ev = *event;
            match ev.event_type {
                IBV_EVENT_CQ_ERR => {
                    let cq = ev.element.cq;
                    if !cq.is_null() {
                        bump_under(&mut (*cq).mutex, &mut (*cq).cond, &mut (*cq).async_events_completed, 1);
                    }
                }
                IBV_EVENT_QP_FATAL
                | IBV_EVENT_QP_REQ_ERR
                | IBV_EVENT_QP_ACCESS_ERR
                | IBV_EVENT_COMM_EST
                | IBV_EVENT_SQ_DRAINED
                | IBV_EVENT_PATH_MIG
                | IBV_EVENT_PATH_MIG_ERR
                | IBV_EVENT_QP_LAST_WQE_REACHED => {
                    let qp = ev.element.qp;
                    if !qp.is_null() {
                        bump_under(&mut (*qp).mutex, &mut (*qp).cond, &mut (*qp).events_completed, 1);
                    }
                }
                IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
                    let srq = ev.element.srq;
                    if !srq.is_null() {
                        bump_under(&mut (*srq).mutex, &mut (*srq).cond, &mut (*srq).events_completed, 1);
                    }
                }
                IBV_EVENT_WQ_FATAL => {
                    let wq = ev.element.wq;
                    if !wq.is_null() {
                        bump_under(&mut (*wq).mutex, &mut (*wq).cond, &mut (*wq).events_completed, 1);
                    }
                }
                _ => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_records_round_trip_and_ack_counts() {
        // A CQ-shaped object with its mutex and condition initialised.
        // SAFETY: ibv_cq is plain C data; zero is valid, then pthread init in place.
        let mut cq: Box<ibv_cq> = Box::new(unsafe { std::mem::zeroed() });
        unsafe {
            libc::pthread_mutex_init(&mut cq.mutex, std::ptr::null());
            libc::pthread_cond_init(&mut cq.cond, std::ptr::null());
        }
        let ptr: *mut ibv_cq = &mut *cq;
        let rec = encode_async(ptr as u64, IBV_EVENT_CQ_ERR);
        assert_eq!(u64::from_ne_bytes(rec[..8].try_into().unwrap()), ptr as u64);
        let mut ev =
            ibv_async_event { element: ibv_async_event_element { cq: ptr }, event_type: IBV_EVENT_CQ_ERR };
        // SAFETY: ev names the live cq above.
        unsafe {
            ibv_ack_async_event(&mut ev);
            ibv_ack_async_event(&mut ev);
        }
        assert_eq!(cq.async_events_completed, 2);
        // Port events touch nothing.
        let mut ev = ibv_async_event {
            element: ibv_async_event_element { port_num: 1 },
            event_type: IBV_EVENT_PORT_ACTIVE,
        };
        // SAFETY: a port event carries no object.
        unsafe { ibv_ack_async_event(&mut ev) };
        assert_eq!(cq.async_events_completed, 2);
    }
}
