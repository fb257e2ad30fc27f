//! Datagram rsockets (`SOCK_DGRAM`), as rdma-core 44's `ds_*` code speaks them on the wire.
//!
//! A datagram rsocket is an ordinary UDP socket (its descriptor is the socket's number, as in
//! rdma-core) plus one UD QP per local address it sends from. Every datagram on a QP starts
//! with a [`DsHeader`] (the sending socket's UDP address and port): that is the source
//! `rrecvfrom` reports. A peer whose QP is not known yet is reached through the UDP socket:
//! the datagram goes there behind a [`DsUdpHeader`] (op DATA: the sender's QP number and
//! address); the receiving socket answers with its own QP number (op CTRL), delivers the data
//! as if it had come over its QP, and both sides make an address handle towards the other's
//! UDP address (rdma-core resolves a route to it). From then on data goes over the QPs.
//!
//! Differences from rdma-core, none visible on the wire: the UDP socket is read by the calling
//! thread (in every call and in `rpoll`'s sleep) instead of a service thread; a datagram that
//! arrives through the UDP socket goes straight to the receive queue instead of looping
//! through the socket's own QP (rdma-core sends it to itself with an address handle made from
//! the port's LID, which a RoCE device refuses — which is why rdma-core 44's datagram
//! rsockets fail on kernel rxe, see `docs/design/rsockets.md`); a datagram longer than a
//! receive slot (2048 bytes with its header) or the path MTU is `EMSGSIZE` instead of an
//! overrun; `rsend` on an unconnected socket is `EDESTADDRREQ` instead of a crash.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::verbs::cm::{CmId, PortSpace};
use crate::verbs::{
    Access, AddressHandle, AddressVector, CompletionQueue, Gid, MemoryRegion, ProtectionDomain, Qkey,
    QpInitAttr, Qpn, RecvWr, SendWr, WcStatus, WorkCompletion,
};
use libc::c_int;

use super::Errno;
use super::proto::{
    self, DS_UDP_IPV4_HDR_LEN, DsHeader, DsUdpHeader, RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_ROUTE, RDMA_RQSIZE,
    RDMA_SQSIZE, SNDLOWAT, SOL_RDMA, op,
};
use super::table::{Defaults, Kind, Socket};
use super::wait;

/// A receive slot (and a send slot): rdma-core's `RS_SNDLOWAT`.
const SLOT: usize = SNDLOWAT as usize;
/// The GRH area in front of every UD receive.
const GRH: usize = crate::verbs::GRH_LEN;
/// Receive work request ids carry this bit; the rest is the slot's offset.
const RECV_FLAG: u64 = 1 << 63;
/// rdma_cm's Q_Key for UDP-port-space QPs.
const QKEY: u32 = crate::wire::cma::RDMA_UDP_QKEY;

/// One UD QP: the local address it sends from, its buffers and free send slots.
struct DsQp {
    /// The rdma_cm id (UDP port space) that owns the QP.
    id: CmId,
    cq: CompletionQueue,
    pd: ProtectionDomain,
    /// `rq_size` receive slots, then the GRH area.
    rbuf: MemoryRegion,
    /// `sq_size` send slots.
    sbuf: MemoryRegion,
    free: Vec<u32>,
    /// What precedes each datagram it sends.
    hdr: DsHeader,
    /// The largest datagram (header included) one packet carries.
    mtu: usize,
    armed: bool,
}

impl DsQp {
    fn qpn(&self) -> u32 {
        self.id.qp().map_or(0, |q| q.qp_num().value())
    }

    fn post_recv(&self, off: usize) -> Result<(), Errno> {
        let qp = self.id.qp().ok_or(libc::EIO)?;
        let grh_at = self.rbuf.len() - GRH;
        let sg = [self.rbuf.sge(grh_at, GRH as u32), self.rbuf.sge(off, SLOT as u32)];
        qp.post_recv(RecvWr::new(RECV_FLAG | off as u64, &sg)).map_err(|_| libc::EIO)
    }
}

/// A destination: the QP that sends to it and, once the peer's QP is known, the address
/// handle and QP number.
struct Dest {
    qp: usize,
    ah: Option<(AddressHandle, u32)>,
}

/// A datagram received: who sent it (its socket's address) and its bytes.
struct Rmsg {
    from: SocketAddr,
    data: Vec<u8>,
}

/// The sizes rdma-core keeps per datagram socket.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    sq_size: u16,
    rq_size: u16,
    sq_inline: u32,
    sbuf_size: u32,
    rbuf_size: u32,
    iomap_size: u16,
}

/// A datagram rsocket.
pub struct DatagramSock {
    udp: UdpSocket,
    domain: c_int,
    /// `rfcntl` flags.
    pub fd_flags: c_int,
    sizes: Sizes,
    /// `ds_init_ep` done (rdma-core's `rs_readable | rs_writable`).
    ready: bool,
    /// `rshutdown` done: no more receiving.
    shut: bool,
    qps: Vec<DsQp>,
    dests: HashMap<SocketAddr, Dest>,
    /// Where `rsend` goes (`rconnect`'s address, or the last `rsendto`'s, as rdma-core).
    conn: Option<SocketAddr>,
    rq: VecDeque<Rmsg>,
    /// Datagrams dropped: no room in the receive queue, or not an rsocket's (bad header).
    pub dropped: u64,
    /// UDP messages that were no rsocket's (bad tag, version or length).
    pub bad_udp: u64,
}

fn verbs_errno(e: crate::verbs::Error) -> Errno {
    e.errno()
}

fn io_errno(e: std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// rdma-core's `rs_any_addr`: the unspecified address or `127.0.0.1` / `::1` (not the
/// rest of 127/8, where softroce's loopback devices live).
fn any_addr(ip: IpAddr) -> bool {
    ip.is_unspecified()
        || ip == IpAddr::from([127, 0, 0, 1])
        || ip == IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
}

/// The address of the local device that reaches `to` (`rdma_resolve_addr`'s choice).
fn device_addr_towards(to: SocketAddr) -> Result<IpAddr, Errno> {
    // As rdma_resolve_addr without a source: every listed device is up.
    super::start_devices();
    let mut id = CmId::new(None, PortSpace::Udp).map_err(|e| e.errno())?;
    id.resolve_addr(None, to, Duration::from_secs(2)).map_err(|e| e.errno())?;
    id.src_addr().map(|a| a.ip()).ok_or(libc::EADDRNOTAVAIL)
}

impl DatagramSock {
    /// `rsocket(domain, SOCK_DGRAM, 0)`: the UDP socket (`ds_init`).
    pub fn new(domain: c_int, d: &Defaults) -> Result<DatagramSock, Errno> {
        // SAFETY: no pointers; a non-negative result is a descriptor we own.
        let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(super::last_errno());
        }
        // SAFETY: just created, owned by nobody else.
        let udp = UdpSocket::from(unsafe { OwnedFd::from_raw_fd(fd) });
        udp.set_nonblocking(true).map_err(io_errno)?;
        Ok(DatagramSock {
            udp,
            domain,
            fd_flags: 0,
            sizes: Sizes {
                sq_size: d.sqsize,
                rq_size: d.rqsize,
                sq_inline: u32::from(d.inline),
                sbuf_size: d.wmem,
                rbuf_size: d.mem,
                iomap_size: d.iomap_size,
            },
            ready: false,
            shut: false,
            qps: Vec::new(),
            dests: HashMap::new(),
            conn: None,
            rq: VecDeque::new(),
            dropped: 0,
            bad_udp: 0,
        })
    }

    /// The socket's number.
    pub fn fd(&self) -> c_int {
        self.udp.as_raw_fd()
    }

    /// rdma-core's `ds_init_ep` with `ds_set_qp_size`: the queues fitted to the buffers (one
    /// 2048-byte slot per work request).
    fn init_ep(&mut self) {
        if self.ready {
            return;
        }
        let s = &mut self.sizes;
        let fit = |q: &mut u16, buf: &mut u32| {
            let by_buf = (*buf / SNDLOWAT).min(u32::from(proto::QP_MAX_SIZE)) as u16;
            if *q > by_buf {
                *q = by_buf;
            } else {
                *buf = u32::from(*q) * SNDLOWAT;
            }
            *q = (*q).max(1);
        };
        fit(&mut s.rq_size, &mut s.rbuf_size);
        fit(&mut s.sq_size, &mut s.sbuf_size);
        self.ready = true;
    }

    /// `rbind`.
    pub fn bind(&mut self, a: SocketAddr) -> Result<(), Errno> {
        self.init_ep();
        let sa = socket2::SockAddr::from(a);
        // SAFETY: `sa` holds a sockaddr of `sa.len()` bytes.
        let r = unsafe { libc::bind(self.fd(), sa.as_ptr().cast(), sa.len()) };
        if r != 0 {
            return Err(super::last_errno());
        }
        Ok(())
    }

    /// `rconnect`: the UDP socket's peer, and where `rsend` goes.
    pub fn connect(&mut self, a: SocketAddr) -> Result<(), Errno> {
        self.init_ep();
        self.bind_towards(a)?;
        self.udp.connect(a).map_err(io_errno)?;
        self.dest(a)?;
        self.conn = Some(a);
        Ok(())
    }

    /// `rshutdown`: no more receiving; what was sent leaves first (`ds_shutdown`).
    pub fn shutdown(&mut self) {
        self.shut = true;
        self.drain_sends(Duration::from_secs(2));
    }

    /// Waits (at most `limit`) until every posted send has completed.
    fn drain_sends(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        while self.qps.iter().any(|q| q.free.len() < usize::from(self.sizes.sq_size)) && Instant::now() < end
        {
            self.poll_cqs();
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Takes what arrived on the UDP socket and the QPs; whether anything did.
    pub fn progress(&mut self) -> bool {
        if self.qps.iter().any(|q| q.armed) {
            for q in &mut self.qps {
                if q.armed {
                    q.cq.ack_notify();
                    q.armed = false;
                }
            }
        }
        let a = self.poll_udp();
        let b = self.poll_cqs();
        a || b
    }

    /// Room for one more received datagram.
    fn room(&self) -> bool {
        self.rq.len() < usize::from(self.sizes.rq_size.max(1))
    }

    /// rdma-core's `udp_svc_process_rs`, for every UDP message waiting.
    fn poll_udp(&mut self) -> bool {
        let mut any = false;
        let mut buf = [0u8; SLOT];
        loop {
            let (n, from) = match self.udp.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => return any,
            };
            any = true;
            let Some(h) =
                (n >= DS_UDP_IPV4_HDR_LEN).then(|| DsUdpHeader::parse(&buf[..n], from.is_ipv6())).flatten()
            else {
                self.bad_udp += 1;
                continue;
            };
            let data = &buf[h.len()..n];
            if self.dest(from).is_err() {
                self.dropped += 1;
                continue;
            }
            if h.op == op::DATA {
                // Our QP, so that the peer's next datagrams take it.
                let d = &self.dests[&from];
                let q = &self.qps[d.qp];
                let reply = DsUdpHeader { op: op::CTRL, qpn: q.qpn(), addr: q.hdr.addr.ip() };
                let _ = self.udp.send_to(&reply.emit(), from);
            }
            let stale =
                self.dests.get(&from).is_some_and(|d| d.ah.as_ref().is_none_or(|(_, qpn)| *qpn != h.qpn));
            if stale {
                self.make_ah(from, h.qpn);
            }
            if h.op == op::DATA {
                if self.ready && !self.shut && self.room() {
                    self.rq.push_back(Rmsg { from, data: data.to_vec() });
                } else {
                    self.dropped += 1;
                }
            }
        }
    }

    /// rdma-core's `udp_svc_create_ah`: an address handle from the QP that serves `to`
    /// towards `to`'s address (the peer's UDP socket's: rdma-core's choice too).
    fn make_ah(&mut self, to: SocketAddr, qpn: u32) {
        let Some(d) = self.dests.get_mut(&to) else { return };
        d.ah = None;
        let q = &self.qps[d.qp];
        let Some(dev) = q.id.device() else { return };
        let sgid = dev.gid_index_for(q.hdr.addr.ip()).unwrap_or_else(|| dev.default_gid_index());
        if let Ok(ah) = q.pd.create_ah(&AddressVector::new(Gid::from_ip(to.ip()), sgid)) {
            d.ah = Some((ah, qpn & 0xFF_FFFF));
        }
    }

    /// An unbound UDP socket binds to the address of the device that reaches `to` (port 0:
    /// an ephemeral one) before its first `rconnect` or `rsendto`, so that its datagrams come
    /// from the address its QP has. (rdma-core lets the kernel bind it at the first send: on a
    /// host whose RDMA device sits on the interface that reaches the peer, the same address;
    /// softroce's loopback devices live on 127/8 addresses the kernel would not pick.)
    fn bind_towards(&mut self, to: SocketAddr) -> Result<(), Errno> {
        let mine = self.udp.local_addr().map_err(io_errno)?;
        if mine.port() != 0 || !mine.ip().is_unspecified() {
            return Ok(());
        }
        let ip = device_addr_towards(to)?;
        self.bind(SocketAddr::new(ip, 0))
    }

    /// rdma-core's `ds_get_src_addr`: the local address (and the UDP socket's port) that
    /// sends to `to` — the socket's own, unless that is "any" or 127.0.0.1, then the address
    /// of the device that reaches `to` (rdma-core asks the kernel's routing instead, which
    /// names the same address on a host whose device sits on the interface).
    fn src_addr(&self, to: SocketAddr) -> Result<SocketAddr, Errno> {
        let mine = self.udp.local_addr().map_err(io_errno)?;
        if !any_addr(mine.ip()) {
            return Ok(mine);
        }
        Ok(SocketAddr::new(device_addr_towards(to)?, mine.port()))
    }

    /// rdma-core's `ds_get_dest`: the destination `to`, made (with a QP for the local address
    /// that reaches it) if new.
    fn dest(&mut self, to: SocketAddr) -> Result<(), Errno> {
        if self.dests.contains_key(&to) {
            return Ok(());
        }
        let src = self.src_addr(to)?;
        let qp = match self.qps.iter().position(|q| q.hdr.addr == src) {
            Some(i) => i,
            None => {
                let q = self.create_qp(src)?;
                self.qps.push(q);
                self.qps.len() - 1
            }
        };
        self.dests.insert(to, Dest { qp, ah: None });
        Ok(())
    }

    /// rdma-core's `ds_create_qp`: an id bound to `src` in the UDP port space, its UD QP, the
    /// buffers and a full receive queue.
    fn create_qp(&mut self, src: SocketAddr) -> Result<DsQp, Errno> {
        self.init_ep();
        let mut id = CmId::new(None, PortSpace::Udp).map_err(|e| e.errno())?;
        id.bind_addr(src).map_err(|e| e.errno())?;
        let dev = id.device().cloned().ok_or(libc::ENODEV)?;
        let max = dev.query_device().max_qp_wr.min(u32::from(proto::QP_MAX_SIZE)) as u16;
        let (sq, rq) = (self.sizes.sq_size.min(max).max(1), self.sizes.rq_size.min(max).max(1));
        self.sizes.sq_size = sq;
        self.sizes.rq_size = rq;
        let pd = dev.alloc_pd().map_err(verbs_errno)?;
        let cq = dev.create_cq(usize::from(sq) + usize::from(rq)).map_err(verbs_errno)?;
        let inline = self.sizes.sq_inline.min(dev.query_device().max_inline_data);
        let init = QpInitAttr::ud(&cq, &cq)
            .max_send_wr(u32::from(sq))
            .max_recv_wr(u32::from(rq))
            .max_send_sge(1)
            .max_recv_sge(2)
            .max_inline_data(inline)
            .signal_all();
        id.create_qp(Some(&pd), &init).map_err(|e| e.errno())?;
        let rbuf = pd.alloc_mr(usize::from(rq) * SLOT + GRH, Access::LOCAL_WRITE).map_err(verbs_errno)?;
        let sbuf = pd.alloc_mr(usize::from(sq) * SLOT, Access::LOCAL_WRITE).map_err(verbs_errno)?;
        let mtu = dev.query_port().active_mtu.bytes() as usize;
        let q = DsQp {
            id,
            cq,
            pd,
            rbuf,
            sbuf,
            free: (0..u32::from(sq)).rev().collect(),
            hdr: DsHeader { addr: src },
            mtu,
            armed: false,
        };
        for i in 0..usize::from(rq) {
            q.post_recv(i * SLOT)?;
        }
        Ok(q)
    }

    /// rdma-core's `ds_poll_cqs`: received datagrams into the queue (those without room, or
    /// not an rsocket's, dropped and their slots posted again), send slots back.
    fn poll_cqs(&mut self) -> bool {
        let mut any = false;
        let mut wcs: [WorkCompletion; 16] = std::array::from_fn(|_| blank_wc());
        for i in 0..self.qps.len() {
            loop {
                let n = self.qps[i].cq.poll(&mut wcs).unwrap_or(0);
                for wc in &wcs[..n] {
                    self.on_wc(i, wc);
                }
                any |= n > 0;
                if n < wcs.len() {
                    break;
                }
            }
        }
        any
    }

    fn on_wc(&mut self, i: usize, wc: &WorkCompletion) {
        if wc.wr_id & RECV_FLAG == 0 {
            self.qps[i].free.push(wc.wr_id as u32);
            return;
        }
        let off = (wc.wr_id & !RECV_FLAG) as usize;
        if off + SLOT > self.qps[i].rbuf.len() - GRH {
            return;
        }
        let len = (wc.byte_len as usize).saturating_sub(GRH).min(SLOT);
        if wc.status == WcStatus::Success && self.ready && !self.shut && self.room() {
            let mut b = vec![0u8; len];
            let _ = self.qps[i].rbuf.read(off, &mut b);
            // rdma-core's `ds_valid_recv`: a version and length that agree; the header must
            // also fit in what arrived (rdma-core would underflow its length).
            match DsHeader::parse(&b).filter(|h| h.len() <= len) {
                Some(h) => {
                    b.drain(..h.len());
                    self.rq.push_back(Rmsg { from: h.addr, data: b });
                }
                None => self.dropped += 1,
            }
        } else if wc.status == WcStatus::Success {
            self.dropped += 1;
        }
        if wc.status != WcStatus::WrFlushErr {
            let _ = self.qps[i].post_recv(off);
        }
    }

    /// Whether `rsend` would go at once (rdma-core's `ds_can_send`: a free send slot).
    fn can_send(&self) -> bool {
        match self.conn.and_then(|c| self.dests.get(&c)) {
            Some(d) if d.ah.is_some() => !self.qps[d.qp].free.is_empty(),
            _ => true,
        }
    }

    /// `rpoll`'s view.
    pub fn poll_events(&mut self, events: i16) -> i16 {
        let mut r = 0;
        if events & libc::POLLIN != 0 && !self.rq.is_empty() {
            r |= libc::POLLIN;
        }
        if events & libc::POLLOUT != 0 && self.can_send() {
            r |= libc::POLLOUT;
        }
        r
    }

    /// Prepares a sleep: the CQs armed, the UDP socket.
    pub fn arm(&mut self) -> Vec<libc::pollfd> {
        let mut v = vec![libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 }];
        for q in &mut self.qps {
            if !q.armed {
                q.cq.req_notify();
                q.armed = true;
            }
            v.push(libc::pollfd { fd: q.cq.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        v
    }

    /// `rclose`: what was sent leaves first.
    pub fn close(&mut self) {
        self.drain_sends(Duration::from_secs(2));
        self.dests.clear();
        self.qps.clear();
    }

    /// `rgetsockname` / `rgetpeername`: the UDP socket's.
    pub fn name(&self, peer: bool) -> Result<(Option<SocketAddr>, c_int), Errno> {
        let a = if peer { self.udp.peer_addr() } else { self.udp.local_addr() };
        match a {
            Ok(a) => Ok((Some(a), self.domain)),
            Err(e) if peer => Err(io_errno(e)),
            Err(_) => Ok((None, self.domain)),
        }
    }

    /// `rsetsockopt`: the UDP socket's options go to it first (as rdma-core), then the
    /// rsocket keeps the ones it knows.
    pub fn setsockopt(&mut self, l: c_int, n: c_int, v: &[u8]) -> Result<(), Errno> {
        let int = || -> Result<u32, Errno> {
            Ok(u32::from_ne_bytes(v.get(..4).and_then(|b| b.try_into().ok()).ok_or(libc::EINVAL)?))
        };
        if l != SOL_RDMA {
            // SAFETY: `v` is `v.len()` readable bytes.
            let r =
                unsafe { libc::setsockopt(self.fd(), l, n, v.as_ptr().cast(), v.len() as libc::socklen_t) };
            if r != 0 {
                return Err(super::last_errno());
            }
        }
        match (l, n) {
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
                if self.qps.is_empty() {
                    self.sizes.rbuf_size = int()?.saturating_mul(2);
                }
            }
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
                if !self.ready {
                    self.sizes.sbuf_size = int()?.saturating_mul(2).max(SNDLOWAT << 1);
                }
            }
            (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_LINGER | libc::SO_OOBINLINE) => {}
            (SOL_RDMA, _) => {
                if self.ready {
                    return Err(libc::EINVAL);
                }
                let cap = |x: u32| x.min(u32::from(proto::QP_MAX_SIZE));
                match n {
                    RDMA_SQSIZE => self.sizes.sq_size = cap(int()?) as u16,
                    RDMA_RQSIZE => self.sizes.rq_size = cap(int()?) as u16,
                    RDMA_INLINE => self.sizes.sq_inline = cap(int()?),
                    RDMA_IOMAPSIZE => {
                        let s = proto::value_to_scale(int()?, 8) & 0xFF;
                        self.sizes.iomap_size = proto::scale_to_value(s, 8) as u16;
                    }
                    RDMA_ROUTE => {}
                    _ => return Err(libc::ENOTSUP),
                }
            }
            _ => return Err(libc::ENOTSUP),
        }
        Ok(())
    }

    /// `rgetsockopt`.
    pub fn getsockopt(&mut self, l: c_int, n: c_int) -> Result<Vec<u8>, Errno> {
        let int = |v: u32| Ok((v as c_int).to_ne_bytes().to_vec());
        match (l, n) {
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => int(self.sizes.rbuf_size),
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => int(self.sizes.sbuf_size),
            (libc::SOL_SOCKET, libc::SO_TYPE) => int(libc::SOCK_DGRAM as u32),
            (libc::SOL_SOCKET, libc::SO_ERROR) => int(0),
            (SOL_RDMA, RDMA_SQSIZE) => int(self.sizes.sq_size.into()),
            (SOL_RDMA, RDMA_RQSIZE) => int(self.sizes.rq_size.into()),
            (SOL_RDMA, RDMA_INLINE) => int(self.sizes.sq_inline),
            (SOL_RDMA, RDMA_IOMAPSIZE) => int(self.sizes.iomap_size.into()),
            _ => Err(libc::ENOTSUP),
        }
    }

    /// One try at sending `data` to the current destination: `None` when a send slot must
    /// free up first.
    fn try_send(&mut self, data: &[u8], flags: c_int) -> Option<Result<usize, Errno>> {
        let Some(to) = self.conn else { return Some(Err(libc::EDESTADDRREQ)) };
        let Some(d) = self.dests.get(&to) else { return Some(Err(libc::EDESTADDRREQ)) };
        let q = &self.qps[d.qp];
        let total = q.hdr.len() + data.len();
        if total > SLOT {
            return Some(Err(libc::EMSGSIZE));
        }
        let Some((ah, qpn)) = &d.ah else {
            // rdma-core's `ds_send_udp`: through the peer's UDP socket, which answers with its
            // QP.
            let h = DsUdpHeader { op: op::DATA, qpn: q.qpn(), addr: q.hdr.addr.ip() };
            let mut m = h.emit();
            m.extend_from_slice(data);
            let sa = socket2::SockAddr::from(to);
            // SAFETY: `m` is readable, `sa` holds a sockaddr of `sa.len()` bytes.
            let r = unsafe {
                libc::sendto(
                    self.fd(),
                    m.as_ptr().cast(),
                    m.len(),
                    flags & !libc::MSG_DONTWAIT,
                    sa.as_ptr().cast(),
                    sa.len(),
                )
            };
            return Some(if r < 0 {
                Err(super::last_errno())
            } else {
                Ok((r as usize).saturating_sub(h.len()))
            });
        };
        if total > q.mtu {
            return Some(Err(libc::EMSGSIZE));
        }
        let dest = ah.dest(Qpn::new(*qpn), Qkey::new(QKEY));
        let (qi, hdr) = (d.qp, q.hdr);
        let q = &mut self.qps[qi];
        let slot = q.free.pop()?;
        let off = slot as usize * SLOT;
        let _ = q.sbuf.write(off, &hdr.emit());
        let _ = q.sbuf.write(off + hdr.len(), data);
        let wr = SendWr::send(u64::from(slot), &[q.sbuf.sge(off, total as u32)]).to(dest);
        let posted = q.id.qp().map(|qp| qp.post_send(wr));
        Some(match posted {
            Some(Ok(())) => Ok(data.len()),
            _ => {
                q.free.push(slot);
                Err(libc::EIO)
            }
        })
    }
}

fn blank_wc() -> WorkCompletion {
    WorkCompletion::new(0, WcStatus::Success, crate::verbs::WcOpcode::Send, Qpn::new(0))
}

/// Runs `step` on datagram socket `sock` (after taking what arrived) until it answers,
/// sleeping on the socket's descriptors in between; `EAGAIN` instead of sleeping when
/// `nonblock`.
fn drive<T>(
    sock: &Socket,
    nonblock: bool,
    mut step: impl FnMut(&mut DatagramSock) -> Option<Result<T, Errno>>,
) -> Result<T, Errno> {
    loop {
        let mut fds = {
            let mut g = sock.inner.lock();
            let Kind::Datagram(d) = &mut *g else { return Err(libc::EBADF) };
            let changed = d.progress();
            let r = step(d);
            if changed {
                wait::signal();
            }
            match r {
                Some(r) => return r,
                None if nonblock => {
                    drop(g);
                    super::calls::yield_cpu();
                    return Err(libc::EAGAIN);
                }
                None => d.arm(),
            }
        };
        wait::sleep(&mut fds, None);
    }
}

fn nonblocking(sock: &Socket, flags: c_int) -> bool {
    let f = match &*sock.inner.lock() {
        Kind::Datagram(d) => d.fd_flags,
        _ => 0,
    };
    f & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
}

/// `rsendto` / `rsend` (`to`: `None` for the connected address).
pub fn send(s: &Socket, data: &[u8], flags: c_int, to: Option<SocketAddr>) -> Result<usize, Errno> {
    let nonblock = nonblocking(s, flags);
    {
        let mut g = s.inner.lock();
        let Kind::Datagram(d) = &mut *g else { return Err(libc::EBADF) };
        d.init_ep();
        if let Some(to) = to
            && d.conn != Some(to)
        {
            d.bind_towards(to)?;
            d.dest(to)?;
            d.conn = Some(to);
        }
    }
    drive(s, nonblock, |d| d.try_send(data, flags))
}

/// `rrecvfrom`: the length and the sender.
pub fn recv(s: &Socket, b: &mut [u8], flags: c_int) -> Result<(usize, Option<SocketAddr>), Errno> {
    let nonblock = nonblocking(s, flags);
    let peek = flags & libc::MSG_PEEK != 0;
    drive(s, nonblock, |d| {
        if !d.ready || d.shut {
            return Some(Err(libc::EINVAL));
        }
        let m = d.rq.front()?;
        let n = b.len().min(m.data.len());
        b[..n].copy_from_slice(&m.data[..n]);
        let from = m.from;
        if !peek {
            d.rq.pop_front();
        }
        Some(Ok((n, Some(from))))
    })
}
