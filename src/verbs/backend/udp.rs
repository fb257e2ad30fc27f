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

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};

use super::{Backend, Datagram, Outgoing};

/// Datagrams per `recvmmsg`.
const BATCH: usize = 32;
/// Bytes per receive slot: a GRO super-packet of up to 64 KiB.
const SLOT: usize = 65536;

pub(crate) struct UdpBackend {
    gso: bool,
    ip: IpAddr,
    port: u16,
    sock: mio::net::UdpSocket,
    state: UdpSocketState,
    senders: HashMap<u16, Option<(UdpSocket, UdpSocketState)>>,
    bufs: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
}

fn bind(addr: SocketAddr) -> io::Result<socket2::Socket> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())?;
    Ok(s)
}

impl UdpBackend {
    /// Binds `<ip>:<port>`.
    pub(crate) fn new(ip: IpAddr, port: u16, gso: bool) -> io::Result<UdpBackend> {
        let s = bind(SocketAddr::new(ip, port))?;
        s.set_nonblocking(true)?;
        // Bursts of a full window arrive back to back: ask for a large buffer (the kernel
        // caps it at net.core.rmem_max).
        let _ = s.set_recv_buffer_size(16 << 20);
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
            bufs: (0..BATCH).map(|_| vec![0u8; SLOT]).collect(),
            metas: vec![RecvMeta::default(); BATCH],
        })
    }

    /// The send socket for a source port, created on first use (blocking, large buffer).
    fn sender(&mut self, port: u16) -> Option<&(UdpSocket, UdpSocketState)> {
        let ip = self.ip;
        self.senders
            .entry(port)
            .or_insert_with(|| {
                let s = bind(SocketAddr::new(ip, port)).ok()?;
                let _ = s.set_send_buffer_size(8 << 20);
                let _ = s.set_recv_buffer_size(4096);
                let sock: UdpSocket = s.into();
                let state = UdpSocketState::new((&sock).into()).ok()?;
                Some((sock, state))
            })
            .as_ref()
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
        let transmit = Transmit {
            destination: out.dst,
            ecn: quinn_udp::EcnCodepoint::from_bits(out.tos & 3),
            contents: out.contents,
            segment_size: (out.contents.len() > out.segment_size).then_some(out.segment_size),
            src_ip: None,
        };
        if out.src_port != self.port
            && let Some((sock, state)) = self.sender(out.src_port)
        {
            return state.try_send(sock.into(), &transmit);
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
}
