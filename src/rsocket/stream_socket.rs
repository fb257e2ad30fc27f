//! Stream rsockets (`SOCK_STREAM`): an rdma_cm id on an event channel of its own (whose
//! descriptor is the socket's number, as in rdma-core), an RC QP with one CQ, three memory
//! regions (send ring, receive ring, target SGL + iomap table) and the protocol state machine
//! ([`Stream`]) between them.
//!
//! Everything happens in the calling thread under the socket's lock, except accepting
//! (the service thread, [`super::svc`]) and keep-alives (the same thread): `progress` takes
//! the CM events and completions that arrived, hands them to the state machine and posts
//! what it asks for; a call that must wait arms the CQ and sleeps on the socket's
//! descriptors with the lock released ([`super::wait`]).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use crate::verbs::cm::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, EventParam, PortSpace};
use crate::verbs::{
    Access, CompletionQueue, MemoryRegion, ProtectionDomain, QpInitAttr, QueuePair, RecvWr, RemoteAddr, Rkey,
    SendWr, Sge, WcStatus, WorkCompletion,
};
use libc::c_int;

use super::Errno;
use super::proto::{self, ConnData, RsIomap, RsSge};
use super::stream::{self, Config, LocalBufs, Post, Region, Src, Stream};
use super::table::{Defaults, Socket};

/// Receive work request ids carry this bit (send ids are [`proto::Msg`] values).
const RECV_FLAG: u64 = 1 << 63;

impl Region for MemoryRegion {
    fn read(&self, off: usize, dst: &mut [u8]) {
        let _ = MemoryRegion::read(self, off, dst);
    }
    fn write(&self, off: usize, src: &[u8]) {
        let _ = MemoryRegion::write(self, off, src);
    }
}

/// The socket options rdma-core keeps per socket.
#[derive(Debug, Clone)]
pub struct Opts {
    /// `RDMA_SQSIZE`.
    pub sq_size: u16,
    /// `RDMA_RQSIZE`.
    pub rq_size: u16,
    /// `RDMA_INLINE`.
    pub sq_inline: u32,
    /// `SO_SNDBUF` × 2.
    pub sbuf_size: u32,
    /// `SO_RCVBUF` × 2.
    pub rbuf_size: u32,
    /// `RDMA_IOMAPSIZE`.
    pub iomap_size: u16,
    /// Bits `1 << optname` of the boolean options set, per level.
    pub so_opts: u64,
    /// See [`Opts::so_opts`].
    pub tcp_opts: u64,
    /// See [`Opts::so_opts`].
    pub ipv6_opts: u64,
    /// `TCP_KEEPIDLE`, seconds (0: not set yet).
    pub keepalive_time: u32,
    /// `RDMA_ROUTE` as given.
    pub route: Option<Vec<u8>>,
}

impl Opts {
    /// The defaults (rdma-core's, or `/etc/rdma/rsocket/*`).
    pub fn new(d: &Defaults) -> Opts {
        Opts {
            sq_size: d.sqsize,
            rq_size: d.rqsize,
            sq_inline: u32::from(d.inline),
            sbuf_size: d.wmem,
            rbuf_size: d.mem,
            iomap_size: d.iomap_size,
            so_opts: 0,
            tcp_opts: 0,
            ipv6_opts: 0,
            keepalive_time: 0,
            route: None,
        }
    }

    /// What a socket accepted from a listener inherits (rdma-core's `rs_alloc`).
    fn inherit(&self) -> Opts {
        Opts { so_opts: 0, tcp_opts: 0, ipv6_opts: 0, keepalive_time: 0, route: None, ..self.clone() }
    }
}

/// Where a stream socket is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Created.
    Init,
    /// `rbind` done.
    Bound,
    /// `rlisten` done.
    Listening,
    /// `rconnect` sent the request.
    Connecting,
    /// Connected (the state machine says how far it still is).
    Connected,
    /// The connection attempt failed (`ENOTCONN` from now on).
    ConnectError,
}

/// How long the service thread waits for the active side's RTU after accepting a connection
/// (the IB CM's REP retries end well within it).
const ACCEPT_WAIT: Duration = Duration::from_secs(10);

/// The connections a listener has accepted and the application has not taken yet, and a
/// descriptor readable while there are any (rdma-core's `accept_queue` socket pair).
pub struct AcceptQueue {
    queue: VecDeque<Box<StreamSock>>,
    tx: UnixStream,
    rx: UnixStream,
}

impl AcceptQueue {
    fn new() -> std::io::Result<AcceptQueue> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        Ok(AcceptQueue { queue: VecDeque::new(), tx, rx })
    }

    fn push(&mut self, s: Box<StreamSock>) {
        self.queue.push_back(s);
        let _ = (&self.tx).write(&[1]);
    }

    fn pop(&mut self) -> Option<Box<StreamSock>> {
        let s = self.queue.pop_front()?;
        let _ = (&self.rx).read(&mut [0u8; 1]);
        Some(s)
    }
}

/// A registered iomap (`riomap`).
struct IoMapping {
    mr: MemoryRegion,
    offset: u64,
    /// Its entry in the peer's table (`PROT_WRITE` mappings), or none (local only).
    index: Option<u32>,
    sent: bool,
}

/// The verbs objects of a connection and its protocol state.
pub struct Endpoint {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    sbuf: MemoryRegion,
    rbuf: MemoryRegion,
    target: MemoryRegion,
    cfg: Config,
    local: LocalBufs,
    /// Known once the peer's connection data is.
    pub stream: Option<Stream>,
    /// The CQ was armed for a sleep: take its notification before polling.
    armed: bool,
}

impl Endpoint {
    /// rdma-core's `rs_create_ep`: sizes fitted to the device, the CQ, the QP (on `id`), the
    /// buffers, and a full receive queue.
    fn create(id: &mut CmId, o: &Opts) -> Result<Endpoint, Errno> {
        let dev = id.device().cloned().ok_or(libc::ENODEV)?;
        let max = (dev.query_device().max_qp_wr.min(u32::from(proto::QP_MAX_SIZE))) as u16;
        let fit = |v: u16| v.clamp(proto::QP_MIN_SIZE, max.max(proto::QP_MIN_SIZE));
        let (sq, rq) = (fit(o.sq_size), fit(o.rq_size));
        let max_inline = dev.query_device().max_inline_data;
        let cfg = Config {
            sq_size: sq,
            rq_size: rq,
            sbuf_size: o.sbuf_size.max(2 * proto::SNDLOWAT),
            rbuf_size: o.rbuf_size.max(2 * proto::SNDLOWAT) & !1,
            sq_inline: o.sq_inline.min(max_inline),
            target_iomap_size: o.iomap_size,
        };
        let v = |e: crate::verbs::Error| {
            tracing::debug!(target: "softroce::rsocket", error = %e, "no rsocket endpoint");
            e.errno()
        };
        let pd = dev.alloc_pd().map_err(v)?;
        let cq = dev.create_cq(usize::from(sq) + usize::from(rq)).map_err(v)?;
        // The QP can always carry a credit update or an iomap entry inline, whatever
        // RDMA_INLINE says about data (rdma-core stages those in its send buffer instead).
        let init = QpInitAttr::rc(&cq, &cq)
            .max_send_wr(u32::from(sq))
            .max_recv_wr(u32::from(rq))
            .max_send_sge(2)
            .max_recv_sge(1)
            .max_inline_data(cfg.sq_inline.max(proto::IOMAP_LEN as u32).min(max_inline))
            .signal_all();
        id.create_qp(Some(&pd), &init).map_err(|e| {
            tracing::debug!(target: "softroce::rsocket", error = %e, "no rsocket QP");
            e.errno()
        })?;
        let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let sbuf = pd.alloc_mr(cfg.sbuf_size as usize, Access::LOCAL_WRITE).map_err(v)?;
        let rbuf = pd.alloc_mr(cfg.rbuf_size as usize, remote).map_err(v)?;
        let target = pd.alloc_mr(stream::target_len(cfg.target_iomap_size), remote).map_err(v)?;
        let local = LocalBufs {
            target_addr: target.addr(),
            target_rkey: target.rkey().value(),
            rbuf_addr: rbuf.addr(),
            rbuf_rkey: rbuf.rkey().value(),
        };
        let qp = id.qp().ok_or(libc::EINVAL)?;
        for _ in 0..rq {
            qp.post_recv(RecvWr::new(RECV_FLAG, &[])).map_err(v)?;
        }
        Ok(Endpoint { pd, cq, sbuf, rbuf, target, cfg, local, stream: None, armed: false })
    }

    /// The connection data to send.
    fn conn_data(&self) -> ConnData {
        stream::conn_data(&self.cfg, &self.local)
    }

    /// Hands the state machine's work requests to the QP.
    fn flush(&mut self, qp: &QueuePair) {
        let Some(s) = self.stream.as_mut() else { return };
        while let Some(p) = s.poll_post() {
            if qp.post_send(work_request(&p, &self.sbuf)).is_err() {
                // Never queued: no completion will give its resources back.
                s.on_send_complete(p.wr_id, false);
            }
        }
    }

    /// Takes the completions that arrived (rdma-core's `rs_poll_cq`) and sends a credit
    /// update if one is due; whether anything happened.
    fn progress(&mut self, qp: &QueuePair) -> bool {
        if self.armed {
            self.cq.ack_notify();
            self.armed = false;
        }
        let Some(s) = self.stream.as_mut() else { return false };
        s.update_credits();
        let mut wcs: [WorkCompletion; 32] = std::array::from_fn(|_| blank_wc());
        let mut reposts = 0;
        let mut any = false;
        loop {
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(_) => {
                    s.fail(libc::EIO);
                    break;
                }
            };
            for wc in &wcs[..n] {
                let ok = wc.status == WcStatus::Success;
                if wc.wr_id & RECV_FLAG != 0 {
                    if s.on_recv(wc.imm_data, wc.byte_len, ok, &self.target) {
                        reposts += 1;
                    }
                } else {
                    s.on_send_complete(wc.wr_id, ok);
                }
            }
            any |= n > 0;
            if n < wcs.len() {
                break;
            }
        }
        if s.connected() {
            for _ in 0..reposts {
                if qp.post_recv(RecvWr::new(RECV_FLAG, &[])).is_err() {
                    s.fail(libc::EIO);
                    break;
                }
            }
        }
        s.update_credits();
        self.flush(qp);
        any
    }

    /// Arms the CQ for a sleep; its descriptor.
    fn arm(&mut self) -> c_int {
        self.cq.req_notify();
        self.armed = true;
        self.cq.as_raw_fd()
    }
}

fn blank_wc() -> WorkCompletion {
    WorkCompletion::new(0, WcStatus::Success, crate::verbs::WcOpcode::Send, crate::verbs::Qpn::new(0))
}

/// A [`Post`] as a work request.
fn work_request(p: &Post, sbuf: &MemoryRegion) -> SendWr {
    let remote = RemoteAddr { addr: p.addr, rkey: Rkey::new(p.rkey) };
    let mut sg: Vec<Sge> = Vec::new();
    if let Src::Ring(pieces, n) = &p.src {
        sg.extend(pieces[..*n].iter().map(|&(off, len)| sbuf.sge(off as usize, len)));
    }
    let wr = match p.imm {
        Some(imm) => SendWr::write_with_imm(p.wr_id, &sg, remote, imm),
        None => SendWr::write(p.wr_id, &sg, remote),
    };
    match &p.src {
        Src::Inline(b) => wr.inline(b),
        _ => wr,
    }
}

/// A stream rsocket.
pub struct StreamSock {
    /// `AF_INET` or `AF_INET6` (what an unbound socket reports, and a listener binds to).
    pub domain: c_int,
    /// Where it is.
    pub phase: Phase,
    /// `rfcntl` flags (`O_NONBLOCK`).
    pub fd_flags: c_int,
    /// Options.
    pub opts: Opts,
    /// The id's event channel (its descriptor is the socket's number).
    pub chan: EventChannel,
    /// The rdma_cm id (`None` once closed).
    pub id: Option<CmId>,
    /// The connection's objects.
    pub ep: Option<Endpoint>,
    /// `SO_ERROR`.
    pub err: c_int,
    /// A listener's accepted connections.
    pub accepted: Option<AcceptQueue>,
    /// The socket's number when it is not the channel's descriptor: an accepted socket's,
    /// made when `raccept` hands it out.
    number: Option<OwnedFd>,
    /// Keep-alives are on (`SO_KEEPALIVE`).
    pub keepalive: bool,
    /// The peer's address (`rconnect`'s).
    dst: Option<SocketAddr>,
    iomaps: Vec<IoMapping>,
    /// Requests refused for bad private data (a listener's count).
    pub refused: u64,
}

impl StreamSock {
    /// `rsocket(domain, SOCK_STREAM, 0)`: an id on a channel of its own.
    pub fn new(domain: c_int, d: &Defaults) -> Result<StreamSock, Errno> {
        let chan = EventChannel::new().map_err(|e| e.errno())?;
        let id = CmId::new(Some(&chan), PortSpace::Tcp).map_err(|e| e.errno())?;
        Ok(StreamSock::with(domain, Opts::new(d), chan, id))
    }

    fn with(domain: c_int, opts: Opts, chan: EventChannel, id: CmId) -> StreamSock {
        StreamSock {
            domain,
            phase: Phase::Init,
            fd_flags: 0,
            opts,
            chan,
            id: Some(id),
            ep: None,
            err: 0,
            accepted: None,
            number: None,
            keepalive: false,
            dst: None,
            iomaps: Vec::new(),
            refused: 0,
        }
    }

    /// The socket's number.
    pub fn fd(&self) -> c_int {
        self.number.as_ref().map_or_else(|| self.chan.as_raw_fd(), |n| n.as_raw_fd())
    }

    /// The protocol state machine of a connected socket.
    pub fn stream(&self) -> Option<&Stream> {
        self.ep.as_ref().and_then(|e| e.stream.as_ref())
    }

    fn stream_mut(&mut self) -> Option<&mut Stream> {
        self.ep.as_mut().and_then(|e| e.stream.as_mut())
    }

    /// Takes what arrived — CM events, completions — and sends what is due; whether
    /// anything happened (other threads waiting on the socket are then woken).
    pub fn progress(&mut self) -> bool {
        if self.phase == Phase::Listening {
            // (The service thread does the same when the application is not calling.)
            return self.accept_pending() > 0;
        }
        let mut any = false;
        while let Ok(Some(ev)) = self.chan.try_get_event() {
            any = true;
            self.on_cm_event(ev);
        }
        if let (Some(ep), Some(qp)) = (self.ep.as_mut(), self.id.as_ref().and_then(|i| i.qp())) {
            any |= ep.progress(qp);
        }
        any
    }

    fn on_cm_event(&mut self, ev: CmEvent) {
        let t = ev.event_type();
        match self.phase {
            Phase::Connecting => self.on_connect_event(ev),
            Phase::Connected if t == CmEventType::Disconnected => {
                // The peer closed (its DREQ): what was received can still be read.
                if let Some(s) = self.stream_mut()
                    && s.connected()
                {
                    s.state = stream::DISCONNECTED;
                }
                if let Some(id) = self.id.as_mut() {
                    let _ = id.disconnect();
                }
            }
            Phase::Connected
                if matches!(
                    t,
                    CmEventType::DeviceRemoval | CmEventType::ConnectError | CmEventType::Unreachable
                ) =>
            {
                if let Some(s) = self.stream_mut() {
                    s.fail(libc::ECONNRESET);
                }
            }
            _ => {}
        }
    }

    // ---- connecting ---------------------------------------------------------------------

    /// `rconnect`'s first step (rdma-core's `rs_do_connect` from `rs_init`/`rs_bound`):
    /// address and route (immediate on softroce), the endpoint, the request. `Ok` means
    /// the request is out.
    pub fn start_connect(&mut self, dst: SocketAddr) -> Result<(), Errno> {
        self.dst = Some(dst);
        let r = self.try_start_connect(dst);
        if let Err(e) = r {
            self.connect_failed(e);
        }
        r
    }

    fn try_start_connect(&mut self, dst: SocketAddr) -> Result<(), Errno> {
        // Each step says why it failed (RUST_LOG=softroce::rsocket=debug): the CM folds
        // several causes into one errno.
        let why = |step: &'static str| {
            move |e: crate::verbs::cm::Error| {
                tracing::debug!(target: "softroce::rsocket", %dst, step, error = %e, "rconnect failed");
                e.errno()
            }
        };
        let id = self.id.as_mut().ok_or(libc::EBADF)?;
        if id.device().is_none() {
            // As rdma_resolve_addr without a source: every listed device is up.
            super::start_devices();
        }
        id.resolve_addr(None, dst, Duration::from_secs(2)).map_err(why("resolve_addr"))?;
        self.expect_event(CmEventType::AddrResolved)?;
        let id = self.id.as_mut().ok_or(libc::EBADF)?;
        id.resolve_route(Duration::from_secs(2)).map_err(why("resolve_route"))?;
        self.expect_event(CmEventType::RouteResolved)?;
        let id = self.id.as_mut().ok_or(libc::EBADF)?;
        let ep = Endpoint::create(id, &self.opts)?;
        let param = ConnParam {
            private_data: ep.conn_data().emit().to_vec(),
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            ..Default::default()
        };
        self.ep = Some(ep);
        id.connect(Some(&param)).map_err(why("connect"))?;
        self.phase = Phase::Connecting;
        Ok(())
    }

    /// Takes the event a resolution step queued at once.
    fn expect_event(&mut self, want: CmEventType) -> Result<(), Errno> {
        loop {
            let ev = self.chan.try_get_event().map_err(|e| e.errno())?.ok_or_else(|| {
                tracing::debug!(target: "softroce::rsocket", ?want, "rconnect: the event is not there");
                libc::EINVAL
            })?;
            if ev.status() != 0 {
                tracing::debug!(target: "softroce::rsocket", ?want, got = ?ev.event_type(), status = ev.status(), "rconnect failed");
                return Err(ev.status().abs());
            }
            if ev.event_type() == want {
                return Ok(());
            }
        }
    }

    /// The answer to our request (rdma-core's `rs_do_connect` in `rs_connecting`).
    fn on_connect_event(&mut self, ev: CmEvent) {
        match ev.event_type() {
            CmEventType::Established => {
                let peer = match ev.param() {
                    EventParam::Conn(c) => ConnData::parse(&c.private_data),
                    _ => ConnData::parse(&[]),
                };
                match (peer, self.ep.as_mut()) {
                    (Ok(peer), Some(ep)) => {
                        ep.stream = Some(Stream::new(ep.cfg, ep.local, &peer));
                        self.phase = Phase::Connected;
                    }
                    // Not an rsocket (rdma-core: ENOTSUP): leave the connection.
                    _ => {
                        if let Some(id) = self.id.as_mut() {
                            let _ = id.disconnect();
                        }
                        self.connect_failed(libc::ENOTSUP);
                    }
                }
            }
            CmEventType::Rejected => self.connect_failed(libc::ECONNREFUSED),
            CmEventType::Unreachable
            | CmEventType::ConnectError
            | CmEventType::AddrError
            | CmEventType::RouteError => {
                let e = ev.status().abs();
                self.connect_failed(if e == 0 { libc::ECONNREFUSED } else { e });
            }
            CmEventType::Disconnected | CmEventType::DeviceRemoval => self.connect_failed(libc::ECONNRESET),
            _ => {}
        }
    }

    fn connect_failed(&mut self, e: Errno) {
        self.phase = Phase::ConnectError;
        self.err = e;
    }

    /// Where a connection attempt stands: `Ok` once connected, `EINPROGRESS` while waiting,
    /// its error when it failed (once: later calls get `ENOTCONN`, as rdma-core's).
    pub fn connect_state(&mut self) -> Result<(), Errno> {
        match self.phase {
            Phase::Connected => Ok(()),
            Phase::Connecting => Err(libc::EINPROGRESS),
            Phase::ConnectError => Err(libc::ENOTCONN),
            _ => Err(libc::EINVAL),
        }
    }

    // ---- accepting (the service thread) -------------------------------------------------

    /// `rlisten`.
    pub fn listen(&mut self, backlog: c_int) -> Result<(), Errno> {
        if self.phase == Phase::Listening {
            return Ok(());
        }
        let id = self.id.as_mut().ok_or(libc::EBADF)?;
        if self.phase == Phase::Init {
            let any: SocketAddr = if self.domain == libc::AF_INET6 {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            };
            id.bind_addr(any).map_err(|e| e.errno())?;
        }
        if id.device().is_none() {
            super::start_devices();
        }
        id.listen(backlog.max(0) as usize).map_err(|e| e.errno())?;
        self.accepted = Some(AcceptQueue::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?);
        self.phase = Phase::Listening;
        Ok(())
    }

    /// Accepts every connection request waiting on a listener (rdma-core's `rs_accept`, in
    /// its service thread): a request whose private data is not an rsocket's is rejected; the
    /// others get a socket, connected, queued for `raccept`. Returns how many.
    pub fn accept_pending(&mut self) -> usize {
        let mut out = 0;
        while let Ok(Some(mut ev)) = self.chan.try_get_event() {
            if ev.event_type() != CmEventType::ConnectRequest {
                continue;
            }
            let Some(mut id) = ev.take_id() else { continue };
            let (peer, req) = match ev.param() {
                EventParam::Conn(c) => (ConnData::parse(&c.private_data), c.clone()),
                _ => continue,
            };
            let Ok(peer) = peer else {
                self.refused += 1;
                let _ = id.reject(&[]);
                continue;
            };
            match self.accept_one(id, &peer, &req) {
                Ok(s) => {
                    if let Some(q) = self.accepted.as_mut() {
                        q.push(s);
                        out += 1;
                    }
                }
                Err(_) => self.refused += 1,
            }
        }
        out
    }

    fn accept_one(
        &self,
        mut id: CmId,
        peer: &ConnData,
        req: &crate::verbs::cm::ConnEventParam,
    ) -> Result<Box<StreamSock>, Errno> {
        let r = (|| {
            let chan = EventChannel::new().map_err(|e| e.errno())?;
            id.migrate(Some(&chan)).map_err(|e| e.errno())?;
            let opts = self.opts.inherit();
            let mut ep = Endpoint::create(&mut id, &opts)?;
            let param = ConnParam {
                private_data: ep.conn_data().emit().to_vec(),
                responder_resources: req.responder_resources,
                initiator_depth: req.initiator_depth,
                flow_control: req.flow_control,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                ..Default::default()
            };
            ep.stream = Some(Stream::new(ep.cfg, ep.local, peer));
            Ok((chan, ep, opts, param))
        })();
        let (chan, ep, opts, param) = match r {
            Ok(x) => x,
            Err(e) => {
                let _ = id.reject(&[]);
                return Err(e);
            }
        };
        id.accept(Some(&param)).map_err(|e| e.errno())?;
        // As rdma-core's rdma_accept on a synchronous id: the connection is the application's
        // once the active side has said it is ready (RTU, ESTABLISHED). Sending before that
        // reaches a peer QP that may not be ready to receive yet: kernel rxe drops, uncounted,
        // what arrives at a QP its program has not moved to RTR (the first credit update was
        // lost, then recovered by a NAK and a retransmission).
        match chan.get_event_timeout(ACCEPT_WAIT) {
            Ok(ev) if ev.event_type() == CmEventType::Established => {}
            Ok(ev) => {
                let _ = id.disconnect();
                return Err(if ev.status() != 0 { ev.status().abs() } else { libc::ECONNREFUSED });
            }
            Err(e) => {
                let _ = id.disconnect();
                return Err(e.errno());
            }
        }
        let mut s = StreamSock::with(self.domain, opts, chan, id);
        s.ep = Some(ep);
        s.phase = Phase::Connected;
        Ok(Box::new(s))
    }

    /// `raccept`'s step: the next accepted connection, if any, numbered now. The number is
    /// a new descriptor (a duplicate of its channel's), made after whatever the caller opened
    /// just before: `librspreload.so` opens the application's descriptor first, and its
    /// `select` finds an rsocket by scanning the application's descriptors in order for one
    /// that maps to the rsocket's number — a number lower than the application's descriptor
    /// would be found first, as itself, and the readiness reported on the wrong descriptor.
    pub fn take_accepted(&mut self) -> Option<Result<Arc<Socket>, Errno>> {
        let mut s = self.accepted.as_mut()?.pop()?;
        // SAFETY: fcntl on a descriptor the channel owns; the result is a descriptor we own.
        let n = unsafe { libc::fcntl(s.chan.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if n < 0 {
            let e = super::last_errno();
            s.close();
            return Some(Err(e));
        }
        // SAFETY: just made, ours alone.
        s.number = Some(unsafe { OwnedFd::from_raw_fd(n) });
        Some(Ok(Socket::stream_boxed(s)))
    }

    // ---- waiting ------------------------------------------------------------------------

    /// Prepares a sleep: arms the CQ; the descriptors to sleep on.
    pub fn arm(&mut self) -> Vec<libc::pollfd> {
        let pfd = |fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let mut fds = vec![pfd(self.fd())];
        if let Some(q) = &self.accepted {
            fds.push(pfd(q.rx.as_raw_fd()));
        }
        if let Some(ep) = self.ep.as_mut()
            && ep.stream.is_some()
        {
            fds.push(pfd(ep.arm()));
        }
        fds
    }

    /// `rpoll`'s view (rdma-core's `rs_poll_rs`): the events of `events` that hold now.
    pub fn poll_events(&mut self, events: i16) -> i16 {
        match self.phase {
            Phase::Listening => {
                let ready = self.accepted.as_ref().is_some_and(|q| !q.queue.is_empty());
                if ready { events & (libc::POLLIN | libc::POLLRDNORM) } else { 0 }
            }
            Phase::ConnectError => (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR,
            Phase::Connected => {
                let Some(s) = self.stream() else { return libc::POLLERR };
                let mut r = 0;
                if events & libc::POLLIN != 0 && s.have_data_or_closed() {
                    r |= libc::POLLIN;
                }
                if events & libc::POLLOUT != 0 && s.can_send() {
                    r |= libc::POLLOUT;
                }
                // The end of the connection once what arrived before it has been read (rdma-core
                // says POLLHUP at once, and a reader that stops at POLLHUP — rstream's
                // `do_poll` — then loses the last data when the close came in the same batch).
                if s.state == stream::DISCONNECTED && !s.have_data() {
                    r |= libc::POLLHUP;
                } else if s.state & stream::ERROR != 0 {
                    r |= libc::POLLERR;
                }
                r
            }
            _ => 0,
        }
    }

    /// Sends a keep-alive now (the service thread's timer).
    pub fn send_keepalive(&mut self) {
        let Some(ep) = self.ep.as_mut() else { return };
        let Some(s) = ep.stream.as_mut() else { return };
        if s.keepalive()
            && let Some(qp) = self.id.as_ref().and_then(|i| i.qp())
        {
            ep.flush(qp);
        }
    }

    // ---- data ---------------------------------------------------------------------------

    /// Sends the iomap entries not sent yet (before any data, as rdma-core's
    /// `rs_send_iomaps`); false while one waits for credits.
    fn send_iomaps(&mut self) -> bool {
        let Some(ep) = self.ep.as_mut() else { return true };
        let Some(s) = ep.stream.as_mut() else { return true };
        for m in self.iomaps.iter_mut().filter(|m| !m.sent) {
            let Some(index) = m.index else {
                m.sent = true;
                continue;
            };
            let iom = RsIomap {
                offset: m.offset,
                sge: RsSge { addr: m.mr.addr(), key: m.mr.rkey().value(), length: m.mr.len() as u32 },
            };
            if !s.send_iomap(index, iom) {
                return false;
            }
            m.sent = true;
        }
        if let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) {
            ep.flush(qp);
        }
        true
    }

    /// One step of `rsend`: sends what the credits allow from `data` (iomap entries first).
    pub fn send_step(&mut self, data: &[u8], olen: &mut u32) -> usize {
        if !self.send_iomaps() {
            return 0;
        }
        let Some(ep) = self.ep.as_mut() else { return 0 };
        let Some(s) = ep.stream.as_mut() else { return 0 };
        let n = s.send(data, olen, &ep.sbuf);
        if let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) {
            ep.flush(qp);
        }
        n
    }

    /// One step of `riowrite`.
    pub fn write_step(&mut self, data: &[u8], offset: u64, olen: &mut u32) -> usize {
        if !self.send_iomaps() {
            return 0;
        }
        let Some(ep) = self.ep.as_mut() else { return 0 };
        let Some(s) = ep.stream.as_mut() else { return 0 };
        let n = s.write_direct(data, offset, olen, &ep.sbuf, &ep.target);
        if let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) {
            ep.flush(qp);
        }
        n
    }

    /// One step of `rrecv`: copies what has arrived.
    pub fn recv_step(&mut self, dst: &mut [u8], peek: bool) -> usize {
        let Some(ep) = self.ep.as_mut() else { return 0 };
        let Some(s) = ep.stream.as_mut() else { return 0 };
        let n = s.recv(dst, peek, &ep.rbuf);
        if n > 0 && !peek {
            s.update_credits();
            if let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) {
                ep.flush(qp);
            }
        }
        n
    }

    /// The iomap table entry the peer's table has free (rdma-core's `rs_get_iomap_mr`).
    fn free_iomap_index(&self) -> Option<u32> {
        let n = self.stream()?.remote_iomap.length;
        (0..n).find(|i| !self.iomaps.iter().any(|m| m.index == Some(*i)))
    }

    /// `riomap`: registers `len` bytes at `buf` (remote-writable with `PROT_WRITE`, and then
    /// announced to the peer before the next data) under `offset` (-1: the address).
    ///
    /// # Safety
    /// `buf .. buf + len` stays valid until `riounmap` or `rclose` (the C contract).
    pub unsafe fn iomap(&mut self, buf: *mut u8, len: usize, write: bool, offset: i64) -> Result<i64, Errno> {
        let Some(ep) = self.ep.as_ref() else { return Err(libc::EINVAL) };
        let index = if write { Some(self.free_iomap_index().ok_or(libc::ENOMEM)?) } else { None };
        let access = if write { Access::LOCAL_WRITE | Access::REMOTE_WRITE } else { Access::LOCAL_WRITE };
        // SAFETY: per this function's contract; the application accepts that the peer writes
        // the memory at any time (riomap's purpose).
        let mr = unsafe { ep.pd.register_raw(buf, len, access) }.map_err(|e| e.errno())?;
        let offset = if offset == -1 { buf as i64 } else { offset };
        self.iomaps.push(IoMapping { mr, offset: offset as u64, index, sent: index.is_none() });
        Ok(offset)
    }

    /// `riounmap`.
    pub fn iounmap(&mut self, buf: *mut u8, len: usize) -> Result<(), Errno> {
        let at = self.iomaps.iter().position(|m| m.mr.addr() == buf as u64 && m.mr.len() == len);
        let i = at.ok_or(libc::EINVAL)?;
        self.iomaps.remove(i);
        Ok(())
    }

    /// `rshutdown`'s first step: the new state, and the control message for the peer.
    pub fn shutdown_flags(&mut self, how: c_int) -> Option<u32> {
        self.stream_mut()?.shutdown(how)
    }

    /// Sends control message `code` if a slot is free.
    pub fn send_ctrl(&mut self, code: u32) {
        let Some(ep) = self.ep.as_mut() else { return };
        let Some(s) = ep.stream.as_mut() else { return };
        if s.send_ctrl(code)
            && let Some(qp) = self.id.as_ref().and_then(|i| i.qp())
        {
            ep.flush(qp);
        }
    }

    // ---- ending -------------------------------------------------------------------------

    /// The local end of `rshutdown` once the peer has been told: a socket that is
    /// disconnected gets its QP moved to the error state (rdma-core's `ucma_shutdown`).
    pub fn shutdown_done(&mut self) {
        let disconnected = self.stream().is_some_and(|s| s.state & stream::DISCONNECTED != 0);
        if disconnected && let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) {
            let _ = qp.modify(&crate::verbs::QpAttrs::error());
        }
    }

    /// Drops everything (`rclose` after the shutdown): the id's destruction sends the DREQ
    /// (or answers the peer's), the QP and buffers go.
    pub fn close(&mut self) {
        self.iomaps.clear();
        // Connections accepted and never taken: closed as rclose would (told, then dropped).
        if let Some(q) = self.accepted.take() {
            for mut s in q.queue {
                s.close();
            }
        }
        if let Some(mut id) = self.id.take() {
            if matches!(self.phase, Phase::Connected | Phase::Connecting) {
                let _ = id.disconnect();
            }
            drop(id);
        }
        self.ep = None;
    }

    /// At exit: the connection's DREQ (as the kernel sends it for a process that ends); the
    /// device, to flush.
    pub fn disconnect_at_exit(&mut self) -> Option<crate::verbs::Device> {
        if self.phase != Phase::Connected {
            return None;
        }
        let id = self.id.as_mut()?;
        id.disconnect().ok()?;
        id.device().cloned()
    }

    /// The socket's address (`rgetsockname`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.as_ref().and_then(|i| i.src_addr())
    }

    /// The peer's address (`rgetpeername`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.as_ref().and_then(|i| i.dst_addr()).or(self.dst)
    }

    /// `TCP_MAXSEG`: the path MTU (rdma-core: `1 << (7 + path MTU enum)`, 2048 without a path).
    pub fn max_seg(&self) -> c_int {
        self.id.as_ref().and_then(|i| i.device()).map_or(2048, |d| d.query_port().active_mtu.bytes() as c_int)
    }
}
