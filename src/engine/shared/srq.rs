//! What a shared receive queue's handle shares with the engines.

use std::sync::atomic::{AtomicU32, AtomicUsize};

use crossbeam_queue::SegQueue;

use crate::transport::RecvWr;

/// What `query` reports (`ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Queue size.
    pub max_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// The armed limit; 0 once the event fired (or if never armed).
    pub srq_limit: u32,
}

/// What an SRQ handle shares with the engine.
pub(crate) struct SrqShared {
    pub srqn: u32,
    pub pd: u32,
    pub max_sge: u32,
    pub max_wr: AtomicU32,
    /// Posted and not yet completed.
    pub outstanding: AtomicUsize,
    pub recv_wrq: SegQueue<RecvWr>,
}

/// Tags SRQ numbers on the engine's "posted" queue (QP numbers have 24 bits).
pub(crate) const SRQ_TAG: u32 = 1 << 31;
