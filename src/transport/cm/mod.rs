//! The InfiniBand Communication Manager as a sans-IO state machine, after Linux 6.1's
//! `drivers/infiniband/core/cm.c`, with the RDMA CM's pure logic beside it ([`rdma`], after
//! `cma.c` and librdmacm).
//!
//! A [`CmEndpoint`] is the CM of one port: it owns every connection's state, the listeners
//! and the tables Linux keeps (remote comm ID, remote QPN, SIDR requests). It never touches
//! a socket or a clock; the engine drives it like the transport QPs:
//!
//! - [`CmEndpoint::handle_mad`]`(now, from, payload)` with every UD payload that arrives on
//!   QP1 (the GSI QP), whatever it holds: the endpoint does the MAD layer's checks too
//!   (`mad.c` `validate_mad`, the unmatched `Get` answer);
//! - commands: [`CmEndpoint::listen`], [`CmEndpoint::connect`], [`CmEndpoint::accept`],
//!   [`CmEndpoint::ready_to_use`], [`CmEndpoint::reject`], [`CmEndpoint::mra`],
//!   [`CmEndpoint::disconnect`] (or [`CmEndpoint::send_dreq`] / [`CmEndpoint::send_drep`]),
//!   [`CmEndpoint::establish`], [`CmEndpoint::sidr_request`], [`CmEndpoint::sidr_reply`],
//!   [`CmEndpoint::destroy`];
//! - [`CmEndpoint::handle_timeout`]`(now)` when [`CmEndpoint::poll_timeout`] is due;
//! - drained with [`CmEndpoint::poll_transmit`] (a 256-byte MAD and where it goes: always QP1
//!   with Q_Key 0x80010000 of the peer's GID) and [`CmEndpoint::poll_event`].
//!
//! What the kernel does is kept, including what is easy to get backwards: the Starting PSN in
//! a REQ or REP is the PSN its *sender* expects to receive ([`CmQpAttrs`] gives each side's
//! `rq_psn` and `sq_psn`); duplicates are answered as `cm_dup_req_handler` and
//! `cm_dup_rep_handler` answer them; a REQ for a service nobody listens on gets REJ 8 at
//! once; timeouts, retries and timewait use `cm_convert_to_ms` of the values in the messages.
//! The module tests and `tests/cm_sim.rs` check it against the captures and over a lossy
//! link.

#![forbid(unsafe_code)]

mod counters;
mod endpoint;
pub mod rdma;
pub mod sim;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use counters::{CmCounters, MESSAGE_NAMES};
pub use endpoint::{CmEndpoint, ID_SLOT_SHIFT, SIDR_ANSWER_MEMORY};

use crate::wire::cm::CmTransport;

/// A connection of a [`CmEndpoint`]: its Local Communication ID as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

impl core::fmt::Display for CmId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// The states of a connection (`enum ib_cm_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// No exchange in progress (after a reject, an error, timewait, or a SIDR exchange).
    Idle,
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Passive: REQ received, not answered yet.
    ReqRcvd,
    /// Passive: told the peer (or will tell it on a duplicate) that the REP will take time.
    MraReqSent,
    /// Active: the peer sent an MRA for our REQ.
    MraReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, RTU not sent yet.
    RepRcvd,
    /// Active: MRA for the REP recorded (rdma_cm does this while user space moves its QP).
    MraRepSent,
    /// Passive: the peer sent an MRA for our REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, DREP not sent yet.
    DreqRcvd,
    /// Disconnected; waiting before the QP may be reused.
    Timewait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, not answered yet.
    SidrReqRcvd,
}

/// The address of a MAD: where it came from, or where it goes. On RoCEv2 a GID is an IP
/// address (IPv4-mapped for IPv4, [`crate::wire::cma::ip_to_gid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadAddr {
    /// The peer's GID: the IP source of a received MAD, the destination of a sent one.
    pub remote_gid: [u8; 16],
    /// Our GID: the IP destination of a received MAD, the source to send one from.
    pub local_gid: [u8; 16],
    /// IP traffic class (IPv4 TOS, IPv6 traffic class).
    pub traffic_class: u8,
    /// BTH partition key.
    pub pkey: u16,
    /// QP: the DETH source QP of a received MAD; the destination QP of a sent one (always the
    /// peer's GSI QP, 1, as Linux sends: `remote_cm_qpn` is 1 and responses go to QP 1).
    pub qpn: u32,
}

impl MadAddr {
    /// The reply address of a received MAD: to its source, from the GID it arrived on, QP 1
    /// (`cm_alloc_response_msg` builds it from the work completion).
    pub fn reply(&self) -> MadAddr {
        MadAddr {
            remote_gid: self.remote_gid,
            local_gid: self.local_gid,
            traffic_class: self.traffic_class,
            pkey: self.pkey,
            qpn: crate::wire::cm::GSI_QPN,
        }
    }
}

/// A MAD to send: the 256 bytes and the address. The engine sends it as a UD SEND Only to
/// `to.qpn` with Q_Key 0x80010000 from QP 1, AckReq set, as rxe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmTransmit {
    /// Where it goes.
    pub to: MadAddr,
    /// The MAD.
    pub mad: [u8; crate::wire::mad::MAD_LEN],
}

/// A path record: what a REQ carries about the primary path and what the QP's address vector
/// is built from (`struct sa_path_rec`, the fields RoCE uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPathRecord {
    /// Our GID (the path's SGID).
    pub local_gid: [u8; 16],
    /// The peer's GID (DGID).
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits); rdma_cm: [`crate::wire::cma::roce_udp_flow_label`].
    pub flow_label: u32,
    /// Traffic class (rdma_cm: the ToS, default 0).
    pub traffic_class: u8,
    /// Hop limit (rdma_cm: the route's, 64).
    pub hop_limit: u8,
    /// Service level.
    pub sl: u8,
    /// Partition key (0xffff on RoCE).
    pub pkey: u16,
    /// Path MTU, IBTA enum (1 = 256 ... 5 = 4096).
    pub mtu: u8,
    /// Static rate (0: port current).
    pub rate: u8,
    /// Packet life time, IBTA time value (rdma_cm on RoCE: 18 in Linux 6.1).
    pub packet_life_time: u8,
}

/// ECE options (enhanced connection establishment): vendor ID and options word, 0 when unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ece {
    /// Vendor ID (24 bits on the wire).
    pub vendor_id: u32,
    /// Options (the MAD's attribute modifier).
    pub attr_mod: u32,
}

/// What an active side asks for (`struct ib_cm_req_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqParams {
    /// The primary path.
    pub path: CmPathRecord,
    /// Service ID ([`crate::wire::cma::PortSpace::service_id`]).
    pub service_id: u64,
    /// Our QP.
    pub qpn: u32,
    /// RC or UC.
    pub transport: CmTransport,
    /// The PSN *we* expect to receive: the peer's first send PSN, and our QP's `rq_psn`.
    pub starting_psn: u32,
    /// Responder resources we offer (our `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// Initiator depth we want (our `max_rd_atomic`).
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retry count (3 bits) both QPs use.
    pub retry_count: u8,
    /// RNR retry count (3 bits) the *passive* QP uses.
    pub rnr_retry_count: u8,
    /// How long we give the peer's CM to answer, IBTA time (rdma_cm: 20).
    pub remote_cm_response_timeout: u8,
    /// How long our CM takes to answer, IBTA time (rdma_cm: 20).
    pub local_cm_response_timeout: u8,
    /// Retransmissions of the REQ (and later DREQ) before giving up (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Private data, at most 92 bytes (rdma_cm: the `cma_hdr` and up to 56 user bytes).
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}

/// How a passive side accepts (`struct ib_cm_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepParams {
    /// Our QP.
    pub qpn: u32,
    /// The PSN *we* expect to receive (our `rq_psn`, the peer's `sq_psn`).
    pub starting_psn: u32,
    /// Responder resources (our `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// Initiator depth (our `max_rd_atomic`).
    pub initiator_depth: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retry count (3 bits) the *active* QP uses.
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}

/// A SIDR request (`struct ib_cm_sidr_req_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqParams {
    /// The path: GIDs and P_Key.
    pub path: CmPathRecord,
    /// Service ID.
    pub service_id: u64,
    /// Retransmission interval (rdma_cm: `1 << (20 - 8)` = 4096 ms).
    pub timeout: Duration,
    /// Retransmissions (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Private data, at most 216 bytes (rdma_cm: `cma_hdr` and up to 180 user bytes).
    pub private_data: Vec<u8>,
}

/// A SIDR reply (`struct ib_cm_sidr_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepParams {
    /// Status ([`crate::wire::cm::SidrStatus`]).
    pub status: crate::wire::cm::SidrStatus,
    /// Our UD QP.
    pub qpn: u32,
    /// Its Q_Key (rdma_cm: [`crate::wire::cma::RDMA_UDP_QKEY`]).
    pub qkey: u32,
    /// Additional information, at most 72 bytes.
    pub info: Vec<u8>,
    /// Private data, at most 136 bytes.
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}

/// What a REQ told the passive side (`struct ib_cm_req_event_param`), with the resource pair
/// already swapped into *our* point of view, as `cm_format_req_event` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    /// The service ID the REQ named.
    pub service_id: u64,
    /// The peer's node GUID.
    pub remote_ca_guid: u64,
    /// The peer's QP.
    pub remote_qpn: u32,
    /// The peer's Q_Key (UD/RD only).
    pub remote_qkey: u32,
    /// RC, UC, XRC or invalid.
    pub transport: CmTransport,
    /// The REQ's Starting PSN: our `sq_psn`.
    pub starting_psn: u32,
    /// Our responder resources = the REQ's Initiator Depth.
    pub responder_resources: u8,
    /// Our initiator depth = the REQ's Responder Resources.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retry count (for our send queue too).
    pub retry_count: u8,
    /// RNR retry count for *our* send queue.
    pub rnr_retry_count: u8,
    /// The peer uses an SRQ.
    pub srq: bool,
    /// The REQ's Remote CM Response Timeout (how long we may take).
    pub local_cm_response_timeout: u8,
    /// The REQ's Local CM Response Timeout (how long the peer takes).
    pub remote_cm_response_timeout: u8,
    /// The primary path as we will use it (GIDs swapped to our point of view, packet life
    /// time = the REQ's Local ACK Timeout − 1).
    pub path: CmPathRecord,
    /// The BTH P_Key the REQ came with.
    pub bth_pkey: u16,
    /// The 92 bytes of private data.
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}

/// What a REP told the active side (`struct ib_cm_rep_event_param`), resources swapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepInfo {
    /// The peer's node GUID.
    pub remote_ca_guid: u64,
    /// The peer's QP.
    pub remote_qpn: u32,
    /// The peer's Q_Key.
    pub remote_qkey: u32,
    /// The REP's Starting PSN: our `sq_psn`.
    pub starting_psn: u32,
    /// Our responder resources = the REP's Initiator Depth.
    pub responder_resources: u8,
    /// Our initiator depth = the REP's Responder Resources.
    pub initiator_depth: u8,
    /// The peer's CA ACK delay.
    pub target_ack_delay: u8,
    /// Failover accepted.
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retry count for *our* send queue.
    pub rnr_retry_count: u8,
    /// The peer uses an SRQ.
    pub srq: bool,
    /// The 196 bytes of private data.
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}

/// Which request gave up after its last retransmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendError {
    /// The REQ got no REP (`IB_CM_REQ_ERROR`; rdma_cm: UNREACHABLE, -ETIMEDOUT).
    Req,
    /// The REP got no RTU (`IB_CM_REP_ERROR`; rdma_cm: UNREACHABLE, -ETIMEDOUT).
    Rep,
    /// The DREQ got no DREP (`IB_CM_DREQ_ERROR`; rdma_cm: DISCONNECTED, -ETIMEDOUT); the
    /// connection is in timewait.
    Dreq,
    /// The SIDR_REQ got no SIDR_REP (`IB_CM_SIDR_REQ_ERROR`; rdma_cm: UNREACHABLE).
    SidrReq,
}

/// Something the user of the endpoint must know (`enum ib_cm_event_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service we listen on: a new connection in [`CmState::ReqRcvd`]. Answer with
    /// [`CmEndpoint::accept`], [`CmEndpoint::reject`] or [`CmEndpoint::mra`].
    ReqReceived {
        /// The new connection.
        id: CmId,
        /// The request.
        req: Box<ReqInfo>,
        /// Where it came from.
        from: MadAddr,
    },
    /// Our REQ was answered: [`CmState::RepRcvd`]. Move the QP to RTR and RTS, then
    /// [`CmEndpoint::ready_to_use`] (or reject).
    RepReceived {
        /// The connection.
        id: CmId,
        /// The reply.
        rep: Box<RepInfo>,
    },
    /// The RTU arrived: [`CmState::Established`] on the passive side.
    RtuReceived {
        /// The connection.
        id: CmId,
        /// Its private data (224 bytes).
        private_data: Vec<u8>,
    },
    /// [`CmEndpoint::establish`] moved a connection to [`CmState::Established`].
    UserEstablished {
        /// The connection.
        id: CmId,
    },
    /// The peer rejected (or answered a message with REJ).
    RejReceived {
        /// The connection.
        id: CmId,
        /// The wire reason ([`crate::wire::cm::RejReason`] for known values).
        reason: u16,
        /// The meaningful ARI bytes.
        ari: Vec<u8>,
        /// The 148 bytes of private data.
        private_data: Vec<u8>,
    },
    /// The peer asked for more time.
    MraReceived {
        /// The connection.
        id: CmId,
        /// Its service timeout.
        service_timeout: u8,
    },
    /// The peer wants to disconnect: [`CmState::DreqRcvd`]. Answer with
    /// [`CmEndpoint::send_drep`] (or destroy the connection, which does).
    DreqReceived {
        /// The connection.
        id: CmId,
        /// Its private data (220 bytes).
        private_data: Vec<u8>,
    },
    /// Our DREQ was answered: [`CmState::Timewait`].
    DrepReceived {
        /// The connection.
        id: CmId,
        /// Its private data (224 bytes).
        private_data: Vec<u8>,
    },
    /// Timewait is over: [`CmState::Idle`]; the QP may be reused.
    TimewaitExit {
        /// The connection.
        id: CmId,
    },
    /// A request got no answer after every retransmission.
    SendError {
        /// The connection.
        id: CmId,
        /// Which request.
        what: SendError,
    },
    /// A SIDR_REQ for a service we listen on. Answer with [`CmEndpoint::sidr_reply`].
    SidrReqReceived {
        /// The new exchange.
        id: CmId,
        /// The service ID.
        service_id: u64,
        /// The request's P_Key.
        pkey: u16,
        /// The 216 bytes of private data.
        private_data: Vec<u8>,
        /// Where it came from.
        from: MadAddr,
    },
    /// Our SIDR_REQ was answered: [`CmState::Idle`].
    SidrRepReceived {
        /// The exchange.
        id: CmId,
        /// Status ([`crate::wire::cm::SidrStatus`] for known values).
        status: u8,
        /// The peer's UD QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// The meaningful additional information.
        info: Vec<u8>,
        /// The 136 bytes of private data.
        private_data: Vec<u8>,
    },
}

impl CmEvent {
    /// The connection the event is about.
    pub fn id(&self) -> CmId {
        match self {
            CmEvent::ReqReceived { id, .. }
            | CmEvent::RepReceived { id, .. }
            | CmEvent::RtuReceived { id, .. }
            | CmEvent::UserEstablished { id }
            | CmEvent::RejReceived { id, .. }
            | CmEvent::MraReceived { id, .. }
            | CmEvent::DreqReceived { id, .. }
            | CmEvent::DrepReceived { id, .. }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SendError { id, .. }
            | CmEvent::SidrReqReceived { id, .. }
            | CmEvent::SidrRepReceived { id, .. } => *id,
        }
    }
}

/// Why a command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum CmError {
    /// No connection with that ID.
    #[error("no CM connection {0}")]
    UnknownId(CmId),
    /// The connection's state does not allow the command (the kernel's -EINVAL).
    #[error("CM connection {id} is in state {state:?}")]
    InvalidState {
        /// The connection.
        id: CmId,
        /// Its state.
        state: CmState,
    },
    /// Private data longer than the message carries.
    #[error("private data of {len} bytes, at most {max} fit")]
    PrivateDataTooLong {
        /// What was given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A parameter out of range.
    #[error("invalid parameter: {0}")]
    InvalidParam(&'static str),
    /// Someone already listens on the service ID (the kernel's -EBUSY).
    #[error("service ID {0:#018x} already has a listener")]
    Busy(u64),
    /// No listener on that service ID.
    #[error("no listener on service ID {0:#018x}")]
    NotListening(u64),
    /// The endpoint holds its maximum number of connections.
    #[error("no free CM connection IDs")]
    NoResources,
}

/// The QP attributes a connection implies (`ib_cm_init_qp_attr` for INIT, RTR and RTS), as
/// plain transport values: the engine applies them with its QP attributes. rdma_cm may
/// override some ([`rdma::RdmaQpOverrides`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmQpAttrs {
    /// RC, UC or XRC.
    pub transport: CmTransport,
    /// INIT: remote write access (always).
    pub remote_write: bool,
    /// INIT: remote read and atomic access (when responder resources are > 0).
    pub remote_read_atomic: bool,
    /// INIT: partition key.
    pub pkey: u16,
    /// RTR: the address vector (the peer's GID, ours, flow label, traffic class, hop limit).
    pub path: CmPathRecord,
    /// RTR: path MTU, IBTA enum.
    pub path_mtu: u8,
    /// RTR: the peer's QP.
    pub dest_qpn: u32,
    /// RTR: the first PSN we expect: the Starting PSN *we* sent.
    pub rq_psn: u32,
    /// RTR (RC): responder resources, `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// RTR (RC): minimum RNR NAK timer (0 = 655 ms, as the CM sets it).
    pub min_rnr_timer: u8,
    /// RTS: our first PSN: the Starting PSN the *peer* sent.
    pub sq_psn: u32,
    /// RTS (RC): transport retry count.
    pub retry_cnt: u8,
    /// RTS (RC): RNR retry count.
    pub rnr_retry: u8,
    /// RTS (RC): initiator depth, `max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// RTS: local ACK timeout, IBTA time (19 between rxe ports with rdma_cm defaults).
    pub timeout: u8,
}

/// The endpoint's fixed parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// Our node GUID (REQ/REP Local CA GUID; the REJ timeout ARI). rxe: the netdev MAC's EUI-64.
    pub node_guid: u64,
    /// The CA's ACK delay, IBTA time (rxe: 15): the REP's Target ACK Delay.
    pub ca_ack_delay: u8,
    /// The high 32 bits of the transaction IDs we form (Linux: the MAD agent number, 2 in the
    /// captures).
    pub hi_tid: u32,
    /// The partition keys of the port (rxe: only 0xffff).
    pub pkeys: Vec<u16>,
    /// GID index 0 of the port: the ARI of a REJ 12 (invalid GID).
    pub gid0: [u8; 16],
    /// The most connections (of every state) the endpoint keeps; a REQ beyond is dropped.
    pub max_connections: usize,
    /// A slot (0..63) to carry in bits 31..26 of every communication ID and SIDR request ID
    /// this endpoint forms: what a device shared by several processes needs, so that the
    /// process that receives an answer can tell whose it is. `None`: IDs as Linux forms them.
    pub id_slot: Option<u8>,
}

impl Default for CmConfig {
    fn default() -> CmConfig {
        CmConfig {
            node_guid: 0x0200_00ff_fe00_0001,
            ca_ack_delay: 15,
            hi_tid: 2,
            pkeys: vec![0xffff],
            gid0: [0; 16],
            max_connections: 1 << 16,
            id_slot: None,
        }
    }
}
