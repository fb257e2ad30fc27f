//! Shared receive queues (`ibv_srq`): one pool of receive work requests for many QPs of a
//! protection domain, with the SRQ limit and its `SrqLimitReached` asynchronous event.
//!
//! ```no_run
//! # use softroce::prelude::*;
//! # fn f(dev: &Device, pd: &ProtectionDomain, cq: &CompletionQueue, mr: &MemoryRegion)
//! #     -> Result<(), VerbsError> {
//! let srq = pd.create_srq(&SrqInitAttr { max_wr: 256, max_sge: 1, srq_limit: 0 })?;
//! let qp = pd.create_qp(&QpInitAttr::rc(cq, cq).with_srq(&srq))?; // receives come from `srq`
//! srq.post_recv(RecvWr::new(1, &[mr.sge(0, 4096)]))?;
//! srq.arm_limit(16)?; // an event once fewer than 16 receives are left
//! while let Some(ev) = dev.poll_async_event() { /* AsyncEvent::SrqLimitReached { .. } */ }
//! # Ok(()) }
//! ```
//!
//! The work requests are checked on the caller's thread (keys, bounds, PD, LOCAL_WRITE,
//! depth) and reach the engine through a lock-free queue, like a QP's. The SRQ lives until
//! its handle and every QP created with it are dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crossbeam_queue::SegQueue;

use super::device::Device;
use super::error::{Error, Result};
use super::pd::ProtectionDomain;
use crate::engine::command::Command;
use crate::transport::{PostError, RecvWr};

pub use crate::engine::shared::srq::SrqAttr;
pub(crate) use crate::engine::shared::srq::{SRQ_TAG, SrqShared};

/// Creation attributes (`ibv_srq_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// Most receive work requests the queue holds.
    pub max_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// The limit, armed at creation when nonzero.
    pub srq_limit: u32,
}

/// Destroys the SRQ in the engine when the last user goes.
pub(crate) struct SrqInner {
    pub shared: Arc<SrqShared>,
    pub device: Device,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let srqn = self.shared.srqn;
        let _ = self.device.shared.call_for(srqn, |reply| Command::DestroySrq { srqn, reply });
    }
}

/// A shared receive queue.
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue").field("srqn", &self.inner.shared.srqn).finish()
    }
}

impl SharedReceiveQueue {
    pub(crate) fn create(pd: &ProtectionDomain, init: &SrqInitAttr) -> Result<SharedReceiveQueue> {
        let dev = &pd.device;
        let attr = &dev.shared.attr;
        if init.max_wr == 0 || init.max_wr > attr.max_srq_wr {
            return Err(Error::Limit { what: "max_srq_wr", max: attr.max_srq_wr as u64 });
        }
        if init.max_sge == 0 || init.max_sge > attr.max_srq_sge {
            return Err(Error::Limit { what: "max_srq_sge", max: attr.max_srq_sge as u64 });
        }
        if init.srq_limit > init.max_wr {
            return Err(Error::InvalidArgument("srq_limit is larger than max_wr"));
        }
        let srqn = dev.shared.next_id.fetch_add(1, Ordering::Relaxed) & 0xff_ffff;
        let shared = Arc::new(SrqShared {
            srqn,
            pd: pd.id,
            max_sge: init.max_sge,
            max_wr: AtomicU32::new(init.max_wr),
            outstanding: AtomicUsize::new(0),
            recv_wrq: SegQueue::new(),
        });
        let limit = init.srq_limit;
        let max_wr = init.max_wr;
        let max_sge = init.max_sge;
        dev.shared.call_for(srqn, |reply| Command::CreateSrq {
            shared: shared.clone(),
            max_wr,
            max_sge,
            limit,
            reply,
        })??;
        Ok(SharedReceiveQueue { inner: Arc::new(SrqInner { shared, device: dev.clone() }) })
    }

    /// The SRQ number (what `ibv_srq_pingpong` and XRC users exchange).
    pub fn srq_num(&self) -> u32 {
        self.inner.shared.srqn
    }

    /// `ibv_post_srq_recv` for one work request. The scatter list is checked now (key, PD,
    /// bounds, local write), and again when a message lands in it.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_checked(wr, true)
    }

    /// Like [`SharedReceiveQueue::post_recv`], with the scatter list checked only when a
    /// message lands in it (see [`super::QueuePair::post_recv_checked_on_use`]).
    pub fn post_recv_checked_on_use(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_checked(wr, false)
    }

    fn post_recv_checked(&self, wr: RecvWr, check_now: bool) -> Result<()> {
        let s = &self.inner.shared;
        if wr.sg_list.len() > s.max_sge as usize {
            return Err(PostError::TooManySge { got: wr.sg_list.len(), max: s.max_sge }.into());
        }
        if check_now {
            super::mr::check_sges(&self.inner.device, s.pd, &wr.sg_list, true)?;
        }
        let max = s.max_wr.load(Ordering::SeqCst) as usize;
        if s.outstanding
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
            .is_err()
        {
            return Err(PostError::QueueFull.into());
        }
        s.recv_wrq.push(wr);
        self.inner.device.shared.schedule(SRQ_TAG | s.srqn);
        Ok(())
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event (0 disarms it). The event
    /// fires at once if fewer WQEs than `limit` are queued.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let srqn = self.inner.shared.srqn;
        self.inner.device.shared.call_for(srqn, |reply| Command::ModifySrq {
            srqn,
            max_wr: None,
            limit: Some(limit),
            reply,
        })?
    }

    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR`: resizes the queue.
    pub fn resize(&self, max_wr: u32) -> Result<()> {
        let max = self.inner.device.shared.attr.max_srq_wr;
        if max_wr > max {
            return Err(Error::Limit { what: "max_srq_wr", max: max as u64 });
        }
        let srqn = self.inner.shared.srqn;
        self.inner.device.shared.call_for(srqn, |reply| Command::ModifySrq {
            srqn,
            max_wr: Some(max_wr),
            limit: None,
            reply,
        })??;
        self.inner.shared.max_wr.store(max_wr, Ordering::SeqCst);
        Ok(())
    }

    /// `ibv_query_srq`.
    pub fn query(&self) -> Result<SrqAttr> {
        let srqn = self.inner.shared.srqn;
        self.inner
            .device
            .shared
            .call_for(srqn, |reply| Command::QuerySrq { srqn, reply })?
            .ok_or(Error::InvalidArgument("SRQ destroyed"))
    }
}

impl ProtectionDomain {
    /// `ibv_create_srq`.
    pub fn create_srq(&self, init: &SrqInitAttr) -> Result<SharedReceiveQueue> {
        SharedReceiveQueue::create(self, init)
    }
}
