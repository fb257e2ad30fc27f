//! The UDP-socket backend: unprivileged, a receive socket bound to `<ip>:4791` for each local
//! address the device serves.
//!
//! # Addresses
//!
//! A device serves one address or, opened on an interface, two: its IPv4 address and its IPv6
//! link-local one (GID 0, see [`crate::verbs::device`]). Each gets its own receive socket
//! (a link-local one bound with the interface as scope, and with `IPV6_FREEBIND` so that an
//! address still in duplicate address detection binds and starts receiving once it is
//! usable), and a packet leaves from a socket bound to the address the engine chose as its
//! source (a link-local destination without a scope gets the interface's).
//!
//! # Sending
//!
//! Packets leave from unconnected sockets with `IP_MTU_DISCOVER` set (quinn-udp sets
//! `IP_PMTUDISC_PROBE`), so the kernel writes IP identification 0 and sets DF: the ICRC,
//! which covers both, can be computed before the packet is handed over (kernel rxe drops a
//! packet with the wrong ICRC silently). Equal-sized packets to one peer go out in one
//! `sendmsg` with UDP GSO; where the kernel segments them, segment `k` gets identification `k`
//! and its ICRC is computed for that value. Each RC/UC QP sends from the UDP source port rxe
//! would give it (`0xC000 | flow label`): a send-only socket per source address and port; if
//! one cannot be bound, that address's receive socket (port 4791) is used instead.
//!
//! # Several engines
//!
//! A device with `n > 1` engine threads binds `n` receive sockets to each `<ip>:4791` with
//! `SO_REUSEPORT`, one per engine, in engine order, and attaches a classic BPF program to each
//! group (`SO_ATTACH_REUSEPORT_CBPF`): for a UDP socket the kernel runs it with the UDP header
//! pulled (`run_bpf_filter` in `net/core/sock_reuseport.c`, called from the UDP lookup with
//! `hdr_len = sizeof(struct udphdr)`), so offset 0 is the BTH, and the program returns the
//! destination QP (BTH bytes 5..8) modulo `n`: the index of the socket, in the order they were
//! bound, of the engine that owns the QP. A packet too short to read gives 0; an index past
//! the group falls back to the kernel's hash, and the engine passes such a packet on.
//!
//! # Receiving
//!
//! `recvmmsg` with UDP GRO on each 4791 socket, a batch from each per call. A UDP socket does not show the IPv4
//! identification and flags, which the ICRC covers; the engine recovers them from the ICRC
//! itself (see [`crate::wire::icrc::recover_ipv4_id`]): the check then detects a random
//! corruption with probability 1 - 2^-15 instead of 1 - 2^-32. IPv6 packets are checked at full
//! strength.

use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};

use super::RxCounters;
use super::{Backend, Datagram, Outgoing, bpf, filter};

/// Datagrams per `recvmmsg`.
const BATCH: usize = 32;
/// Bytes per receive slot: a GRO super-packet of up to 64 KiB.
const SLOT: usize = 65536;
/// The receive buffer asked for. Peers send whole windows back to back (an RC QP up to 256
/// packets, a UC sender as fast as it can), and the engine reads between other work: the
/// kernel drops what does not fit (`rcvd_socket_drops`). Without privilege the kernel caps the
/// size at `net.core.rmem_max` (Debian's default gives 416 KiB); with `CAP_NET_ADMIN`
/// (root) `SO_RCVBUFFORCE` goes past it.
pub(crate) const RCVBUF: usize = 32 << 20;

/// Send sockets kept open at most (one per UDP source port in use: RC QPs send from a port
/// hashed from their QP numbers, as rxe). Past it the least recently used one is closed (and
/// opened again if its port is used again).
pub(crate) const MAX_SENDERS: usize = 256;

/// A send socket bound to one source address and port, and when it was last used.
struct Sender {
    sock: Option<(UdpSocket, UdpSocketState)>,
    last_use: u64,
}

/// One local address the backend serves: its receive socket (this engine's, in a group).
struct Local {
    /// The bound address (a link-local one with its interface as scope).
    addr: SocketAddr,
    sock: mio::net::UdpSocket,
    state: UdpSocketState,
    /// The receive socket's inode, to find its line in `/proc/net/udp{,6}`.
    inode: Option<u64>,
    /// The socket's kernel drop count as last added to `rx.socket_drops` (several sockets
    /// add up there).
    drops_seen: u64,
    /// The receive filter is attached ([`super::filter`]).
    filtered: bool,
}

pub(crate) struct UdpBackend {
    gso: bool,
    port: u16,
    /// The addresses served, the device's own first.
    locals: Vec<Local>,
    senders: HashMap<(IpAddr, u16), Sender>,
    /// Sends so far (the clock of `Sender::last_use`).
    sends: u64,
    bufs: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
    rx: Arc<RxCounters>,
    /// The first receive socket's buffer, as the kernel granted it.
    rcvbuf: Option<usize>,
    /// Send sockets are bound with `SO_REUSEPORT` (the engines of one device share source
    /// ports).
    reuse_senders: bool,
}

/// The address a socket for local address `ip` binds: with `scope` (the interface index) as
/// its scope when `ip` is IPv6 link-local, which can only be bound on one interface.
pub(crate) fn local_socket_addr(ip: IpAddr, port: u16, scope: u32) -> SocketAddr {
    match ip {
        IpAddr::V6(v6) if v6.is_unicast_link_local() => SocketAddrV6::new(v6, port, 0, scope).into(),
        _ => SocketAddr::new(ip, port),
    }
}

fn bind(addr: SocketAddr) -> io::Result<socket2::Socket> {
    bind_with(addr, false)
}

/// Binds a UDP socket to `addr`, with `SO_REUSEPORT` when `reuse_port`.
///
/// IPv6: `UDP_NO_CHECK6_RX`, since kernel rxe sends RoCEv2 over IPv6 with UDP checksum 0 (its
/// own tunnel socket accepts that; the ICRC covers the packet) and an ordinary UDPv6 socket
/// drops such datagrams (counted in the kernel's `Udp6InCsumErrors`). A link-local address
/// binds with `IPV6_FREEBIND`: one still in duplicate address detection (tentative, the first
/// second or two after its interface came up) cannot be bound otherwise; the socket receives
/// once the address is usable.
pub(crate) fn bind_with(addr: SocketAddr, reuse_port: bool) -> io::Result<socket2::Socket> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if let SocketAddr::V6(v6) = addr {
        s.set_only_v6(true)?;
        set_udp_option(&s, libc::UDP_NO_CHECK6_RX)?;
        if v6.ip().is_unicast_link_local() {
            s.set_freebind_v6(true)?;
        }
    }
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    s.bind(&addr.into())?;
    Ok(s)
}

/// Turns on the `SOL_UDP` option `name` of `s`.
fn set_udp_option(s: &socket2::Socket, name: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a plain int option; the kernel reads `size_of::<c_int>()` bytes from `&one`.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_UDP,
            name,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The classic BPF program that picks the socket of the engine owning a packet's destination
/// QP, for a group of `n` sockets: `A = payload[4..8] (big-endian) & 0xffffff; A %= n; return
/// A`. (BTH: opcode, flags, P_Key (2), reserved, DestQP (3).)
pub(crate) fn steering_program(n: u32) -> [libc::sock_filter; 4] {
    let op = |code: u32, k: u32| libc::sock_filter { code: code as u16, jt: 0, jf: 0, k };
    [
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 4),
        op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0x00ff_ffff),
        op(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, n.max(1)),
        op(libc::BPF_RET | libc::BPF_A, 0),
    ]
}

/// Attaches [`steering_program`] to the `SO_REUSEPORT` group of `s`.
fn attach_steering(s: &socket2::Socket, n: u32) -> io::Result<()> {
    attach_program(s, &steering_program(n))
}

/// Attaches classic BPF program `prog` to the `SO_REUSEPORT` group of `s` (replacing the
/// group's program: one per group, whichever member attaches it).
pub(crate) fn attach_program(s: &socket2::Socket, prog: &[libc::sock_filter]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut prog = prog.to_vec();
    let len = u16::try_from(prog.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fprog = libc::sock_fprog { len, filter: prog.as_mut_ptr() };
    // SAFETY: the kernel copies `fprog.len` instructions from `fprog.filter`, which points
    // into `prog`, alive and unmoved for the call; it reads `size_of::<sock_fprog>()` bytes
    // from `&fprog`.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// `out`'s packets with their ICRC recomputed for UDP source port `port` (the IP fields the
/// kernel gives a datagram from an unconnected socket: ID 0, DF; TOS and TTL are masked out).
fn with_icrc_for_port(out: &Outgoing<'_>, port: u16) -> Vec<u8> {
    use crate::wire::ICRC_LEN;
    use crate::wire::roce::{IpRepr, RoceFrameRepr};
    // (never mixed families: the engine builds both addresses from one path)
    let Some(ip) = IpRepr::for_udp_socket(out.src_ip, out.dst.ip(), out.tos, out.hop_limit, out.flow_label)
    else {
        return out.contents.to_vec();
    };
    let frame = RoceFrameRepr { ip, src_port: port, dst_port: out.dst.port(), udp_checksum: false };
    let mut buf = out.contents.to_vec();
    for pkt in buf.chunks_mut(out.segment_size.max(1)) {
        let Some(body) = pkt.len().checked_sub(ICRC_LEN) else { continue };
        if let Ok(crc) = frame.icrc(&pkt[..body]) {
            pkt[body..].copy_from_slice(&crc.to_le_bytes());
        }
    }
    buf
}

/// An address that could not be bound, and why.
pub(crate) type BindError = (SocketAddr, io::Error);

impl UdpBackend {
    /// Binds each of `addrs` (port 0: one the kernel picks for the first address, the same
    /// for the others).
    pub(crate) fn new(addrs: &[SocketAddr], gso: bool, rx: Arc<RxCounters>) -> Result<UdpBackend, BindError> {
        let mut socks = Vec::with_capacity(addrs.len());
        for addr in with_common_port(addrs)? {
            socks.push((addr, bind(addr).map_err(|e| (addr, e))?));
        }
        UdpBackend::from_sockets(socks, gso, rx)
    }

    /// `n` backends whose receive sockets share each of `addrs` (`SO_REUSEPORT`, bound in
    /// order), with the kernel steering each packet to the socket of index `DestQP % n`.
    /// Fails, as one socket would, when an address is in use (by any socket).
    pub(crate) fn group(
        addrs: &[SocketAddr],
        gso: bool,
        rx: Arc<RxCounters>,
        n: usize,
    ) -> Result<Vec<UdpBackend>, BindError> {
        // A plain bind first (`with_common_port`): it fails if anything holds the address
        // (another device's group included), which a SO_REUSEPORT bind would join instead;
        // it also picks the port when it is 0.
        // socks[engine] = that engine's socket of each address.
        let mut socks: Vec<Vec<(SocketAddr, socket2::Socket)>> = (0..n).map(|_| Vec::new()).collect();
        for addr in with_common_port(addrs)? {
            for engine in socks.iter_mut() {
                engine.push((addr, bind_with(addr, true).map_err(|e| (addr, e))?));
            }
            if let Some((_, s)) = socks.first().and_then(|e| e.last()) {
                attach_steering(s, n as u32).map_err(|e| (addr, e))?;
            }
        }
        let mut group = Vec::with_capacity(n);
        for s in socks {
            let mut b = UdpBackend::from_sockets(s, gso, rx.clone())?;
            // Two QPs of the device on different engines may send from the same source port
            // (an RC pair connected to each other always does: the port hashes both QPNs):
            // each engine binds its own send socket to it. Without SO_REUSEPORT the second
            // bind fails, and that engine's packets would leave from 4791 instead (their ICRC
            // recomputed for it, `send_port_fallback`), not from the port rxe would use.
            b.reuse_senders = true;
            group.push(b);
        }
        Ok(group)
    }

    /// Backends on sockets of a shared address's groups ([`crate::engine::share`]), one per
    /// address: their send sockets too are bound with `SO_REUSEPORT`, since other processes'
    /// QPs on the address may send from the same source ports.
    pub(crate) fn from_shared(
        socks: Vec<(SocketAddr, socket2::Socket)>,
        gso: bool,
        rx: Arc<RxCounters>,
    ) -> Result<UdpBackend, BindError> {
        let mut b = UdpBackend::from_sockets(socks, gso, rx)?;
        b.reuse_senders = true;
        Ok(b)
    }

    /// A backend on bound sockets `socks`, one per local address (the port of the first is
    /// the device's port, what packets are sent to).
    fn from_sockets(
        socks: Vec<(SocketAddr, socket2::Socket)>,
        gso: bool,
        rx: Arc<RxCounters>,
    ) -> Result<UdpBackend, BindError> {
        let port = socks.first().map_or(0, |(a, _)| a.port());
        let mut locals = Vec::with_capacity(socks.len());
        let mut rcvbuf = None;
        for (addr, s) in socks {
            s.set_nonblocking(true).map_err(|e| (addr, e))?;
            // What cannot be RoCE is dropped in the kernel (issue 30). A kernel that refuses
            // the filter only costs the engine its own checks.
            let filtered = filter::udp_socket_filter(None, filter::SAMPLE)
                .is_some_and(|prog| bpf::attach_filter(std::os::fd::AsRawFd::as_raw_fd(&s), &prog).is_ok());
            set_recv_buffer(&s, RCVBUF);
            if locals.is_empty() {
                rcvbuf = s.recv_buffer_size().ok();
            }
            let inode = socket_inode(&s);
            let std_sock: UdpSocket = s.into();
            let state = UdpSocketState::new((&std_sock).into()).map_err(|e| (addr, e))?;
            let sock = mio::net::UdpSocket::from_std(std_sock);
            locals.push(Local { addr, sock, state, inode, drops_seen: 0, filtered });
        }
        Ok(UdpBackend {
            gso,
            port,
            locals,
            senders: HashMap::new(),
            sends: 0,
            bufs: (0..BATCH).map(|_| vec![0u8; SLOT]).collect(),
            metas: vec![RecvMeta::default(); BATCH],
            rx,
            rcvbuf,
            reuse_senders: false,
        })
    }

    /// The send socket for a source address and port, created on first use (blocking, large
    /// buffer); the least recently used one is closed when [`MAX_SENDERS`] are open.
    fn sender(&mut self, local: SocketAddr, port: u16) -> Option<&(UdpSocket, UdpSocketState)> {
        self.sends += 1;
        let key = (local.ip(), port);
        if !self.senders.contains_key(&key) && self.senders.len() >= MAX_SENDERS {
            let oldest = self.senders.iter().min_by_key(|(_, s)| s.last_use).map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.senders.remove(&k);
            }
        }
        let reuse = self.reuse_senders;
        let entry = self.senders.entry(key).or_insert_with(|| Sender {
            sock: (|| {
                let mut addr = local;
                addr.set_port(port);
                let s = bind_with(addr, reuse).ok()?;
                let _ = s.set_send_buffer_size(8 << 20);
                let _ = s.set_recv_buffer_size(4096);
                let sock: UdpSocket = s.into();
                let state = UdpSocketState::new((&sock).into()).ok()?;
                Some((sock, state))
            })(),
            last_use: 0,
        });
        entry.last_use = self.sends;
        entry.sock.as_ref()
    }
}

/// `addrs` with port 0 replaced by the port the kernel gives a first bind (the same for
/// all); every address is bound once (and let go), so that one in use fails here.
fn with_common_port(addrs: &[SocketAddr]) -> Result<Vec<SocketAddr>, BindError> {
    let mut port = addrs.first().map_or(0, |a| a.port());
    let mut out = Vec::with_capacity(addrs.len());
    for a in addrs {
        let mut a = *a;
        a.set_port(port);
        let s = bind(a).map_err(|e| (a, e))?;
        port = s.local_addr().ok().and_then(|b| b.as_socket()).map_or(port, |b| b.port());
        a.set_port(port);
        out.push(a);
    }
    Ok(out)
}

impl Backend for UdpBackend {
    fn port(&self) -> u16 {
        self.port
    }

    fn recv(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<usize> {
        let mut count = 0;
        let mut first_err = None;
        // A batch from each address's socket.
        for local in &self.locals {
            let mut slices: Vec<IoSliceMut<'_>> = self.bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            let n = match local.state.recv((&local.sock).into(), &mut slices, &mut self.metas) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    first_err.get_or_insert(e);
                    continue;
                }
            };
            drop(slices);
            for (meta, buf) in self.metas[..n].iter().zip(&self.bufs) {
                let dst = meta.dst_ip.unwrap_or(local.addr.ip());
                let ecn = meta.ecn.map_or(0, |e| e as u8);
                let stride = meta.stride.max(1);
                for seg in buf[..meta.len].chunks(stride) {
                    f(Datagram {
                        payload: seg,
                        src: meta.addr,
                        dst,
                        dst_port: self.port,
                        ecn,
                        ip_header: None,
                    });
                    count += 1;
                }
            }
        }
        match first_err {
            Some(e) if count == 0 => Err(e),
            _ => Ok(count),
        }
    }

    fn send(&mut self, out: Outgoing<'_>) -> io::Result<()> {
        let Some(i) = self.locals.iter().position(|l| l.addr.ip() == out.src_ip) else {
            // (The engine sends only from the device's addresses.)
            return Err(io::Error::from(io::ErrorKind::AddrNotAvailable));
        };
        let local = self.locals[i].addr;
        let mut destination = out.dst;
        // A link-local destination is reachable only through our interface.
        if let (SocketAddr::V6(d), SocketAddr::V6(l)) = (&mut destination, local)
            && d.ip().is_unicast_link_local()
            && d.scope_id() == 0
        {
            d.set_scope_id(l.scope_id());
        }
        let mut transmit = Transmit {
            destination,
            ecn: quinn_udp::EcnCodepoint::from_bits(out.tos & 3),
            contents: out.contents,
            segment_size: (out.contents.len() > out.segment_size).then_some(out.segment_size),
            src_ip: None,
        };
        let rebuilt;
        if out.src_port != self.port {
            if let Some((sock, state)) = self.sender(local, out.src_port) {
                return state.try_send(sock.into(), &transmit);
            }
            // The port cannot be bound (another socket holds it): the packets leave from the
            // receive socket's port, and the ICRC, which covers the UDP header, must be
            // computed over that one or the peer drops every packet.
            rebuilt = with_icrc_for_port(&out, self.port);
            transmit.contents = &rebuilt;
            self.rx.send_port_fallback.fetch_add(1, Ordering::Relaxed);
        }
        // The receive socket is non-blocking: wait out a full buffer.
        let local = &self.locals[i];
        loop {
            match local.state.try_send((&local.sock).into(), &transmit) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                r => return r,
            }
        }
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        for local in &mut self.locals {
            registry.register(&mut local.sock, token, mio::Interest::READABLE)?;
        }
        Ok(())
    }

    fn listen(&mut self, registry: &mio::Registry, token: mio::Token, on: bool) -> io::Result<()> {
        if on {
            return self.register(registry, token);
        }
        for local in &mut self.locals {
            registry.deregister(&mut local.sock)?;
        }
        Ok(())
    }

    fn max_segments(&self) -> usize {
        match self.locals.iter().map(|l| l.state.max_gso_segments()).min() {
            Some(n) if self.gso => n.clamp(1, 64),
            _ => 1,
        }
    }

    fn gso_numbers_ip_id(&self) -> bool {
        true
    }

    fn recv_buffer_size(&self) -> Option<usize> {
        self.rcvbuf
    }

    fn admit_qpns(&mut self, qpns: &filter::QpnSet) -> bool {
        use std::os::fd::AsRawFd;
        if !filter::qpn_filter_enabled() {
            return false;
        }
        let Some(prog) = filter::udp_socket_filter(Some(qpns), filter::SAMPLE) else { return false };
        let mut all = !self.locals.is_empty();
        for l in &self.locals {
            all &= l.filtered && bpf::attach_filter(l.sock.as_raw_fd(), &prog).is_ok();
        }
        all
    }

    fn junk_weight(&self) -> u64 {
        if self.locals.iter().all(|l| l.filtered) { u64::from(filter::SAMPLE) } else { 1 }
    }

    fn refresh_counters(&mut self) {
        for local in &mut self.locals {
            let table = if local.addr.is_ipv4() { "/proc/self/net/udp" } else { "/proc/self/net/udp6" };
            if let Some(drops) = local.inode.and_then(|i| socket_drops(table, i))
                && drops > local.drops_seen
            {
                self.rx.socket_drops.fetch_add(drops - local.drops_seen, Ordering::Relaxed);
                local.drops_seen = drops;
            }
        }
    }
}

/// Sets the receive buffer to `bytes`: past `net.core.rmem_max` where allowed
/// (`SO_RCVBUFFORCE` needs `CAP_NET_ADMIN`), else as much as the kernel grants.
pub(crate) fn set_recv_buffer(s: &socket2::Socket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let v = i32::try_from(bytes).unwrap_or(i32::MAX);
    // SAFETY: a plain int option; the kernel reads `size_of::<i32>()` bytes from `&v`.
    let forced = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    } == 0;
    if !forced {
        let _ = s.set_recv_buffer_size(bytes);
    }
}

/// The inode number of a socket (`socket:[N]` in `/proc/self/fd`).
fn socket_inode(s: &socket2::Socket) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", s.as_raw_fd())).ok()?;
    link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// The `drops` column of the socket with `inode` in a `/proc/net/udp`-style table.
fn socket_drops(table: &str, inode: u64) -> Option<u64> {
    parse_drops(&std::fs::read_to_string(table).ok()?, inode)
}

fn parse_drops(text: &str, inode: u64) -> Option<u64> {
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
        (f.len() >= 13 && f[9].parse() == Ok(inode)).then(|| f[12].parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_sent_from_another_port_carries_the_icrc_of_that_port() {
        use crate::wire::roce::{IpRepr, RoceFrameRepr};
        let (src, dst) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let ip = IpRepr::V4 { src, dst, tos: 0, ttl: 64, id: 0, df: true };
        let body = [0x04u8, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 1, 2, 3, 4];
        let mut two = Vec::new();
        for _ in 0..2 {
            let crc = RoceFrameRepr { ip, src_port: 0xc123, dst_port: 4791, udp_checksum: false }
                .icrc(&body)
                .unwrap();
            two.extend_from_slice(&body);
            two.extend_from_slice(&crc.to_le_bytes());
        }
        let out = Outgoing {
            dst: SocketAddr::new(IpAddr::V4(dst), 4791),
            src_ip: IpAddr::V4(src),
            src_port: 0xc123,
            contents: &two,
            segment_size: two.len() / 2,
            tos: 0,
            hop_limit: 64,
            flow_label: 0,
            qpn: 0,
        };
        let fixed = with_icrc_for_port(&out, 4791);
        let want =
            RoceFrameRepr { ip, src_port: 4791, dst_port: 4791, udp_checksum: false }.icrc(&body).unwrap();
        for pkt in fixed.chunks(two.len() / 2) {
            assert_eq!(&pkt[..body.len()], &body);
            assert_eq!(pkt[body.len()..], want.to_le_bytes());
        }
    }

    #[test]
    fn drops_column_of_the_right_socket() {
        let text = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
 1049: 0100007F:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 17
 1050: 0200007F:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4343 2 0000000000000000 0
";
        assert_eq!(parse_drops(text, 4242), Some(17));
        assert_eq!(parse_drops(text, 4343), Some(0));
        assert_eq!(parse_drops(text, 1), None);
    }

    #[test]
    fn send_sockets_stay_bounded_however_many_source_ports_were_used() {
        // QPs come and go, each with its own source port: the socket cache must not keep
        // one descriptor per port ever used (a soak run leaked one per replaced QP).
        let rx = Arc::new(RxCounters::default());
        let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut b = UdpBackend::new(&[local], false, rx).unwrap();
        for port in 0..(MAX_SENDERS as u16 + 300) {
            let _ = b.sender(local, 0xc000 + port);
        }
        assert!(b.senders.len() <= MAX_SENDERS, "{} send sockets", b.senders.len());
        // The most recent ports are still there.
        assert!(b.senders.contains_key(&(local.ip(), 0xc000 + MAX_SENDERS as u16 + 299)));
    }

    #[test]
    fn the_kernel_steers_each_packet_to_the_socket_of_its_dest_qp() {
        // Three sockets on one address: a datagram whose BTH names DestQP q reaches socket
        // q % 3, whatever the source.
        let rx = Arc::new(RxCounters::default());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let group = UdpBackend::group(&[SocketAddr::new(ip, 0)], false, rx, 3).unwrap();
        let port = group[0].port;
        assert!(group.iter().all(|b| b.locals[0].sock.local_addr().unwrap().port() == port));
        let from = [UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap()];
        let qpns = [0x11u32, 0x12, 0x13, 0x14, 0xff_fffe, 0x80_0000, 1, 0x1234];
        for (k, q) in qpns.iter().enumerate() {
            // (a BTH and an ICRC: what the receive filter lets through)
            let mut bth = [0u8; 16];
            bth[0] = 0x04; // RC SEND Only
            bth[2..4].copy_from_slice(&[0xff, 0xff]); // the default P_Key
            bth[4] = 0xab; // the reserved byte before DestQP must not count
            bth[5..8].copy_from_slice(&q.to_be_bytes()[1..]);
            from[k % 2].send_to(&bth, (ip, port)).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        for (i, b) in group.iter().enumerate() {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while let Ok((n, _)) = b.locals[0].sock.recv_from(&mut buf) {
                got.push(if n >= 8 { u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) } else { u32::MAX });
            }
            let mut want: Vec<u32> = qpns.iter().copied().filter(|q| *q as usize % 3 == i).collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "socket {i}");
        }
    }

    /// The smallest datagram the receive filter lets through: an RC SEND Only BTH (P_Key
    /// 0xffff, QP 0x11) and an ICRC (not checked by the backend).
    const SEND_ONLY: [u8; 16] = [0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0];

    #[test]
    fn each_served_address_receives_and_sends_from_itself() {
        // Two addresses (an IPv4 and an IPv6 one, as a device on an interface has), one port
        // picked for both: a datagram to either arrives with its destination, and a send leaves
        // from the address the engine names, from the source port asked for.
        let rx = Arc::new(RxCounters::default());
        let addrs: [SocketAddr; 2] = ["127.0.0.1:0".parse().unwrap(), "[::1]:0".parse().unwrap()];
        let Ok(mut b) = UdpBackend::new(&addrs, false, rx) else {
            eprintln!("no IPv6 loopback here: skipped");
            return;
        };
        let port = b.port;
        assert_ne!(port, 0);
        assert!(b.locals.iter().all(|l| l.addr.port() == port));
        let peers = [UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("[::1]:0").unwrap()];
        for (p, a) in peers.iter().zip(&addrs) {
            p.send_to(&SEND_ONLY, (a.ip(), port)).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = Vec::new();
        b.recv(&mut |d| got.push((d.src, d.dst, d.payload.len()))).unwrap();
        got.sort();
        let mut want: Vec<_> =
            peers.iter().zip(&addrs).map(|(p, a)| (p.local_addr().unwrap(), a.ip(), 16)).collect();
        want.sort();
        assert_eq!(got, want);
        // A source port free on both addresses right now (a fixed one may be another test's).
        let sport = (0..100)
            .find_map(|_| {
                let v4 = UdpSocket::bind("127.0.0.1:0").ok()?;
                let p = v4.local_addr().ok()?.port();
                UdpSocket::bind(("::1", p)).ok().map(|_| p)
            })
            .unwrap();
        for (p, a) in peers.iter().zip(&addrs) {
            let contents = [0x17u8; 24];
            let out = Outgoing {
                dst: p.local_addr().unwrap(),
                src_ip: a.ip(),
                src_port: sport,
                contents: &contents,
                segment_size: contents.len(),
                tos: 0,
                hop_limit: 64,
                flow_label: 0,
                qpn: 0,
            };
            b.send(out).unwrap();
            let mut buf = [0u8; 64];
            p.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
            let (n, from) = p.recv_from(&mut buf).unwrap();
            assert_eq!((n, from), (24, SocketAddr::new(a.ip(), sport)));
        }
        // An address the backend does not serve is refused, not used.
        let stray = Outgoing {
            dst: peers[0].local_addr().unwrap(),
            src_ip: "127.0.0.2".parse().unwrap(),
            src_port: 0xc123,
            contents: &[0; 8],
            segment_size: 8,
            tos: 0,
            hop_limit: 64,
            flow_label: 0,
            qpn: 0,
        };
        assert!(b.send(stray).is_err());
    }

    #[test]
    fn ipv6_datagrams_without_a_udp_checksum_are_received() {
        // Kernel rxe sends RoCEv2 over IPv6 with UDP checksum 0 (the ICRC covers the packet);
        // an ordinary UDPv6 socket drops those (RFC 8200), rxe's own socket takes them.
        let rx = Arc::new(RxCounters::default());
        let Ok(mut b) = UdpBackend::new(&["[::1]:0".parse().unwrap()], false, rx) else {
            eprintln!("no IPv6 loopback here: skipped");
            return;
        };
        let peer = socket2::Socket::from(UdpSocket::bind("[::1]:0").unwrap());
        set_udp_option(&peer, libc::UDP_NO_CHECK6_TX).unwrap();
        let peer = UdpSocket::from(peer);
        peer.send_to(&SEND_ONLY, ("::1", b.port)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = 0;
        b.recv(&mut |d| got += d.payload.len()).unwrap();
        assert_eq!(got, 16);
    }

    #[test]
    fn a_bound_socket_is_found_with_no_drops() {
        let s = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let inode = socket_inode(&s).unwrap();
        assert_eq!(socket_drops("/proc/self/net/udp", inode), Some(0));
        set_recv_buffer(&s, RCVBUF);
        assert!(s.recv_buffer_size().unwrap() >= 200_000);
    }
}
