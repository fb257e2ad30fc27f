//! The completer: handles responses (ACK, NAK, READ responses, atomic ACKs) and retires send
//! work requests (kernel rxe's `rxe_comp.c`).
//!
//! `Qp::completer_handle` walks the same states as rxe's `rxe_completer()` — the names are
//! kept so the two can be read side by side — for one response packet, or for a local ACK
//! timeout.

use super::Time;
use super::memory::Memory;
use super::qp::{Qp, QpType};
use super::sgl::scatter;
use super::wqe::{SendWqe, WqeState};
use super::wr::{Payload, SendOp, WcStatus};
use crate::wire::aeth::{NakCode, Syndrome, rnr_timer_ns};
use crate::wire::{AethRepr, Opcode, Operation, Packet, Position};

/// rxe's `comp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CompSt {
    GetWqe,
    CheckPsn,
    CheckAck,
    Read,
    Atomic,
    WriteSend,
    UpdateComp,
    CompAck,
    CompWqe,
    ErrorRetry,
    RnrRetry(u8),
    Error,
    Done,
    Exit,
}

/// How many local ACK timeouts stale responses may defer a retry by at least, whatever the
/// peer can still owe (see `run_completer`).
const BUSY_PATIENCE: u32 = 32;

impl Qp {
    /// Every packet of the WQE went out at least once: a cumulative ACK may complete it, even
    /// if a go-back-N rewind has put it back to resending (state `Processing`).
    fn fully_sent(&self, w: &SendWqe) -> bool {
        w.state == WqeState::Pending
            || (w.state == WqeState::Processing && w.last_psn.is_before(self.req.max_psn))
    }

    /// PSNs sent and not yet acknowledged (a READ's: its response packets).
    fn unacked_psns(&self) -> u64 {
        u64::from(self.req.max_psn.distance_from(self.comp.psn))
    }

    /// How many stale or early responses may defer the local ACK timer between two steps of
    /// progress: the most a correct peer can still owe us. Every response answers one PSN we
    /// sent and not yet saw acknowledged (`max_psn - comp.psn`; a READ's PSNs are its response
    /// packets), once for the first transmission and once more for each go-back-N retry,
    /// which a peer like rxe replays in full; the retry budget allows `retry_cnt` of those
    /// (one more for replays still queued from before the last progress). A peer that sends
    /// more than that without progress is not working through a backlog.
    fn busy_budget(&self) -> u64 {
        self.unacked_psns().saturating_mul(u64::from(self.attr.retry_cnt) + 2)
    }

    /// The requester asks again for everything from the oldest unacknowledged PSN: the peer
    /// may answer all of it once more, as stale responses if the first answers get through.
    /// Bounded without drift (lost replays are never seen): the count grows only up to
    /// `retry_cnt + 1` times what is outstanding now, or stays where it is if above that.
    pub(crate) fn note_replay_requested(&mut self) {
        let outstanding = self.unacked_psns();
        let cap = outstanding.saturating_mul(u64::from(self.attr.retry_cnt) + 1).max(self.comp.replays_owed);
        self.comp.replays_owed = self.comp.replays_owed.saturating_add(outstanding).min(cap);
    }

    fn reset_retry_counters(&mut self) {
        self.comp.retry_cnt = self.attr.retry_cnt;
        self.comp.rnr_retry = self.attr.rnr_retry;
        self.comp.started_retry = false;
    }

    /// Re-arms or stops the local ACK timer after the acknowledged PSN moved.
    fn rearm_retransmit(&mut self, now: Time) {
        if self.qp_type == QpType::Rc && self.req.psn.is_after(self.comp.psn) {
            self.arm_retransmit(now);
        } else {
            self.stop_retransmit();
        }
    }

    /// The local ACK timer expired.
    pub(crate) fn completer_timeout<M: Memory>(&mut self, now: Time, mem: &M) {
        let outstanding =
            self.sq.front().is_some_and(|w| matches!(w.state, WqeState::Processing | WqeState::Pending));
        if !outstanding {
            return;
        }
        self.counters.local_ack_timeout_err += 1;
        self.run_completer(now, None, mem, CompSt::ErrorRetry, true);
    }

    /// Handles one response packet.
    pub(crate) fn completer_handle<M: Memory>(&mut self, now: Time, pkt: Option<&Packet<'_>>, mem: &M) {
        if let Some(p) = pkt {
            // A response for a PSN the requester never sent (a "ghost"): nothing can match it.
            // (Compared with the furthest PSN sent: a go-back-N rewind does not unsend.)
            if !p.bth().psn().is_before(self.req.max_psn) {
                self.counters.rcvd_dropped += 1;
                return;
            }
        }
        self.run_completer(now, pkt, mem, CompSt::GetWqe, false);
        if let Some(p) = pkt {
            self.tail_probe_answered(p);
        }
    }

    fn run_completer<M: Memory>(
        &mut self,
        now: Time,
        pkt: Option<&Packet<'_>>,
        mem: &M,
        start: CompSt,
        timeout: bool,
    ) {
        let psn_before = self.comp.psn;
        let mut st = start;
        let mut dropped = true;
        // A stale or early response (a duplicate of something already acknowledged, or a READ
        // response beyond a gap): the peer is alive and working through its queue.
        let mut peer_busy = false;
        // A duplicate of something already acknowledged (a replay, if we asked again).
        let mut stale = false;
        // A retransmission started here: the PSNs a NAK acknowledges do not grow the window.
        let mut loss_seen = false;
        loop {
            st = match st {
                CompSt::GetWqe => match self.sq.front().map(|w| w.state) {
                    None | Some(WqeState::Posted) => {
                        if pkt.is_some() {
                            CompSt::Done
                        } else {
                            CompSt::Exit
                        }
                    }
                    Some(WqeState::Done) => CompSt::CompWqe,
                    Some(WqeState::Error) => CompSt::Error,
                    Some(_) => {
                        if pkt.is_some() {
                            CompSt::CheckPsn
                        } else {
                            CompSt::Exit
                        }
                    }
                },
                CompSt::CheckPsn => {
                    let p = pkt.expect("CheckPsn has a packet");
                    let psn = p.bth().psn();
                    let w = self.sq.front().expect("CheckPsn has a WQE");
                    let sent = self.fully_sent(w);
                    if psn.is_after(w.last_psn) {
                        // A response beyond this WQE: it implicitly acknowledges a SEND/WRITE,
                        // and proves a READ/atomic response lost (implied NAK).
                        if sent {
                            if w.wr.op.is_read_or_atomic() {
                                if self.comp.started_retry || self.req.need_retry {
                                    // A retry of this READ is under way: the peer is still
                                    // answering requests sent before it (rxe serves them
                                    // one at a time), busy rather than gone.
                                    peer_busy = true;
                                }
                                CompSt::ErrorRetry
                            } else {
                                self.reset_retry_counters();
                                CompSt::CompWqe
                            }
                        } else {
                            CompSt::Done
                        }
                    } else if psn.is_before(self.comp.psn) {
                        if psn == w.last_psn && sent && !w.wr.op.is_read_or_atomic() {
                            CompSt::CompAck
                        } else {
                            peer_busy = true;
                            stale = true;
                            CompSt::Done
                        }
                    } else if psn.is_after(self.comp.psn) && w.wr.op.is_read_or_atomic() {
                        // A READ response beyond a gap: the response at comp.psn was lost
                        // (an implied NAK, IBTA 9.7.5.1.1). Ask again at once for what is
                        // missing, once per gap (rxe waits for a response beyond the WQE or
                        // the timer); later responses of the same stream are stale. The peer
                        // is answering: the retry budget starts afresh, as for a NAK that
                        // acknowledges (a gap is only acted on after progress since the last
                        // retry, so this cannot loop without progress).
                        peer_busy = true;
                        if self.comp.started_retry || self.req.need_retry {
                            CompSt::Done
                        } else {
                            self.counters.rcvd_read_gap += 1;
                            self.reset_retry_counters();
                            CompSt::ErrorRetry
                        }
                    } else {
                        CompSt::CheckAck
                    }
                }
                CompSt::CheckAck => self.check_ack(pkt.expect("CheckAck has a packet")),
                CompSt::Read => {
                    let p = pkt.expect("Read has a packet");
                    self.do_read(p, mem)
                }
                CompSt::Atomic => {
                    let p = pkt.expect("Atomic has a packet");
                    self.do_atomic(p, mem)
                }
                CompSt::WriteSend => {
                    let psn = pkt.expect("WriteSend has a packet").bth().psn();
                    let w = self.sq.front().expect("WriteSend has a WQE");
                    if w.wr.op.is_read_or_atomic() {
                        // A plain ACK cannot complete a READ or an atomic (it carries no data
                        // and no original value): it proves their response lost, as an
                        // implied NAK. (rxe completes the WQE here, without its data.)
                        CompSt::ErrorRetry
                    } else if self.fully_sent(w) && psn == w.last_psn {
                        CompSt::CompAck
                    } else {
                        CompSt::UpdateComp
                    }
                }
                CompSt::CompAck => {
                    dropped = false;
                    let w = self.sq.pop_front().expect("CompAck has a WQE");
                    self.req.wqe_index = self.req.wqe_index.saturating_sub(1);
                    if w.has_rd_atomic {
                        self.req.rd_atomic =
                            self.req.rd_atomic.saturating_add(1).min(self.attr.max_rd_atomic);
                    }
                    self.push_send_wc_for(&w, WcStatus::Success);
                    let psn = pkt.map(|p| p.bth().psn());
                    match psn {
                        Some(psn) if !psn.is_before(self.comp.psn) => CompSt::UpdateComp,
                        _ => CompSt::Done,
                    }
                }
                CompSt::CompWqe => {
                    dropped = false;
                    let w = self.sq.pop_front().expect("CompWqe has a WQE");
                    self.req.wqe_index = self.req.wqe_index.saturating_sub(1);
                    if pkt.is_some()
                        && matches!(w.state, WqeState::Pending | WqeState::Processing)
                        && !w.last_psn.is_before(self.comp.psn)
                    {
                        self.comp.psn = w.last_psn.next();
                        self.comp.opcode = None;
                    }
                    if w.has_rd_atomic {
                        self.req.rd_atomic =
                            self.req.rd_atomic.saturating_add(1).min(self.attr.max_rd_atomic);
                    }
                    self.push_send_wc_for(&w, WcStatus::Success);
                    CompSt::GetWqe
                }
                CompSt::UpdateComp => {
                    dropped = false;
                    let p = pkt.expect("UpdateComp has a packet");
                    let info = p.info();
                    self.comp.opcode = if info.position.ends() { None } else { Some(info.opcode) };
                    let psn = p.bth().psn();
                    if !psn.is_before(self.comp.psn) {
                        self.comp.psn = psn.next();
                    }
                    CompSt::Done
                }
                CompSt::ErrorRetry => {
                    let head = self.sq.front().map(|w| w.state);
                    if matches!(head, None | Some(WqeState::Posted)) {
                        CompSt::Exit
                    } else if self.comp.started_retry && !timeout {
                        // A retry is already under way: duplicate NAKs start no other.
                        CompSt::Done
                    } else if self.comp.retry_cnt > 0 {
                        // softroce follows the IBTA: retry_cnt 7 means seven retries (rxe
                        // treats 7 as infinite; only rnr_retry 7 is infinite in the spec).
                        self.comp.retry_cnt -= 1;
                        if self.req.psn.is_after(self.comp.psn) {
                            tracing::debug!(
                                qpn = self.qpn,
                                from_psn = %self.comp.psn,
                                cause = if timeout { "local ACK timeout" } else { "sequence NAK" },
                                retries_left = self.comp.retry_cnt,
                                "retransmitting"
                            );
                            self.counters.completer_retry_err += 1;
                            if !timeout {
                                self.recovery.on_loss(self.tuning.max_unacked_psns);
                                loss_seen = true;
                            }
                            self.req.need_retry = true;
                            self.comp.started_retry = true;
                        }
                        CompSt::Done
                    } else {
                        self.counters.retry_exceeded_err += 1;
                        tracing::warn!(
                            qpn = self.qpn,
                            psn = %self.comp.psn,
                            retry_cnt = self.attr.retry_cnt,
                            "retries exhausted: the peer acknowledged nothing (gone, or the path drops)"
                        );
                        if let Some(w) = self.sq.front_mut() {
                            w.status = WcStatus::RetryExcErr;
                        }
                        CompSt::Error
                    }
                }
                CompSt::RnrRetry(timer) => {
                    if self.comp.rnr_retry > 0 {
                        // rnr_retry 7 means "retry forever" (IBTA and rxe agree).
                        if self.comp.rnr_retry != 7 {
                            self.comp.rnr_retry -= 1;
                        }
                        self.req.wait_rnr = true;
                        tracing::debug!(qpn = self.qpn, rnr_retries_left = self.comp.rnr_retry, "RNR wait");
                        self.rnr_at = Some(now + std::time::Duration::from_nanos(rnr_timer_ns(timer)));
                        // The RNR wait replaces the ACK timeout until the retry is sent.
                        self.stop_retransmit();
                        CompSt::Exit
                    } else {
                        self.counters.retry_rnr_exceeded_err += 1;
                        tracing::warn!(qpn = self.qpn, "RNR retries exhausted: the peer posted no receive");
                        if let Some(w) = self.sq.front_mut() {
                            w.status = WcStatus::RnrRetryExcErr;
                        }
                        CompSt::Error
                    }
                }
                CompSt::Error => {
                    if let Some(w) = self.sq.front_mut() {
                        if w.status == WcStatus::Success {
                            // rxe completes sequence errors with whatever status the WQE held
                            // (usually SUCCESS); an unexpected response is a bad response.
                            w.status = WcStatus::BadRespErr;
                        }
                        w.state = WqeState::Error;
                    }
                    self.enter_error(true);
                    return;
                }
                CompSt::Done | CompSt::Exit => break,
            };
        }
        if pkt.is_some() && dropped {
            self.counters.rcvd_dropped += 1;
        }
        let progressed = self.comp.psn != psn_before || self.sq.is_empty();
        let timer_lapsed = timeout && self.retransmit_at.is_none() && !self.req.wait_rnr;
        // A peer that still sends stale responses is busy, not gone (kernel rxe answers a QP's
        // requests one at a time and replays every duplicate READ in full): retrying now would
        // only queue behind them, so the timer restarts, though the retry budget does not.
        // The patience scales with the peer's backlog: each such response proves the peer
        // alive and working, and the timer keeps deferring while they come (at least one per
        // timeout) and number no more than the peer can still owe (`busy_budget`), or for
        // BUSY_PATIENCE timeouts, whichever is longer; stale responses also while they number
        // no more than the replays we asked for (`note_replay_requested`). A peer that goes
        // quiet defers nothing;
        // one that sends useless responses forever exhausts the budget, and then the retries
        // run out as usual (RETRY_EXC_ERR).
        if progressed {
            self.comp.busy_since = None;
            self.comp.busy_seen = 0;
            self.recovery.backoff = 0;
            if !loss_seen {
                let acked = self.comp.psn.distance_from(psn_before);
                self.recovery.on_ack(self.tuning.max_unacked_psns, acked);
            }
            if let Some((psn, sent)) = self.req.timed
                && self.comp.psn.is_after(psn)
            {
                self.recovery.sample(now - sent);
                self.req.timed = None;
            }
        } else if peer_busy && self.recovery.probe_at.is_some() {
            // Stale responses: the peer is working through its queue; no probe meanwhile.
            self.arm_probe(now);
        }
        if peer_busy && !progressed {
            self.comp.busy_seen = self.comp.busy_seen.saturating_add(1);
        }
        let within_budget = self.comp.busy_seen <= self.busy_budget();
        // A stale response we asked for (a replay of a rewound request) defers on its own:
        // the budget above is for what is outstanding now, the replays of a large READ that
        // just completed can outnumber it by far.
        let replay = stale && self.comp.replays_owed > 0;
        if stale {
            self.comp.replays_owed -= u64::from(replay);
        }
        let deferred = peer_busy
            && self.retransmit_at.is_some()
            && self.retransmit_interval().is_some_and(|rto| {
                let since = *self.comp.busy_since.get_or_insert(now);
                within_budget || replay || now - since < rto * BUSY_PATIENCE
            });
        if progressed || timer_lapsed || deferred {
            self.rearm_retransmit(now);
        }
        // After a rewind, a late cumulative ACK can acknowledge what the requester is about to
        // resend: skip ahead to the first unacknowledged PSN (not counted as a retry).
        if self.req.psn.is_before(self.comp.psn) && !self.req.need_retry {
            self.req_retry();
        }
        self.retire_done();
    }

    /// rxe's `check_ack`: the response must fit the head WQE and the READ response sequence.
    fn check_ack(&mut self, p: &Packet<'_>) -> CompSt {
        let info = p.info();
        let w = self.sq.front().expect("CheckAck has a WQE");
        let op = info.opcode;
        let syndrome = p.aeth().map(|a| AethRepr::parse(&a).syndrome());
        // The READ response sequence.
        match self.comp.opcode {
            None => {
                if !info.position.starts() {
                    return CompSt::Error;
                }
            }
            Some(prev) => {
                let in_read = prev == Opcode::RC_READ_RESP_FIRST || prev == Opcode::RC_READ_RESP_MIDDLE;
                let ok = in_read
                    && (op == Opcode::RC_READ_RESP_MIDDLE
                        || op == Opcode::RC_READ_RESP_LAST
                        || (op == Opcode::RC_READ_RESP_FIRST && p.bth().psn() == w.first_psn)
                        || (op == Opcode::RC_READ_RESP_ONLY && w.first_psn == w.last_psn));
                if !ok {
                    return CompSt::Error;
                }
            }
        }
        match info.operation {
            Operation::RdmaReadResponse => {
                if info.position != Position::Middle && !matches!(syndrome, Some(Syndrome::Ack { .. })) {
                    return CompSt::Error;
                }
                if !matches!(w.wr.op, SendOp::RdmaRead(_)) {
                    if let Some(w) = self.sq.front_mut() {
                        w.status = WcStatus::FatalErr;
                    }
                    return CompSt::Error;
                }
                self.reset_retry_counters();
                CompSt::Read
            }
            Operation::AtomicAcknowledge => {
                if !matches!(syndrome, Some(Syndrome::Ack { .. })) || !w.wr.op.is_atomic() {
                    return CompSt::Error;
                }
                self.reset_retry_counters();
                CompSt::Atomic
            }
            Operation::Acknowledge => match syndrome {
                Some(Syndrome::Ack { .. }) => {
                    self.reset_retry_counters();
                    CompSt::WriteSend
                }
                Some(Syndrome::RnrNak { timer }) => {
                    self.counters.rcvd_rnr_err += 1;
                    tracing::debug!(qpn = self.qpn, psn = %p.bth().psn(), timer, "RNR NAK received");
                    CompSt::RnrRetry(timer)
                }
                Some(Syndrome::Nak(NakCode::PsnSequenceError)) => {
                    let psn = p.bth().psn();
                    tracing::debug!(qpn = self.qpn, %psn, "sequence NAK received");
                    if psn.is_after(self.comp.psn) {
                        self.counters.rcvd_seq_err += 1;
                        self.comp.psn = psn;
                        // The NAK acknowledges everything before its PSN: that is forward
                        // progress, so the retry budget starts afresh (rxe keeps counting
                        // down, harmless there because it treats retry_cnt 7 as infinite).
                        self.reset_retry_counters();
                    }
                    CompSt::ErrorRetry
                }
                Some(Syndrome::Nak(code)) => {
                    tracing::warn!(qpn = self.qpn, psn = %p.bth().psn(), nak = ?code, "NAK received");
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        _ => WcStatus::RemOpErr,
                    };
                    if let Some(w) = self.sq.front_mut() {
                        w.status = status;
                    }
                    CompSt::Error
                }
                Some(Syndrome::Reserved(_)) | None => CompSt::Error,
            },
            _ => CompSt::Error,
        }
    }

    /// rxe's `do_read`: place READ response data in the local SGEs.
    fn do_read<M: Memory>(&mut self, p: &Packet<'_>, mem: &M) -> CompSt {
        let pd = self.pd;
        let mtu = self.mtu();
        let info = p.info();
        let data = p.payload();
        let w = self.sq.front_mut().expect("Read has a WQE");
        let resid = w.len - w.read_done;
        // First/Middle carry exactly one MTU, Last/Only the rest.
        let expect = if info.position.ends() { resid } else { mtu.min(resid) };
        if data.len() as u64 != expect || (!info.position.ends() && resid <= mtu) {
            w.status = WcStatus::BadRespErr;
            return CompSt::Error;
        }
        if !data.is_empty() {
            let Payload::Sges(list) = &w.wr.payload else {
                w.status = WcStatus::LocQpOpErr;
                return CompSt::Error;
            };
            if scatter(mem, pd, list, w.read_done, data).is_err() {
                w.status = WcStatus::LocProtErr;
                return CompSt::Error;
            }
        }
        w.read_done += data.len() as u64;
        if w.read_done == w.len && info.position.ends() { CompSt::CompAck } else { CompSt::UpdateComp }
    }

    /// rxe's `do_atomic`: store the original remote value in the local SGE.
    fn do_atomic<M: Memory>(&mut self, p: &Packet<'_>, mem: &M) -> CompSt {
        let pd = self.pd;
        let orig = p.atomic_ack_eth().map(|a| a.orig()).unwrap_or(0);
        let w = self.sq.front_mut().expect("Atomic has a WQE");
        let Payload::Sges(list) = &w.wr.payload else {
            w.status = WcStatus::LocQpOpErr;
            return CompSt::Error;
        };
        if scatter(mem, pd, list, 0, &orig.to_ne_bytes()).is_err() {
            w.status = WcStatus::LocProtErr;
            return CompSt::Error;
        }
        CompSt::CompAck
    }
}
