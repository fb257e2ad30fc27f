//! The UDP-socket backend: unprivileged, one socket per device bound to `<ip>:4791`.
//!
//! # Sending
//!
//! Packets leave from unconnected sockets with `IP_MTU_DISCOVER` set (quinn-udp sets
//! `IP_PMTUDISC_PROBE`), so the kernel writes IP identification 0 and sets DF: the ICRC,
//! which covers both, can be computed before the packet is handed over (kernel rxe drops a
//! packet with the wrong ICRC silently). Equal-sized packets to one peer go out in one
//! `sendmsg` with UDP GSO; where the kernel segments them, segment `k` gets identification `k`
//! and its ICRC is computed for that value. Each RC/UC QP sends from the UDP source port rxe
//! would give it (`0xC000 | flow label`): a send-only socket per source port; if one cannot
//! be bound, the receive socket (port 4791) is used instead.
//!
//! # Several engines
//!
//! A device with `n > 1` engine threads binds `n` receive sockets to `<ip>:4791` with
//! `SO_REUSEPORT`, one per engine, in engine order, and attaches a classic BPF program to the
//! group (`SO_ATTACH_REUSEPORT_CBPF`): for a UDP socket the kernel runs it with the UDP header
//! pulled (`run_bpf_filter` in `net/core/sock_reuseport.c`, called from the UDP lookup with
//! `hdr_len = sizeof(struct udphdr)`), so offset 0 is the BTH, and the program returns the
//! destination QP (BTH bytes 5..8) modulo `n`: the index of the socket, in the order they were
//! bound, of the engine that owns the QP. A packet too short to read gives 0; an index past
//! the group falls back to the kernel's hash, and the engine passes such a packet on.
//!
//! # Receiving
//!
//! `recvmmsg` with UDP GRO on the 4791 socket. A UDP socket does not show the IPv4
//! identification and flags, which the ICRC covers; the engine recovers them from the ICRC
//! itself (see [`crate::wire::icrc::recover_ipv4_id`]): the check then detects a random
//! corruption with probability 1 - 2^-15 instead of 1 - 2^-32. IPv6 packets are checked at full
//! strength.

use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};

use super::{Backend, Datagram, Outgoing, bpf, filter};
use crate::verbs::device::RxCounters;

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

/// A send socket bound to one source port, and when it was last used.
struct Sender {
    sock: Option<(UdpSocket, UdpSocketState)>,
    last_use: u64,
}

pub(crate) struct UdpBackend {
    gso: bool,
    ip: IpAddr,
    port: u16,
    sock: mio::net::UdpSocket,
    state: UdpSocketState,
    senders: HashMap<u16, Sender>,
    /// Sends so far (the clock of `Sender::last_use`).
    sends: u64,
    bufs: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
    rx: Arc<RxCounters>,
    /// The receive socket's inode, to find its line in `/proc/net/udp`.
    inode: Option<u64>,
    /// The receive buffer the kernel granted.
    rcvbuf: Option<usize>,
    /// Send sockets are bound with `SO_REUSEPORT` (the engines of one device share source
    /// ports).
    reuse_senders: bool,
    /// The socket's kernel drop count as last added to `rx.socket_drops` (several engines'
    /// sockets add up there).
    drops_seen: u64,
    /// The receive filter is attached ([`super::filter`]).
    filtered: bool,
}

fn bind(addr: SocketAddr) -> io::Result<socket2::Socket> {
    bind_with(addr, false)
}

/// Binds a UDP socket to `addr`, with `SO_REUSEPORT` when `reuse_port`.
fn bind_with(addr: SocketAddr, reuse_port: bool) -> io::Result<socket2::Socket> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    s.bind(&addr.into())?;
    Ok(s)
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
    use std::os::fd::AsRawFd;
    let mut prog = steering_program(n);
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
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

impl UdpBackend {
    /// Binds `<ip>:<port>`.
    pub(crate) fn new(ip: IpAddr, port: u16, gso: bool, rx: Arc<RxCounters>) -> io::Result<UdpBackend> {
        let s = bind(SocketAddr::new(ip, port))?;
        UdpBackend::from_socket(s, ip, port, gso, rx)
    }

    /// `n` backends whose receive sockets share `<ip>:<port>` (`SO_REUSEPORT`, bound in
    /// order), with the kernel steering each packet to the socket of index `DestQP % n`.
    /// Fails, as one socket would, when the address is in use (by any socket).
    pub(crate) fn group(
        ip: IpAddr,
        port: u16,
        gso: bool,
        rx: Arc<RxCounters>,
        n: usize,
    ) -> io::Result<Vec<UdpBackend>> {
        let addr = SocketAddr::new(ip, port);
        // A plain bind first: it fails if anything holds the address (another device's
        // group included), which a SO_REUSEPORT bind would join instead; it also picks the
        // port when `port` is 0.
        let bound = bind(addr)?.local_addr()?.as_socket().map_or(port, |a| a.port());
        let addr = SocketAddr::new(ip, bound);
        let mut socks = Vec::with_capacity(n);
        for _ in 0..n {
            socks.push(bind_with(addr, true)?);
        }
        attach_steering(&socks[0], n as u32)?;
        let mut group = Vec::with_capacity(n);
        for s in socks {
            let mut b = UdpBackend::from_socket(s, ip, port, gso, rx.clone())?;
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

    /// A backend on bound socket `s` (`port`: the device's port, what packets are sent to).
    fn from_socket(
        s: socket2::Socket,
        ip: IpAddr,
        port: u16,
        gso: bool,
        rx: Arc<RxCounters>,
    ) -> io::Result<UdpBackend> {
        s.set_nonblocking(true)?;
        // What cannot be RoCE is dropped in the kernel (issue 30). A kernel that refuses the
        // filter only costs the engine its own checks.
        let filtered = filter::udp_socket_filter(None, filter::SAMPLE)
            .is_some_and(|prog| bpf::attach_filter(std::os::fd::AsRawFd::as_raw_fd(&s), &prog).is_ok());
        set_recv_buffer(&s, RCVBUF);
        let rcvbuf = s.recv_buffer_size().ok();
        let inode = socket_inode(&s);
        let std_sock: UdpSocket = s.into();
        let state = UdpSocketState::new((&std_sock).into())?;
        let sock = mio::net::UdpSocket::from_std(std_sock);
        Ok(UdpBackend {
            gso,
            ip,
            port,
            sock,
            state,
            senders: HashMap::new(),
            sends: 0,
            bufs: (0..BATCH).map(|_| vec![0u8; SLOT]).collect(),
            metas: vec![RecvMeta::default(); BATCH],
            rx,
            inode,
            rcvbuf,
            reuse_senders: false,
            drops_seen: 0,
            filtered,
        })
    }

    /// The send socket for a source port, created on first use (blocking, large buffer); the
    /// least recently used one is closed when [`MAX_SENDERS`] are open.
    fn sender(&mut self, port: u16) -> Option<&(UdpSocket, UdpSocketState)> {
        self.sends += 1;
        if !self.senders.contains_key(&port) && self.senders.len() >= MAX_SENDERS {
            let oldest = self.senders.iter().min_by_key(|(_, s)| s.last_use).map(|(p, _)| *p);
            if let Some(p) = oldest {
                self.senders.remove(&p);
            }
        }
        let (ip, reuse) = (self.ip, self.reuse_senders);
        let entry = self.senders.entry(port).or_insert_with(|| Sender {
            sock: (|| {
                let s = bind_with(SocketAddr::new(ip, port), reuse).ok()?;
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

impl Backend for UdpBackend {
    fn port(&self) -> u16 {
        self.port
    }

    fn recv(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<usize> {
        let mut slices: Vec<IoSliceMut<'_>> = self.bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        let n = match self.state.recv((&self.sock).into(), &mut slices, &mut self.metas) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        };
        drop(slices);
        let mut count = 0;
        for (meta, buf) in self.metas[..n].iter().zip(&self.bufs) {
            let dst = meta.dst_ip.unwrap_or(self.ip);
            let ecn = meta.ecn.map_or(0, |e| e as u8);
            let stride = meta.stride.max(1);
            for seg in buf[..meta.len].chunks(stride) {
                f(Datagram { payload: seg, src: meta.addr, dst, dst_port: self.port, ecn, ip_header: None });
                count += 1;
            }
        }
        Ok(count)
    }

    fn send(&mut self, out: Outgoing<'_>) -> io::Result<()> {
        let mut transmit = Transmit {
            destination: out.dst,
            ecn: quinn_udp::EcnCodepoint::from_bits(out.tos & 3),
            contents: out.contents,
            segment_size: (out.contents.len() > out.segment_size).then_some(out.segment_size),
            src_ip: None,
        };
        let rebuilt;
        if out.src_port != self.port {
            if let Some((sock, state)) = self.sender(out.src_port) {
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
        loop {
            match self.state.try_send((&self.sock).into(), &transmit) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                r => return r,
            }
        }
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        registry.register(&mut self.sock, token, mio::Interest::READABLE)
    }

    fn max_segments(&self) -> usize {
        if self.gso { self.state.max_gso_segments().clamp(1, 64) } else { 1 }
    }

    fn gso_numbers_ip_id(&self) -> bool {
        true
    }

    fn recv_buffer_size(&self) -> Option<usize> {
        self.rcvbuf
    }

    fn admit_qpns(&mut self, qpns: &filter::QpnSet) -> bool {
        use std::os::fd::AsRawFd;
        self.filtered
            && filter::qpn_filter_enabled()
            && filter::udp_socket_filter(Some(qpns), filter::SAMPLE)
                .is_some_and(|prog| bpf::attach_filter(self.sock.as_raw_fd(), &prog).is_ok())
    }

    fn junk_weight(&self) -> u64 {
        if self.filtered { u64::from(filter::SAMPLE) } else { 1 }
    }

    fn refresh_counters(&mut self) {
        let table = if self.ip.is_ipv4() { "/proc/self/net/udp" } else { "/proc/self/net/udp6" };
        if let Some(drops) = self.inode.and_then(|i| socket_drops(table, i))
            && drops > self.drops_seen
        {
            self.rx.socket_drops.fetch_add(drops - self.drops_seen, Ordering::Relaxed);
            self.drops_seen = drops;
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
        let mut b = UdpBackend::new("127.0.0.1".parse().unwrap(), 0, false, rx).unwrap();
        for port in 0..(MAX_SENDERS as u16 + 300) {
            let _ = b.sender(0xc000 + port);
        }
        assert!(b.senders.len() <= MAX_SENDERS, "{} send sockets", b.senders.len());
        // The most recent ports are still there.
        assert!(b.senders.contains_key(&(0xc000 + MAX_SENDERS as u16 + 299)));
    }

    #[test]
    fn the_kernel_steers_each_packet_to_the_socket_of_its_dest_qp() {
        // Three sockets on one address: a datagram whose BTH names DestQP q reaches socket
        // q % 3, whatever the source.
        let rx = Arc::new(RxCounters::default());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let group = UdpBackend::group(ip, 0, false, rx, 3).unwrap();
        let port = group[0].sock.local_addr().unwrap().port();
        assert!(group.iter().all(|b| b.sock.local_addr().unwrap().port() == port));
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
            while let Ok((n, _)) = b.sock.recv_from(&mut buf) {
                got.push(if n >= 8 { u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) } else { u32::MAX });
            }
            let mut want: Vec<u32> = qpns.iter().copied().filter(|q| *q as usize % 3 == i).collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "socket {i}");
        }
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
