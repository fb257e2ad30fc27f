//! Completion queues and completion channels.
//!
//! A CQ is an `Obj<ibv_cq_ex, Cq>` (the first bytes of an `ibv_cq_ex` are an `ibv_cq`, so
//! `ibv_create_cq` and `ibv_create_cq_ex` can share the shape) holding a softroce
//! [`CompletionQueue`]. `ibv_poll_cq` and `ibv_req_notify_cq` are header inlines that call the
//! context's `ops.poll_cq` / `ops.req_notify_cq`: [`poll_cq`] and [`req_notify_cq`] here.
//!
//! A **completion channel** is an epoll descriptor (`channel->fd`): each CQ created on it adds
//! its own notification descriptor (softroce's per-CQ socket, readable with one byte per
//! notification once armed) with the `ibv_cq *` as the epoll data. So the channel fd is a real
//! pollable descriptor (poll/epoll/select, `O_NONBLOCK` honoured), and `ibv_get_cq_event`
//! waits on it, then consumes exactly one notification byte of the CQ it names: one event per
//! arm, as with the kernel.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use libc::{c_int, c_void};
use softroce::verbs::{CompletionQueue, NetworkHdr, WcOpcode, WorkCompletion};

use crate::context::Context;
use crate::ffi::*;
use crate::object::Obj;
use crate::util::{Errno, errno_of, guard, ptr_or_errno, set_errno, zero_or_errno};

const CQ_MAGIC: u64 = 0x736f_6674_5f63_7100;
const CHAN_MAGIC: u64 = 0x736f_6674_5f63_6800;

/// The Rust side of a CQ.
pub struct Cq {
    /// The softroce completion queue.
    pub cq: CompletionQueue,
    /// Completion events handed out by `ibv_get_cq_event` (destroy waits until the
    /// application acknowledged as many).
    comp_events: AtomicU32,
    /// The completion `start_poll`/`next_poll` made current (the `ibv_wc_read_*` readers'
    /// source). The caller serialises a CQ's extended polling, so the lock is uncontended.
    cur: parking_lot::Mutex<WorkCompletion>,
    /// The QPs using the CQ (once per direction).
    pub users: crate::object::Users,
}

/// The Rust side of a completion channel: its epoll descriptor.
pub struct Chan {
    ep: OwnedFd,
}

/// A CQ of ours behind `p`, or `None`.
///
/// # Safety
/// `p` is NULL or an `ibv_cq *`.
pub unsafe fn cq_of<'a>(p: *const ibv_cq) -> Option<&'a Obj<ibv_cq_ex, Cq>> {
    // SAFETY: per the caller; every CQ of ours is an Obj<ibv_cq_ex, Cq>.
    unsafe { Obj::from_c(p.cast::<ibv_cq_ex>(), CQ_MAGIC) }
}

/// `ibv_create_comp_channel`: NULL + errno (`EINVAL` for a context that is not ours, or the
/// `epoll_create1` error).
///
/// # Safety
/// `ctx` is NULL or a context of ours.
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    ptr_or_errno(|| {
        // SAFETY: per the caller.
        let c = unsafe { Context::from_ibv(ctx) }.ok_or(libc::EINVAL)?;
        // SAFETY: plain system call.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(crate::util::errno());
        }
        // SAFETY: a fresh descriptor we own.
        let ep = unsafe { OwnedFd::from_raw_fd(fd) };
        let ch = ibv_comp_channel { context: c.as_ibv(), fd, refcnt: 0 };
        Ok(Obj::into_c(ch, CHAN_MAGIC, Chan { ep }))
    })
}

/// `ibv_destroy_comp_channel`: 0, `EBUSY` while CQs still use it, `EINVAL` if not ours.
///
/// # Safety
/// `ch` is NULL or a channel of ours, not used again on success.
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { Obj::<ibv_comp_channel, Chan>::from_c(ch, CHAN_MAGIC) }.ok_or(libc::EINVAL)?;
        if o.c.refcnt != 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: checked above; the caller gives it back.
        drop(unsafe { Obj::<ibv_comp_channel, Chan>::take(ch, CHAN_MAGIC) });
        Ok(())
    })
}

/// Releases a QP's hold on a CQ (nothing for NULL or not ours).
///
/// # Safety
/// `cq` is NULL or a QP's CQ pointer.
pub unsafe fn release_cq(cq: *const ibv_cq) {
    // SAFETY: per the caller: a CQ of ours cannot be destroyed while the QP holds it.
    if let Some(o) = unsafe { cq_of(cq) } {
        o.rust.users.release();
    }
}

/// Makes a CQ: the C part (with its mutex and cond initialised in place) and the softroce CQ.
pub(crate) fn create(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut ibv_cq_ex, Errno> {
    // SAFETY: the caller passes a context (or NULL).
    let c = unsafe { Context::from_ibv(ctx) }.ok_or(libc::EINVAL)?;
    let max = c.rt.info.attr.max_cqe;
    if cqe < 1 || cqe as u64 > max as u64 || comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    let chan = if channel.is_null() {
        None
    } else {
        // SAFETY: a channel pointer from the application.
        Some(unsafe { Obj::<ibv_comp_channel, Chan>::from_c(channel, CHAN_MAGIC) }.ok_or(libc::EINVAL)?)
    };
    let dev = c.rt.device()?;
    let cq = dev.create_cq(cqe as usize).map_err(|e| errno_of(&e))?;
    let notify_fd = cq.as_raw_fd();
    // SAFETY: ibv_cq_ex holds integers, raw pointers, `Option<fn>` slots and pthread objects
    // (initialised in place below): all-zero is valid.
    let mut cx: ibv_cq_ex = unsafe { std::mem::zeroed() };
    cx.context = c.as_ibv();
    cx.channel = channel;
    cx.cq_context = cq_context;
    cx.handle = crate::object::next_handle();
    cx.cqe = cq.cqe() as c_int;
    cx.start_poll = Some(start_poll);
    cx.next_poll = Some(next_poll);
    cx.end_poll = Some(end_poll);
    cx.read_opcode = Some(read_opcode);
    cx.read_vendor_err = Some(read_vendor_err);
    cx.read_byte_len = Some(read_byte_len);
    cx.read_imm_data = Some(read_imm_data);
    cx.read_qp_num = Some(read_qp_num);
    cx.read_src_qp = Some(read_src_qp);
    cx.read_wc_flags = Some(read_wc_flags);
    cx.read_slid = Some(read_slid);
    cx.read_sl = Some(read_sl);
    cx.read_dlid_path_bits = Some(read_dlid_path_bits);
    let rust = Cq {
        cq,
        comp_events: AtomicU32::new(0),
        cur: parking_lot::Mutex::new(WorkCompletion::default()),
        users: Default::default(),
    };
    let p = Obj::into_c(cx, CQ_MAGIC, rust);
    // SAFETY: p is a fresh, boxed (pinned) CQ; the pthread objects are initialised in place.
    unsafe {
        libc::pthread_mutex_init(&raw mut (*p).mutex, std::ptr::null());
        libc::pthread_cond_init(&raw mut (*p).cond, std::ptr::null());
    }
    if let Some(ch) = chan {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: p as u64 };
        // SAFETY: both descriptors are live; ev is a valid event.
        if unsafe { libc::epoll_ctl(ch.rust.ep.as_raw_fd(), libc::EPOLL_CTL_ADD, notify_fd, &mut ev) } < 0 {
            let e = crate::util::errno();
            // SAFETY: p is ours and unused elsewhere.
            drop(unsafe { Obj::<ibv_cq_ex, Cq>::take(p, CQ_MAGIC) });
            return Err(e);
        }
        // SAFETY: the channel's refcnt is updated under the context mutex, as rdma-core does.
        unsafe {
            libc::pthread_mutex_lock(&raw mut (*ctx).mutex);
            (*channel).refcnt += 1;
            libc::pthread_mutex_unlock(&raw mut (*ctx).mutex);
        }
    }
    // SAFETY: p is a live CQ of ours.
    let num = unsafe { Obj::<ibv_cq_ex, Cq>::from_c(p, CQ_MAGIC) }.map_or(0, |o| o.rust.cq.cq_num());
    crate::events::register_cq(ctx, num, p.cast());
    Ok(p)
}

/// `ibv_create_cq`: NULL + errno (`EINVAL`: `cqe` < 1 or above `max_cqe`, `comp_vector` not 0,
/// a channel or context not ours; `ENOMEM` at the device's CQ limit).
///
/// # Safety
/// `ctx` is a context of ours; `channel` NULL or a channel of ours.
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    ptr_or_errno(|| create(ctx, cqe, cq_context, channel, comp_vector).map(|p| p.cast::<ibv_cq>()))
}

/// `ibv_destroy_cq`: 0, `EBUSY` while a QP uses the CQ (the kernel's answer), or `EINVAL`.
/// Waits, as rdma-core does, until every completion event and asynchronous event delivered
/// for the CQ has been acknowledged.
///
/// # Safety
/// `cq` is NULL or a CQ of ours, not used again on success.
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { cq_of(cq) }.ok_or(libc::EINVAL)?;
        if o.rust.users.busy() {
            return Err(libc::EBUSY);
        }
        let channel = o.c.channel;
        if !channel.is_null() {
            // SAFETY: the CQ's channel was checked when the CQ was made and is live (it cannot
            // be destroyed while its refcnt counts this CQ).
            unsafe {
                if let Some(ch) = Obj::<ibv_comp_channel, Chan>::from_c(channel, CHAN_MAGIC) {
                    libc::epoll_ctl(
                        ch.rust.ep.as_raw_fd(),
                        libc::EPOLL_CTL_DEL,
                        o.rust.cq.as_raw_fd(),
                        std::ptr::null_mut(),
                    );
                }
                let ctx = o.c.context;
                libc::pthread_mutex_lock(&raw mut (*ctx).mutex);
                (*channel).refcnt -= 1;
                libc::pthread_mutex_unlock(&raw mut (*ctx).mutex);
            }
        }
        let p = cq.cast::<ibv_cq_ex>();
        let reported = crate::events::unregister_cq(o.c.context, o.rust.cq.cq_num());
        // SAFETY: the CQ's own initialised mutex/cond; the counters are written under it.
        unsafe {
            libc::pthread_mutex_lock(&raw mut (*p).mutex);
            while (*p).comp_events_completed != o.rust.comp_events.load(Ordering::SeqCst)
                || (*p).async_events_completed != reported
            {
                libc::pthread_cond_wait(&raw mut (*p).cond, &raw mut (*p).mutex);
            }
            libc::pthread_mutex_unlock(&raw mut (*p).mutex);
            let mut b = Obj::<ibv_cq_ex, Cq>::take(p, CQ_MAGIC).ok_or(libc::EINVAL)?;
            libc::pthread_mutex_destroy(&raw mut b.c.mutex);
            libc::pthread_cond_destroy(&raw mut b.c.cond);
        }
        Ok(())
    })
}

/// `ibv_resize_cq`: 0, or an errno value (also in errno): `EINVAL` for a pointer not ours,
/// `cqe` < 1 or above `max_cqe`, or fewer than the completions the CQ holds (as rxe). The CQ
/// keeps its completions, in order; `cq->cqe` becomes `cqe`.
///
/// # Safety
/// `cq` is NULL or a CQ of ours; the application does not poll it meanwhile (as with the
/// real library, which does not serialise resize against polling either).
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { cq_of(cq) }.ok_or(libc::EINVAL)?;
        let n = usize::try_from(cqe).map_err(|_| libc::EINVAL)?;
        o.rust.cq.resize(n).map_err(|e| match e {
            softroce::verbs::Error::Limit { .. } | softroce::verbs::Error::InvalidArgument(_) => libc::EINVAL,
            e => errno_of(&e),
        })?;
        // SAFETY: ours (checked); `cqe` is read by the application, which does not race
        // with its own resize.
        unsafe { (*cq).cqe = o.rust.cq.cqe() as c_int };
        Ok(())
    })
}

/// `ibv_get_cq_event`: waits on the channel (unless its fd is `O_NONBLOCK`: then -1 with
/// `EAGAIN`), returns the CQ with an event and its `cq_context`; -1 with errno otherwise.
///
/// The blocking `epoll_wait` runs in this frame, which holds nothing to drop (a
/// `pthread_cancel` while blocked unwinds through it cleanly: `extern "C-unwind"`).
///
/// # Safety
/// `ch` is a channel of ours; `cq` and `cq_context` are writable.
pub unsafe extern "C-unwind" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's channel is readable.
    let fd = unsafe { (*ch).fd };
    loop {
        // SAFETY: fcntl on the channel's descriptor.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl < 0 {
            return -1;
        }
        let timeout = if fl & libc::O_NONBLOCK != 0 { 0 } else { -1 };
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: one event's room.
        let n = unsafe { libc::epoll_wait(fd, &mut ev, 1, timeout) };
        if n < 0 {
            return -1;
        }
        if n == 0 {
            set_errno(libc::EAGAIN);
            return -1;
        }
        let got = guard(None, || take_event(ev.u64 as usize as *mut ibv_cq_ex));
        if let Some(p) = got {
            // SAFETY: the caller's out-pointers are writable; p is the live CQ.
            unsafe {
                *cq = p.cast::<ibv_cq>();
                *cq_context = (*p).cq_context;
            }
            return 0;
        }
        // Another thread took this notification first: wait again.
    }
}

/// Consumes one notification byte of the CQ behind an epoll event; the CQ if there was one.
fn take_event(p: *mut ibv_cq_ex) -> Option<*mut ibv_cq_ex> {
    // SAFETY: the epoll data is a CQ of ours registered on the channel (removed before the CQ
    // is freed).
    let o = unsafe { Obj::<ibv_cq_ex, Cq>::from_c(p, CQ_MAGIC) }?;
    let mut b = 0u8;
    // SAFETY: a one-byte non-blocking read from the CQ's own socket.
    let n =
        unsafe { libc::recv(o.rust.cq.as_raw_fd(), (&raw mut b).cast::<c_void>(), 1, libc::MSG_DONTWAIT) };
    if n != 1 {
        return None;
    }
    o.rust.comp_events.fetch_add(1, Ordering::SeqCst);
    Some(p)
}

/// `ibv_ack_cq_events`: acknowledges `nevents` events of `ibv_get_cq_event` for `cq`: adds
/// them to `cq->comp_events_completed` under `cq->mutex` and signals `cq->cond`, as rdma-core
/// does for any CQ.
///
/// # Safety
/// `cq` is NULL or an initialised `struct ibv_cq`.
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: libc::c_uint) {
    guard((), || {
        if cq.is_null() {
            return;
        }
        // SAFETY: per the caller, a CQ (ours, or one the caller made) with its mutex and cond
        // initialised; rdma-core counts under them the same way, whoever made the CQ.
        unsafe {
            crate::context::bump_under(
                &raw mut (*cq).mutex,
                &raw mut (*cq).cond,
                &raw mut (*cq).comp_events_completed,
                nevents,
            )
        };
    })
}

const IBV_WC_GRH: u32 = 1;
const IBV_WC_WITH_IMM: u32 = 2;
const IBV_WC_WITH_INV: u32 = 8;

/// `enum ibv_wc_opcode` of a softroce opcode.
pub fn wc_opcode(op: WcOpcode) -> u32 {
    match op {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::CompSwap => 3,
        WcOpcode::FetchAdd => 4,
        WcOpcode::BindMw => 5,
        WcOpcode::LocalInv => 6,
        WcOpcode::Recv => 128,
        WcOpcode::RecvRdmaWithImm => 129,
    }
}

/// Whether a completion is a receive's (the opcodes from `IBV_WC_RECV` on).
fn is_recv(wc: &WorkCompletion) -> bool {
    matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
}

/// `ibv_wc_flags` of a completion. Every successful receive has `IBV_WC_GRH`: on RoCE each
/// packet comes with its network header, and rxe flags it for RC and UC receives as for UD.
pub fn wc_flags(wc: &WorkCompletion) -> u32 {
    let mut f = 0;
    if wc.grh || (is_recv(wc) && wc.status == softroce::verbs::WcStatus::Success) {
        f |= IBV_WC_GRH;
    }
    if wc.imm_data.is_some() {
        f |= IBV_WC_WITH_IMM;
    }
    if wc.invalidated_rkey.is_some() {
        f |= IBV_WC_WITH_INV;
    }
    f
}

/// `wc.sl` of a completion: for a UD receive, the RoCE packet type as mlx5 reports it, where
/// kernel rxe reports 0 (a deliberate difference, `docs/design/libibverbs.md`, "UD receives:
/// `wc.sl`").
///
/// On RoCE an mlx5 device's receive completion carries no service level: the 4-bit field that
/// rdma-core's mlx5 provider copies into `wc.sl` (`(cqe->flags_rqpn >> 24) & 0xf`) holds the
/// packet type instead — bit 3 set when the frame has a UDP header (RoCEv2), bits 2..0 the
/// layer-3 header: 1 IPv6, 2 IPv4 (the PRM as UCX quotes it, `uct_ud_iface_check_grh`). UCX
/// 1.13, the version Debian 12 ships, reads `wc.sl & 7 == 2` to find the IPv4 layout of the
/// GRH area; with 0 it reads an IPv4 datagram's GRH area as an IPv6 header, finds a
/// destination GID that is none of its own and drops every datagram (its `ud_verbs`
/// transport, and with it UCP's wire-up, never works).
pub fn wc_sl(wc: &WorkCompletion) -> u8 {
    match wc.network_hdr {
        Some(NetworkHdr::Ipv4) => 0x8 | 0x2,
        Some(NetworkHdr::Ipv6) => 0x8 | 0x1,
        None => 0,
    }
}

/// A softroce completion as an `ibv_wc` (`imm_data` in network order, as the header says).
pub fn to_ibv_wc(wc: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: wc.wr_id,
        status: wc.status.code(),
        opcode: wc_opcode(wc.opcode),
        vendor_err: 0,
        byte_len: wc.byte_len,
        // (a send completion's immediate data is 0, with IBV_WC_WITH_IMM, as rxe reports it)
        imm_data: match (wc.imm_data, wc.invalidated_rkey) {
            (Some(i), _) if is_recv(wc) => i.to_be(),
            (None, Some(k)) => k.value(),
            _ => 0,
        },
        qp_num: wc.qp_num.value(),
        src_qp: wc.src_qp.value(),
        wc_flags: wc_flags(wc),
        pkey_index: 0,
        slid: 0,
        sl: wc_sl(wc),
        dlid_path_bits: 0,
    }
}

/// `ops.poll_cq` (`ibv_poll_cq`): up to `n` completions into `wc`; the count, or a negative
/// value (`-EINVAL` for a CQ not ours or a bad array, `-EOVERFLOW` once the CQ overflowed).
///
/// # Safety
/// Called through the header inline with the application's object and arrays, as the C
/// contract says (NULL or foreign objects are refused).
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-libc::EIO, || {
        // SAFETY: the inline passes the application's CQ.
        let Some(o) = (unsafe { cq_of(cq) }) else {
            return -libc::EINVAL;
        };
        if n < 0 || (n > 0 && wc.is_null()) {
            return -libc::EINVAL;
        }
        let mut got = 0;
        // In chunks through `poll`, which makes progress inline (on devices that do) only
        // when the CQ is empty, not after the last completion of a full array.
        let mut buf: [softroce::verbs::WorkCompletion; 16] = Default::default();
        while got < n {
            let want = ((n - got) as usize).min(buf.len());
            match o.rust.cq.poll(&mut buf[..want]) {
                Ok(k) => {
                    for w in &buf[..k] {
                        if w.status != softroce::verbs::WcStatus::Success {
                            // SAFETY: the context of one of our live objects (or the caller's).
                            unsafe { crate::events::drain_ctx(o.c.context) };
                        }
                        // SAFETY: the caller's array has room for n entries.
                        unsafe { wc.add(got as usize).write(to_ibv_wc(w)) };
                        got += 1;
                    }
                    if k < want {
                        break;
                    }
                }
                Err(_) if got > 0 => break,
                Err(_) => return -libc::EOVERFLOW,
            }
        }
        if got == 0 && yield_due(&o.rust.cq) {
            // Nothing yet: let the engine thread run (see `yield_due`). Applications busy-poll;
            // on a host with fewer cores than busy threads the engine would otherwise wait for
            // the scheduler's time slice (milliseconds) before it can deliver anything.
            std::thread::yield_now();
        }
        got
    })
}

thread_local! {
    /// Empty polls in a row on this thread.
    static EMPTY_POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether an empty poll should yield the CPU: always without inline progress (the engine
/// thread does the work); with it, every 16th empty poll in a row (some 20-30 µs of polling),
/// so that this thread mostly polls — it moves the packets itself — but an engine thread that
/// needs this CPU (for a reply that only it can produce, such as the peer's WRITE into memory
/// the application polls directly) still gets it on a machine with few cores. (Beneath this,
/// `CompletionQueue::poll` yields too when the thread's polling is idle and its CPU contended:
/// `softroce::engine::pacer`.)
fn yield_due(cq: &softroce::verbs::CompletionQueue) -> bool {
    if !cq.device().inline_progress() {
        return true;
    }
    EMPTY_POLLS.with(|n| {
        n.set(n.get().wrapping_add(1));
        n.get() % 16 == 0
    })
}

/// `ops.req_notify_cq` (`ibv_req_notify_cq`): arms the CQ's next completion event; with
/// `solicited_only`, for the next solicited receive or failed receive only (as rxe).
///
/// # Safety
/// Called through the header inline with the application's object and arrays, as the C
/// contract says (NULL or foreign objects are refused).
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the inline passes the application's CQ.
        match unsafe { cq_of(cq) } {
            Some(o) => {
                if solicited_only != 0 {
                    o.rust.cq.req_notify_solicited();
                } else {
                    o.rust.cq.req_notify();
                }
                0
            }
            None => libc::EINVAL,
        }
    })
}

const IBV_WC_STANDARD_FLAGS: u64 = 0x7f;
const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 2;
const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;
const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 2;

/// `verbs_context.create_cq_ex` (`ibv_create_cq_ex`): the standard completion fields
/// (`IBV_WC_STANDARD_FLAGS`) can be read; timestamps, CVLAN, flow tag and tag matching are
/// `EOPNOTSUPP` (a device without them), a parent domain too. NULL + errno.
///
/// # Safety
/// Called through the header inline with the application's object and arrays, as the C
/// contract says (NULL or foreign objects are refused).
pub unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    ptr_or_errno(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let a = unsafe { *attr };
        if a.wc_flags & !IBV_WC_STANDARD_FLAGS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 && !a.parent_domain.is_null() {
            return Err(libc::EOPNOTSUPP);
        }
        // (rdma-core's ibv_cmd_create_cq_ex: EOPNOTSUPP for a mask bit it does not know)
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            && a.flags & !(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        let p = create(ctx, cqe, a.cq_context, a.channel, a.comp_vector as c_int)?;
        // SAFETY: p is the fresh CQ.
        unsafe { (*p).comp_mask = 0 };
        Ok(p)
    })
}

/// The CQ behind an `ibv_cq_ex *` a slot received.
fn cqx<'a>(cq: *mut ibv_cq_ex) -> Option<&'a Obj<ibv_cq_ex, Cq>> {
    // SAFETY: the slot is called by the header inline with the application's CQ.
    unsafe { Obj::from_c(cq, CQ_MAGIC) }
}

/// Makes the next completion current: 0, `ENOENT` when there is none, `EOVERFLOW` after an
/// overflow.
fn advance(cq: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || {
        let Some(o) = cqx(cq) else { return libc::EINVAL };
        match o.rust.cq.poll_one() {
            Ok(Some(w)) => {
                if w.status != softroce::verbs::WcStatus::Success {
                    // SAFETY: the context of one of our live objects (or the caller's).
                    unsafe { crate::events::drain_ctx(o.c.context) };
                }
                // SAFETY: the application's CQ: the inline readers read status and wr_id here.
                unsafe {
                    (*cq).status = w.status.code();
                    (*cq).wr_id = w.wr_id;
                }
                *o.rust.cur.lock() = w;
                0
            }
            Ok(None) => {
                if yield_due(&o.rust.cq) {
                    std::thread::yield_now();
                }
                libc::ENOENT
            }
            Err(_) => libc::EOVERFLOW,
        }
    })
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    advance(cq)
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    advance(cq)
}

unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

/// A reader of the current completion (`dflt` for a CQ that is not ours).
fn read<T: Copy>(cq: *mut ibv_cq_ex, f: impl FnOnce(&WorkCompletion) -> T, dflt: T) -> T {
    guard(dflt, || cqx(cq).map_or(dflt, |o| f(&o.rust.cur.lock())))
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| wc_opcode(w.opcode), 0)
}
unsafe extern "C" fn read_vendor_err(_cq: *mut ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.byte_len, 0)
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| to_ibv_wc(w).imm_data, 0)
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.qp_num.value(), 0)
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.src_qp.value(), 0)
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> libc::c_uint {
    read(cq, wc_flags, 0)
}
unsafe extern "C" fn read_slid(_cq: *mut ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, wc_sl, 0)
}
unsafe extern "C" fn read_dlid_path_bits(_cq: *mut ibv_cq_ex) -> u8 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use softroce::verbs::{Qpn, WcStatus};

    #[test]
    fn a_ud_receive_reports_its_packet_type_in_sl_as_mlx5() {
        let mut wc = WorkCompletion::new(1, WcStatus::Success, WcOpcode::Recv, Qpn::new(5));
        assert_eq!(to_ibv_wc(&wc).sl, 0, "not a UD receive: 0");
        wc.grh = true;
        wc.network_hdr = Some(NetworkHdr::Ipv4);
        // UCX 1.13 (uct_ud_iface_check_grh) takes the IPv4 layout when sl & 7 == 2.
        assert_eq!(to_ibv_wc(&wc).sl, 0xA);
        assert_eq!(to_ibv_wc(&wc).sl & 7, 2);
        wc.network_hdr = Some(NetworkHdr::Ipv6);
        assert_eq!(to_ibv_wc(&wc).sl, 0x9);
        assert_eq!(to_ibv_wc(&wc).sl & 7, 1);
    }
}
