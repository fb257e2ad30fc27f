//! The requester: turns send work requests into request packets (kernel rxe's `rxe_req.c`).
//!
//! Each call of `Qp::requester_transmit` builds at most one packet, in the order rxe's
//! `rxe_requester()` makes its decisions: retry rewind, next WQE, SQ drain, fence, PSN window,
//! opcode choice, READ/atomic credit, packet, PSN bookkeeping, retransmit timer.

use super::memory::Memory;
use super::qp::{Qp, QpState, QpType, packets_for};
use super::sgl::gather;
use super::wqe::WqeState;
use super::wr::{SendOp, WcStatus};
use super::{Time, Transmit};
use crate::wire::{
    AtomicEthRepr, BthRepr, DethRepr, Headers, IethRepr, ImmDtRepr, Opcode, Operation, PacketRepr, Position,
    RethRepr,
};

impl Qp {
    pub(crate) fn mtu(&self) -> u64 {
        self.attr.path_mtu.bytes() as u64
    }

    /// Builds the next request packet, if the requester has one to send now.
    pub(crate) fn requester_transmit<M: Memory>(
        &mut self,
        now: Time,
        mem: &M,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.req.error {
            return None;
        }
        if self.req.need_retry && !self.req.wait_rnr {
            self.req_retry();
            self.req.need_retry = false;
        }
        if self.req.wait_rnr {
            return None;
        }
        let rc = self.qp_type == QpType::Rc;
        let (idx, w) = loop {
            let idx = self.req.wqe_index;
            let w = self.sq.get(idx)?;
            // SQD: finish what was started, start nothing new.
            if self.state == QpState::Sqd && !w.started {
                return None;
            }
            // Fence: wait until no READ or atomic is outstanding. Once: a WQE resent after a
            // rewind passed its fence, and a READ posted behind it may hold a credit now.
            if w.wr.fence && !w.started && self.req.rd_atomic < self.attr.max_rd_atomic {
                return None;
            }
            if !w.wr.op.is_local() {
                break (idx, w);
            }
            // A bind or local invalidate runs once, when the queue reaches it (rxe's
            // `rxe_do_local_ops`), and completes in order behind what was posted before it.
            if w.state == WqeState::Posted {
                let result = match &w.wr.op {
                    SendOp::BindMw(b) => mem.bind_mw(self.pd, self.qpn, b).map_err(|_| WcStatus::MwBindErr),
                    SendOp::LocalInv(rkey) => mem
                        .invalidate_local(self.pd, self.qpn, rkey.value())
                        .map_err(|_| WcStatus::LocQpOpErr),
                    _ => Ok(()),
                };
                if let Err(status) = result {
                    self.req_fail(idx, status);
                    return None;
                }
                self.sq[idx].state = WqeState::Done;
            }
            self.req.wqe_index += 1;
            self.retire_done();
        };
        // The window of unacknowledged PSNs.
        let window = self.recovery.window(self.tuning.max_unacked_psns);
        if rc && self.req.psn.diff(self.comp.psn) >= window as i32 {
            return None;
        }

        let mtu = self.mtu();
        let op = w.wr.op;
        let (remaining, starts) = match op {
            SendOp::RdmaRead(_) => (w.len - w.read_done, true),
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => (0, true),
            _ => (w.len - w.sent, w.sent == 0),
        };
        // A READ request and an atomic are single packets whatever the length.
        let fits = remaining <= mtu || op.is_read_or_atomic();
        let position = match (starts, fits) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        };
        let operation = match op {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => Operation::Send,
            SendOp::RdmaWrite(_) | SendOp::RdmaWriteWithImm(..) => Operation::RdmaWrite,
            SendOp::RdmaRead(_) => Operation::RdmaReadRequest,
            SendOp::CompareSwap { .. } => Operation::CompareSwap,
            SendOp::FetchAdd { .. } => Operation::FetchAdd,
            SendOp::BindMw(_) | SendOp::LocalInv(_) => {
                // Handled above; never a packet.
                self.req_fail(idx, WcStatus::LocQpOpErr);
                return None;
            }
        };
        let mut extra = if self.qp_type == QpType::Ud { Headers::DETH } else { Headers::NONE };
        if position.ends() {
            if op.imm().is_some() {
                extra = extra | Headers::IMMDT;
            }
            if matches!(op, SendOp::SendWithInv(_)) {
                extra = extra | Headers::IETH;
            }
        }
        let Some(opcode) = Opcode::find(self.qp_type.transport(), operation, position, extra) else {
            self.req_fail(idx, WcStatus::LocQpOpErr);
            return None;
        };

        // One of the max_rd_atomic credits, taken once per WQE.
        if op.is_read_or_atomic() && !w.has_rd_atomic {
            if self.req.rd_atomic == 0 {
                return None;
            }
            self.req.rd_atomic -= 1;
            self.sq[idx].has_rd_atomic = true;
        }

        let w = &self.sq[idx];
        let payload_len = match operation {
            Operation::Send | Operation::RdmaWrite => remaining.min(mtu),
            _ => 0,
        };
        let end = position.ends();
        let dest_qp = w.wr.ud.map_or(self.attr.dest_qpn, |d| d.remote_qpn);
        let mut bth = BthRepr::new(opcode, dest_qp.value(), self.req.psn);
        bth.solicited = w.wr.solicited
            && end
            && matches!(
                op,
                SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) | SendOp::RdmaWriteWithImm(..)
            );
        if rc {
            let every = self.tuning.ack_req_every.min(window / 2).max(1);
            bth.ack_req = end || self.req.noack_pkts >= every || self.req.force_ack_req;
        }
        let mut repr = PacketRepr::new(bth);
        match op {
            SendOp::RdmaWrite(r) | SendOp::RdmaWriteWithImm(r, _) if starts => {
                repr.reth = Some(RethRepr { va: r.addr, rkey: r.rkey.value(), dma_len: w.len as u32 });
            }
            SendOp::RdmaRead(r) => {
                repr.reth = Some(RethRepr {
                    va: r.addr + w.read_done,
                    rkey: r.rkey.value(),
                    dma_len: remaining as u32,
                });
            }
            SendOp::CompareSwap { remote, compare, swap } => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey.value(),
                    swap_add: swap,
                    compare,
                });
            }
            SendOp::FetchAdd { remote, add } => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey.value(),
                    swap_add: add,
                    compare: 0,
                });
            }
            _ => {}
        }
        if end {
            if let Some(imm) = op.imm() {
                repr.immdt = Some(ImmDtRepr { imm });
            }
            if let SendOp::SendWithInv(rkey) = op {
                repr.ieth = Some(IethRepr { rkey: rkey.value() });
            }
        }
        if let Some(ud) = w.wr.ud {
            // A Q_Key with the high bit set is privileged: an ordinary consumer's send uses
            // the QP's own Q_Key instead (IBTA 10.2.4; rxe sends the WR's value verbatim).
            let qkey = if ud.remote_qkey.uses_qp_qkey() { self.attr.qkey } else { ud.remote_qkey };
            repr.deth = Some(DethRepr { qkey: qkey.value(), resv8: 0, src_qp: self.qpn });
        }
        let (range, total) = match repr.emit_headers(buf, payload_len as usize) {
            Ok(x) => x,
            Err(_) => {
                self.req_fail(idx, WcStatus::LocQpOpErr);
                return None;
            }
        };
        if let Err(_e) = gather(mem, self.pd, &w.wr.payload, w.sent, &mut buf[range]) {
            self.req_fail(idx, WcStatus::LocProtErr);
            return None;
        }
        let ud = w.wr.ud;

        // PSN bookkeeping (rxe's update_wqe_psn / update_wqe_state).
        if rc {
            if bth.ack_req {
                self.req.noack_pkts = 0;
            } else {
                self.req.noack_pkts += 1;
            }
        }
        let psn = self.req.psn;
        if rc && self.req.timed.is_none() && !psn.is_before(self.req.max_psn) {
            self.req.timed = Some((psn, now));
        }
        let w = &mut self.sq[idx];
        if starts {
            let npkts = match operation {
                Operation::CompareSwap | Operation::FetchAdd => 1,
                _ => packets_for(remaining, mtu),
            };
            w.first_psn = psn;
            w.last_psn = psn.add(npkts - 1);
            self.req.psn = if operation == Operation::RdmaReadRequest { psn.add(npkts) } else { psn.next() };
        } else {
            self.req.psn = psn.next();
        }
        if self.req.psn.is_after(self.req.max_psn) {
            self.req.max_psn = self.req.psn;
        }
        w.sent += payload_len;
        w.started = true;
        if end {
            w.state = if rc { WqeState::Pending } else { WqeState::Done };
            self.req.wqe_index += 1;
        } else {
            w.state = WqeState::Processing;
        }
        if rc {
            if self.retransmit_at.is_none() {
                self.arm_retransmit(now);
            }
        } else if end {
            self.retire_done();
        }
        Some(Transmit { len: total, ud })
    }

    /// A local error on WQE `idx`: it completes with `status` once everything before it has,
    /// and the QP goes to the error state.
    pub(crate) fn req_fail(&mut self, idx: usize, status: WcStatus) {
        if let Some(w) = self.sq.get_mut(idx) {
            w.state = WqeState::Error;
            w.status = status;
        }
        self.req.error = true;
        self.retire_done();
    }

    /// Completes finished WQEs at the head of the send queue: UC/UD ones that were sent and
    /// a failed one (which takes the QP to the error state).
    pub(crate) fn retire_done(&mut self) {
        while let Some(w) = self.sq.front() {
            match w.state {
                WqeState::Done => {
                    let w = self.sq.pop_front().expect("front exists");
                    self.req.wqe_index = self.req.wqe_index.saturating_sub(1);
                    self.push_send_wc_for(&w, WcStatus::Success);
                }
                WqeState::Error => {
                    self.enter_error(true);
                    return;
                }
                _ => return,
            }
        }
    }

    /// Go-back-N (rxe's `req_retry`): resend from the oldest unacknowledged PSN. The first
    /// unfinished WQE resumes where the acknowledged packets end (a SEND or WRITE continues
    /// with Middle/Last packets, a READ asks only for the data not yet received); every later
    /// one is resent from the start with the same PSNs.
    pub(crate) fn req_retry(&mut self) {
        self.note_replay_requested();
        let mtu = self.mtu();
        let comp_psn = self.comp.psn;
        self.req.wqe_index = 0;
        self.req.psn = comp_psn;
        self.req.noack_pkts = 0;
        self.req.timed = None;
        let mut first = true;
        for w in self.sq.iter_mut() {
            match w.state {
                WqeState::Posted | WqeState::Error => break,
                WqeState::Done => continue,
                WqeState::Processing | WqeState::Pending => {}
            }
            if first && !w.wr.op.is_read_or_atomic() {
                let acked_pkts = comp_psn.distance_from(w.first_psn) as u64;
                let npkts = packets_for(w.len, mtu) as u64;
                if acked_pkts < npkts {
                    w.sent = (acked_pkts * mtu).min(w.len);
                } else {
                    w.sent = 0;
                }
            } else if !first || !w.wr.op.is_read_or_atomic() {
                w.sent = 0;
            }
            w.state = if w.sent > 0 { WqeState::Processing } else { WqeState::Posted };
            first = false;
        }
    }
}
