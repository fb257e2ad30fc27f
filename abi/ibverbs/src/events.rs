//! Asynchronous events of QPs and SRQs: the engine's [`softroce::verbs::AsyncEvent`]s (which
//! name QP and SRQ numbers) turned into records on the owning context's `async_fd`.
//!
//! A table maps (device, QPN) and (device, SRQN) to the C object and its context, and counts
//! the events the application has *read* for each with `ibv_get_async_event` (destroy waits
//! until it acknowledged as many, as the kernel's `events_reported`). An event still unread
//! when its object is destroyed is dropped when it reaches the front of the pipe (the kernel
//! removes it from the event file): `ibv_get_async_event` never hands out a destroyed object.
//! The engine queues events without a wake-up, so they are drained at the library's own
//! progress points: a `poll_cq` that returns an error completion, `ibv_modify_qp`, and
//! `ibv_get_async_event` before it blocks. An event raised while nothing calls the library
//! waits in the engine's queue until the next such call.

use std::collections::HashMap;

use parking_lot::Mutex;
use softroce::verbs::{AsyncEvent, Device, QpEvent};

use crate::context::Context;
use crate::ffi::*;

#[derive(Clone, Copy)]
struct Entry {
    obj: usize,
    ctx: usize,
    reported: u32,
}

#[derive(Default)]
struct Table {
    qps: HashMap<(usize, u32), Entry>,
    srqs: HashMap<(usize, u32), Entry>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// The device key of a context: its `ibv_device *` (one per listed device, process-wide).
fn dev_key(ctx: *mut ibv_context) -> usize {
    // SAFETY: ctx is one of our live contexts (objects record their context at creation).
    unsafe { (*ctx).device as usize }
}

fn with<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    f(TABLE.lock().get_or_insert_with(Table::default))
}

/// Records a new QP.
///
/// # Safety
/// `qp` is a live QP of ours with its context set.
pub unsafe fn register_qp(qp: *mut ibv_qp_ex) {
    // SAFETY: a fresh QP of ours.
    let (ctx, qpn) = unsafe { ((*qp).qp_base.context, (*qp).qp_base.qp_num) };
    with(|t| t.qps.insert((dev_key(ctx), qpn), Entry { obj: qp as usize, ctx: ctx as usize, reported: 0 }));
}

/// Forgets a QP; returns how many events were delivered for it.
pub fn unregister_qp_of(ctx: *mut ibv_context, qpn: u32) -> u32 {
    with(|t| t.qps.remove(&(dev_key(ctx), qpn)).map_or(0, |e| e.reported))
}

/// Records a new SRQ.
pub fn register_srq(ctx: *mut ibv_context, srqn: u32, srq: *mut ibv_srq) {
    with(|t| {
        t.srqs.insert((dev_key(ctx), srqn), Entry { obj: srq as usize, ctx: ctx as usize, reported: 0 })
    });
}

/// Forgets an SRQ; returns how many events were delivered for it.
pub fn unregister_srq(ctx: *mut ibv_context, srqn: u32) -> u32 {
    with(|t| t.srqs.remove(&(dev_key(ctx), srqn)).map_or(0, |e| e.reported))
}

fn qp_event_type(e: QpEvent) -> u32 {
    match e {
        QpEvent::Fatal => IBV_EVENT_QP_FATAL,
        QpEvent::RequestError => IBV_EVENT_QP_REQ_ERR,
        QpEvent::AccessError => IBV_EVENT_QP_ACCESS_ERR,
        QpEvent::SqDrained => IBV_EVENT_SQ_DRAINED,
        QpEvent::LastWqeReached => IBV_EVENT_QP_LAST_WQE_REACHED,
    }
}

/// Moves every queued engine event of `dev` (the device of context `ctx`) to the owning
/// contexts' async pipes.
pub fn drain(ctx: *mut ibv_context, dev: &Device) {
    let key = dev_key(ctx);
    while let Some(ev) = dev.poll_async_event() {
        let target = with(|t| {
            let (e, ty) = match ev {
                AsyncEvent::Qp { qpn, event } => (t.qps.get_mut(&(key, qpn.value())), qp_event_type(event)),
                AsyncEvent::SrqLimitReached { srqn } => {
                    (t.srqs.get_mut(&(key, srqn)), IBV_EVENT_SRQ_LIMIT_REACHED)
                }
                // CQ overflow: poll_cq reports it to the application directly.
                AsyncEvent::CqError { .. } => (None, 0),
            };
            e.map(|e| (e.obj, e.ctx, ty))
        });
        if let Some((obj, c, ty)) = target {
            // SAFETY: the entry's context is live while the object is (objects are destroyed
            // before their context).
            if let Some(c) = unsafe { Context::from_ibv(c as *const ibv_context) } {
                // A full pipe (4096 unread events) drops it; Context counts the drops.
                c.post_async_event(obj as u64, ty);
            }
        }
    }
}

/// [`drain`] for a context, if its engine has started.
///
/// # Safety
/// `ctx` is NULL or an `ibv_context *` (anything else is undefined, as with the library).
pub unsafe fn drain_ctx(ctx: *mut ibv_context) {
    // SAFETY: ctx is one of our contexts (callers checked).
    if let Some(c) = unsafe { Context::from_ibv(ctx) }
        && let Some(dev) = c.rt.started()
    {
        drain(ctx, &dev);
    }
}

/// `ibv_get_async_event` read a record naming `obj` with `event_type`: true if it is to be
/// handed out (counting it for the object's destroy), false if its object is gone.
pub fn take(obj: u64, event_type: u32) -> bool {
    let qp = matches!(
        event_type,
        IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED
    );
    let srq = matches!(event_type, IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED);
    if !qp && !srq {
        return true;
    }
    with(|t| {
        let m = if qp { &mut t.qps } else { &mut t.srqs };
        match m.values_mut().find(|e| e.obj as u64 == obj) {
            Some(e) => {
                e.reported += 1;
                true
            }
            None => false,
        }
    })
}
