//! [`CmEndpoint`]: the connections, the kernel's lookup tables, the handlers of every CM
//! message (`cm_*_handler` in `cm.c`) and the commands (`ib_send_cm_*`).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::counters::attr_index;
use super::{
    CmConfig, CmCounters, CmError, CmEvent, CmId, CmPathRecord, CmQpAttrs, CmState, CmTransmit, Ece, MadAddr,
    RepInfo, RepParams, ReqInfo, ReqParams, SendError, SidrRepParams, SidrReqParams,
};
use crate::transport::Time;
use crate::wire::cm::{
    CLASS_VERSION, CmAttr, CmTransport, DrepRepr, DreqRepr, GSI_QPN, MGMT_CLASS_CM, MraRepr, MsgResponse,
    RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, cm_ack_timeout,
    iba_time_to_ms, private_data_len as pdl,
};
use crate::wire::mad::{self, MAD_LEN, Mad, MadBody, MadRepr};

/// A MAD waiting for an answer: resent every `interval` until `retries_left` runs out
/// (`ib_post_send_mad` with `timeout_ms` and `retries`).
#[derive(Debug, Clone)]
struct Pending {
    mad: Box<[u8; MAD_LEN]>,
    to: MadAddr,
    attr: CmAttr,
    deadline: Time,
    interval: Duration,
    retries_left: u8,
}

/// One connection (`struct cm_id_private` with its `cm_timewait_info`).
#[derive(Debug, Clone)]
struct Conn {
    id: CmId,
    state: CmState,
    remote_id: u32,
    service_id: u64,
    tid: u64,
    remote_ca_guid: u64,
    remote_qpn: u32,
    local_qpn: u32,
    transport: CmTransport,
    sq_psn: u32,
    rq_psn: u32,
    /// Retransmission interval of REQ/REP/DREQ (`timeout_ms`).
    timeout: Duration,
    max_cm_retries: u8,
    path_mtu: u8,
    pkey: u16,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    service_timeout: u8,
    /// Where MADs of this connection go.
    to: MadAddr,
    /// The primary path (the QP's address vector).
    path: CmPathRecord,
    /// `av.timeout`: the QP's local ACK timeout and the timewait length.
    av_timeout: u8,
    /// The MAD in flight, if an answer is awaited.
    msg: Option<Pending>,
    /// The private data of the last MRA, RTU or DREP, resent with duplicates.
    private_data: Vec<u8>,
    timewait_until: Option<Time>,
    /// Keys this connection holds in the remote-ID and remote-QPN tables.
    remote_id_key: Option<(u32, u64)>,
    remote_qpn_key: Option<(u32, u64)>,
    sidr_key: Option<(u32, [u8; 16])>,
    /// The listener a passive connection came from, while it is unanswered.
    listener: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Listener {
    backlog: usize,
}

/// Where a shared address's member puts its slot in its communication IDs
/// ([`CmConfig::id_slot`]): bits 31..26.
pub const ID_SLOT_SHIFT: u32 = 26;
/// The index part of such an ID.
const ID_INDEX_MASK: u32 = (1 << ID_SLOT_SHIFT) - 1;

/// The CM of one port, sans IO. See the [module documentation](super).
#[derive(Debug)]
pub struct CmEndpoint {
    config: CmConfig,
    random_id_operand: u32,
    next_index: u32,
    conns: BTreeMap<u32, Conn>,
    listeners: BTreeMap<u64, Listener>,
    remote_ids: BTreeMap<(u32, u64), u32>,
    remote_qpns: BTreeMap<(u32, u64), u32>,
    sidr_reqs: BTreeMap<(u32, [u8; 16]), u32>,
    /// SIDR requests answered recently: (request ID, requester GID) → the SIDR_REP sent and
    /// until when a duplicate gets it again; `sidr_answered_order` keeps insertion order to
    /// expire and bound the table.
    sidr_answered: BTreeMap<(u32, [u8; 16]), (Time, CmTransmit)>,
    sidr_answered_order: VecDeque<(Time, (u32, [u8; 16]))>,
    transmits: VecDeque<CmTransmit>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
}

/// How long a SIDR_REP is kept to answer duplicates of its request: longer than the
/// requester's whole retry budget (Linux and rdma_cm: 16 SIDR_REQs 4096 ms apart).
pub const SIDR_ANSWER_MEMORY: Duration = Duration::from_secs(70);

/// The most SIDR answers kept (the oldest are forgotten first).
const SIDR_ANSWERS_MAX: usize = 4096;

fn check_len(v: &[u8], max: usize) -> Result<(), CmError> {
    if v.len() > max { Err(CmError::PrivateDataTooLong { len: v.len(), max }) } else { Ok(()) }
}

fn fixed<const N: usize>(v: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let k = v.len().min(N);
    a[..k].copy_from_slice(&v[..k]);
    a
}

fn ms(n: u8) -> Duration {
    Duration::from_millis(iba_time_to_ms(n))
}

impl CmEndpoint {
    /// An endpoint with its configuration. `seed` picks the random operand the local
    /// communication IDs are XORed with (`cm.random_id_operand`), so that IDs do not repeat
    /// across restarts.
    pub fn new(config: CmConfig, seed: u64) -> CmEndpoint {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        CmEndpoint {
            config,
            random_id_operand: (z ^ (z >> 31)) as u32,
            next_index: 0,
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            remote_ids: BTreeMap::new(),
            remote_qpns: BTreeMap::new(),
            sidr_reqs: BTreeMap::new(),
            sidr_answered: BTreeMap::new(),
            sidr_answered_order: VecDeque::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.config
    }

    /// The counters.
    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<CmTransmit> {
        self.transmits.pop_front()
    }

    /// True when no MAD waits in [`CmEndpoint::poll_transmit`].
    pub fn poll_transmit_is_empty(&self) -> bool {
        self.transmits.is_empty()
    }

    /// The next event for the user.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        let ev = self.events.pop_front();
        if let Some(ev) = &ev {
            tracing::debug!(event = ?ev, "CM event");
        }
        ev
    }

    /// The earliest deadline: a retransmission or the end of a timewait.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.conns
            .values()
            .flat_map(|c| [c.msg.as_ref().map(|m| m.deadline), c.timewait_until])
            .flatten()
            .min()
    }

    /// The state of a connection.
    pub fn state(&self, id: CmId) -> Option<CmState> {
        self.conn_index(id).and_then(|i| self.conns.get(&i)).map(|c| c.state)
    }

    /// The connections, with their states, in ID-allocation order.
    pub fn connections(&self) -> impl Iterator<Item = (CmId, CmState)> + '_ {
        self.conns.values().map(|c| (c.id, c.state))
    }

    /// The number of connections the endpoint holds.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// The peer's Local Communication ID, once known.
    pub fn remote_id(&self, id: CmId) -> Option<u32> {
        self.get(id).ok().map(|c| c.remote_id)
    }

    /// Checks the endpoint's internal consistency, for tests and fuzzing: the lookup tables
    /// and the connections agree; every state that waits for an answer has a retransmission
    /// timer and no other state has one (so nothing waits forever); timewait has its timer;
    /// no listener holds more unanswered requests than its backlog.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.conns.len() > self.config.max_connections {
            return Err(format!("{} connections > {}", self.conns.len(), self.config.max_connections));
        }
        for (k, i) in &self.remote_ids {
            if self.conns.get(i).and_then(|c| c.remote_id_key) != Some(*k) {
                return Err(format!("remote id {k:?} -> {i}: connection does not hold it"));
            }
        }
        for (k, i) in &self.remote_qpns {
            if self.conns.get(i).and_then(|c| c.remote_qpn_key) != Some(*k) {
                return Err(format!("remote qpn {k:?} -> {i}: connection does not hold it"));
            }
        }
        for (k, i) in &self.sidr_reqs {
            if self.conns.get(i).and_then(|c| c.sidr_key) != Some(*k) {
                return Err(format!("sidr {k:?} -> {i}: connection does not hold it"));
            }
        }
        for (&i, c) in &self.conns {
            if c.id != self.wire_id(i) {
                return Err(format!("connection {i} has ID {}", c.id));
            }
            if c.remote_id_key.is_some_and(|k| self.remote_ids.get(&k) != Some(&i))
                || c.remote_qpn_key.is_some_and(|k| self.remote_qpns.get(&k) != Some(&i))
                || c.sidr_key.is_some_and(|k| self.sidr_reqs.get(&k) != Some(&i))
            {
                return Err(format!("connection {} holds a key the tables do not map to it", c.id));
            }
            let waits = matches!(
                c.state,
                CmState::ReqSent
                    | CmState::MraReqRcvd
                    | CmState::RepSent
                    | CmState::MraRepRcvd
                    | CmState::DreqSent
                    | CmState::SidrReqSent
            );
            if waits != c.msg.is_some() {
                return Err(format!(
                    "connection {} in {:?} with pending MAD {}",
                    c.id,
                    c.state,
                    c.msg.is_some()
                ));
            }
            if (c.state == CmState::Timewait) != c.timewait_until.is_some() {
                return Err(format!(
                    "connection {} in {:?}, timewait timer {:?}",
                    c.id, c.state, c.timewait_until
                ));
            }
            if c.msg.as_ref().is_some_and(|m| m.interval.is_zero() && m.retries_left > 0) {
                return Err(format!("connection {} retransmits without delay", c.id));
            }
        }
        for (sid, l) in &self.listeners {
            let n = self.conns.values().filter(|c| c.listener == Some(*sid)).count();
            if n > l.backlog {
                return Err(format!("listener {sid:#x}: {n} unanswered requests > backlog {}", l.backlog));
            }
        }
        Ok(())
    }

    // ---- IDs -------------------------------------------------------------------------

    fn wire_id(&self, index: u32) -> CmId {
        match self.config.id_slot {
            // A member of a shared address: its slot in bits 31..26, the index scrambled below.
            Some(slot) => {
                CmId((u32::from(slot) << ID_SLOT_SHIFT) | ((index ^ self.random_id_operand) & ID_INDEX_MASK))
            }
            // Linux: local_id = (__force __be32)xarray_index ^ random_id_operand, sent as the
            // big-endian value of those bytes. The index's bytes are little-endian in memory.
            None => CmId(index.swap_bytes() ^ self.random_id_operand),
        }
    }

    fn conn_index(&self, id: CmId) -> Option<u32> {
        match self.config.id_slot {
            Some(slot) if id.0 >> ID_SLOT_SHIFT == u32::from(slot) => {
                Some((id.0 ^ self.random_id_operand) & ID_INDEX_MASK)
            }
            Some(_) => None,
            None => Some((id.0 ^ self.random_id_operand).swap_bytes()),
        }
    }

    /// `cm_acquire_id`: the connection with this local ID whose remote ID is `remote`.
    fn acquire(&self, local: u32, remote: u32) -> Option<u32> {
        let i = self.conn_index(CmId(local))?;
        let c = self.conns.get(&i)?;
        (c.id.0 == local && c.remote_id == remote).then_some(i)
    }

    fn get(&self, id: CmId) -> Result<&Conn, CmError> {
        self.conn_index(id)
            .and_then(|i| self.conns.get(&i))
            .filter(|c| c.id == id)
            .ok_or(CmError::UnknownId(id))
    }

    fn index_of(&self, id: CmId) -> Result<u32, CmError> {
        self.get(id)?;
        self.conn_index(id).ok_or(CmError::UnknownId(id))
    }

    /// Allocates an index cyclically, as `xa_alloc_cyclic` does: IDs are not reused soon.
    fn alloc(&mut self, state: CmState) -> Option<u32> {
        if self.conns.len() >= self.config.max_connections {
            return None;
        }
        // With a slot in the IDs, indices have 26 bits.
        let mask = if self.config.id_slot.is_some() { ID_INDEX_MASK } else { u32::MAX };
        let mut i = self.next_index & mask;
        while self.conns.contains_key(&i) {
            i = i.wrapping_add(1) & mask;
        }
        self.next_index = i.wrapping_add(1) & mask;
        let id = self.wire_id(i);
        self.conns.insert(
            i,
            Conn {
                id,
                state,
                remote_id: 0,
                service_id: 0,
                tid: 0,
                remote_ca_guid: 0,
                remote_qpn: 0,
                local_qpn: 0,
                transport: CmTransport::Rc,
                sq_psn: 0,
                rq_psn: 0,
                timeout: Duration::ZERO,
                max_cm_retries: 0,
                path_mtu: 0,
                pkey: 0xffff,
                responder_resources: 0,
                initiator_depth: 0,
                retry_count: 0,
                rnr_retry_count: 0,
                service_timeout: 0,
                to: MadAddr {
                    remote_gid: [0; 16],
                    local_gid: [0; 16],
                    traffic_class: 0,
                    pkey: 0xffff,
                    qpn: GSI_QPN,
                },
                path: CmPathRecord {
                    local_gid: [0; 16],
                    remote_gid: [0; 16],
                    flow_label: 0,
                    traffic_class: 0,
                    hop_limit: 0,
                    sl: 0,
                    pkey: 0xffff,
                    mtu: 0,
                    rate: 0,
                    packet_life_time: 0,
                },
                av_timeout: 0,
                msg: None,
                private_data: Vec::new(),
                timewait_until: None,
                remote_id_key: None,
                remote_qpn_key: None,
                sidr_key: None,
                listener: None,
            },
        );
        Some(i)
    }

    /// `cm_form_tid`: the agent's high half and the local ID's bytes as the x86 kernel
    /// reads them (reversed).
    fn form_tid(&self, id: CmId) -> u64 {
        (u64::from(self.config.hi_tid) << 32) | u64::from(id.0.swap_bytes())
    }

    // ---- tables ------------------------------------------------------------------------

    /// `cm_remove_remote`.
    fn remove_remote(&mut self, i: u32) {
        let Some(c) = self.conns.get_mut(&i) else { return };
        if let Some(k) = c.remote_id_key.take() {
            self.remote_ids.remove(&k);
        }
        if let Some(k) = c.remote_qpn_key.take() {
            self.remote_qpns.remove(&k);
        }
    }

    fn remove_sidr(&mut self, i: u32) {
        if let Some(k) = self.conns.get_mut(&i).and_then(|c| c.sidr_key.take()) {
            self.sidr_reqs.remove(&k);
        }
    }

    /// `cm_enter_timewait`: out of the remote tables, timer of `ms(av.timeout)`.
    fn enter_timewait(&mut self, now: Time, i: u32) {
        self.remove_remote(i);
        if let Some(c) = self.conns.get_mut(&i) {
            c.state = CmState::Timewait;
            c.listener = None;
            c.timewait_until = Some(now + ms(c.av_timeout));
        }
    }

    /// `cm_reset_to_idle`.
    fn reset_to_idle(&mut self, i: u32) {
        self.remove_remote(i);
        if let Some(c) = self.conns.get_mut(&i) {
            c.state = CmState::Idle;
            c.listener = None;
        }
    }

    // ---- sending -----------------------------------------------------------------------

    fn count_tx(&mut self, attr: CmAttr, retry: bool) {
        if let Some(k) = attr_index(attr) {
            self.counters.tx_msgs[k] += 1;
            if retry {
                self.counters.tx_retries[k] += 1;
            }
        }
    }

    fn push(&mut self, to: MadAddr, tid: u64, body: MadBody) -> [u8; MAD_LEN] {
        let attr = body.cm_attr().unwrap_or(CmAttr::ClassPortInfo);
        let mad = MadRepr::cm(tid, body).to_bytes();
        self.count_tx(attr, false);
        self.transmits.push_back(CmTransmit { to, mad });
        mad
    }

    fn push_with_attr_mod(&mut self, to: MadAddr, tid: u64, attr_mod: u32, body: MadBody) -> [u8; MAD_LEN] {
        let attr = body.cm_attr().unwrap_or(CmAttr::ClassPortInfo);
        let mut repr = MadRepr::cm(tid, body);
        repr.header.attribute_modifier = attr_mod;
        let mad = repr.to_bytes();
        self.count_tx(attr, false);
        self.transmits.push_back(CmTransmit { to, mad });
        mad
    }

    /// Sends a MAD that expects an answer and keeps it for retransmission.
    fn send_retrying(&mut self, now: Time, i: u32, mad: [u8; MAD_LEN], attr: CmAttr) {
        let Some(c) = self.conns.get_mut(&i) else { return };
        c.msg = Some(Pending {
            mad: Box::new(mad),
            to: c.to,
            attr,
            deadline: now + c.timeout,
            interval: c.timeout,
            retries_left: c.max_cm_retries,
        });
    }

    /// `cm_issue_rej`: a REJ built from a received message alone (no connection).
    fn issue_rej(
        &mut self,
        from: &MadAddr,
        tid: u64,
        rcv_local: u32,
        rcv_remote: u32,
        reason: RejReason,
        msg: MsgResponse,
    ) {
        let rej = RejRepr {
            local_comm_id: rcv_remote,
            remote_comm_id: rcv_local,
            message_rejected: msg as u8,
            reason: reason as u16,
            ..RejRepr::default()
        };
        self.push(from.reply(), tid, MadBody::Rej(rej));
    }

    /// `cm_format_rej` for a connection in `state`.
    fn rej_for(&self, c: &Conn, state: CmState, reason: u16, ari: &[u8], pd: &[u8]) -> RejRepr {
        let (local, msg) = match state {
            CmState::ReqRcvd => (0, MsgResponse::Req),
            CmState::MraReqSent => (c.id.0, MsgResponse::Req),
            CmState::RepRcvd | CmState::MraRepSent => (c.id.0, MsgResponse::Rep),
            _ => (c.id.0, MsgResponse::Other),
        };
        let mut r = RejRepr {
            local_comm_id: local,
            remote_comm_id: c.remote_id,
            message_rejected: msg as u8,
            reason,
            ..RejRepr::default()
        };
        if !ari.is_empty() {
            r.rejected_info_length = ari.len().min(pdl::REJ_ARI) as u8;
            r.ari = fixed(ari);
        }
        r.private_data = fixed(pd);
        r
    }

    fn mra_for(&self, c: &Conn, what: MsgResponse) -> MraRepr {
        MraRepr {
            local_comm_id: c.id.0,
            remote_comm_id: c.remote_id,
            message_mraed: what as u8,
            service_timeout: c.service_timeout,
            private_data: fixed(&c.private_data),
            ..MraRepr::default()
        }
    }

    // ---- receiving ---------------------------------------------------------------------

    /// Takes a UD payload received on QP1. Does what Linux's MAD layer does before the CM
    /// sees it (`ib_mad_recv_done`, `validate_mad`, `find_mad_agent`): drops what it drops,
    /// answers a `Get`/`Set` nobody handles with status 0x000c, and passes class 0x07 version
    /// 2 Sends to the CM. Never panics, whatever the bytes.
    pub fn handle_mad(&mut self, now: Time, from: &MadAddr, payload: &[u8]) {
        // rxe delivers what the UD SEND carried; the MAD layer reads a whole 256-byte MAD. A
        // longer payload does not fit the GSI receive buffer; a shorter one would be read with
        // stale bytes past its end: both are dropped here.
        let Ok(bytes) = <&[u8; MAD_LEN]>::try_from(payload) else {
            self.counters.rx_bad_length += 1;
            return;
        };
        let mad = Mad::new_unchecked(&bytes[..]);
        let h = mad.header();
        if h.base_version() != mad::BASE_VERSION {
            self.counters.rx_bad_base_version += 1;
            return;
        }
        let class = h.mgmt_class();
        if class == 0x01 || class == 0x81 {
            self.counters.rx_smp_on_gsi += 1;
            return;
        }
        if class == MGMT_CLASS_CM
            && h.attribute_id() != mad::ATTR_CLASS_PORT_INFO
            && h.method() != mad::method::SEND
        {
            self.counters.rx_bad_method += 1;
            return;
        }
        if !(class == MGMT_CLASS_CM && h.class_version() == CLASS_VERSION && h.method() == mad::method::SEND)
        {
            match mad::unsupported_method_response(bytes) {
                Some(resp) => {
                    self.counters.rx_unsupported_answered += 1;
                    self.transmits.push_back(CmTransmit { to: from.reply(), mad: resp });
                }
                None => self.counters.rx_no_agent += 1,
            }
            return;
        }
        let repr = MadRepr::parse(&mad);
        let Some(k) = repr.body.cm_attr().and_then(attr_index) else {
            self.counters.rx_unknown_attr += 1;
            return;
        };
        self.counters.rx_msgs[k] += 1;
        let tid = repr.header.transaction_id;
        let attr_mod = repr.header.attribute_modifier;
        match repr.body {
            MadBody::Req(r) => self.on_req(now, from, tid, attr_mod, &r),
            MadBody::Mra(r) => self.on_mra(now, &r),
            MadBody::Rej(r) => self.on_rej(now, &r),
            MadBody::Rep(r) => self.on_rep(now, from, tid, attr_mod, &r),
            MadBody::Rtu(r) => self.on_rtu(&r),
            MadBody::Dreq(r) => self.on_dreq(from, tid, &r),
            MadBody::Drep(r) => self.on_drep(now, &r),
            MadBody::SidrReq(r) => self.on_sidr_req(now, from, tid, &r),
            MadBody::SidrRep(r) => self.on_sidr_rep(&r),
            MadBody::Lap(_) | MadBody::Apr(_) => self.counters.rx_lap_apr_ignored += 1,
            MadBody::ClassPortInfo(_) | MadBody::Other(_) => self.counters.rx_unknown_attr += 1,
        }
    }

    fn dup(&mut self, attr: CmAttr) {
        if let Some(k) = attr_index(attr) {
            self.counters.rx_duplicates[k] += 1;
        }
    }

    /// `cm_req_handler` with `cm_match_req`.
    fn on_req(&mut self, now: Time, from: &MadAddr, tid: u64, attr_mod: u32, r: &ReqRepr) {
        let guid = r.local_ca_guid;
        // A duplicate REQ: the same remote comm ID from the same CA.
        if let Some(&i) = self.remote_ids.get(&(r.local_comm_id, guid)) {
            self.dup(CmAttr::Req);
            self.dup_req(from, i);
            return;
        }
        // A stale connection: the peer's QP is still connected to us under another ID.
        if let Some(&old) = self.remote_qpns.get(&(r.local_qpn, guid)) {
            self.counters.stale_conn_rejected += 1;
            self.issue_rej(from, tid, r.local_comm_id, 0, RejReason::StaleConn, MsgResponse::Req);
            self.dreq_if_established(now, old);
            return;
        }
        let Some(listener) = self.listeners.get(&r.service_id).copied() else {
            self.counters.req_no_listener += 1;
            // cm_issue_rej copies the REQ's (zero) remote comm ID as the REJ's local one.
            self.issue_rej(from, tid, r.local_comm_id, 0, RejReason::InvalidServiceId, MsgResponse::Req);
            return;
        };
        let pending = self.conns.values().filter(|c| c.listener == Some(r.service_id)).count();
        if pending >= listener.backlog {
            // ucma's backlog is exhausted: the event handler fails with -ENOMEM, and
            // cm_destroy_id then sends no REJ "to allow future retries".
            self.counters.req_backlog_full += 1;
            return;
        }
        let Some(i) = self.alloc(CmState::ReqRcvd) else {
            self.counters.req_no_resources += 1;
            return;
        };
        let plt = r.primary_local_ack_timeout.saturating_sub(1);
        let path = CmPathRecord {
            local_gid: from.local_gid,
            remote_gid: r.primary_local_gid,
            flow_label: r.primary_flow_label,
            traffic_class: r.primary_traffic_class,
            hop_limit: r.primary_hop_limit,
            sl: r.primary_sl,
            pkey: r.partition_key,
            mtu: r.path_mtu,
            rate: r.primary_packet_rate,
            packet_life_time: plt,
        };
        let transport = CmTransport::from_req(r.transport_service_type, r.extended_transport_type);
        {
            let c = self.conns.get_mut(&i).expect("just allocated");
            c.remote_id = r.local_comm_id;
            c.service_id = r.service_id;
            c.tid = tid;
            c.timeout = ms(r.local_cm_response_timeout);
            c.max_cm_retries = r.max_cm_retries;
            c.remote_qpn = r.local_qpn;
            c.initiator_depth = r.responder_resources;
            c.responder_resources = r.initiator_depth;
            c.path_mtu = r.path_mtu;
            c.pkey = r.partition_key;
            c.sq_psn = r.starting_psn;
            c.retry_count = r.retry_count;
            c.rnr_retry_count = r.rnr_retry_count;
            c.transport = transport;
            c.remote_ca_guid = guid;
            // The first AV is built from the work completion; replies then go to the GID the
            // REQ names as its sender (cm_format_paths_from_req + cm_init_av_by_path).
            c.to = from.reply();
            c.listener = Some(r.service_id);
        }
        self.remote_ids.insert((r.local_comm_id, guid), i);
        self.remote_qpns.insert((r.local_qpn, guid), i);
        if let Some(c) = self.conns.get_mut(&i) {
            c.remote_id_key = Some((r.local_comm_id, guid));
            c.remote_qpn_key = Some((r.local_qpn, guid));
        }
        if !self.config.pkeys.contains(&r.partition_key) {
            // cm_init_av_by_path fails to find the P_Key: REJ "invalid GID" with GID 0 as ARI.
            self.counters.req_bad_pkey += 1;
            let gid0 = self.config.gid0;
            let _ = self.reject_inner(now, i, RejReason::InvalidGid as u16, &gid0, &[]);
            self.conns.remove(&i);
            return;
        }
        if let Some(c) = self.conns.get_mut(&i) {
            c.to = MadAddr {
                remote_gid: path.remote_gid,
                local_gid: from.local_gid,
                traffic_class: path.traffic_class,
                pkey: path.pkey,
                qpn: GSI_QPN,
            };
            c.av_timeout = plt + 1;
            c.path = path;
        }
        let req = ReqInfo {
            service_id: r.service_id,
            remote_ca_guid: guid,
            remote_qpn: r.local_qpn,
            remote_qkey: r.local_qkey,
            transport,
            starting_psn: r.starting_psn,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.end_to_end_flow_control != 0,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq != 0,
            local_cm_response_timeout: r.remote_cm_response_timeout,
            remote_cm_response_timeout: r.local_cm_response_timeout,
            path,
            bth_pkey: from.pkey,
            private_data: r.private_data.to_vec(),
            ece: Ece { vendor_id: r.vendor_id, attr_mod },
        };
        let id = self.wire_id(i);
        self.events.push_back(CmEvent::ReqReceived { id, req: Box::new(req), from: *from });
    }

    /// `cm_dup_req_handler`.
    fn dup_req(&mut self, from: &MadAddr, i: u32) {
        let Some(c) = self.conns.get(&i) else { return };
        let body = match c.state {
            CmState::MraReqSent => MadBody::Mra(self.mra_for(c, MsgResponse::Req)),
            CmState::Timewait => {
                MadBody::Rej(self.rej_for(c, CmState::Timewait, RejReason::StaleConn as u16, &[], &[]))
            }
            _ => return,
        };
        let tid = c.tid;
        self.push(from.reply(), tid, body);
    }

    /// Sends a DREQ on an old connection a stale REQ or REP names (`ib_send_cm_dreq`, which
    /// only acts when the connection is established).
    fn dreq_if_established(&mut self, now: Time, i: u32) {
        if self.conns.get(&i).is_some_and(|c| c.state == CmState::Established) {
            let _ = self.send_dreq_inner(now, i, &[]);
        }
    }

    /// `cm_rep_handler`.
    fn on_rep(&mut self, now: Time, from: &MadAddr, tid: u64, attr_mod: u32, r: &RepRepr) {
        let Some(i) = self.acquire(r.remote_comm_id, 0) else {
            self.dup_rep(from, r);
            return;
        };
        let state = self.conns.get(&i).map(|c| c.state);
        if !matches!(state, Some(CmState::ReqSent | CmState::MraReqRcvd)) {
            self.counters.rx_wrong_state += 1;
            return;
        }
        let guid = r.local_ca_guid;
        let qpn = if self.conns.get(&i).is_some_and(|c| c.transport == CmTransport::Xrc) {
            r.local_eecn
        } else {
            r.local_qpn
        };
        if self.remote_ids.contains_key(&(r.local_comm_id, guid)) {
            self.dup(CmAttr::Rep);
            return;
        }
        if let Some(&old) = self.remote_qpns.get(&(qpn, guid)) {
            self.counters.stale_conn_rejected += 1;
            self.remove_remote(i);
            // cm_issue_rej copies the REP's comm IDs crosswise; TID of the received REP.
            let rej = RejRepr {
                local_comm_id: r.remote_comm_id,
                remote_comm_id: r.local_comm_id,
                message_rejected: MsgResponse::Rep as u8,
                reason: RejReason::StaleConn as u16,
                ..RejRepr::default()
            };
            self.push(from.reply(), tid, MadBody::Rej(rej));
            self.dreq_if_established(now, old);
            return;
        }
        self.remote_ids.insert((r.local_comm_id, guid), i);
        self.remote_qpns.insert((qpn, guid), i);
        let ca_ack_delay_peer = r.target_ack_delay;
        let Some(c) = self.conns.get_mut(&i) else { return };
        c.remote_id_key = Some((r.local_comm_id, guid));
        c.remote_qpn_key = Some((qpn, guid));
        c.state = CmState::RepRcvd;
        c.remote_id = r.local_comm_id;
        c.remote_ca_guid = guid;
        c.remote_qpn = qpn;
        c.initiator_depth = r.responder_resources;
        c.responder_resources = r.initiator_depth;
        c.sq_psn = r.starting_psn;
        c.rnr_retry_count = r.rnr_retry_count;
        c.av_timeout = cm_ack_timeout(ca_ack_delay_peer, c.av_timeout.saturating_sub(1));
        c.msg = None;
        let rep = RepInfo {
            remote_ca_guid: guid,
            remote_qpn: qpn,
            remote_qkey: r.local_qkey,
            starting_psn: r.starting_psn,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            target_ack_delay: r.target_ack_delay,
            failover_accepted: r.failover_accepted,
            flow_control: r.end_to_end_flow_control != 0,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq != 0,
            private_data: r.private_data.to_vec(),
            ece: Ece { vendor_id: r.vendor_id(), attr_mod },
        };
        let id = c.id;
        self.events.push_back(CmEvent::RepReceived { id, rep: Box::new(rep) });
    }

    /// `cm_dup_rep_handler`: an established active side re-sends its RTU.
    fn dup_rep(&mut self, from: &MadAddr, r: &RepRepr) {
        let Some(i) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_no_connection += 1;
            return;
        };
        self.dup(CmAttr::Rep);
        let Some(c) = self.conns.get(&i) else { return };
        let body = match c.state {
            CmState::Established => MadBody::Rtu(RtuRepr {
                local_comm_id: c.id.0,
                remote_comm_id: c.remote_id,
                private_data: fixed(&c.private_data),
            }),
            CmState::MraRepSent => MadBody::Mra(self.mra_for(c, MsgResponse::Rep)),
            _ => return,
        };
        let tid = c.tid;
        self.push(from.reply(), tid, body);
    }

    /// `cm_rtu_handler`.
    fn on_rtu(&mut self, r: &RtuRepr) {
        let Some(i) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_no_connection += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&i) else { return };
        if !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            self.dup(CmAttr::Rtu);
            return;
        }
        c.state = CmState::Established;
        c.msg = None;
        let id = c.id;
        self.counters.established += 1;
        self.events.push_back(CmEvent::RtuReceived { id, private_data: r.private_data.to_vec() });
    }

    /// `cm_dreq_handler`.
    fn on_dreq(&mut self, from: &MadAddr, tid: u64, r: &DreqRepr) {
        let Some(i) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            // cm_issue_drep: answer anyway, so that a peer whose DREP was lost, or whose
            // connection we already destroyed, stops retrying.
            self.dup(CmAttr::Dreq);
            self.counters.rx_no_connection += 1;
            let drep = DrepRepr {
                local_comm_id: r.remote_comm_id,
                remote_comm_id: r.local_comm_id,
                ..DrepRepr::default()
            };
            self.push(from.reply(), tid, MadBody::Drep(drep));
            return;
        };
        let Some(c) = self.conns.get_mut(&i) else { return };
        if c.local_qpn != r.remote_qpn {
            self.counters.rx_dreq_wrong_qpn += 1;
            return;
        }
        match c.state {
            CmState::RepSent | CmState::DreqSent | CmState::MraRepRcvd => c.msg = None,
            CmState::Established => {}
            CmState::Timewait => {
                let drep = DrepRepr {
                    local_comm_id: c.id.0,
                    remote_comm_id: c.remote_id,
                    private_data: fixed(&c.private_data),
                };
                let tid = c.tid;
                self.dup(CmAttr::Dreq);
                self.push(from.reply(), tid, MadBody::Drep(drep));
                return;
            }
            CmState::DreqRcvd => {
                self.dup(CmAttr::Dreq);
                return;
            }
            _ => {
                self.counters.rx_wrong_state += 1;
                return;
            }
        }
        c.state = CmState::DreqRcvd;
        c.tid = tid;
        let id = c.id;
        self.events.push_back(CmEvent::DreqReceived { id, private_data: r.private_data.to_vec() });
    }

    /// `cm_drep_handler`.
    fn on_drep(&mut self, now: Time, r: &DrepRepr) {
        let Some(i) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_no_connection += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&i) else { return };
        if !matches!(c.state, CmState::DreqSent | CmState::DreqRcvd) {
            self.counters.rx_wrong_state += 1;
            return;
        }
        c.msg = None;
        let id = c.id;
        self.enter_timewait(now, i);
        self.events.push_back(CmEvent::DrepReceived { id, private_data: r.private_data.to_vec() });
    }

    /// `cm_rej_handler` with `cm_acquire_rejected_id`.
    fn on_rej(&mut self, now: Time, r: &RejRepr) {
        let i = if r.reason == RejReason::Timeout as u16 {
            let guid = u64::from_be_bytes(fixed(&r.ari));
            self.remote_ids
                .get(&(r.local_comm_id, guid))
                .and_then(|&i| self.conns.get(&i))
                .and_then(|c| self.acquire(c.id.0, c.remote_id))
        } else if r.message_rejected == MsgResponse::Req as u8 {
            self.acquire(r.remote_comm_id, 0)
        } else {
            self.acquire(r.remote_comm_id, r.local_comm_id)
        };
        let Some(i) = i else {
            self.counters.rx_no_connection += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&i) else { return };
        let stale = r.reason == RejReason::StaleConn as u16;
        match c.state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => {
                c.msg = None;
                if stale {
                    self.enter_timewait(now, i);
                } else {
                    self.reset_to_idle(i);
                }
            }
            CmState::DreqSent | CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                c.msg = None;
                self.enter_timewait(now, i);
            }
            _ => {
                self.counters.rx_wrong_state += 1;
                return;
            }
        }
        let n = usize::from(r.rejected_info_length).min(pdl::REJ_ARI);
        let id = self.wire_id(i);
        self.events.push_back(CmEvent::RejReceived {
            id,
            reason: r.reason,
            ari: r.ari[..n].to_vec(),
            private_data: r.private_data.to_vec(),
        });
    }

    /// `cm_mra_handler` with `cm_acquire_mraed_id`.
    fn on_mra(&mut self, now: Time, r: &MraRepr) {
        let i = match MsgResponse::from_u8(r.message_mraed) {
            Some(MsgResponse::Req) => self.acquire(r.remote_comm_id, 0),
            Some(MsgResponse::Rep | MsgResponse::Other) => self.acquire(r.remote_comm_id, r.local_comm_id),
            None => None,
        };
        let Some(i) = i else {
            self.counters.rx_no_connection += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&i) else { return };
        let timeout = ms(r.service_timeout) + ms(c.av_timeout);
        let next = match (c.state, MsgResponse::from_u8(r.message_mraed)) {
            (CmState::ReqSent, Some(MsgResponse::Req)) => CmState::MraReqRcvd,
            (CmState::RepSent, Some(MsgResponse::Rep)) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.dup(CmAttr::Mra);
                return;
            }
            _ => {
                self.counters.rx_wrong_state += 1;
                return;
            }
        };
        // ib_modify_mad: the pending MAD now waits `timeout`, and so does every later retry.
        let Some(m) = c.msg.as_mut() else {
            self.counters.rx_wrong_state += 1;
            return;
        };
        m.deadline = now + timeout;
        m.interval = timeout;
        c.state = next;
        let id = c.id;
        self.events.push_back(CmEvent::MraReceived { id, service_timeout: r.service_timeout });
    }

    /// `cm_sidr_req_handler`.
    ///
    /// Unlike Linux, which forgets a SIDR request once it is answered (a retransmission whose
    /// SIDR_REP was lost then reaches the application as a second request), a duplicate of a
    /// request answered within [`SIDR_ANSWER_MEMORY`] gets the same SIDR_REP again.
    fn on_sidr_req(&mut self, now: Time, from: &MadAddr, tid: u64, r: &SidrReqRepr) {
        let key = (r.request_id, from.remote_gid);
        if self.sidr_reqs.contains_key(&key) {
            self.dup(CmAttr::SidrReq);
            return;
        }
        self.expire_sidr_answers(now);
        if let Some((_, t)) = self.sidr_answered.get(&key) {
            let t = t.clone();
            self.dup(CmAttr::SidrReq);
            self.counters.sidr_rep_resent += 1;
            self.count_tx(CmAttr::SidrRep, true);
            self.transmits.push_back(t);
            return;
        }
        let listener = self.listeners.get(&r.service_id).copied();
        let pending = self.conns.values().filter(|c| c.listener == Some(r.service_id)).count();
        let Some(i) = self.alloc(CmState::SidrReqRcvd) else {
            self.counters.req_no_resources += 1;
            return;
        };
        if let Some(c) = self.conns.get_mut(&i) {
            c.remote_id = r.request_id;
            c.service_id = r.service_id;
            c.tid = tid;
            c.to = from.reply();
            c.pkey = r.partition_key;
        }
        let status = match listener {
            None => {
                self.counters.sidr_no_listener += 1;
                Some(SidrStatus::Unsupported)
            }
            // The event handler fails when ucma's backlog is full, and cm_destroy_id then
            // answers SIDR_REQ_RCVD with a reject.
            Some(l) if pending >= l.backlog => {
                self.counters.req_backlog_full += 1;
                Some(SidrStatus::Reject)
            }
            Some(_) => None,
        };
        if let Some(status) = status {
            let params = SidrRepParams {
                status,
                qpn: 0,
                qkey: 0,
                info: Vec::new(),
                private_data: Vec::new(),
                ece: Ece::default(),
            };
            let _ = self.sidr_reply_inner(now, i, &params);
            self.conns.remove(&i);
            return;
        }
        self.sidr_reqs.insert(key, i);
        if let Some(c) = self.conns.get_mut(&i) {
            c.sidr_key = Some(key);
            c.listener = Some(r.service_id);
        }
        let id = self.wire_id(i);
        self.events.push_back(CmEvent::SidrReqReceived {
            id,
            service_id: r.service_id,
            pkey: r.partition_key,
            private_data: r.private_data.to_vec(),
            from: *from,
        });
    }

    /// `cm_sidr_rep_handler`.
    fn on_sidr_rep(&mut self, r: &SidrRepRepr) {
        let Some(i) = self.acquire(r.request_id, 0) else {
            self.counters.rx_no_connection += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&i) else { return };
        if c.state != CmState::SidrReqSent {
            self.counters.rx_wrong_state += 1;
            return;
        }
        c.state = CmState::Idle;
        c.msg = None;
        let n = usize::from(r.additional_info_length).min(pdl::SIDR_REP_INFO);
        let id = c.id;
        self.events.push_back(CmEvent::SidrRepReceived {
            id,
            status: r.status,
            qpn: r.qpn,
            qkey: r.qkey,
            info: r.additional_info[..n].to_vec(),
            private_data: r.private_data.to_vec(),
        });
    }

    // ---- time --------------------------------------------------------------------------

    /// Resends what is due and gives up on what ran out of retries (`cm_process_send_error`
    /// after the MAD layer's last `retry_send`); ends timewaits (`cm_timewait_handler`).
    pub fn handle_timeout(&mut self, now: Time) {
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.msg.as_ref().is_some_and(|m| m.deadline <= now)
                    || c.timewait_until.is_some_and(|t| t <= now)
            })
            .map(|(&i, _)| i)
            .collect();
        for i in due {
            let Some(c) = self.conns.get_mut(&i) else { continue };
            if c.timewait_until.is_some_and(|t| t <= now) {
                c.timewait_until = None;
                if c.state == CmState::Timewait {
                    c.state = CmState::Idle;
                    let id = c.id;
                    self.events.push_back(CmEvent::TimewaitExit { id });
                }
            }
            let Some(c) = self.conns.get_mut(&i) else { continue };
            let Some(m) = c.msg.as_mut().filter(|m| m.deadline <= now) else { continue };
            if m.retries_left > 0 {
                m.retries_left -= 1;
                m.deadline = now + m.interval;
                let (to, mad, attr) = (m.to, *m.mad, m.attr);
                self.count_tx(attr, true);
                self.transmits.push_back(CmTransmit { to, mad });
                continue;
            }
            c.msg = None;
            self.counters.send_timeouts += 1;
            let id = c.id;
            let what = match c.state {
                CmState::ReqSent | CmState::MraReqRcvd => {
                    self.reset_to_idle(i);
                    SendError::Req
                }
                CmState::RepSent | CmState::MraRepRcvd => {
                    self.reset_to_idle(i);
                    SendError::Rep
                }
                CmState::DreqSent => {
                    self.enter_timewait(now, i);
                    SendError::Dreq
                }
                CmState::SidrReqSent => {
                    if let Some(c) = self.conns.get_mut(&i) {
                        c.state = CmState::Idle;
                    }
                    SendError::SidrReq
                }
                _ => continue,
            };
            self.events.push_back(CmEvent::SendError { id, what });
        }
    }

    // ---- commands ----------------------------------------------------------------------

    /// Listens on a service ID (`ib_cm_insert_listen`; Linux matches the 64-bit ID exactly).
    /// `backlog` bounds the requests that wait for an answer (ucma's backlog, at most 1024 by
    /// default there); requests beyond it are dropped so that the peer retries.
    pub fn listen(&mut self, service_id: u64, backlog: usize) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::Busy(service_id));
        }
        self.listeners.insert(service_id, Listener { backlog: backlog.max(1) });
        Ok(())
    }

    /// Stops listening. Requests already received stay, but no longer count against a
    /// backlog: a new listener on the service starts with an empty one, as a new ucma
    /// listening context does.
    pub fn cancel_listen(&mut self, service_id: u64) -> Result<(), CmError> {
        self.listeners.remove(&service_id).ok_or(CmError::NotListening(service_id))?;
        for c in self.conns.values_mut().filter(|c| c.listener == Some(service_id)) {
            c.listener = None;
        }
        Ok(())
    }

    /// Sends a REQ (`ib_send_cm_req`): a new connection in [`CmState::ReqSent`], resent every
    /// `2·ms(packet_life_time) + ms(remote_cm_response_timeout)` (6144 ms with rdma_cm's
    /// values) up to `max_cm_retries` times.
    pub fn connect(&mut self, now: Time, p: &ReqParams) -> Result<CmId, CmError> {
        check_len(&p.private_data, pdl::REQ)?;
        if !matches!(p.transport, CmTransport::Rc | CmTransport::Uc) {
            return Err(CmError::InvalidParam("a REQ is for an RC or UC QP"));
        }
        if p.qpn > 0xff_ffff || p.qpn < 2 {
            return Err(CmError::InvalidParam("QPN"));
        }
        let i = self.alloc(CmState::ReqSent).ok_or(CmError::NoResources)?;
        let id = self.wire_id(i);
        let tid = self.form_tid(id);
        let path = p.path;
        let req = ReqRepr {
            local_comm_id: id.0,
            vendor_id: p.ece.vendor_id & 0xff_ffff,
            service_id: p.service_id,
            local_ca_guid: self.config.node_guid,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: p.transport.to_req().0,
            extended_transport_type: p.transport.to_req().1,
            end_to_end_flow_control: p.flow_control as u8,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count.min(7),
            partition_key: path.pkey,
            path_mtu: path.mtu,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: p.max_cm_retries.min(15),
            srq: p.srq as u8,
            // Routed (hop limit > 1): permissive LIDs, subnet local 0 (cm_format_req).
            primary_local_lid: if path.hop_limit <= 1 { 0 } else { 0xffff },
            primary_remote_lid: if path.hop_limit <= 1 { 0 } else { 0xffff },
            primary_local_gid: path.local_gid,
            primary_remote_gid: path.remote_gid,
            primary_flow_label: path.flow_label & 0xf_ffff,
            primary_packet_rate: path.rate,
            primary_traffic_class: path.traffic_class,
            primary_hop_limit: path.hop_limit,
            primary_sl: path.sl,
            primary_subnet_local: (path.hop_limit <= 1) as u8,
            primary_local_ack_timeout: cm_ack_timeout(self.config.ca_ack_delay, path.packet_life_time),
            private_data: fixed(&p.private_data),
            ..ReqRepr::default()
        };
        let to = MadAddr {
            remote_gid: path.remote_gid,
            local_gid: path.local_gid,
            traffic_class: path.traffic_class,
            pkey: path.pkey,
            qpn: GSI_QPN,
        };
        if let Some(c) = self.conns.get_mut(&i) {
            c.service_id = p.service_id;
            c.tid = tid;
            c.timeout = ms(path.packet_life_time) * 2 + ms(p.remote_cm_response_timeout);
            c.max_cm_retries = req.max_cm_retries;
            c.initiator_depth = p.initiator_depth;
            c.responder_resources = p.responder_resources;
            c.retry_count = req.retry_count;
            c.path_mtu = path.mtu;
            c.pkey = path.pkey;
            c.transport = p.transport;
            c.local_qpn = p.qpn;
            c.rq_psn = req.starting_psn;
            c.to = to;
            c.path = path;
            c.av_timeout = path.packet_life_time.saturating_add(1);
        }
        let mad = self.push_with_attr_mod(to, tid, p.ece.attr_mod, MadBody::Req(req));
        self.send_retrying(now, i, mad, CmAttr::Req);
        Ok(id)
    }

    /// Sends a REP (`ib_send_cm_rep`), from [`CmState::ReqRcvd`] or [`CmState::MraReqSent`]:
    /// [`CmState::RepSent`], resent every `ms(REQ remote CM response timeout as the REQ gave
    /// ours)` up to the REQ's Max CM Retries.
    pub fn accept(&mut self, now: Time, id: CmId, p: &RepParams) -> Result<(), CmError> {
        check_len(&p.private_data, pdl::REP)?;
        let i = self.index_of(id)?;
        let c = &self.conns[&i];
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::InvalidState { id, state: c.state });
        }
        let xrc = c.transport == CmTransport::Xrc;
        let rep = RepRepr {
            local_comm_id: c.id.0,
            remote_comm_id: c.remote_id,
            local_qpn: if xrc { 0 } else { p.qpn & 0xff_ffff },
            local_eecn: if xrc { p.qpn & 0xff_ffff } else { 0 },
            vendor_id_h: (p.ece.vendor_id >> 16) as u8,
            vendor_id_m: (p.ece.vendor_id >> 8) as u8,
            vendor_id_l: p.ece.vendor_id as u8,
            starting_psn: p.starting_psn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: if xrc { 0 } else { p.initiator_depth },
            target_ack_delay: self.config.ca_ack_delay,
            failover_accepted: p.failover_accepted & 3,
            end_to_end_flow_control: if xrc { 0 } else { p.flow_control as u8 },
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: if xrc { 1 } else { p.srq as u8 },
            local_ca_guid: self.config.node_guid,
            private_data: fixed(&p.private_data),
            ..RepRepr::default()
        };
        let (to, tid) = (c.to, c.tid);
        let mad = self.push_with_attr_mod(to, tid, p.ece.attr_mod, MadBody::Rep(rep));
        let c = self.conns.get_mut(&i).expect("checked");
        c.state = CmState::RepSent;
        c.listener = None;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.rq_psn = rep.starting_psn;
        c.local_qpn = p.qpn & 0xff_ffff;
        self.send_retrying(now, i, mad, CmAttr::Rep);
        Ok(())
    }

    /// Sends the RTU (`ib_send_cm_rtu`), from [`CmState::RepRcvd`] or
    /// [`CmState::MraRepSent`]: [`CmState::Established`]. The private data is kept and sent
    /// again if a duplicate REP arrives.
    pub fn ready_to_use(&mut self, _now: Time, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        check_len(private_data, pdl::RTU)?;
        let i = self.index_of(id)?;
        let c = self.conns.get_mut(&i).expect("checked");
        if !matches!(c.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::InvalidState { id, state: c.state });
        }
        c.state = CmState::Established;
        c.private_data = private_data.to_vec();
        let rtu =
            RtuRepr { local_comm_id: c.id.0, remote_comm_id: c.remote_id, private_data: fixed(private_data) };
        let (to, tid) = (c.to, c.tid);
        self.counters.established += 1;
        self.push(to, tid, MadBody::Rtu(rtu));
        Ok(())
    }

    /// Sends a REJ (`ib_send_cm_rej`) from a connection being set up. rdma_cm uses reason 28
    /// (consumer defined) for `rdma_reject`. From [`CmState::ReqRcvd`] the REJ carries local
    /// comm ID 0; from [`CmState::RepSent`] the connection enters timewait, otherwise idle.
    pub fn reject(
        &mut self,
        now: Time,
        id: CmId,
        reason: RejReason,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let i = self.index_of(id)?;
        self.reject_inner(now, i, reason as u16, ari, private_data)
    }

    /// `cm_send_rej_locked`.
    fn reject_inner(&mut self, now: Time, i: u32, reason: u16, ari: &[u8], pd: &[u8]) -> Result<(), CmError> {
        check_len(pd, pdl::REJ)?;
        check_len(ari, pdl::REJ_ARI)?;
        let c = self.conns.get(&i).ok_or(CmError::UnknownId(CmId(0)))?;
        let state = c.state;
        let rej = self.rej_for(c, state, reason, ari, pd);
        let (to, tid, id) = (c.to, c.tid, c.id);
        match state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent => self.reset_to_idle(i),
            CmState::RepSent | CmState::MraRepRcvd => self.enter_timewait(now, i),
            _ => return Err(CmError::InvalidState { id, state }),
        }
        if let Some(c) = self.conns.get_mut(&i) {
            c.msg = None;
        }
        self.push(to, tid, MadBody::Rej(rej));
        Ok(())
    }

    /// Records that the answer will take time (`ib_send_cm_mra`): [`CmState::ReqRcvd`] goes
    /// to [`CmState::MraReqSent`], [`CmState::RepRcvd`] to [`CmState::MraRepSent`]. With
    /// `delay` (rdma_cm's `IB_CM_MRA_FLAG_DELAY`, which it always uses) nothing is sent now;
    /// the MRA goes out only when a duplicate REQ or REP arrives. The Service Timeout is
    /// `service_timeout` (rdma_cm: 24, about 67 s with the path's ACK timeout).
    pub fn mra(
        &mut self,
        _now: Time,
        id: CmId,
        service_timeout: u8,
        delay: bool,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_len(private_data, pdl::MRA)?;
        let i = self.index_of(id)?;
        let c = self.conns.get_mut(&i).expect("checked");
        let (next, what) = match c.state {
            CmState::ReqRcvd => (CmState::MraReqSent, MsgResponse::Req),
            CmState::RepRcvd => (CmState::MraRepSent, MsgResponse::Rep),
            state => return Err(CmError::InvalidState { id, state }),
        };
        c.state = next;
        c.service_timeout = service_timeout & 0x1f;
        c.private_data = private_data.to_vec();
        if !delay {
            let c = &self.conns[&i];
            let mra = self.mra_for(c, what);
            let (to, tid) = (c.to, c.tid);
            self.push(to, tid, MadBody::Mra(mra));
        }
        Ok(())
    }

    /// Sends a DREQ (`ib_send_cm_dreq`), from [`CmState::Established`] only:
    /// [`CmState::DreqSent`], resent every connection timeout up to its Max CM Retries.
    pub fn send_dreq(&mut self, now: Time, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let i = self.index_of(id)?;
        self.send_dreq_inner(now, i, private_data)
    }

    fn send_dreq_inner(&mut self, now: Time, i: u32, pd: &[u8]) -> Result<(), CmError> {
        check_len(pd, pdl::DREQ)?;
        let c = self.conns.get(&i).ok_or(CmError::UnknownId(CmId(0)))?;
        if c.state != CmState::Established {
            return Err(CmError::InvalidState { id: c.id, state: c.state });
        }
        let tid = self.form_tid(c.id);
        let dreq = DreqRepr {
            local_comm_id: c.id.0,
            remote_comm_id: c.remote_id,
            remote_qpn: c.remote_qpn,
            private_data: fixed(pd),
            ..DreqRepr::default()
        };
        let to = c.to;
        let mad = self.push(to, tid, MadBody::Dreq(dreq));
        if let Some(c) = self.conns.get_mut(&i) {
            c.state = CmState::DreqSent;
        }
        self.send_retrying(now, i, mad, CmAttr::Dreq);
        Ok(())
    }

    /// Sends the DREP (`ib_send_cm_drep`), from [`CmState::DreqRcvd`] only: timewait.
    pub fn send_drep(&mut self, now: Time, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let i = self.index_of(id)?;
        self.send_drep_inner(now, i, private_data)
    }

    fn send_drep_inner(&mut self, now: Time, i: u32, pd: &[u8]) -> Result<(), CmError> {
        check_len(pd, pdl::DREP)?;
        let c = self.conns.get_mut(&i).ok_or(CmError::UnknownId(CmId(0)))?;
        if c.state != CmState::DreqRcvd {
            return Err(CmError::InvalidState { id: c.id, state: c.state });
        }
        c.private_data = pd.to_vec();
        let drep = DrepRepr { local_comm_id: c.id.0, remote_comm_id: c.remote_id, private_data: fixed(pd) };
        let (to, tid) = (c.to, c.tid);
        self.enter_timewait(now, i);
        self.push(to, tid, MadBody::Drep(drep));
        Ok(())
    }

    /// Disconnects as rdma_cm's `rdma_disconnect` does: a DREQ when established, the DREP when
    /// the peer asked first ([`CmState::DreqRcvd`]).
    pub fn disconnect(&mut self, now: Time, id: CmId) -> Result<(), CmError> {
        let i = self.index_of(id)?;
        match self.conns[&i].state {
            CmState::Established => self.send_dreq_inner(now, i, &[]),
            CmState::DreqRcvd => self.send_drep_inner(now, i, &[]),
            state => Err(CmError::InvalidState { id, state }),
        }
    }

    /// The passive side saw the connection work before the RTU (`ib_cm_notify(COMM_EST)`, on
    /// the first packet the QP receives): [`CmState::RepSent`] becomes established.
    pub fn establish(&mut self, id: CmId) -> Result<(), CmError> {
        let i = self.index_of(id)?;
        let c = self.conns.get_mut(&i).expect("checked");
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::Established;
                c.msg = None;
                self.counters.established += 1;
                self.events.push_back(CmEvent::UserEstablished { id });
                Ok(())
            }
            state => Err(CmError::InvalidState { id, state }),
        }
    }

    /// Sends a SIDR_REQ (`ib_send_cm_sidr_req`): [`CmState::SidrReqSent`].
    pub fn sidr_request(&mut self, now: Time, p: &SidrReqParams) -> Result<CmId, CmError> {
        check_len(&p.private_data, pdl::SIDR_REQ)?;
        if p.timeout.is_zero() {
            return Err(CmError::InvalidParam("a SIDR_REQ needs a retransmission interval"));
        }
        let i = self.alloc(CmState::SidrReqSent).ok_or(CmError::NoResources)?;
        let id = self.wire_id(i);
        let tid = self.form_tid(id);
        let to = MadAddr {
            remote_gid: p.path.remote_gid,
            local_gid: p.path.local_gid,
            traffic_class: p.path.traffic_class,
            pkey: p.path.pkey,
            qpn: GSI_QPN,
        };
        let req = SidrReqRepr {
            request_id: id.0,
            partition_key: p.path.pkey,
            service_id: p.service_id,
            private_data: fixed(&p.private_data),
            ..SidrReqRepr::default()
        };
        if let Some(c) = self.conns.get_mut(&i) {
            c.service_id = p.service_id;
            c.tid = tid;
            c.timeout = p.timeout;
            c.max_cm_retries = p.max_cm_retries;
            c.to = to;
            c.path = p.path;
        }
        let mad = self.push(to, tid, MadBody::SidrReq(req));
        self.send_retrying(now, i, mad, CmAttr::SidrReq);
        Ok(id)
    }

    /// Sends the SIDR_REP (`ib_send_cm_sidr_rep`), from [`CmState::SidrReqRcvd`]: idle.
    pub fn sidr_reply(&mut self, now: Time, id: CmId, p: &SidrRepParams) -> Result<(), CmError> {
        let i = self.index_of(id)?;
        self.sidr_reply_inner(now, i, p)
    }

    /// Forgets SIDR answers older than [`SIDR_ANSWER_MEMORY`].
    fn expire_sidr_answers(&mut self, now: Time) {
        while let Some((t, key)) = self.sidr_answered_order.front().copied() {
            if t > now && self.sidr_answered_order.len() <= SIDR_ANSWERS_MAX {
                break;
            }
            self.sidr_answered_order.pop_front();
            if self.sidr_answered.get(&key).is_some_and(|(u, _)| *u == t) {
                self.sidr_answered.remove(&key);
            }
        }
    }

    fn sidr_reply_inner(&mut self, now: Time, i: u32, p: &SidrRepParams) -> Result<(), CmError> {
        check_len(&p.private_data, pdl::SIDR_REP)?;
        check_len(&p.info, pdl::SIDR_REP_INFO)?;
        let c = self.conns.get(&i).ok_or(CmError::UnknownId(CmId(0)))?;
        if c.state != CmState::SidrReqRcvd {
            return Err(CmError::InvalidState { id: c.id, state: c.state });
        }
        let rep = SidrRepRepr {
            request_id: c.remote_id,
            status: p.status as u8,
            additional_info_length: p.info.len() as u8,
            vendor_id_h: ((p.ece.vendor_id >> 8) & 0xff) as u16,
            qpn: p.qpn & 0xff_ffff,
            vendor_id_l: p.ece.vendor_id as u8,
            service_id: c.service_id,
            qkey: p.qkey,
            additional_info: fixed(&p.info),
            private_data: fixed(&p.private_data),
        };
        let (to, tid) = (c.to, c.tid);
        let key = (c.remote_id, c.to.remote_gid);
        let mad = self.push_with_attr_mod(to, tid, p.ece.attr_mod, MadBody::SidrRep(rep));
        let until = now + SIDR_ANSWER_MEMORY;
        self.sidr_answered.insert(key, (until, CmTransmit { to, mad }));
        self.sidr_answered_order.push_back((until, key));
        self.expire_sidr_answers(now);
        self.remove_sidr(i);
        if let Some(c) = self.conns.get_mut(&i) {
            c.state = CmState::Idle;
            c.listener = None;
        }
        Ok(())
    }

    /// Destroys a connection as `ib_destroy_cm_id` does, telling the peer what its state
    /// calls for: REJ 4 (timeout, with our node GUID) while our REQ is unanswered, REJ 28
    /// while setting up, a DREQ (sent once) when established, the DREP when the peer asked,
    /// SIDR_REP "reject" for an unanswered SIDR_REQ. The ID is free afterwards; a late MAD
    /// for it gets the kernel's answer for an unknown connection.
    pub fn destroy(&mut self, now: Time, id: CmId) -> Result<(), CmError> {
        let i = self.index_of(id)?;
        let state = self.conns[&i].state;
        match state {
            CmState::SidrReqRcvd => {
                let p = SidrRepParams {
                    status: SidrStatus::Reject,
                    qpn: 0,
                    qkey: 0,
                    info: Vec::new(),
                    private_data: Vec::new(),
                    ece: Ece::default(),
                };
                let _ = self.sidr_reply_inner(now, i, &p);
            }
            CmState::ReqSent | CmState::MraReqRcvd => {
                let guid = self.config.node_guid.to_be_bytes();
                let _ = self.reject_inner(now, i, RejReason::Timeout as u16, &guid, &[]);
            }
            CmState::ReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent => {
                let _ = self.reject_inner(now, i, RejReason::ConsumerDefined as u16, &[], &[]);
            }
            CmState::Established => {
                // cm_issue_dreq: one DREQ, not retried, then timewait.
                let c = &self.conns[&i];
                let dreq = DreqRepr {
                    local_comm_id: c.id.0,
                    remote_comm_id: c.remote_id,
                    remote_qpn: c.remote_qpn,
                    ..DreqRepr::default()
                };
                let (to, tid) = (c.to, self.form_tid(c.id));
                self.push(to, tid, MadBody::Dreq(dreq));
            }
            CmState::DreqRcvd => {
                let _ = self.send_drep_inner(now, i, &[]);
            }
            CmState::Idle | CmState::DreqSent | CmState::Timewait | CmState::SidrReqSent => {}
        }
        self.remove_remote(i);
        self.remove_sidr(i);
        self.conns.remove(&i);
        Ok(())
    }

    /// The connection, if it is in a state where both sides' QP values are known (from the
    /// REQ received or the REP received on, through [`CmState::Established`]) or in one of
    /// `also`.
    fn get_for_qp(&self, id: CmId, also: &[CmState]) -> Result<&Conn, CmError> {
        const BOTH_KNOWN: [CmState; 7] = [
            CmState::ReqRcvd,
            CmState::MraReqSent,
            CmState::RepRcvd,
            CmState::MraRepSent,
            CmState::RepSent,
            CmState::MraRepRcvd,
            CmState::Established,
        ];
        let c = self.get(id)?;
        if BOTH_KNOWN.contains(&c.state) || also.contains(&c.state) {
            Ok(c)
        } else {
            Err(CmError::InvalidState { id, state: c.state })
        }
    }

    /// What the connection gives a QP moving to INIT (`cm_init_qp_init_attr`): whether it gets
    /// remote read and atomic access besides remote write (the connection has responder
    /// resources), and the P_Key. Available from the REQ on (sent or received) through
    /// [`CmState::Established`].
    pub fn qp_init_attrs(&self, id: CmId) -> Result<(bool, u16), CmError> {
        let c = self.get_for_qp(id, &[CmState::ReqSent, CmState::MraReqRcvd])?;
        Ok((c.responder_resources > 0, c.pkey))
    }

    /// The QP attributes the connection implies, for INIT, RTR and RTS
    /// (`cm_init_qp_init_attr`, `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`). Available once
    /// both sides' values are known: from [`CmState::ReqRcvd`] on the passive side (its QP
    /// goes to RTS before the REP leaves) and from [`CmState::RepRcvd`] on the active side,
    /// through [`CmState::Established`].
    pub fn qp_attrs(&self, id: CmId) -> Result<CmQpAttrs, CmError> {
        let c = self.get_for_qp(id, &[])?;
        let rc = matches!(c.transport, CmTransport::Rc | CmTransport::Xrc);
        Ok(CmQpAttrs {
            transport: c.transport,
            remote_write: true,
            remote_read_atomic: c.responder_resources > 0,
            pkey: c.pkey,
            path: c.path,
            path_mtu: c.path_mtu,
            dest_qpn: c.remote_qpn,
            rq_psn: c.rq_psn,
            max_dest_rd_atomic: if rc { c.responder_resources } else { 0 },
            min_rnr_timer: 0,
            sq_psn: c.sq_psn,
            retry_cnt: if rc { c.retry_count } else { 0 },
            rnr_retry: if rc { c.rnr_retry_count } else { 0 },
            max_rd_atomic: if rc { c.initiator_depth } else { 0 },
            timeout: c.av_timeout,
        })
    }
}
