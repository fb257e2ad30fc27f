//! perftest's rdma_cm mode (`-R`, perftest 4.5-0.17): the parameter exchange runs over an RC QP
//! connected through the RDMA CM instead of TCP, and the test QPs connect through the RDMA CM
//! too (RC in the TCP port space, UD through SIDR in the UDP port space).
//!
//! The control connection (`rdma_client_connect`/`rdma_server_connect`): an RC QP on an id in
//! the TCP port space, port `-p`, one receive of a `struct pingpong_dest` (56 bytes) posted
//! before connecting; every message of the exchange is one signaled SEND, answered lock-step
//! as over TCP (the client writes first). [`Control`] makes it a byte stream for
//! `oob::perftest`'s session, one SEND per write and one message per read.
//!
//! The test connections (`create_rdma_cm_connection`) go to the same port after a first K
//! and before a second one: one id per QP, `rdma_connect` with responder resources and
//! initiator depth `-o` for READ/atomic tests (0 otherwise), retry and RNR retry 7. perftest's
//! server closes its control listener and listens anew for them, so a client may be refused
//! for a moment: we retry a refused connection every 100 ms (as perftest does) within
//! `--connect-timeout`. Our server keeps its listener (and the UDP one for UD), so a client
//! never finds nobody listening. UD latency and duplex tests then send their QP number in a
//! 4-byte SEND with immediate to the server, which makes its reply address from the GRH.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softroce::verbs::cm::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use softroce::verbs::{
    AddressHandle, AddressVector, CompletionQueue, Device, Gid, MemoryRegion, ProtectionDomain, Qkey,
    QpInitAttr, Qpn, QueuePair, RecvWr, SendWr, UdDest, WcOpcode, WcStatus, WorkCompletion,
};

use crate::cli::common::CliError;
use crate::cli::oob::SideChannel;

/// The Q_Key the RDMA CM gives UD QPs (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// perftest's `UD_ADDITION`: the GRH room at the start of every UD receive buffer.
pub const GRH: u64 = 40;
/// Size of the control channel's messages (`sizeof(struct pingpong_dest)`).
const MSG: usize = 56;
/// How long to wait between connection attempts refused because nobody listened yet.
const RETRY_DELAY: Duration = Duration::from_millis(100);
/// How long address/route resolution and a connection's answer may take.
const STEP: Duration = Duration::from_secs(10);

/// The process's RDMA CM state for one run: the event channel, and on the server the
/// listeners (TCP: the control connection and RC test QPs; UDP: UD test QPs).
pub struct CmCtx {
    ch: EventChannel,
    /// Server: the listener of the TCP port space.
    listener: Option<CmId>,
    /// Server of a UD test: the listener of the UDP port space.
    ud_listener: Option<CmId>,
    /// Client: the server's address and port.
    server: Option<SocketAddr>,
    /// This side's address (the device's).
    local: IpAddr,
    /// `--connect-timeout`.
    connect_for: Duration,
    /// `--peer-timeout` (`None`: forever).
    idle: Option<Duration>,
}

fn cm_err(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::network(format!("rdma_cm: {what}: {e}"))
}

impl CmCtx {
    /// A server's context: listens on the device's address and `port` in the TCP port space,
    /// and in the UDP one with `ud`.
    pub fn server(dev: &Device, port: u16, ud: bool, idle: Option<Duration>) -> Result<CmCtx, CliError> {
        let ch = EventChannel::new().map_err(|e| cm_err("rdma_create_event_channel", e))?;
        let addr = SocketAddr::new(dev.ip(), port);
        let listen = |ps: PortSpace| -> Result<CmId, CliError> {
            let mut l = CmId::new(Some(&ch), ps).map_err(|e| cm_err("rdma_create_id", e))?;
            l.bind_addr(addr).map_err(|e| {
                CliError::setup(format!(
                    "rdma_cm: cannot bind {addr} ({ps:?} port space): {e}; choose another -p (on both sides)"
                ))
            })?;
            l.listen(0).map_err(|e| cm_err("rdma_listen", e))?;
            Ok(l)
        };
        let listener = Some(listen(PortSpace::Tcp)?);
        let ud_listener = if ud { Some(listen(PortSpace::Udp)?) } else { None };
        Ok(CmCtx {
            ch,
            listener,
            ud_listener,
            server: None,
            local: dev.ip(),
            connect_for: Duration::ZERO,
            idle,
        })
    }

    /// A client's context towards `server`.
    pub fn client(
        dev: &Device,
        server: SocketAddr,
        connect_for: Duration,
        idle: Option<Duration>,
    ) -> Result<CmCtx, CliError> {
        let ch = EventChannel::new().map_err(|e| cm_err("rdma_create_event_channel", e))?;
        Ok(CmCtx {
            ch,
            listener: None,
            ud_listener: None,
            server: Some(server),
            local: dev.ip(),
            connect_for,
            idle,
        })
    }

    fn is_server(&self) -> bool {
        self.server.is_none()
    }

    /// The next event of `id` (any id if `None`) that is not an ADDR/ROUTE/ESTABLISHED of
    /// another id; events of other ids are dropped (acknowledged).
    fn event_of(&self, id: Option<&CmId>, within: Option<Duration>) -> Result<CmEvent, CliError> {
        let deadline = within.map(|d| Instant::now() + d);
        loop {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Err(CliError::network(format!(
                    "rdma_cm: no event from the peer within {} s (it stopped, or is unreachable; --peer-timeout sets the limit)",
                    within.unwrap_or_default().as_secs()
                )));
            }
            let ev = match self.ch.get_event_timeout(left.min(Duration::from_secs(1))) {
                Ok(ev) => ev,
                Err(softroce::verbs::cm::Error::Timeout) => continue,
                Err(e) => return Err(cm_err("rdma_get_cm_event", e)),
            };
            match id {
                Some(id) if !ev.id().is(id) => continue,
                _ => return Ok(ev),
            }
        }
    }

    /// Waits for `want` on `id`; any other event of it is the error it reports.
    fn expect(&self, id: &CmId, want: CmEventType, what: &str) -> Result<CmEvent, CliError> {
        let ev = self.event_of(Some(id), Some(STEP))?;
        if ev.event_type() == want {
            return Ok(ev);
        }
        Err(CliError::network(format!("rdma_cm: {what}: {}, status {}", ev.event_type().name(), ev.status())))
    }

    /// A client's id resolved to the server (ADDR_RESOLVED, ROUTE_RESOLVED).
    fn resolved(&self, ps: PortSpace) -> Result<CmId, CliError> {
        let server = self.server.ok_or_else(|| CliError::failed("internal error: no server address"))?;
        let mut id = CmId::new(Some(&self.ch), ps).map_err(|e| cm_err("rdma_create_id", e))?;
        id.resolve_addr(Some(SocketAddr::new(self.local, 0)), server, Duration::from_secs(2))
            .map_err(|e| cm_err(&format!("rdma_resolve_addr to {server}"), e))?;
        self.expect(&id, CmEventType::AddrResolved, "resolving the server's address")?;
        id.resolve_route(Duration::from_secs(2)).map_err(|e| cm_err("rdma_resolve_route", e))?;
        self.expect(&id, CmEventType::RouteResolved, "resolving the route")?;
        Ok(id)
    }

    /// The next connection request on the listener of `ps` (server), as its new id.
    fn request(&self, ps: PortSpace) -> Result<CmId, CliError> {
        let listener = match ps {
            PortSpace::Udp => self.ud_listener.as_ref(),
            _ => self.listener.as_ref(),
        }
        .ok_or_else(|| CliError::failed("internal error: no listener"))?;
        loop {
            let mut ev = self.event_of(None, self.idle)?;
            if ev.event_type() != CmEventType::ConnectRequest
                || !ev.listen_id().is_some_and(|l| l.is(listener))
            {
                continue;
            }
            if let Some(id) = ev.take_id() {
                return Ok(id);
            }
        }
    }

    /// Connects a client id made by `make` (resolve, create the QP, connect), again after
    /// every refusal (nobody listening yet) until `--connect-timeout` has passed. Returns the
    /// id and its ESTABLISHED event.
    fn connect_retrying(
        &self,
        ps: PortSpace,
        mut make: impl FnMut(&mut CmId) -> Result<ConnParam, CliError>,
        what: &str,
    ) -> Result<(CmId, CmEvent), CliError> {
        let start = Instant::now();
        let mut refused = 0;
        loop {
            let mut id = self.resolved(ps)?;
            let param = make(&mut id)?;
            id.connect(Some(&param)).map_err(|e| cm_err("rdma_connect", e))?;
            let ev = self.event_of(Some(&id), Some(STEP * 3))?;
            match ev.event_type() {
                CmEventType::Established => return Ok((id, ev)),
                t @ (CmEventType::Rejected | CmEventType::Unreachable | CmEventType::ConnectError)
                    if start.elapsed() < self.connect_for =>
                {
                    refused += 1;
                    tracing::debug!("rdma_cm: {what}: {} (status {}), retrying", t.name(), ev.status());
                    drop(ev);
                    drop(id);
                    std::thread::sleep(RETRY_DELAY);
                }
                t => {
                    let server = self.server.map(|s| s.to_string()).unwrap_or_default();
                    let hint = if t == CmEventType::Rejected {
                        format!(
                            "nobody accepted on {server}{}: start the server first (`softroce perf … -R` or \
                             perftest with -R), check -p on both sides; --connect-timeout waits longer",
                            if refused > 0 { format!(" after {refused} tries") } else { String::new() }
                        )
                    } else {
                        "the server does not answer over RoCEv2 (UDP 4791)".to_string()
                    };
                    return Err(CliError::network(format!(
                        "rdma_cm: {what}: {}, status {}: {hint}",
                        t.name(),
                        ev.status()
                    )));
                }
            }
        }
    }

    /// Opens the control connection (`rdma_client_connect` / `rdma_server_connect`):
    /// `read_atomic` sets responder resources and initiator depth to `out_reads`.
    pub fn control(&self, read_atomic: bool, out_reads: u8) -> Result<Control, CliError> {
        let param = ConnParam {
            responder_resources: if read_atomic { out_reads } else { 0 },
            initiator_depth: if read_atomic { out_reads } else { 0 },
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        let mut parts = None;
        let setup =
            |id: &mut CmId, parts: &mut Option<(ControlParts, Arc<QueuePair>)>| -> Result<(), CliError> {
                let dev =
                    id.device().cloned().ok_or_else(|| CliError::failed("rdma_cm: the id has no device"))?;
                let p = ControlParts::new(&dev)?;
                let qp = Arc::new(
                    p.pd.create_qp(&QpInitAttr::rc(&p.send_cq, &p.recv_cq).max_send_wr(1).max_recv_wr(1))
                        .map_err(|e| cm_err("rdma_create_qp", e))?,
                );
                id.attach_qp(qp.clone()).map_err(|e| cm_err("rdma_create_qp", e))?;
                post_control_recv(&qp, &p.mr)?;
                *parts = Some((p, qp));
                Ok(())
            };
        let id = if self.is_server() {
            let mut id = self.request(PortSpace::Tcp)?;
            setup(&mut id, &mut parts)?;
            id.accept(Some(&param)).map_err(|e| cm_err("rdma_accept", e))?;
            self.expect(&id, CmEventType::Established, "the parameter-exchange connection")?;
            id
        } else {
            let (id, _) = self.connect_retrying(
                PortSpace::Tcp,
                |id| {
                    setup(id, &mut parts)?;
                    Ok(param.clone())
                },
                "the parameter-exchange connection",
            )?;
            id
        };
        let (p, qp) = parts.ok_or_else(|| CliError::failed("internal error: no control QP"))?;
        let dev = p.send_cq.device().clone();
        Ok(Control { _id: id, qp, parts: p, pending: Vec::new(), idle: self.idle, dev })
    }

    /// Connects test QP `i` (`rdma_cm_client_connection` / `rdma_cm_server_connection` for
    /// one node): `qp` is attached to a new id; returns the id and, for UD, the peer (the
    /// address handle, QP number and Q_Key to send to) when this side sends. Returns the id,
    /// its QP and the UD peer.
    pub fn connect_test_qp(
        &self,
        t: &TestQp<'_>,
    ) -> Result<(CmId, Arc<QueuePair>, Option<UdPeer>), CliError> {
        let ps = if t.ud { PortSpace::Udp } else { PortSpace::Tcp };
        let param = ConnParam {
            responder_resources: if t.read_atomic { t.out_reads } else { 0 },
            initiator_depth: if t.read_atomic { t.out_reads } else { 0 },
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        if self.is_server() {
            let mut id = self.request(ps)?;
            let qp = t.make_qp()?;
            id.attach_qp(qp.clone()).map_err(|e| cm_err("rdma_create_qp", e))?;
            if t.ud && t.exchange_qpn {
                // `rdma_cm_request_ud_connection_parameters`: a receive for the client's QP
                // number, before the SIDR_REP.
                let wr = RecvWr::new(u64::MAX, &[t.mr.sge(t.recv_off as usize, (GRH + 4) as u32)]);
                qp.post_recv(wr).map_err(|e| cm_err("posting the receive for the peer's QP number", e))?;
            }
            id.accept(Some(&ConnParam { qp_num: qp.qp_num().value(), ..param }))
                .map_err(|e| cm_err("rdma_accept", e))?;
            if !(t.ud && t.exchange_qpn) {
                return Ok((id, qp, None));
            }
            // `rdma_cm_initialize_ud_connection_parameters`: the reply address from the GRH,
            // the peer's QP number from the immediate data.
            let wc = wait_wc(t.recv_cq, self.idle, "the peer's QP number")?;
            if wc.status != WcStatus::Success || wc.imm_data.is_none() {
                return Err(CliError::network(format!(
                    "rdma_cm: bad completion for the peer's QP number: {} (immediate {:?})",
                    wc.status, wc.imm_data
                )));
            }
            let mut grh = [0u8; GRH as usize];
            t.mr.read(t.recv_off as usize, &mut grh).map_err(|e| cm_err("reading the GRH", e))?;
            let src =
                grh_source(&grh).ok_or_else(|| CliError::network("rdma_cm: no GRH on the peer's message"))?;
            let av = AddressVector::new(Gid::from_ip(src), t.gid_index);
            let ah = t.pd.create_ah(&av).map_err(|e| cm_err("creating the reply address handle", e))?;
            // The immediate is the QP number as `htonl` puts it on the wire.
            let qpn = wc.imm_data.unwrap_or_default() & 0xff_ffff;
            let qpn = if qpn == 0 { wc.src_qp.value() } else { qpn };
            let dest = ah.dest(Qpn::new(qpn), Qkey::new(RDMA_UDP_QKEY));
            return Ok((id, qp, Some(UdPeer { _ah: ah, dest })));
        }
        let mut made: Option<Arc<QueuePair>> = None;
        let (id, ev) = self.connect_retrying(
            ps,
            |id| {
                let qp = t.make_qp()?;
                id.attach_qp(qp.clone()).map_err(|e| cm_err("rdma_create_qp", e))?;
                made = Some(qp);
                Ok(param.clone())
            },
            "the test connection",
        )?;
        let qp = made.ok_or_else(|| CliError::failed("internal error: no QP"))?;
        if !t.ud {
            return Ok((id, qp, None));
        }
        let ud = match ev.param() {
            softroce::verbs::cm::EventParam::Ud(u) => u.clone(),
            _ => return Err(CliError::network("rdma_cm: ESTABLISHED without the peer's UD parameters")),
        };
        drop(ev);
        let ah = t.pd.create_ah(&ud.ah_attr).map_err(|e| cm_err("ibv_create_ah", e))?;
        let dest = ah.dest(Qpn::new(ud.qp_num), ud.qkey);
        if t.exchange_qpn {
            // `rdma_cm_send_ud_connection_parameters`: our QP number, as immediate data.
            let imm = qp.qp_num().value();
            let wr = SendWr::send_with_imm(u64::MAX, &[t.mr.sge(0, 4)], imm).to(dest);
            qp.post_send(wr).map_err(|e| cm_err("sending our QP number", e))?;
            let wc = wait_wc(t.send_cq, self.idle, "sending our QP number")?;
            if wc.status != WcStatus::Success {
                return Err(CliError::network(format!("rdma_cm: sending our QP number: {}", wc.status)));
            }
        }
        Ok((id, qp, Some(UdPeer { _ah: ah, dest })))
    }

    /// Disconnects the test ids (the client's `rdma_cm_disconnect_nodes`) and waits a moment
    /// for their DISCONNECTED events.
    pub fn disconnect(&self, ids: &mut [CmId]) {
        let mut left = 0;
        for id in ids.iter_mut() {
            if id.port_space() == PortSpace::Tcp && id.disconnect().is_ok() {
                left += 1;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while left > 0 && Instant::now() < deadline {
            match self.ch.get_event_timeout(Duration::from_millis(100)) {
                Ok(ev) if ev.event_type() == CmEventType::Disconnected => left -= 1,
                _ => {}
            }
        }
    }
}

/// What [`CmCtx::connect_test_qp`] needs to make and connect one test QP.
pub struct TestQp<'r> {
    /// The test's PD.
    pub pd: &'r ProtectionDomain,
    /// Its CQs.
    pub send_cq: &'r CompletionQueue,
    /// Its CQs.
    pub recv_cq: &'r CompletionQueue,
    /// Its MR (the UD QP-number message is sent from offset 0 and received at `recv_off`).
    pub mr: &'r MemoryRegion,
    /// Where this QP's receives start.
    pub recv_off: u64,
    /// The QP to create.
    pub init: QpInitAttr<'r>,
    /// UD (SIDR) rather than RC.
    pub ud: bool,
    /// UD latency or duplex: the client sends its QP number to the server.
    pub exchange_qpn: bool,
    /// READ/atomic: offer `out_reads` responder resources and initiator depth.
    pub read_atomic: bool,
    /// `-o`.
    pub out_reads: u8,
    /// The source GID index for a reply address handle.
    pub gid_index: softroce::verbs::GidIndex,
}

impl TestQp<'_> {
    fn make_qp(&self) -> Result<Arc<QueuePair>, CliError> {
        Ok(Arc::new(self.pd.create_qp(&self.init).map_err(|e| cm_err("rdma_create_qp", e))?))
    }
}

/// A UD peer: where this side's sends go.
pub struct UdPeer {
    _ah: AddressHandle,
    /// The destination of every send.
    pub dest: UdDest,
}

/// The source address in a UD receive's GRH area (an IPv6 header, or an IPv4 header in its
/// last 20 bytes).
fn grh_source(g: &[u8; GRH as usize]) -> Option<IpAddr> {
    if g[0] >> 4 == 6 {
        let s: [u8; 16] = g[8..24].try_into().ok()?;
        return Some(IpAddr::from(s));
    }
    if g[20] >> 4 == 4 {
        let s: [u8; 4] = g[32..36].try_into().ok()?;
        return Some(IpAddr::from(s));
    }
    None
}

fn wait_wc(cq: &CompletionQueue, idle: Option<Duration>, what: &str) -> Result<WorkCompletion, CliError> {
    let start = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one_wait(Duration::from_millis(100)).map_err(|e| cm_err(what, e))? {
            return Ok(wc);
        }
        if idle.is_some_and(|i| start.elapsed() > i) {
            return Err(CliError::network(format!(
                "rdma_cm: {what}: nothing for {} s (--peer-timeout sets the limit)",
                start.elapsed().as_secs()
            )));
        }
    }
}

/// The control connection's verbs objects.
struct ControlParts {
    mr: MemoryRegion,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    pd: ProtectionDomain,
}

impl ControlParts {
    fn new(dev: &Device) -> Result<ControlParts, CliError> {
        let pd = dev.alloc_pd().map_err(|e| cm_err("ibv_alloc_pd", e))?;
        let send_cq = dev.create_cq(2).map_err(|e| cm_err("ibv_create_cq", e))?;
        let recv_cq = dev.create_cq(2).map_err(|e| cm_err("ibv_create_cq", e))?;
        let mr = pd
            .alloc_mr(2 * MSG, softroce::verbs::Access::LOCAL_WRITE)
            .map_err(|e| cm_err("ibv_reg_mr", e))?;
        Ok(ControlParts { mr, send_cq, recv_cq, pd })
    }
}

/// Receives land in the second half of the control MR.
fn post_control_recv(qp: &QueuePair, mr: &MemoryRegion) -> Result<(), CliError> {
    qp.post_recv(RecvWr::new(1, &[mr.sge(MSG, MSG as u32)]))
        .map_err(|e| cm_err("posting the parameter-exchange receive", e))
}

/// The control connection as a byte stream: each `write` is one SEND (at most 56 bytes),
/// each `read` returns one received message (the rest of a longer one is dropped, as
/// perftest copies only what it expects).
pub struct Control {
    _id: CmId,
    qp: Arc<QueuePair>,
    parts: ControlParts,
    pending: Vec<u8>,
    idle: Option<Duration>,
    dev: Device,
}

impl Control {
    /// Waits for a completion on `cq`; silence counts from the last packet the device
    /// received (a BW server waits here through its client's whole run).
    fn wait(&self, cq: &CompletionQueue, what: &str) -> io::Result<WorkCompletion> {
        let activity = || self.dev.counters().map_or(0, |c| c.qp.rcvd_pkts);
        let mut quiet = Instant::now();
        let mut seen = activity();
        loop {
            match cq.poll_one_wait(Duration::from_millis(100)) {
                Ok(Some(wc)) if wc.status == WcStatus::Success => return Ok(wc),
                Ok(Some(wc)) => {
                    return Err(io::Error::new(
                        ErrorKind::ConnectionReset,
                        format!("{what}: completion status {}", wc.status),
                    ));
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
            let now = activity();
            if now != seen {
                seen = now;
                quiet = Instant::now();
            }
            if self.idle.is_some_and(|i| quiet.elapsed() > i) {
                return Err(io::Error::new(ErrorKind::TimedOut, format!("{what}: peer silent")));
            }
        }
    }
}

impl Read for Control {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pending.is_empty() {
            let wc = self.wait(&self.parts.recv_cq, "receive")?;
            if wc.opcode != WcOpcode::Recv {
                return Err(io::Error::other("unexpected completion on the control QP"));
            }
            let len = (wc.byte_len as usize).min(MSG);
            let mut msg = vec![0u8; len];
            self.parts.mr.read(MSG, &mut msg).map_err(|e| io::Error::other(e.to_string()))?;
            post_control_recv(&self.qp, &self.parts.mr).map_err(|e| io::Error::other(e.msg))?;
            if len == 0 {
                return Err(io::Error::new(ErrorKind::UnexpectedEof, "empty message"));
            }
            self.pending = msg;
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.clear();
        Ok(n)
    }
}

impl Write for Control {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() > MSG {
            return Err(io::Error::new(ErrorKind::InvalidInput, "control message over 56 bytes"));
        }
        self.parts.mr.write(0, buf).map_err(|e| io::Error::other(e.to_string()))?;
        self.qp
            .post_send(SendWr::send(2, &[self.parts.mr.sge(0, buf.len() as u32)]))
            .map_err(|e| io::Error::new(ErrorKind::BrokenPipe, e.to_string()))?;
        self.wait(&self.parts.send_cq, "send")?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SideChannel for Control {}
