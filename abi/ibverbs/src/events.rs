//! Asynchronous events of QPs, SRQs and CQs: the engine's [`softroce::verbs::AsyncEvent`]s
//! (which name QP, SRQ and CQ numbers) turned into records on the owning context's
//! `async_fd`.
//!
//! A table maps (device, QPN), (device, SRQN) and (device, CQ number) to the C object and its
//! context, and counts the events the application has *read* for each with
//! `ibv_get_async_event` (destroy waits until it acknowledged as many, as the kernel's
//! `events_reported`). An event still unread when its object is destroyed is dropped when it
//! reaches the front of the pipe (the kernel removes it from the event file):
//! `ibv_get_async_event` never hands out a destroyed object.
//!
//! When a device's engine starts, [`hook`] makes the engine deliver each event as it is raised
//! (on the engine thread, into the owning context's pipe), so a thread blocked in
//! `ibv_get_async_event` or polling `async_fd` wakes up with nothing else calling the library.
//! [`drain`] still moves what was queued before that.

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
    cqs: HashMap<(usize, u32), Entry>,
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

/// Records a new CQ.
pub fn register_cq(ctx: *mut ibv_context, cq_num: u32, cq: *mut ibv_cq) {
    with(|t| {
        t.cqs.insert((dev_key(ctx), cq_num), Entry { obj: cq as usize, ctx: ctx as usize, reported: 0 })
    });
}

/// Forgets a CQ; returns how many events were delivered for it.
pub fn unregister_cq(ctx: *mut ibv_context, cq_num: u32) -> u32 {
    with(|t| t.cqs.remove(&(dev_key(ctx), cq_num)).map_or(0, |e| e.reported))
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

/// Posts `ev`, raised by the device whose `ibv_device *` is `key`, to the pipe of the context
/// that owns its object (nothing if the object is not, or no longer, ours). The table stays
/// locked while the record is written, so the object and its context cannot be destroyed
/// meanwhile (destroy unregisters under the same lock first).
pub fn deliver(key: usize, ev: AsyncEvent) {
    with(|t| {
        let (e, ty) = match ev {
            AsyncEvent::Qp { qpn, event } => (t.qps.get(&(key, qpn.value())), qp_event_type(event)),
            AsyncEvent::SrqLimitReached { srqn } => (t.srqs.get(&(key, srqn)), IBV_EVENT_SRQ_LIMIT_REACHED),
            AsyncEvent::CqError { cq } => (t.cqs.get(&(key, cq)), IBV_EVENT_CQ_ERR),
        };
        if let Some(e) = e {
            // SAFETY: the entry's context is live while its object is registered (objects
            // are destroyed before their context, and unregistered before they are freed).
            if let Some(c) = unsafe { Context::from_ibv(e.ctx as *const ibv_context) } {
                // A full pipe (4096 unread events) drops it; Context counts the drops.
                c.post_async_event(e.obj as u64, ty);
            }
        }
    })
}

/// Moves every queued engine event of `dev` (the device of context `ctx`) to the owning
/// contexts' async pipes.
pub fn drain(ctx: *mut ibv_context, dev: &Device) {
    let key = dev_key(ctx);
    while let Some(ev) = dev.poll_async_event() {
        deliver(key, ev);
    }
}

/// Makes the engine of `dev` (listed as `ibv_device *` `key`) deliver its events at once.
pub fn hook(key: usize, dev: &Device) {
    dev.on_async_event(move |ev| crate::util::guard((), || deliver(key, ev)));
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
    let cq = event_type == IBV_EVENT_CQ_ERR;
    if !qp && !srq && !cq {
        return true;
    }
    with(|t| {
        let m = if qp {
            &mut t.qps
        } else if srq {
            &mut t.srqs
        } else {
            &mut t.cqs
        };
        match m.values_mut().find(|e| e.obj as u64 == obj) {
            Some(e) => {
                e.reported += 1;
                true
            }
            None => false,
        }
    })
}
