//! The shared receive queue (`ibv_srq`): one pool of receive WQEs that several QPs of one
//! protection domain consume in order, with the SRQ limit and its one-shot "limit reached"
//! event.
//!
//! Sans-IO like the QP: the driver owns the [`Srq`] beside its QPs and hands it to
//! [`Qp::handle_packet_srq`] with each packet for a QP created by [`Qp::new_with_srq`]. The
//! QP borrows the head WQE only for the packet that consumes it; whatever it does not take
//! goes back to the front of the queue, so the order of the pool is kept across QPs.
//!
//! The limit (IBTA 10.2.9.4, `ibv_modify_srq` with `IBV_SRQ_LIMIT`): when armed with a
//! limit L > 0 and the number of WQEs in the queue drops below L, the SRQ raises
//! `IBV_EVENT_SRQ_LIMIT_REACHED` once and disarms (its limit reads 0 again).

use std::collections::VecDeque;

use super::Time;
use super::memory::Memory;
use super::qp::{PostError, Qp};
use super::wr::{GRH_LEN, RecvWr};
use crate::wire::{Operation, Packet};

/// A bad `modify_srq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SrqError {
    /// The limit is larger than the queue.
    #[error("SRQ limit {limit} is larger than max_wr {max_wr}")]
    LimitTooLarge {
        /// Asked for.
        limit: u32,
        /// The queue's size.
        max_wr: u32,
    },
    /// The queue cannot shrink below the WQEs it holds, nor grow past the device's limit.
    #[error("SRQ max_wr {0} is not possible now")]
    BadSize(u32),
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    srqn: u32,
    pd: u32,
    max_wr: u32,
    max_sge: u32,
    limit: u32,
    wrs: VecDeque<RecvWr>,
    limit_reached: bool,
}

impl Srq {
    /// A new, empty SRQ; `limit` 0 leaves the limit event disarmed.
    pub fn new(srqn: u32, pd: u32, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq, SrqError> {
        if limit > max_wr {
            return Err(SrqError::LimitTooLarge { limit, max_wr });
        }
        Ok(Srq { srqn, pd, max_wr, max_sge, limit, wrs: VecDeque::new(), limit_reached: false })
    }

    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }
    /// Protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }
    /// Queue size.
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }
    /// Scatter/gather entries per WQE.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }
    /// The armed limit (0 = disarmed).
    pub fn limit(&self) -> u32 {
        self.limit
    }
    /// WQEs waiting.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }
    /// True when no WQE waits.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// `ibv_post_srq_recv` for one work request.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if wr.sg_list.len() > self.max_sge as usize {
            return Err(PostError::TooManySge { got: wr.sg_list.len(), max: self.max_sge });
        }
        if self.wrs.len() >= self.max_wr as usize {
            return Err(PostError::QueueFull);
        }
        self.wrs.push_back(wr);
        Ok(())
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event (0 disarms it).
    pub fn set_limit(&mut self, limit: u32) -> Result<(), SrqError> {
        if limit > self.max_wr {
            return Err(SrqError::LimitTooLarge { limit, max_wr: self.max_wr });
        }
        self.limit = limit;
        self.check_limit();
        Ok(())
    }

    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR`: resizes the queue (never below what it holds).
    pub fn resize(&mut self, max_wr: u32) -> Result<(), SrqError> {
        if (max_wr as usize) < self.wrs.len() || max_wr < self.limit || max_wr == 0 {
            return Err(SrqError::BadSize(max_wr));
        }
        self.max_wr = max_wr;
        Ok(())
    }

    /// True once after the queue fell below the armed limit (the driver raises
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`).
    pub fn poll_limit_event(&mut self) -> bool {
        std::mem::take(&mut self.limit_reached)
    }

    /// Removes every WQE (the SRQ is being destroyed); they are returned for flushing.
    pub fn drain(&mut self) -> impl Iterator<Item = RecvWr> + '_ {
        self.wrs.drain(..)
    }

    fn check_limit(&mut self) {
        if self.limit > 0 && self.wrs.len() < self.limit as usize {
            self.limit = 0;
            self.limit_reached = true;
        }
    }
}

impl Qp {
    /// [`Qp::handle_packet_grh`] for a QP created with [`Qp::new_with_srq`]: a packet that
    /// starts a message needing a receive WQE takes the head of `srq`.
    pub fn handle_packet_srq<M: Memory>(
        &mut self,
        now: Time,
        pkt: &Packet<'_>,
        grh: Option<&[u8; GRH_LEN]>,
        mem: &M,
        srq: &mut Srq,
    ) {
        let info = pkt.info();
        let may_consume = self.resp.recv.is_none()
            && self.rq.is_empty()
            && ((info.operation == Operation::Send && info.position.starts()) || info.immediate());
        let lent = may_consume
            && match srq.wrs.pop_front() {
                Some(wr) => {
                    self.rq.push_back(wr);
                    true
                }
                None => false,
            };
        self.handle_packet_grh(now, pkt, grh, mem);
        if lent {
            if let Some(wr) = self.rq.pop_front() {
                // Not taken (a duplicate, a dropped packet): back where it was.
                srq.wrs.push_front(wr);
            } else {
                srq.check_limit();
            }
        }
    }
}
