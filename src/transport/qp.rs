//! The queue pair: attributes, the IBTA state machine, posting, and the sans-IO interface that
//! drives the requester ([`super::requester`]), completer ([`super::completer`]) and responder
//! ([`super::responder`]).
//!
//! A [`Qp`] never reads a clock, opens a socket or spawns a thread. It is driven by:
//!
//! - [`Qp::post_send`] / [`Qp::post_recv`]: work from the application;
//! - [`Qp::handle_packet`]: a packet for this QP (requests go to the responder, responses to
//!   the completer), with the current time;
//! - [`Qp::handle_timeout`]: the current time, once [`Qp::poll_timeout`]'s deadline passed;
//!
//! and drained with [`Qp::poll_transmit`] (the next packet to send), [`Qp::poll_completion`]
//! and [`Qp::poll_event`].

use std::collections::VecDeque;
use std::time::Duration;

use super::counters::Counters;
use super::ids::{Qkey, Qpn};
use super::memory::{Access, Memory};
use super::wqe::{CompState, PROBE_MAX_BACKOFF, Recovery, ReqState, RespState, SendWqe, WqeState};
use super::wr::{GRH_LEN, Payload, RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use super::{Time, Transmit};
use crate::wire::{Packet, Psn, Transport};

/// Queue pair transport service type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

impl QpType {
    /// The opcode transport prefix of this service.
    pub fn transport(self) -> Transport {
        match self {
            QpType::Rc => Transport::Rc,
            QpType::Uc => Transport::Uc,
            QpType::Ud => Transport::Ud,
        }
    }
}

/// Queue pair state (`ibv_qp_state`; the discriminants are its values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    /// Just created or reset: nothing is processed.
    Reset = 0,
    /// Initialised: receives may be posted.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drain: no new send work request is started.
    Sqd = 4,
    /// Send queue error (UC/UD).
    Sqe = 5,
    /// Error: every work request completes with `WR_FLUSH_ERR`.
    Err = 6,
}

impl QpState {
    /// The state's `enum ibv_qp_state` value.
    pub const fn ibv(self) -> u8 {
        self as u8
    }

    /// The state of an `enum ibv_qp_state` value, if it is one (the argument's type is
    /// [`Mtu::from_ibv`]'s).
    pub const fn from_ibv(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

/// Path MTU (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// The MTU of `n` bytes, if it is one of the five IB MTUs.
    pub fn from_bytes(n: u32) -> Option<Mtu> {
        [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096]
            .into_iter()
            .find(|m| m.bytes() == n)
    }
    /// The MTU with ibverbs enum value `v` (1..=5).
    pub fn from_ibv(v: u32) -> Option<Mtu> {
        [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096]
            .into_iter()
            .find(|m| *m as u32 == v)
    }
    /// The active MTU rxe derives from a netdev MTU: the netdev MTU minus the largest header
    /// stack (80 bytes), rounded down to an IB MTU, at least 256.
    pub fn active_for_netdev(netdev_mtu: u32) -> Mtu {
        Mtu::largest_within(netdev_mtu.saturating_sub(80))
    }
    /// The largest IB MTU that fits in `n` bytes (at least 256), as rxe derives the active
    /// MTU from the netdev MTU minus headers.
    pub fn largest_within(n: u32) -> Mtu {
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() <= n)
            .unwrap_or(Mtu::Mtu256)
    }
}

/// Queue capacities given at creation (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps { max_send_wr: 128, max_recv_wr: 128, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 256 }
    }
}

/// The largest message (`max_msg_sz`): 2^31 bytes.
pub const MAX_MSG_SIZE: u64 = 1 << 31;

/// Current attributes of a QP (the transport's part of `ibv_qp_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Remote access rights the QP grants (RDMA READ/WRITE/atomic).
    pub access: Access,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Destination QP number (RC/UC).
    pub dest_qpn: Qpn,
    /// First PSN the responder expects.
    pub rq_psn: Psn,
    /// First PSN the requester sends.
    pub sq_psn: Psn,
    /// READs/atomics this QP may have outstanding as requester.
    pub max_rd_atomic: u8,
    /// READs/atomics this QP accepts as responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder asks for (0..=31).
    pub min_rnr_timer: u8,
    /// Local ACK timeout code: 4.096 µs × 2^timeout, 0 = infinite.
    pub timeout: u8,
    /// Transport retries after timeouts or sequence NAKs (0..=7).
    pub retry_cnt: u8,
    /// Retries after RNR NAKs (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Q_Key (UD).
    pub qkey: Qkey,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            access: Access::NONE,
            path_mtu: Mtu::Mtu256,
            dest_qpn: Qpn::new(0),
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            qkey: Qkey::new(0),
        }
    }
}

/// A `modify_qp` request: the target state and the attributes to change (`None` = leave as
/// is; the attribute mask of `ibv_modify_qp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttrUpdate {
    /// Target state.
    pub state: Option<QpState>,
    /// `IBV_QP_ACCESS_FLAGS`.
    pub access: Option<Access>,
    /// `IBV_QP_PATH_MTU`.
    pub path_mtu: Option<Mtu>,
    /// `IBV_QP_DEST_QPN`.
    pub dest_qpn: Option<Qpn>,
    /// `IBV_QP_RQ_PSN`.
    pub rq_psn: Option<Psn>,
    /// `IBV_QP_SQ_PSN`.
    pub sq_psn: Option<Psn>,
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub max_rd_atomic: Option<u8>,
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub max_dest_rd_atomic: Option<u8>,
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub min_rnr_timer: Option<u8>,
    /// `IBV_QP_TIMEOUT`.
    pub timeout: Option<u8>,
    /// `IBV_QP_RETRY_CNT`.
    pub retry_cnt: Option<u8>,
    /// `IBV_QP_RNR_RETRY`.
    pub rnr_retry: Option<u8>,
    /// `IBV_QP_QKEY`.
    pub qkey: Option<Qkey>,
    /// `IBV_QP_AV` was given (the address vector itself lives in the verbs layer).
    pub av: bool,
    /// `IBV_QP_PORT` was given.
    pub port: bool,
    /// `IBV_QP_PKEY_INDEX` was given.
    pub pkey_index: bool,
}

/// At most this many local ACK timeouts `T` pass between arming the timer and its expiry,
/// however long the driver was kept from running meanwhile (see
/// [`Qp::handle_timeout_stalled`]).
pub const LOCAL_ACK_STRETCH: u32 = 4;

/// Largest number of READs/atomics outstanding in either direction (rxe's
/// `max_qp_rd_atom`).
pub const MAX_RD_ATOMIC: u8 = 128;

/// Why a `modify_qp` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    /// The IBTA state machine has no such transition for this QP type.
    #[error("invalid QP state transition {from:?} -> {to:?}")]
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// The transition requires an attribute that was not given.
    #[error("attribute {0} is required for this transition")]
    MissingAttribute(&'static str),
    /// An attribute was given that this transition does not accept.
    #[error("attribute {0} cannot be modified in this transition")]
    UnexpectedAttribute(&'static str),
    /// An attribute is out of range.
    #[error("attribute {0} is out of range")]
    InvalidAttribute(&'static str),
}

/// Why a work request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The QP state does not accept this queue's work requests.
    #[error("QP is in state {0:?}, which does not accept this work request")]
    InvalidState(QpState),
    /// The queue is full.
    #[error("queue full")]
    QueueFull,
    /// More scatter/gather entries than the QP was created with.
    #[error("too many scatter/gather entries ({got} > {max})")]
    TooManySge {
        /// Given.
        got: usize,
        /// Allowed.
        max: u32,
    },
    /// The inline payload exceeds `max_inline_data`.
    #[error("inline data too long ({got} > {max})")]
    InlineTooLong {
        /// Given.
        got: u64,
        /// Allowed.
        max: u32,
    },
    /// The operation is not supported on this QP type.
    #[error("operation not supported on this QP type")]
    OpNotSupported,
    /// The QP takes its receives from a shared receive queue: post them there.
    #[error("the QP uses a shared receive queue: post receives to the SRQ")]
    UsesSrq,
    /// The message exceeds `max_msg_sz` (2^31 bytes) or the UD path MTU.
    #[error("message too long ({0} bytes)")]
    MessageTooLong(u64),
    /// Atomic operations need an 8-byte local buffer and an 8-byte-aligned remote address.
    #[error("atomic operations need 8 bytes locally and an 8-byte aligned remote address")]
    BadAtomic,
    /// UD sends need a destination.
    #[error("UD send without an address handle")]
    NoDestination,
}

/// Checks a send work request against what a QP of this type and capacity accepts (not its
/// state or queue depth): scatter/gather count, inline length, operation, message length,
/// atomic operands, UD destination. The verbs layer calls it on the caller's thread; the QP
/// calls it again when the request reaches it.
pub fn check_send_wr(qp_type: QpType, caps: &QpCaps, path_mtu: Mtu, wr: &SendWr) -> Result<(), PostError> {
    let len = wr.payload.len();
    match &wr.payload {
        Payload::Sges(s) if s.len() > caps.max_send_sge as usize => {
            return Err(PostError::TooManySge { got: s.len(), max: caps.max_send_sge });
        }
        Payload::Inline(b) if b.len() as u64 > caps.max_inline_data as u64 => {
            return Err(PostError::InlineTooLong { got: len, max: caps.max_inline_data });
        }
        _ => {}
    }
    let supported = match qp_type {
        QpType::Rc => true,
        QpType::Uc => matches!(
            wr.op,
            SendOp::Send
                | SendOp::SendWithImm(_)
                | SendOp::RdmaWrite(_)
                | SendOp::RdmaWriteWithImm(..)
                | SendOp::BindMw(_)
                | SendOp::LocalInv(_)
        ),
        QpType::Ud => matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)),
    };
    if !supported {
        return Err(PostError::OpNotSupported);
    }
    if len > MAX_MSG_SIZE {
        return Err(PostError::MessageTooLong(len));
    }
    if qp_type == QpType::Ud {
        if wr.ud.is_none() {
            return Err(PostError::NoDestination);
        }
        if len > path_mtu.bytes() as u64 {
            return Err(PostError::MessageTooLong(len));
        }
    }
    if wr.op.is_atomic() {
        let aligned = wr.op.remote().is_some_and(|r| r.addr.is_multiple_of(8));
        if len != 8 || !aligned || matches!(wr.payload, Payload::Inline(_)) {
            return Err(PostError::BadAtomic);
        }
    }
    if matches!(wr.op, SendOp::RdmaRead(_)) && matches!(wr.payload, Payload::Inline(_)) {
        return Err(PostError::OpNotSupported);
    }
    Ok(())
}

/// Asynchronous events a QP raises (`ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpEvent {
    /// `IBV_EVENT_QP_FATAL`: the QP went to the error state.
    Fatal,
    /// `IBV_EVENT_QP_REQ_ERR`: the responder detected an invalid request.
    RequestError,
    /// `IBV_EVENT_QP_ACCESS_ERR`: the responder detected an access violation.
    AccessError,
    /// `IBV_EVENT_SQ_DRAINED`: the send queue drained in SQD.
    SqDrained,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP attached to a shared receive queue went to the
    /// error state and will take no more receive WQEs from it.
    LastWqeReached,
}

/// Tunables that are not IBTA attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpTuning {
    /// Largest number of unacknowledged PSNs in flight (rxe: 128).
    pub max_unacked_psns: u32,
    /// AckReq is set on the last packet of each message and after this many packets
    /// without one (rxe: 65).
    pub ack_req_every: u32,
    /// Least silence before the requester's probe goes back N early (see the loss recovery
    /// notes on `Qp`); the probe waits longer when the measured round trip asks for it, and
    /// never fires after the local ACK timeout. Default [`PROBE_MIN`].
    pub probe_min: Duration,
    /// Least silence before the requester's tail probe resends the single oldest
    /// unacknowledged packet (see the tail probe in the loss recovery notes on `Qp`); it waits two measured round trips
    /// when that is longer. `None` (the default) turns the tail probe off; [`TAIL_PROBE_MIN`]
    /// is the floor it was measured with. Off by default until it has run the interop
    /// matrix's loss rows against kernel rxe and shown a gain beyond the noise on a real
    /// lossy link (docs/performance.md, "The tail probe": 0.74 → 0.86 of the lossless
    /// goodput in virtual time, within the noise over veth).
    pub tail_probe_min: Option<Duration>,
}

impl Default for QpTuning {
    fn default() -> QpTuning {
        QpTuning { max_unacked_psns: 256, ack_req_every: 65, probe_min: PROBE_MIN, tail_probe_min: None }
    }
}

/// The default least probe interval ([`QpTuning::probe_min`]).
pub const PROBE_MIN: Duration = Duration::from_millis(2);

/// The default least tail probe interval ([`QpTuning::tail_probe_min`]).
pub const TAIL_PROBE_MIN: Duration = Duration::from_micros(250);

/// Number of packets a transfer of `len` bytes takes at `mtu` (at least one).
pub(crate) fn packets_for(len: u64, mtu: u64) -> u32 {
    len.div_ceil(mtu).max(1) as u32
}

/// A queue pair as a sans-IO state machine.
#[derive(Debug)]
pub struct Qp {
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: u32,
    pub(crate) caps: QpCaps,
    pub(crate) state: QpState,
    pub(crate) attr: QpAttr,
    pub(crate) tuning: QpTuning,
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: VecDeque<RecvWr>,
    pub(crate) req: ReqState,
    pub(crate) comp: CompState,
    pub(crate) resp: RespState,
    pub(crate) send_wcs: VecDeque<WorkCompletion>,
    pub(crate) recv_wcs: VecDeque<WorkCompletion>,
    pub(crate) events: VecDeque<QpEvent>,
    pub(crate) counters: Counters,
    pub(crate) retransmit_at: Option<Time>,
    /// When the local ACK timer was last armed (what a timeout's waiting is measured from).
    pub(crate) retransmit_armed: Time,
    /// The local ACK timer expired and was postponed because the driver had been stalled.
    pub(crate) retransmit_postponed: bool,
    pub(crate) rnr_at: Option<Time>,
    /// Loss recovery beside the IBTA timer: the round-trip estimate and the probe timer
    /// (see [`Recovery`]).
    pub(crate) recovery: Recovery,
    /// Alternates responder and requester output so neither starves the other.
    pub(crate) tx_turn: bool,
    pub(crate) sq_drained_reported: bool,
    /// Send WQEs finished so far (completed, flushed, or retired unsignaled).
    pub(crate) send_retired: u64,
    /// Receives come from a shared receive queue ([`super::Srq`]), not `rq`.
    pub(crate) uses_srq: bool,
}

impl Qp {
    /// A new QP in the RESET state.
    pub fn new(qpn: u32, qp_type: QpType, pd: u32, caps: QpCaps) -> Qp {
        Qp {
            qpn: qpn & 0xff_ffff,
            qp_type,
            pd,
            caps,
            state: QpState::Reset,
            attr: QpAttr::default(),
            tuning: QpTuning::default(),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            req: ReqState::default(),
            comp: CompState::default(),
            resp: RespState::default(),
            send_wcs: VecDeque::new(),
            recv_wcs: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            retransmit_at: None,
            retransmit_armed: Time::ZERO,
            retransmit_postponed: false,
            rnr_at: None,
            recovery: Recovery::default(),
            tx_turn: false,
            sq_drained_reported: false,
            send_retired: 0,
            uses_srq: false,
        }
    }

    /// A new QP in the RESET state that takes its receives from a shared receive queue:
    /// drive it with [`Qp::handle_packet_srq`].
    pub fn new_with_srq(qpn: u32, qp_type: QpType, pd: u32, caps: QpCaps) -> Qp {
        Qp { uses_srq: true, ..Qp::new(qpn, qp_type, pd, caps) }
    }

    /// Whether the QP takes its receives from a shared receive queue.
    pub fn uses_srq(&self) -> bool {
        self.uses_srq
    }

    /// Sets the path MTU of a UD QP (a UD QP has no `path_mtu` attribute: its messages are
    /// limited by the port's active MTU, which the driver passes here).
    pub fn set_ud_mtu(&mut self, mtu: Mtu) {
        if self.qp_type == QpType::Ud {
            self.attr.path_mtu = mtu;
        }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// Protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }
    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// Current attributes.
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }
    /// Capacities.
    pub fn caps(&self) -> &QpCaps {
        &self.caps
    }
    /// Counters, named after kernel rxe's hw_counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Mutable counters (for the engine's receive-path drops).
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }
    /// Tunables.
    pub fn tuning(&self) -> QpTuning {
        self.tuning
    }
    /// Changes the tunables.
    pub fn set_tuning(&mut self, t: QpTuning) {
        self.tuning = t;
    }
    /// Send work requests queued and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }
    /// Whether the requester owes progress: an RC QP in RTS with send work queued, or in SQD
    /// with work it started. Such a QP must always have a packet to send or a timer armed
    /// (the local ACK timer, the RNR timer; unless its timeout is 0, infinite), so that it
    /// advances, retries, or completes in error: it never waits in silence.
    pub fn owes_progress(&self) -> bool {
        self.qp_type == QpType::Rc
            && match self.state {
                QpState::Rts => !self.sq.is_empty(),
                QpState::Sqd => self.sq.iter().any(|w| w.started),
                _ => false,
            }
    }
    /// The invariant behind [`Qp::owes_progress`], broken: called when [`Qp::poll_transmit`]
    /// has just returned `None`, true if the QP owes progress and no timer will make it.
    pub fn silently_stalled(&self) -> bool {
        self.owes_progress() && self.local_ack_timeout().is_some() && self.poll_timeout().is_none()
    }
    /// Receive work requests queued.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }
    /// A one-line summary of the internal state, for diagnostics.
    pub fn debug_state(&self) -> String {
        let head: Vec<String> = self
            .sq
            .iter()
            .take(4)
            .map(|w| {
                format!(
                    "{:?}/{:?}[{}..{}] sent={} read={} started={} fence={}",
                    w.wr.op, w.state, w.first_psn, w.last_psn, w.sent, w.read_done, w.started, w.wr.fence
                )
            })
            .collect();
        format!(
            "state={:?} req.psn={} max_psn={} wqe_index={} rd_atomic={} need_retry={} wait_rnr={} error={} comp.psn={} comp.opcode={:?} retry={} started={} resp.psn={} resp.out={} timers={:?}/{:?} sq=[{}]",
            self.state,
            self.req.psn,
            self.req.max_psn,
            self.req.wqe_index,
            self.req.rd_atomic,
            self.req.need_retry,
            self.req.wait_rnr,
            self.req.error,
            self.comp.psn,
            self.comp.opcode,
            self.comp.retry_cnt,
            self.comp.started_retry,
            self.resp.psn,
            self.resp.out.len(),
            self.retransmit_at,
            self.rnr_at,
            head.join(", ")
        )
    }

    /// Send work requests finished so far: completed, flushed, or retired without a
    /// completion (unsignaled). The engine uses it to free send queue slots.
    pub fn send_retired(&self) -> u64 {
        self.send_retired
    }
    /// The requester's in-flight window in PSNs: the tuning's `max_unacked_psns`, halved after
    /// each loss and grown back as acknowledgements come.
    pub fn send_window(&self) -> u32 {
        self.recovery.window(self.tuning.max_unacked_psns)
    }
    /// The requester's smoothed round-trip estimate, once one was measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.recovery.srtt
    }
    /// The next PSN the requester will send (`sq_psn` as `query_qp` reports it).
    pub fn next_send_psn(&self) -> Psn {
        self.req.psn
    }
    /// The PSN the responder expects next.
    pub fn expected_psn(&self) -> Psn {
        self.resp.psn
    }

    /// `ibv_modify_qp`: checks the transition against the IBTA table for this QP type, the
    /// required and allowed attributes and their ranges, then applies it.
    pub fn modify(&mut self, u: &QpAttrUpdate) -> Result<(), ModifyError> {
        use QpState as S;
        let from = self.state;
        let to = u.state.unwrap_or(from);
        let rc = self.qp_type == QpType::Rc;
        let ud = self.qp_type == QpType::Ud;
        // (required, allowed) attribute names for each legal transition (the kernel's
        // `ib_modify_qp_is_ok` table: a transition to RESET or ERR takes no attribute, and a
        // QP in RESET can only go to INIT or stay).
        let (required, allowed): (&[&str], &[&str]) = match (from, to) {
            (S::Reset, S::Err) => return Err(ModifyError::InvalidTransition { from, to }),
            (_, S::Reset) | (_, S::Err) => (&[], &[]),
            (S::Reset, S::Init) => {
                if ud {
                    (&["pkey_index", "port", "qkey"], &[])
                } else {
                    (&["pkey_index", "port", "access"], &[])
                }
            }
            (S::Init, S::Init) => {
                (&[], if ud { &["pkey_index", "port", "qkey"] } else { &["pkey_index", "port", "access"] })
            }
            (S::Init, S::Rtr) => {
                if rc {
                    (
                        &["av", "path_mtu", "dest_qpn", "rq_psn", "max_dest_rd_atomic", "min_rnr_timer"],
                        &["access", "pkey_index"],
                    )
                } else if ud {
                    (&[], &["pkey_index", "qkey"])
                } else {
                    (&["av", "path_mtu", "dest_qpn", "rq_psn"], &["access", "pkey_index"])
                }
            }
            (S::Rtr, S::Rts) => {
                if rc {
                    (
                        &["timeout", "retry_cnt", "rnr_retry", "sq_psn", "max_rd_atomic"],
                        &["access", "min_rnr_timer"],
                    )
                } else if ud {
                    (&["sq_psn"], &["qkey"])
                } else {
                    (&["sq_psn"], &["access"])
                }
            }
            (S::Rts, S::Rts) | (S::Sqd, S::Rts) => (
                &[],
                if rc {
                    &["access", "min_rnr_timer"]
                } else if ud {
                    &["qkey"]
                } else {
                    &["access"]
                },
            ),
            (S::Rts, S::Sqd) => (&[], &[]),
            (S::Sqd, S::Sqd) => (
                &[],
                if rc {
                    &[
                        "av",
                        "timeout",
                        "retry_cnt",
                        "rnr_retry",
                        "max_rd_atomic",
                        "max_dest_rd_atomic",
                        "access",
                        "min_rnr_timer",
                        "port",
                        "pkey_index",
                    ]
                } else if ud {
                    &["qkey", "pkey_index"]
                } else {
                    &["av", "access", "pkey_index"]
                },
            ),
            (S::Sqe, S::Rts) if !rc => (&[], if ud { &["qkey"] } else { &["access"] }),
            _ => return Err(ModifyError::InvalidTransition { from, to }),
        };
        let given = [
            ("access", u.access.is_some()),
            ("path_mtu", u.path_mtu.is_some()),
            ("dest_qpn", u.dest_qpn.is_some()),
            ("rq_psn", u.rq_psn.is_some()),
            ("sq_psn", u.sq_psn.is_some()),
            ("max_rd_atomic", u.max_rd_atomic.is_some()),
            ("max_dest_rd_atomic", u.max_dest_rd_atomic.is_some()),
            ("min_rnr_timer", u.min_rnr_timer.is_some()),
            ("timeout", u.timeout.is_some()),
            ("retry_cnt", u.retry_cnt.is_some()),
            ("rnr_retry", u.rnr_retry.is_some()),
            ("qkey", u.qkey.is_some()),
            ("av", u.av),
            ("port", u.port),
            ("pkey_index", u.pkey_index),
        ];
        for (name, present) in given {
            if present && !required.contains(&name) && !allowed.contains(&name) {
                return Err(ModifyError::UnexpectedAttribute(name));
            }
        }
        for name in required {
            if !given.iter().any(|(n, p)| n == name && *p) {
                return Err(ModifyError::MissingAttribute(name));
            }
        }
        let check =
            |ok: bool, name: &'static str| if ok { Ok(()) } else { Err(ModifyError::InvalidAttribute(name)) };
        if let Some(v) = u.dest_qpn {
            check(v != Qpn::new(0), "dest_qpn")?;
        }
        if let Some(v) = u.max_rd_atomic {
            check(v <= MAX_RD_ATOMIC, "max_rd_atomic")?;
        }
        if let Some(v) = u.max_dest_rd_atomic {
            check(v <= MAX_RD_ATOMIC, "max_dest_rd_atomic")?;
        }
        if let Some(v) = u.min_rnr_timer {
            check(v <= 31, "min_rnr_timer")?;
        }
        if let Some(v) = u.timeout {
            check(v <= 31, "timeout")?;
        }
        if let Some(v) = u.retry_cnt {
            check(v <= 7, "retry_cnt")?;
        }
        if let Some(v) = u.rnr_retry {
            check(v <= 7, "rnr_retry")?;
        }
        if let (Some(a), false) = (u.access, self.qp_type == QpType::Ud) {
            check(Access::ALL.contains(a), "access")?;
        }

        // Apply.
        let a = &mut self.attr;
        if let Some(v) = u.access {
            a.access = v;
        }
        if let Some(v) = u.path_mtu {
            a.path_mtu = v;
        }
        if let Some(v) = u.dest_qpn {
            a.dest_qpn = v;
        }
        if let Some(v) = u.rq_psn {
            a.rq_psn = v;
        }
        if let Some(v) = u.sq_psn {
            a.sq_psn = v;
        }
        if let Some(v) = u.max_rd_atomic {
            a.max_rd_atomic = v;
        }
        if let Some(v) = u.max_dest_rd_atomic {
            a.max_dest_rd_atomic = v;
        }
        if let Some(v) = u.min_rnr_timer {
            a.min_rnr_timer = v;
        }
        if let Some(v) = u.timeout {
            a.timeout = v;
        }
        if let Some(v) = u.retry_cnt {
            a.retry_cnt = v;
        }
        if let Some(v) = u.rnr_retry {
            a.rnr_retry = v;
        }
        if let Some(v) = u.qkey {
            a.qkey = v;
        }
        if u.rq_psn.is_some() {
            self.resp.reset_psn(self.attr.rq_psn);
        }
        if u.sq_psn.is_some() {
            self.req.psn = self.attr.sq_psn;
            self.req.max_psn = self.attr.sq_psn;
            self.comp.psn = self.attr.sq_psn;
        }
        if u.max_dest_rd_atomic.is_some() {
            self.resp.resize_resources(self.attr.max_dest_rd_atomic as usize);
        }
        if u.max_rd_atomic.is_some() {
            self.req.rd_atomic = self.attr.max_rd_atomic;
        }
        if u.retry_cnt.is_some() || u.rnr_retry.is_some() {
            self.comp.retry_cnt = self.attr.retry_cnt;
            self.comp.rnr_retry = self.attr.rnr_retry;
        }
        match to {
            S::Reset => self.reset(),
            S::Err if from != S::Err => self.enter_error(false),
            S::Sqd => self.sq_drained_reported = false,
            _ => {}
        }
        if from != to {
            tracing::debug!(qpn = self.qpn, ?from, ?to, "QP state");
        }
        self.state = to;
        Ok(())
    }

    /// Back to RESET: queues emptied without completions, state cleared.
    fn reset(&mut self) {
        let (qpn, ty, pd, caps, tuning) = (self.qpn, self.qp_type, self.pd, self.caps, self.tuning);
        let (counters, uses_srq, mtu) = (self.counters.clone(), self.uses_srq, self.attr.path_mtu);
        *self = Qp::new(qpn, ty, pd, caps);
        self.tuning = tuning;
        self.counters = counters;
        self.uses_srq = uses_srq;
        self.set_ud_mtu(mtu);
    }

    /// Moves the QP to ERR: every outstanding send and receive WQE completes with
    /// `WR_FLUSH_ERR` (the head send WQE with its own status if it failed), timers stop.
    /// Queued NAKs still go out; READ responses in progress do not.
    pub(crate) fn enter_error(&mut self, fatal: bool) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        if fatal {
            tracing::warn!(qpn = self.qpn, outstanding = self.sq.len(), "QP to ERR (fatal error)");
            self.events.push_back(QpEvent::Fatal);
        } else {
            tracing::debug!(qpn = self.qpn, outstanding = self.sq.len(), "QP to ERR");
        }
        self.retransmit_at = None;
        self.retransmit_postponed = false;
        self.rnr_at = None;
        self.recovery.probe_at = None;
        self.recovery.tail_at = None;
        self.req.tail_probe_due = false;
        self.req.need_retry = false;
        self.req.wait_rnr = false;
        while let Some(w) = self.sq.pop_front() {
            let status = if w.state == WqeState::Error { w.status } else { WcStatus::WrFlushErr };
            self.push_send_wc_for(&w, status);
        }
        self.req.wqe_index = 0;
        self.resp.flush_in_error(self.qpn, &mut self.rq, &mut self.recv_wcs);
        if self.uses_srq {
            self.events.push_back(QpEvent::LastWqeReached);
        }
    }

    /// Queues the completion of a send WQE (every error; successes when signaled).
    pub(crate) fn push_send_wc_for(&mut self, w: &SendWqe, status: WcStatus) {
        self.send_retired += 1;
        if w.wr.op.is_send() {
            self.counters.rdma_sends += 1;
        }
        if status == WcStatus::Success && !w.wr.signaled {
            return;
        }
        let mut wc = WorkCompletion::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), Qpn::new(self.qpn));
        if status != WcStatus::Success && status != WcStatus::WrFlushErr {
            tracing::warn!(
                qpn = self.qpn,
                wr_id = w.wr.wr_id,
                opcode = ?w.wr.op.wc_opcode(),
                first_psn = %w.first_psn,
                last_psn = %w.last_psn,
                "error completion: {status}"
            );
        }
        if status == WcStatus::Success {
            wc.byte_len = w.len as u32;
            wc.imm_data = w.wr.op.imm();
        }
        self.send_wcs.push_back(wc);
    }

    /// `ibv_post_send` for one work request.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => {}
            s => return Err(PostError::InvalidState(s)),
        }
        if self.sq.len() >= self.caps.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        check_send_wr(self.qp_type, &self.caps, self.attr.path_mtu, &wr)?;
        let len = wr.payload.len();
        let wqe = SendWqe {
            wr,
            len,
            state: WqeState::Posted,
            status: WcStatus::Success,
            first_psn: Psn::new(0),
            last_psn: Psn::new(0),
            sent: 0,
            read_done: 0,
            has_rd_atomic: false,
            started: false,
        };
        if self.state == QpState::Err {
            self.push_send_wc_for(&wqe, WcStatus::WrFlushErr);
        } else {
            self.sq.push_back(wqe);
        }
        Ok(())
    }

    /// Checks a receive work request against the QP's capacities (not its state or depth).
    pub fn check_recv_wr(caps: &QpCaps, wr: &RecvWr) -> Result<(), PostError> {
        if wr.sg_list.len() > caps.max_recv_sge as usize {
            return Err(PostError::TooManySge { got: wr.sg_list.len(), max: caps.max_recv_sge });
        }
        Ok(())
    }

    /// `ibv_post_recv` for one work request.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.uses_srq {
            return Err(PostError::UsesSrq);
        }
        if self.state == QpState::Reset {
            return Err(PostError::InvalidState(self.state));
        }
        if self.rq.len() >= self.caps.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        Self::check_recv_wr(&self.caps, &wr)?;
        if self.state == QpState::Err {
            let opcode = WcOpcode::Recv;
            self.recv_wcs.push_back(WorkCompletion::new(
                wr.wr_id,
                WcStatus::WrFlushErr,
                opcode,
                Qpn::new(self.qpn),
            ));
        } else {
            self.rq.push_back(wr);
        }
        Ok(())
    }

    /// Handles a packet addressed to this QP (already checked by the engine: ICRC, QPN,
    /// transport type and source address).
    pub fn handle_packet<M: Memory>(&mut self, now: Time, pkt: &Packet<'_>, mem: &M) {
        self.handle_packet_grh(now, pkt, None, mem)
    }

    /// [`Qp::handle_packet`] with the packet's network header as a UD receive reports it:
    /// the 40 bytes ibverbs puts at the start of every UD receive buffer (for RoCEv2 over
    /// IPv4, 20 zero bytes and then the IPv4 header; over IPv6, the IPv6 header). Without it
    /// a UD receive gets 40 zero bytes there.
    pub fn handle_packet_grh<M: Memory>(
        &mut self,
        now: Time,
        pkt: &Packet<'_>,
        grh: Option<&[u8; GRH_LEN]>,
        mem: &M,
    ) {
        let info = pkt.info();
        if info.transport != self.qp_type.transport() {
            self.counters.rcvd_dropped += 1;
            return;
        }
        self.counters.rcvd_pkts += 1;
        match info.direction {
            crate::wire::Direction::Request => {
                if matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
                    self.responder_handle(now, pkt, grh, mem);
                } else {
                    self.counters.rcvd_dropped += 1;
                }
            }
            crate::wire::Direction::Response => {
                if matches!(self.state, QpState::Rts | QpState::Sqd) && self.qp_type == QpType::Rc {
                    self.completer_handle(now, Some(pkt), mem);
                } else {
                    self.counters.rcvd_dropped += 1;
                }
            }
        }
        self.check_sq_drained();
    }

    /// Handles expired timers, for a driver that was never kept from running (see
    /// [`Qp::handle_timeout_stalled`]).
    pub fn handle_timeout<M: Memory>(&mut self, now: Time, mem: &M) {
        self.handle_timeout_stalled(now, mem, |_| Duration::ZERO)
    }

    /// Handles expired timers. `stalled(since)` tells how long, between `since` and `now`,
    /// the driver was ready to run but could not (a userspace engine descheduled by the
    /// operating system); a driver that cannot tell returns zero.
    ///
    /// The local ACK timer counts only the time the driver could run: an expiry after a
    /// timeout interval `T` of which the driver spent part descheduled is postponed by that
    /// part and neither retransmits nor takes one of the `retry_cnt` retries: the peer —
    /// usually on the same overloaded machine — had as little chance to answer. When the
    /// answer comes before the new expiry, the timeout was avoided (counted in
    /// `local_ack_timeout_stalled`). The postponement is bounded: every timeout fires at most
    /// [`LOCAL_ACK_STRETCH`] × `T` after the timer was armed, so a peer that is really gone
    /// still ends in `RETRY_EXC_ERR` within `(retry_cnt + 1) × LOCAL_ACK_STRETCH × T` of the
    /// last progress. The IBTA attribute is the least time the requester waits before it
    /// retries; waiting longer while the requester itself could not run stays within it.
    pub fn handle_timeout_stalled<M: Memory>(
        &mut self,
        now: Time,
        mem: &M,
        stalled: impl Fn(Time) -> Duration,
    ) {
        if self.rnr_at.is_some_and(|t| t <= now) {
            self.rnr_at = None;
            self.req.wait_rnr = false;
            self.req.need_retry = true;
        }
        if self.recovery.tail_at.is_some_and(|t| t <= now) {
            self.recovery.tail_at = None;
            self.tail_probe_fired(now, &stalled);
        }
        if self.recovery.probe_at.is_some_and(|t| t <= now) {
            self.recovery.probe_at = None;
            self.probe_fired(now, &stalled);
        }
        if self.retransmit_at.is_some_and(|t| t <= now) {
            if let Some(rto) = self.retransmit_interval() {
                let armed = self.retransmit_armed;
                let cap = armed + rto * LOCAL_ACK_STRETCH;
                let waited = now - armed;
                let ran = waited.saturating_sub(stalled(armed).min(waited));
                if ran < rto && now < cap {
                    // The driver could not run for part of the interval: wait for the rest.
                    self.retransmit_postponed = true;
                    self.retransmit_at = Some((now + (rto - ran)).min(cap));
                    return;
                }
            }
            self.retransmit_at = None;
            self.retransmit_postponed = false;
            self.completer_timeout(now, mem);
        }
    }

    /// The earliest deadline at which [`Qp::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        [self.retransmit_at, self.rnr_at, self.recovery.probe_at, self.recovery.tail_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Builds the next packet to send into `buf` (BTH through ICRC; the ICRC is left zero for
    /// the engine, which knows the IP and UDP headers it covers). `buf` must hold a full
    /// packet at the path MTU: [`Qp::max_packet_len`] bytes.
    pub fn poll_transmit<M: Memory>(&mut self, now: Time, mem: &M, buf: &mut [u8]) -> Option<Transmit> {
        if buf.len() < self.max_packet_len() {
            return None;
        }
        let t = if std::mem::take(&mut self.req.tail_probe_due)
            && let Some(t) = self.tail_probe(now, mem, buf)
        {
            Some(t)
        } else if self.tx_turn {
            self.requester_transmit(now, mem, buf).or_else(|| self.responder_transmit(mem, buf))
        } else {
            self.responder_transmit(mem, buf).or_else(|| self.requester_transmit(now, mem, buf))
        };
        if t.is_some() {
            self.tx_turn = !self.tx_turn;
            self.counters.sent_pkts += 1;
        }
        self.check_sq_drained();
        t
    }

    /// UD: the destination of the send whose packet [`Qp::poll_transmit`] builds next, if one
    /// is due (the QP is ready to send and has one); the engine resolves its route first.
    pub fn next_ud_dest(&self) -> Option<crate::transport::UdDest> {
        if self.qp_type != QpType::Ud || self.state != QpState::Rts || self.req.error {
            return None;
        }
        self.sq.get(self.req.wqe_index).and_then(|w| w.wr.ud)
    }

    /// UD: the send [`Qp::next_ud_dest`] names cannot leave (its address handle is gone, or
    /// leads to no address the device has): it completes with `LOC_QP_OP_ERR` and the QP
    /// enters the error state, as rxe's requester does when it finds no address vector or
    /// route for a work request.
    pub fn fail_next_ud_send(&mut self) {
        if self.next_ud_dest().is_some() {
            self.req_fail(self.req.wqe_index, WcStatus::LocQpOpErr);
        }
    }

    /// True when [`Qp::poll_transmit`] may have a packet (cheap check for the engine's
    /// scheduler; a `true` can still yield nothing, e.g. when the window is closed).
    pub fn wants_transmit(&self) -> bool {
        self.resp.has_output()
            || (self.req.wqe_index < self.sq.len() && !self.req.wait_rnr)
            || self.req.need_retry
            || self.req.tail_probe_due
    }

    /// Makes [`Qp::poll_transmit`] build the requester's next packet before the responder's
    /// (it alternates otherwise): a held-back ACK that leaves with the request answering it
    /// then goes after it, as the shorter last segment of one GSO send.
    pub fn requests_first(&mut self) {
        self.tx_turn = true;
    }

    /// True when all this QP has to send is one plain ACK of the responder (no request, no
    /// retry, no READ or atomic response): an ACK that may wait for the QP's next packet.
    pub fn only_plain_ack(&self) -> bool {
        self.resp.only_plain_ack()
            && (self.req.wqe_index >= self.sq.len() || self.req.wait_rnr)
            && !self.req.need_retry
            && !self.req.tail_probe_due
    }

    /// Largest packet this QP builds: headers, a path-MTU payload, ICRC.
    pub fn max_packet_len(&self) -> usize {
        // BTH + the longest extension chain (RETH + ImmDt or DETH + ImmDt or AETH + AtomicAck)
        // + payload + pad + ICRC.
        12 + 32 + self.attr.path_mtu.bytes() as usize + 4
    }

    /// The next work completion for the send CQ.
    pub fn poll_send_completion(&mut self) -> Option<WorkCompletion> {
        self.send_wcs.pop_front()
    }

    /// The next work completion for the receive CQ.
    pub fn poll_recv_completion(&mut self) -> Option<WorkCompletion> {
        self.recv_wcs.pop_front()
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// Raises SQ_DRAINED once in SQD when no send WQE is in flight.
    fn check_sq_drained(&mut self) {
        if self.state == QpState::Sqd && !self.sq_drained_reported && self.sq.iter().all(|w| !w.started) {
            self.sq_drained_reported = true;
            self.events.push_back(QpEvent::SqDrained);
        }
    }

    /// The local ACK timeout `T` (4.096 µs × 2^`timeout`; `None` for timeout 0 = infinite).
    pub fn local_ack_timeout(&self) -> Option<Duration> {
        self.retransmit_interval()
    }

    /// Arms the local ACK timer `T` from `now` (not for timeout 0 = infinite).
    pub(crate) fn arm_retransmit(&mut self, now: Time) {
        self.note_timer_outrun();
        self.retransmit_at = self.retransmit_interval().map(|d| now + d);
        self.retransmit_armed = now;
        self.arm_probe(now);
    }

    /// Stops the local ACK timer: nothing is outstanding, or the peer answered.
    pub(crate) fn stop_retransmit(&mut self) {
        self.note_timer_outrun();
        self.retransmit_at = None;
        self.recovery.probe_at = None;
        self.recovery.tail_at = None;
    }

    /// Arms the probe (see [`Recovery`]) from `now`, when a round trip has been measured and
    /// the probe would come before the local ACK timer.
    pub(crate) fn arm_probe(&mut self, now: Time) {
        let r = &mut self.recovery;
        r.probe_at = match (r.interval(self.tuning.probe_min), self.retransmit_at) {
            (Some(d), Some(t)) if now + d < t => Some(now + d),
            _ => None,
        };
        r.probe_armed = now;
        // The tail probe: two round trips (at least `tail_probe_min`), before the probe.
        r.tail_at = match (r.srtt, self.tuning.tail_probe_min, r.probe_at) {
            (Some(srtt), Some(min), Some(p)) if now + (srtt * 2).max(min) < p => {
                Some(now + (srtt * 2).max(min))
            }
            _ => None,
        };
    }

    /// Whether the requester may start a recovery of its own (a probe, a go-back-N): it is
    /// sending (RTS or SQD), not waiting out an RNR NAK, not in error.
    fn may_recover(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd) && !self.req.wait_rnr && !self.req.error
    }

    /// Goes back N from the oldest unacknowledged PSN at the next transmit, shrinking the
    /// in-flight window as after any loss (`why`: the log's words; the caller counts it).
    fn go_back_n(&mut self, why: &'static str) {
        tracing::debug!(qpn = self.qpn, from_psn = %self.comp.psn, "{why}");
        self.recovery.on_loss(self.tuning.max_unacked_psns);
        self.req.need_retry = true;
        self.comp.started_retry = true;
    }

    /// The tail probe timer expired: nothing was acknowledged for two round trips. Unless the
    /// driver was kept from running, resend the oldest unacknowledged packet alone (see
    /// [`Qp::tail_probe`]) at the next transmit.
    fn tail_probe_fired(&mut self, now: Time, stalled: &impl Fn(Time) -> Duration) {
        let armed = self.recovery.probe_armed;
        if !self.may_recover()
            || self.req.need_retry
            || self.retransmit_at.is_none()
            || !self.req.max_psn.is_after(self.comp.psn)
        {
            return;
        }
        let waited = now - armed;
        if kept_from_running(stalled, armed, waited) {
            // Kept from running: the peer had no fair chance either; wait as long again.
            self.recovery.tail_at =
                Some(now + waited).filter(|&t| self.recovery.probe_at.is_some_and(|p| t < p));
            return;
        }
        self.req.tail_probe_due = true;
        self.note_replay_requested();
    }

    /// The tail probe (softroce's own, after TCP's tail loss probe): when nothing has been
    /// acknowledged for two measured round trips (at least [`QpTuning::tail_probe_min`]),
    /// well before the go-back-N probe, the requester resends the single oldest
    /// unacknowledged SEND/WRITE packet with AckReq set, and nothing else. The responder
    /// answers it whatever happened: a duplicate is acknowledged with the last PSN the
    /// responder executed (C9-105; rxe does the same), the missing packet is executed and
    /// acknowledged. So a lost acknowledgement, a slow peer or a lost last packet of a
    /// burst costs one packet instead of a window resent, and when the answer acknowledges
    /// exactly the probed PSN while more was sent after it — the responder is missing the
    /// next packet (a lost NAK, a lost retransmission) — the requester goes back N from there
    /// at once (`tail_probe_retransmit`), as a sequence NAK would have made it. A READ or an
    /// atomic at the head is left to the go-back-N probe (a duplicate READ is answered in
    /// full). On the wire an ordinary retransmission; the requester's state is unchanged.
    pub(crate) fn tail_probe<M: Memory>(&mut self, now: Time, mem: &M, buf: &mut [u8]) -> Option<Transmit> {
        let x = self.comp.psn;
        if !self.may_recover() || self.req.need_retry || !x.is_before(self.req.max_psn) {
            return None;
        }
        let idx = self.sq.iter().position(|w| matches!(w.state, WqeState::Processing | WqeState::Pending))?;
        let w = &self.sq[idx];
        if w.wr.op.is_read_or_atomic() || x.is_before(w.first_psn) || x.is_after(w.last_psn) {
            return None;
        }
        let mtu = self.mtu();
        let saved = (self.req.psn, self.req.wqe_index, self.req.noack_pkts, self.req.timed);
        let (sent, state) = (w.sent, w.state);
        let offset = (x.distance_from(w.first_psn) as u64 * mtu).min(w.len);
        let w = &mut self.sq[idx];
        w.sent = offset;
        w.state = if offset > 0 { WqeState::Processing } else { WqeState::Posted };
        self.req.psn = x;
        self.req.wqe_index = idx;
        self.req.force_ack_req = true;
        let t = self.requester_transmit(now, mem, buf);
        self.req.force_ack_req = false;
        (self.req.psn, self.req.wqe_index, self.req.noack_pkts, self.req.timed) = saved;
        // A local error building it (a region gone since the first send) stands, as it
        // would for a go-back-N retransmission: the WQE keeps its error state.
        if !self.req.error
            && let Some(w) = self.sq.get_mut(idx)
        {
            (w.sent, w.state) = (sent, state);
        }
        if t.is_some() {
            tracing::debug!(qpn = self.qpn, %x, "tail probe: the oldest unacknowledged packet alone");
            self.counters.tail_probe += 1;
            self.recovery.tail_psn = Some(x);
        }
        t
    }

    /// After a response: if it answers the tail probe by acknowledging exactly the probed
    /// PSN while later PSNs were sent, those were lost: go back N from the next one.
    pub(crate) fn tail_probe_answered(&mut self, pkt: &crate::wire::Packet<'_>) {
        let Some(x) = self.recovery.tail_psn else { return };
        let psn = pkt.bth().psn();
        if psn.is_before(x) {
            return;
        }
        self.recovery.tail_psn = None;
        let ack = pkt.info().operation == crate::wire::Operation::Acknowledge
            && pkt.aeth().is_some_and(|a| {
                matches!(crate::wire::AethRepr::parse(&a).syndrome(), crate::wire::aeth::Syndrome::Ack { .. })
            });
        if ack
            && psn == x
            && self.comp.psn == x.next()
            && self.req.max_psn.is_after(self.comp.psn)
            && self.may_recover()
            && !self.req.need_retry
        {
            self.counters.tail_probe_retransmit += 1;
            self.go_back_n("retransmitting (tail probe answered)");
        }
    }

    /// The probe timer expired: nothing was acknowledged for a probe interval. Go back N from
    /// the oldest unacknowledged PSN (not counted as a retry), unless the driver was kept from
    /// running for half the interval (then the peer had no fair chance either: wait again).
    fn probe_fired(&mut self, now: Time, stalled: &impl Fn(Time) -> Duration) {
        let armed = self.recovery.probe_armed;
        let outstanding = self.req.max_psn.is_after(self.comp.psn)
            && self.sq.front().is_some_and(|w| matches!(w.state, WqeState::Processing | WqeState::Pending));
        if !self.may_recover() || self.retransmit_at.is_none() || !outstanding {
            return;
        }
        let waited = now - armed;
        if kept_from_running(stalled, armed, waited) {
            self.arm_probe(now);
            return;
        }
        if !self.req.need_retry {
            self.counters.probe_retransmit += 1;
            self.go_back_n("retransmitting (probe: nothing acknowledged)");
        }
        self.recovery.backoff = (self.recovery.backoff + 1).min(PROBE_MAX_BACKOFF);
        self.arm_probe(now);
    }

    /// A response came before a postponed timer's new expiry: the timeout it avoided.
    fn note_timer_outrun(&mut self) {
        if std::mem::take(&mut self.retransmit_postponed) {
            self.counters.local_ack_timeout_stalled += 1;
        }
    }

    /// The retransmit timeout as a duration (`None` for timeout 0 = infinite).
    pub(crate) fn retransmit_interval(&self) -> Option<Duration> {
        (self.attr.timeout != 0).then(|| Duration::from_nanos(4096u64 << self.attr.timeout))
    }
}

/// Whether the driver was kept from running (`stalled`: how long since `armed`) for at least
/// half of the `waited` a timer armed at `armed` has run: then the peer had no fair chance to
/// answer either, and a probe would be premature.
fn kept_from_running(stalled: &impl Fn(Time) -> Duration, armed: Time, waited: Duration) -> bool {
    stalled(armed).min(waited) * 2 >= waited
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_from_netdev() {
        assert_eq!(Mtu::active_for_netdev(1500), Mtu::Mtu1024);
        assert_eq!(Mtu::active_for_netdev(2128), Mtu::Mtu2048);
        assert_eq!(Mtu::active_for_netdev(9000), Mtu::Mtu4096);
        assert_eq!(Mtu::active_for_netdev(65536), Mtu::Mtu4096);
        assert_eq!(Mtu::active_for_netdev(300), Mtu::Mtu256);
    }
}
