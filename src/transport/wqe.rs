//! The work queue entries and the per-QP positions that the requester, the completer and the
//! responder keep (rxe's `rxe_send_wqe`, `qp->req`, `qp->comp`, `qp->resp`): plain data, so that
//! [`Qp`](super::Qp) and each of its three halves can hold and read them without importing one
//! another.

use std::collections::VecDeque;
use std::time::Duration;

use super::Time;
use super::ids::Qpn;
use super::wr::{RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion};
use crate::wire::aeth::Syndrome;
use crate::wire::{Opcode, Psn};

/// Where a send WQE stands (rxe's `wqe_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WqeState {
    /// Not started.
    Posted,
    /// Some packets sent.
    Processing,
    /// All packets sent, waiting for the acknowledgement (RC).
    Pending,
    /// Finished without acknowledgement (UC/UD) — ready to complete.
    Done,
    /// Failed; `status` says how.
    Error,
}

/// A send work request as the requester and completer track it.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    pub len: u64,
    pub state: WqeState,
    pub status: WcStatus,
    pub first_psn: Psn,
    pub last_psn: Psn,
    /// SEND/WRITE: bytes already put into packets.
    pub sent: u64,
    /// READ: bytes already placed by READ responses.
    pub read_done: u64,
    /// Took one of the `max_rd_atomic` credits.
    pub has_rd_atomic: bool,
    /// A packet of it was sent. A go-back-N rewind puts a WQE back to `Posted` but does not
    /// unsend it: it passed its fence when it was first sent (what the fence waited for has
    /// completed since, and what holds a credit now was posted after it), and SQD must
    /// finish it.
    pub started: bool,
}

/// Requester state (rxe's `qp->req`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ReqState {
    /// Next PSN to send.
    pub psn: Psn,
    /// One past the furthest PSN ever sent: go-back-N rewinds `psn`, not this.
    pub max_psn: Psn,
    /// Index into the send queue of the next WQE to send from.
    pub wqe_index: usize,
    /// Packets sent since the last AckReq.
    pub noack_pkts: u32,
    /// READ/atomic credits left.
    pub rd_atomic: u8,
    /// A go-back-N retransmission is due.
    pub need_retry: bool,
    /// A local error stopped the requester; it waits for the completer to reach the failed WQE.
    pub error: bool,
    /// Waiting for the RNR timer before retrying.
    pub wait_rnr: bool,
    /// The packet whose acknowledgement times the round trip: its PSN and when it left
    /// (only new packets are timed, and a go-back-N rewind forgets it: Karn's rule).
    pub timed: Option<(Psn, Time)>,
    /// The tail probe is due: the next packet is the oldest unacknowledged one, alone.
    pub tail_probe_due: bool,
    /// Set AckReq on the packet being built (the tail probe's).
    pub force_ack_req: bool,
}

/// Completer state (rxe's `qp->comp`).
#[derive(Debug, Clone, Default)]
pub(crate) struct CompState {
    /// Oldest unacknowledged PSN.
    pub psn: Psn,
    /// Inside a multi-packet READ response: the last response opcode seen.
    pub opcode: Option<crate::wire::Opcode>,
    /// Retries left.
    pub retry_cnt: u8,
    /// RNR retries left.
    pub rnr_retry: u8,
    /// A retry is under way; duplicate NAKs do not start another.
    pub started_retry: bool,
    /// Since when stale responses have been deferring the local ACK timer without progress.
    pub busy_since: Option<Time>,
    /// Stale or early responses received since the last progress (the peer's evidence of
    /// being busy; see `Qp::busy_budget`).
    pub busy_seen: u64,
    /// Stale responses the peer may still send: the PSNs outstanding at each go-back-N
    /// rewind or tail probe (a peer like rxe replays every duplicate READ in full), less the
    /// stale responses seen since; at most `retry_cnt + 1` times the most outstanding at a
    /// rewind (see `Qp::note_replay_requested`).
    pub replays_owed: u64,
}

/// Most doublings of the probe interval while probes go unanswered.
pub(crate) const PROBE_MAX_BACKOFF: u32 = 6;

/// Early loss recovery, softroce's own, on the requester side. The IBTA local ACK timer `T`
/// (67 ms at the usual timeout 14) is the only way a requester learns that the packet a
/// sequence NAK asked for, the NAK itself, or the last packets of a burst were lost: the
/// responder sends one NAK per gap and then stays silent (C9-110). Waiting `T` for each such
/// loss made recovery cost more than the losses. So the requester measures the round trip
/// (RFC 6298's smoothed RTT and variance, from the acknowledgement of one new packet at a
/// time) and, when nothing has been acknowledged for `srtt + 4 × rttvar` (at least
/// [`QpTuning::probe_min`], doubling while the probes go unanswered), goes back N from the oldest
/// unacknowledged PSN, exactly as a sequence NAK would have made it do. On the wire this is
/// an ordinary retransmission (duplicates are answered by every responder); it does not take
/// one of `retry_cnt` and does not touch the local ACK timer, which still ends a dead
/// connection after `retry_cnt` timeouts.
///
/// Go-back-N throws away every packet sent behind a lost one, so a loss costs the window in
/// flight. After a loss (a NAK, an implied NAK, a probe; not a local ACK timeout, which here
/// mostly means a peer kept from a CPU) the window (`cwnd`, at most `max_unacked_psns`)
/// halves, to no less than [`CWND_MIN`], and grows back by [`CWND_INCREASE`] PSNs per window acknowledged; while
/// it is reduced, AckReq is set at least every half window so that the ACKs keep it moving.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recovery {
    /// Smoothed round-trip time, once measured.
    pub srtt: Option<Duration>,
    /// Round-trip variation.
    pub rttvar: Duration,
    /// When the probe fires.
    pub probe_at: Option<Time>,
    /// When the probe was armed (what stalls are measured from).
    pub probe_armed: Time,
    /// Probes sent since the last progress.
    pub backoff: u32,
    /// The in-flight window in PSNs after losses (0: not reduced, the tuning's
    /// `max_unacked_psns`).
    pub cwnd: u32,
    /// Acknowledged PSNs times [`CWND_INCREASE`] not yet turned into window growth.
    pub cwnd_credit: u32,
    /// When the tail probe fires (see the tail probe in the loss recovery notes on `Qp`).
    pub tail_at: Option<Time>,
    /// The PSN the tail probe resent, until a response at or beyond it arrives.
    pub tail_psn: Option<Psn>,
}

/// Smallest in-flight window after losses, in PSNs.
pub(crate) const CWND_MIN: u32 = 16;

/// PSNs the in-flight window grows by per window of acknowledged PSNs.
pub(crate) const CWND_INCREASE: u32 = 16;

impl Recovery {
    /// Takes a round-trip sample (RFC 6298, section 2).
    pub(crate) fn sample(&mut self, rtt: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let err = rtt.abs_diff(srtt);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
    }

    /// The in-flight window in PSNs, at most `max`.
    pub(crate) fn window(&self, max: u32) -> u32 {
        if self.cwnd == 0 { max } else { self.cwnd.min(max) }
    }

    /// A loss was detected (a sequence NAK, an implied NAK, a probe): halve the window. A
    /// local ACK timeout does not: in a userspace stack it is mostly a peer kept from a CPU,
    /// which a smaller window does not help (it made runs on a saturated machine slower and
    /// more likely to run out of retries).
    pub(crate) fn on_loss(&mut self, max: u32) {
        let floor = CWND_MIN.min(max).max(1);
        self.cwnd = (self.window(max) / 2).max(floor);
        self.cwnd_credit = 0;
    }

    /// `acked` PSNs were acknowledged: grow the window by [`CWND_INCREASE`] per window's
    /// worth (additive increase, as TCP's congestion avoidance with a larger step).
    pub(crate) fn on_ack(&mut self, max: u32, acked: u32) {
        if self.cwnd == 0 {
            return;
        }
        self.cwnd_credit = self.cwnd_credit.saturating_add(acked.saturating_mul(CWND_INCREASE));
        let grow = self.cwnd_credit / self.cwnd;
        self.cwnd_credit %= self.cwnd;
        self.cwnd = self.cwnd.saturating_add(grow);
        if self.cwnd >= max {
            self.cwnd = 0;
            self.cwnd_credit = 0;
        }
    }

    /// The probe interval (at least `min`), if a round trip was measured.
    pub(crate) fn interval(&self, min: Duration) -> Option<Duration> {
        let srtt = self.srtt?;
        Some((srtt + self.rttvar * 4).max(min) * (1 << self.backoff.min(PROBE_MAX_BACKOFF)))
    }
}

/// Most responses queued at once; beyond this, new ACKs are dropped (the requester's timer
/// recovers) so that a flood of AckReq packets cannot grow memory without bound.
const MAX_QUEUED_RESPONSES: usize = 1024;

/// A receive WQE being filled.
#[derive(Debug, Clone)]
pub(crate) struct CurRecv {
    pub wr: RecvWr,
    pub offset: u64,
}

/// The RDMA target of the message in progress (rxe's `qp->resp` va/rkey/resid/length).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RdmaCursor {
    pub va: u64,
    pub rkey: u32,
    pub resid: u64,
    pub length: u32,
}

/// A responder resource: what a READ or atomic needs to be answered again when its request
/// is duplicated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    Read { first_psn: Psn, last_psn: Psn, rkey: u32, va: u64, length: u32 },
    Atomic { psn: Psn, orig: u64 },
}

/// A queued response.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Response {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    /// `replay`: the answer to a duplicate of a READ whose first answer was sent in full.
    Read {
        psn: Psn,
        rkey: u32,
        va: u64,
        resid: u64,
        first: bool,
        msn: u32,
        replay: bool,
    },
}

/// Responder state (rxe's `qp->resp`).
#[derive(Debug, Clone, Default)]
pub(crate) struct RespState {
    /// The PSN expected next.
    pub psn: Psn,
    /// One after the PSN of the last executed SEND/WRITE/atomic packet.
    pub ack_psn: Psn,
    /// Message sequence number (24 bits on the wire).
    pub msn: u32,
    /// Last executed opcode, for the opcode sequence check.
    pub opcode: Option<Opcode>,
    /// A PSN-sequence NAK was sent for the current gap.
    pub sent_psn_nak: bool,
    /// UC: the message in progress lost a packet; drop until the next First/Only.
    pub drop_msg: bool,
    pub recv: Option<CurRecv>,
    pub rdma: RdmaCursor,
    pub resources: Vec<Option<Resource>>,
    pub res_head: usize,
    pub out: VecDeque<Response>,
    /// Fault injection ([`Qp::force_rnr_nak`]): the next new SEND is answered with an RNR NAK.
    pub forced_rnr: bool,
    /// A forced RNR NAK was sent since the driver last asked.
    pub forced_rnr_sent: bool,
}

impl RespState {
    pub(crate) fn reset_psn(&mut self, psn: Psn) {
        self.psn = psn;
        self.ack_psn = psn;
        self.sent_psn_nak = false;
    }

    pub(crate) fn resize_resources(&mut self, n: usize) {
        self.resources = vec![None; n];
        self.res_head = 0;
    }

    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// One response queued, and it is a positive ACK.
    pub(crate) fn only_plain_ack(&self) -> bool {
        self.out.len() == 1
            && matches!(self.out.front(), Some(Response::Ack { syndrome: Syndrome::Ack { .. }, .. }))
    }

    pub(crate) fn push(&mut self, r: Response, counters: &mut super::Counters) {
        if let (
            Response::Ack { psn, syndrome: Syndrome::Ack { .. }, msn },
            Some(Response::Ack { psn: last, syndrome: Syndrome::Ack { .. }, msn: last_msn }),
        ) = (r, self.out.back_mut())
        {
            // A cumulative ACK covers the one queued before it: send only the later.
            if !psn.is_before(*last) {
                *last = psn;
                *last_msn = msn;
            }
            counters.ack_deferred += 1;
            return;
        }
        if self.out.len() >= MAX_QUEUED_RESPONSES {
            counters.rcvd_dropped += 1;
            return;
        }
        self.out.push_back(r);
    }

    pub(crate) fn add_resource(&mut self, r: Resource) {
        if self.resources.is_empty() {
            return;
        }
        let i = self.res_head % self.resources.len();
        self.resources[i] = Some(r);
        self.res_head = (i + 1) % self.resources.len();
    }

    /// READ responses queued and not fully sent, replays of duplicates left out: a requester
    /// that keeps to `max_rd_atomic` may have completed those READs from their first answers
    /// (which crossed its retransmission) and sent new ones. Replays are bounded anyway: one
    /// per READ the responder remembers (a duplicate of one still queued restarts it).
    pub(crate) fn reads_in_progress(&self) -> usize {
        self.out.iter().filter(|r| matches!(r, Response::Read { replay: false, .. })).count()
    }

    /// On entering the error state: flush the receive queue and the receive WQE in progress
    /// with `WR_FLUSH_ERR`, forget READ responses not yet sent (the NAK that caused the error
    /// and the ACKs queued before it still go out).
    pub(crate) fn flush_in_error(
        &mut self,
        qpn: u32,
        rq: &mut VecDeque<RecvWr>,
        wcs: &mut VecDeque<WorkCompletion>,
    ) {
        if let Some(cur) = self.recv.take() {
            wcs.push_back(WorkCompletion::new(
                cur.wr.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                Qpn::new(qpn),
            ));
        }
        while let Some(wr) = rq.pop_front() {
            wcs.push_back(WorkCompletion::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, Qpn::new(qpn)));
        }
        self.out.retain(|r| !matches!(r, Response::Read { .. }));
        self.resources.iter_mut().for_each(|r| *r = None);
        self.opcode = None;
        self.drop_msg = false;
    }
}
