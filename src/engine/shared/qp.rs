//! What a queue pair's handle shares with the engines, and the attributes a QP is modified
//! with and reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crossbeam_queue::SegQueue;

use super::srq::SrqShared;
use crate::transport::{
    Access, Mtu, Qkey, QpAttr, QpAttrUpdate, QpCaps, QpState, QpType, Qpn, RecvWr, SendWr,
};
use crate::wire::Psn;
use crate::wire::gid::{Gid, GidIndex};

/// Where a connected QP sends (`ibv_ah_attr` with its GRH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// Destination GID (the peer's IP address as a GID).
    pub dgid: Gid,
    /// Index of the source GID in this device's table ([`Device::default_gid_index`](crate::verbs::Device::default_gid_index),
    /// [`Device::gid_index_for`](crate::verbs::Device::gid_index_for)).
    pub sgid_index: GidIndex,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// Flow label; 0 lets the UDP source port derive from the QP numbers, as rxe does.
    pub flow_label: u32,
    /// Service level (carried for completeness; RoCEv2 has no SL on the wire).
    pub sl: u8,
}

impl AddressVector {
    /// An address vector to `dgid` from source GID `sgid_index`, hop limit 64.
    pub fn new(dgid: Gid, sgid_index: GidIndex) -> AddressVector {
        AddressVector { dgid, sgid_index, hop_limit: 64, traffic_class: 0, flow_label: 0, sl: 0 }
    }
}

/// What the engine needs of an address handle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AhEntry {
    pub pd: u32,
    pub av: AddressVector,
}

/// The attributes of a `modify_qp` call (`ibv_qp_attr` with its mask: `None` = not in the
/// mask).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttrs {
    /// `IBV_QP_STATE`.
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
    /// `IBV_QP_PKEY_INDEX` (only index 0 exists).
    pub pkey_index: Option<u16>,
    /// `IBV_QP_PORT` (only port 1 exists).
    pub port_num: Option<u8>,
    /// `IBV_QP_AV`.
    pub av: Option<AddressVector>,
}

impl QpAttrs {
    /// RESET → INIT for a connected QP with the given remote access rights.
    pub fn init(access: Access) -> QpAttrs {
        QpAttrs {
            state: Some(QpState::Init),
            access: Some(access),
            pkey_index: Some(0),
            port_num: Some(1),
            ..QpAttrs::default()
        }
    }
    /// RESET → INIT for a UD QP with its Q_Key.
    pub fn init_ud(qkey: Qkey) -> QpAttrs {
        QpAttrs {
            state: Some(QpState::Init),
            qkey: Some(qkey),
            pkey_index: Some(0),
            port_num: Some(1),
            ..QpAttrs::default()
        }
    }
    /// INIT → RTR for an RC QP: the peer, the path MTU, the PSN the peer starts at, and
    /// the responder's resources (READ/atomic depth 16, RNR timer 12 = 0.64 ms, as perftest).
    pub fn rtr(av: AddressVector, path_mtu: Mtu, dest_qpn: Qpn, rq_psn: Psn) -> QpAttrs {
        QpAttrs {
            state: Some(QpState::Rtr),
            av: Some(av),
            path_mtu: Some(path_mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..QpAttrs::default()
        }
    }
    /// RTR → RTS for an RC QP: timeout 14 (67 ms), 7 retries, infinite RNR retries,
    /// READ/atomic depth 16.
    pub fn rts(sq_psn: Psn) -> QpAttrs {
        QpAttrs {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(16),
            ..QpAttrs::default()
        }
    }
    /// INIT → RTR for a UC QP: the peer, the path MTU and the PSN the peer starts at.
    pub fn rtr_uc(av: AddressVector, path_mtu: Mtu, dest_qpn: Qpn, rq_psn: Psn) -> QpAttrs {
        QpAttrs {
            state: Some(QpState::Rtr),
            av: Some(av),
            path_mtu: Some(path_mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            ..QpAttrs::default()
        }
    }
    /// RTR → RTS for a UC or UD QP: only the first PSN it sends.
    pub fn rts_unreliable(sq_psn: Psn) -> QpAttrs {
        QpAttrs { state: Some(QpState::Rts), sq_psn: Some(sq_psn), ..QpAttrs::default() }
    }
    /// INIT → RTR for a UD QP (no peer: each send names its address handle).
    pub fn rtr_ud() -> QpAttrs {
        QpAttrs { state: Some(QpState::Rtr), ..QpAttrs::default() }
    }
    /// Any state → ERR.
    pub fn error() -> QpAttrs {
        QpAttrs { state: Some(QpState::Err), ..QpAttrs::default() }
    }

    /// The transport's view of the same call.
    pub(crate) fn to_update(self) -> QpAttrUpdate {
        QpAttrUpdate {
            state: self.state,
            access: self.access,
            path_mtu: self.path_mtu,
            dest_qpn: self.dest_qpn,
            rq_psn: self.rq_psn,
            sq_psn: self.sq_psn,
            max_rd_atomic: self.max_rd_atomic,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            qkey: self.qkey,
            av: self.av.is_some(),
            port: self.port_num.is_some(),
            pkey_index: self.pkey_index.is_some(),
        }
    }
}

/// What `query_qp` reports.
#[derive(Debug, Clone)]
pub struct QpInfo {
    /// State.
    pub state: QpState,
    /// Transport attributes.
    pub attr: QpAttr,
    /// Address vector (connected QPs after RTR).
    pub av: Option<AddressVector>,
    /// Capacities.
    pub cap: QpCaps,
    /// The next PSN the QP will send.
    pub sq_psn: Psn,
    /// The PSN it expects next.
    pub rq_psn: Psn,
    /// Its counters.
    pub counters: crate::transport::Counters,
}

/// What a QP handle shares with the engine.
pub(crate) struct QpShared {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: u32,
    pub caps: QpCaps,
    pub sq_sig_all: bool,
    /// The state as the engine last published it ([`QpState::ibv`]).
    pub state: AtomicU8,
    pub path_mtu: AtomicU8,
    /// Send work requests posted and not yet finished.
    pub send_outstanding: AtomicUsize,
    /// Receive work requests posted and not yet completed.
    pub recv_outstanding: AtomicUsize,
    /// Send work requests posted and not yet taken by the engine. Unbounded: the depth is
    /// kept by `send_outstanding`. A `SegQueue` allocates its blocks (31 requests each) as
    /// requests arrive and frees them as the engine takes them, so an idle QP holds no
    /// queue storage (a queue preallocated to `max_send_wr` took 16 KiB per QP at 128).
    pub send_wrq: SegQueue<SendWr>,
    /// Receive work requests posted and not yet taken by the engine (bounded by
    /// `recv_outstanding`), allocated as they come like `send_wrq`.
    pub recv_wrq: SegQueue<RecvWr>,
    /// Queued for the engine's attention.
    pub scheduled: std::sync::atomic::AtomicBool,
    /// The shared receive queue receives come from.
    pub srq: Option<Arc<SrqShared>>,
}

impl QpShared {
    /// The state as the engine last published it.
    pub(crate) fn state(&self) -> QpState {
        QpState::from_ibv(u32::from(self.state.load(Ordering::SeqCst))).unwrap_or(QpState::Err)
    }

    pub(crate) fn set_state(&self, s: QpState) {
        self.state.store(s.ibv(), Ordering::SeqCst);
    }
}
