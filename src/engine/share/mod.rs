//! One address, many processes: the devices of several processes on the same
//! `<address>:<port>` share it as the processes of a host share a kernel RDMA device.
//!
//! Design (`docs/design/shared-device.md` has the whole of it):
//! - **Slots.** Each device on the address is a *member* with a slot 0..63, claimed by binding
//!   an abstract unix name (`unix::name(.., "slot/<s>")`) on which it listens. Its QP numbers
//!   carry the slot in bits 23..18, its CM communication IDs in bits 31..26, so any member can
//!   tell from a packet (or a MAD) which member it is for.
//! - **One UDP port, steered by the kernel.** Every member's engines bind their sockets to
//!   `<address>:<port>` with `SO_REUSEPORT` (one group, one user); a classic BPF program
//!   ([`steer`]) sends each datagram to the socket of the engine that owns its destination QP.
//!   The kernel numbers a group's sockets by join order and moves the last one into the gap
//!   when one leaves, so a member learns the numbering by *probing* ([`probe`]): it sends one
//!   datagram per index through the group and each socket's engine says who it is.
//! - **Members talk over unix connections.** A member connects to every other member when it
//!   joins (the kernel vouches for the peer's user id, `SO_PEERCRED`). Over them go datagrams
//!   that reached the wrong member (while the steering is being renewed, or a MAD: the CM's
//!   packets all reach one member, which hands each to the member it names) and listener
//!   announcements. A member that goes away — closes its device, exits, is killed — closes
//!   its connections; the others see it at once, forget its listeners, and the lowest of them
//!   renews the steering. No helper process, no file: nothing outlives the last member.

pub(crate) mod msg;
pub(crate) mod probe;
pub(crate) mod steer;
pub(crate) mod unix;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use socket2::{Socket, Type};

use super::backend::Datagram;
use crate::wire::mad::Recipient;
use msg::Msg;
use steer::SocketMap;

/// What `cargo bench --bench throughput -- shared` needs to measure the kernel's side of the
/// steering in isolation: not part of the API.
#[doc(hidden)]
pub mod bench {
    /// The steering program for a group whose socket `i` belongs to `(slot, engine)`
    /// `owners[i]`.
    pub fn steering_program(owners: &[(u8, u16)]) -> Vec<libc::sock_filter> {
        super::steer::program(&super::steer::SocketMap { owners: owners.to_vec() })
    }

    /// Attaches `prog` to the `SO_REUSEPORT` group of `s`.
    pub fn attach(s: &socket2::Socket, prog: &[libc::sock_filter]) -> std::io::Result<()> {
        crate::engine::backend::udp::attach_program(s, prog)
    }
}

/// Members an address can have (slots 0..63).
pub(crate) const MAX_SLOTS: usize = 64;
/// A QP number's slot: bits 23..18 (2^18 numbers per member).
pub(crate) const SLOT_SHIFT: u32 = 18;
/// A CM communication ID's slot: bits 31..26.
pub(crate) const COMM_ID_SHIFT: u32 = crate::transport::cm::ID_SLOT_SHIFT;
/// The QP numbers of probes: `PROBE_BASE + i` asks the kernel for socket `i` (never a QP:
/// the top of slot 63's range).
pub(crate) const PROBE_BASE: u32 = 0xff_ff00;
/// How many sockets a group may have (one probe number each).
pub(crate) const MAX_SOCKETS: usize = 256;

/// The slot a QP number belongs to.
pub(crate) fn slot_of_qpn(qpn: u32) -> u8 {
    ((qpn & 0xff_ffff) >> SLOT_SHIFT) as u8
}

/// The first QP number and how many follow it for a member in `slot` (`None`: an unshared
/// device, which numbers its QPs from 0x11 across the whole 24-bit space, as rxe does).
pub(crate) fn qpn_range(slot: Option<u8>) -> (u32, u32) {
    match slot {
        None => (0x11, 0xff_ffe0),
        Some(s) => {
            let base = u32::from(s) << SLOT_SHIFT;
            let end = if u32::from(s) == (PROBE_BASE >> SLOT_SHIFT) {
                PROBE_BASE
            } else {
                base + (1 << SLOT_SHIFT)
            };
            (base + 0x11, end - base - 0x11)
        }
    }
}

/// Who must handle a packet that reached this member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// This member.
    Mine,
    /// Member `slot` of address `index`: pass it on.
    Peer(usize, u8),
    /// Nobody: a member that has gone (its QPs are no more).
    Gone,
}

/// Counters of the sharing (summed into the device's counters).
#[derive(Debug, Default)]
pub(crate) struct ShareCounters {
    /// Datagrams passed on to another member.
    pub passed_on: AtomicU64,
    /// Datagrams another member passed on to this one.
    pub passed_in: AtomicU64,
    /// Datagrams that could not be passed on (the member's connection full or closed).
    pub pass_dropped: AtomicU64,
    /// Datagrams for a QP of a member that has gone.
    pub gone: AtomicU64,
    /// Steering renewals (probe rounds) that succeeded.
    pub steerings: AtomicU64,
    /// Probe rounds that did not find a complete group (retried).
    pub probe_retries: AtomicU64,
    /// Probes answered.
    pub probes_answered: AtomicU64,
    /// Member messages that could not be decoded.
    pub bad_messages: AtomicU64,
}

/// A member's listener: its address (unspecified: a wildcard), the member's slot and process.
type Listen = (IpAddr, u8, u32);

/// Another member, as seen from this one.
struct Peer {
    sock: Arc<Socket>,
    pid: u32,
}

/// One address a shared device serves (its own, and on an interface its IPv6 link-local
/// one): each has its own group, members, steering.
struct Addr {
    /// The bound address (a link-local one with its interface as scope).
    sa: SocketAddr,
    /// Bit `s`: slot `s` has a member on this address (this one included).
    live: AtomicU64,
    peers: RwLock<Vec<Option<Peer>>>,
    /// The numbering of the group at the last probe.
    map: Mutex<SocketMap>,
    /// Where probe answers leave from.
    answer: UdpSocket,
}

/// A member's part of a shared address (one per shared device).
pub(crate) struct Share {
    /// This member's slot (the same on every address the device serves).
    pub slot: u8,
    uid: u32,
    port: u16,
    addrs: Vec<Addr>,
    /// Every member's listeners: service ID → (address, slot, process).
    listens: RwLock<HashMap<u64, Vec<Listen>>>,
    /// The engine-side I/O (taken by engine 0; `None` once the device closes).
    io: Mutex<Option<ShareIo>>,
    /// Set when the device closes: a probe round still running stops.
    closed: AtomicBool,
    probing: AtomicBool,
    /// When the last probe round was asked for (ns since `epoch`).
    last_reprobe: AtomicU64,
    epoch: Instant,
    /// `passed_on` at engine 0's last look (steady passing on means the steering is stale).
    passed_seen: AtomicU64,
    pub counters: ShareCounters,
}

/// What engine 0 polls: the member's listeners and its connections.
pub(crate) struct ShareIo {
    /// This member's listener on each address (token `LISTENER + index`).
    listeners: Vec<Socket>,
    poll: mio::Poll,
    events: mio::Events,
    /// Connections by token: the address's index and the peer's slot once known (accepted
    /// ones say it in `Hello`).
    conns: HashMap<usize, (Arc<Socket>, usize, Option<u8>)>,
    next_token: usize,
    /// A handle on one of this member's group sockets of each address, to attach steering
    /// programs with.
    attach: Vec<Socket>,
    buf: Vec<u8>,
}

/// Tokens of the listeners (one per address); connections get tokens above.
const LISTENER: usize = 0;
const FIRST_CONN: usize = 16;
/// How long a joiner waits for the membership lock.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// A joining member, before its engines run: its share, the UDP sockets for its engines (for
/// each engine, one per address), and the membership locks it holds until it has probed
/// ([`Joining::finish`]).
pub(crate) struct Joining {
    pub share: Arc<Share>,
    pub sockets: Vec<Vec<(SocketAddr, Socket)>>,
    /// How many sockets this member brought to each group (its engines).
    engines: usize,
    _locks: Vec<unix::NameLock>,
}

/// Why an address could not be joined.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JoinError {
    /// The UDP port is held by a socket that is not a member (another program, another
    /// user, or an unshared softroce device).
    #[error(
        "UDP {0} is held by a socket outside softroce's sharing (another program, another user, or SOFTROCE_SHARE=0)"
    )]
    HeldOutside(SocketAddr),
    /// Every slot is taken.
    #[error("{0}: {MAX_SLOTS} processes already share this address")]
    Full(SocketAddr),
    /// A system call failed.
    #[error("{1}: {0}")]
    Io(io::Error, &'static str),
}

fn bind_udp(addr: SocketAddr, reuse_port: bool) -> io::Result<Socket> {
    crate::engine::backend::udp::bind_with(addr, reuse_port)
}

/// The names of an address's member sockets, locks and so on: its IP, with the scope of a
/// link-local one (the same link-local address can be on two interfaces).
fn key(sa: &SocketAddr) -> String {
    match sa {
        SocketAddr::V6(v6) if v6.scope_id() != 0 => format!("{}%{}", v6.ip(), v6.scope_id()),
        _ => sa.ip().to_string(),
    }
}

impl Share {
    /// Joins the members of each of `addrs` (all with one port) with `engines` sockets each
    /// (see the module docs).
    pub(crate) fn join(addrs: &[SocketAddr], engines: usize) -> Result<Joining, JoinError> {
        let uid = unix::euid();
        let port = addrs.first().map_or(0, |a| a.port());
        let at = addrs.first().copied().unwrap_or_else(|| SocketAddr::new([0, 0, 0, 0].into(), port));
        let name = |sa: &SocketAddr, what: &str| unix::name(uid, &key(sa), port, what);
        let mut locks = Vec::with_capacity(addrs.len());
        for a in addrs {
            locks.push(
                unix::NameLock::acquire(&name(a, "lock"), LOCK_PATIENCE)
                    .map_err(|e| JoinError::Io(e, "membership lock"))?,
            );
        }
        // The first slot free on every address.
        let mut claimed = None;
        'slots: for s in 0..MAX_SLOTS as u8 {
            let mut ls = Vec::with_capacity(addrs.len());
            for a in addrs {
                match unix::bind(Type::SEQPACKET, &name(a, &format!("slot/{s}"))) {
                    Ok(l) => ls.push(l),
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue 'slots,
                    Err(e) => return Err(JoinError::Io(e, "member socket")),
                }
            }
            claimed = Some((s, ls));
            break;
        }
        let (slot, listeners) = claimed.ok_or(JoinError::Full(at))?;
        for l in &listeners {
            l.listen(128).map_err(|e| JoinError::Io(e, "member socket"))?;
            l.set_nonblocking(true).map_err(|e| JoinError::Io(e, "member socket"))?;
        }
        let poll = mio::Poll::new().map_err(|e| JoinError::Io(e, "poll"))?;
        let mut conns = HashMap::new();
        let mut next_token = FIRST_CONN;
        let mut hello = Vec::new();
        Msg::Hello { slot }.encode(&mut hello);
        let mut shared_addrs = Vec::with_capacity(addrs.len());
        let mut sockets: Vec<Vec<(SocketAddr, Socket)>> = (0..engines.max(1)).map(|_| Vec::new()).collect();
        let mut attach = Vec::with_capacity(addrs.len());
        for (i, a) in addrs.iter().enumerate() {
            // The members there are: a connection to each (the kernel tells who is at the end).
            let mut peers: Vec<Option<Peer>> = (0..MAX_SLOTS).map(|_| None).collect();
            let mut live = 1u64 << slot;
            for s in (0..MAX_SLOTS as u8).filter(|s| *s != slot) {
                let Ok(Some(c)) = unix::connect(&name(a, &format!("slot/{s}")), Duration::from_secs(2))
                else {
                    continue;
                };
                let Ok((pid, peer_uid)) = unix::peer_cred(&c) else { continue };
                if peer_uid != uid || c.send(&hello).is_err() {
                    tracing::warn!(
                        slot = s,
                        peer_uid,
                        "softroce: a socket of another user holds a member name; ignored"
                    );
                    continue;
                }
                let _ = c.set_nonblocking(true);
                let c = Arc::new(c);
                let fd = c.as_raw_fd();
                poll.registry()
                    .register(&mut mio::unix::SourceFd(&fd), mio::Token(next_token), mio::Interest::READABLE)
                    .map_err(|e| JoinError::Io(e, "poll"))?;
                conns.insert(next_token, (c.clone(), i, Some(s)));
                next_token += 1;
                live |= 1 << s;
                peers[usize::from(s)] = Some(Peer { sock: c, pid });
            }
            if live == 1 << slot {
                // Nobody to share with: the port must be free of anything else (a plain bind
                // fails on any holder; a SO_REUSEPORT bind would join a group of the same user).
                match bind_udp(*a, false) {
                    Ok(probe) => drop(probe),
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(JoinError::HeldOutside(*a)),
                    Err(e) => return Err(JoinError::Io(e, "bind")),
                }
            }
            for engine in sockets.iter_mut() {
                match bind_udp(*a, true) {
                    Ok(s) => engine.push((*a, s)),
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(JoinError::HeldOutside(*a)),
                    Err(e) => return Err(JoinError::Io(e, "bind")),
                }
            }
            attach.push(sockets[0][i].1.try_clone().map_err(|e| JoinError::Io(e, "dup"))?);
            let answer =
                if a.is_ipv4() { UdpSocket::bind(("0.0.0.0", 0)) } else { UdpSocket::bind(("::", 0)) }
                    .map_err(|e| JoinError::Io(e, "probe socket"))?;
            shared_addrs.push(Addr {
                sa: *a,
                live: AtomicU64::new(live),
                peers: RwLock::new(peers),
                map: Mutex::new(SocketMap::default()),
                answer,
            });
        }
        for (i, l) in listeners.iter().enumerate() {
            let fd = l.as_raw_fd();
            poll.registry()
                .register(&mut mio::unix::SourceFd(&fd), mio::Token(LISTENER + i), mio::Interest::READABLE)
                .map_err(|e| JoinError::Io(e, "poll"))?;
        }
        let io = ShareIo {
            listeners,
            poll,
            events: mio::Events::with_capacity(64),
            conns,
            next_token,
            attach,
            buf: vec![0u8; 1 << 16],
        };
        let share = Arc::new(Share {
            slot,
            uid,
            port,
            addrs: shared_addrs,
            listens: RwLock::new(HashMap::new()),
            io: Mutex::new(Some(io)),
            closed: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            last_reprobe: AtomicU64::new(0),
            epoch: Instant::now(),
            passed_seen: AtomicU64::new(0),
            counters: ShareCounters::default(),
        });
        tracing::debug!(addr = %at, slot, members = share.members(), "softroce: joined a shared address");
        Ok(Joining { share, sockets, engines: engines.max(1), _locks: locks })
    }

    /// The name of `what` for address `i`'s members.
    fn name(&self, i: usize, what: &str) -> Vec<u8> {
        unix::name(self.uid, &key(&self.addrs[i].sa), self.port, what)
    }

    /// The index of local address `ip`.
    #[inline]
    fn addr_index(&self, ip: IpAddr) -> Option<usize> {
        self.addrs.iter().position(|a| a.sa.ip() == ip)
    }

    /// The fd engine 0 adds to its poll: readable when a member connects or sends.
    pub(crate) fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        self.io.lock().as_ref().map(|io| io.poll.as_raw_fd())
    }

    /// Who must handle a packet for QP `qpn` (not QP1) that arrived at local address `dst`.
    #[inline]
    pub(crate) fn owner_of_qpn(&self, qpn: u32, dst: IpAddr) -> Owner {
        let s = slot_of_qpn(qpn);
        if s == self.slot {
            return Owner::Mine;
        }
        match self.addr_index(dst) {
            Some(i) if self.addrs[i].live.load(Ordering::Relaxed) & (1 << s) != 0 => Owner::Peer(i, s),
            _ => Owner::Gone,
        }
    }

    /// Who must handle MAD `mad`, which arrived at local address `dst`: a request goes to the
    /// member listening on its service (this one if none does, so that the CM refuses it); an
    /// answer to the member whose ID it names; the rest here.
    pub(crate) fn owner_of_mad(&self, mad: &[u8], dst: IpAddr) -> Owner {
        let Some(i) = self.addr_index(dst) else { return Owner::Mine };
        let slot = match crate::wire::mad::recipient(mad) {
            Recipient::Device => return Owner::Mine,
            Recipient::Id(id) => (id >> COMM_ID_SHIFT) as u8,
            Recipient::Service(sid) => {
                let listens = self.listens.read();
                let Some(l) = listens.get(&sid) else { return Owner::Mine };
                let exact = l.iter().find(|(a, _, _)| *a == dst);
                let Some(&(_, s, pid)) =
                    exact.or_else(|| l.iter().find(|(a, _, _)| a.is_unspecified() || a.is_loopback()))
                else {
                    return Owner::Mine;
                };
                // A wildcard listener's process may have no device on this address (its slot
                // here, if any, is another process's): then nobody here listens.
                if s != self.slot
                    && self.addrs[i].peers.read()[usize::from(s)].as_ref().is_none_or(|p| p.pid != pid)
                {
                    return Owner::Mine;
                }
                s
            }
        };
        if slot == self.slot || self.addrs[i].live.load(Ordering::Relaxed) & (1 << slot) == 0 {
            Owner::Mine
        } else {
            Owner::Peer(i, slot)
        }
    }

    /// Passes datagram `d` on to member `slot` of address `i`; false if it could not be.
    pub(crate) fn pass_on(&self, i: usize, slot: u8, d: &Datagram<'_>) -> bool {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let peers = self.addrs[i].peers.read();
        let Some(Some(p)) = peers.get(usize::from(slot)) else {
            self.counters.pass_dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let sent = BUF.with(|b| {
            let mut b = b.borrow_mut();
            Msg::Packet { src: d.src, dst: d.dst, dst_port: d.dst_port, ecn: d.ecn, payload: d.payload }
                .encode(&mut b);
            p.sock.send_with_flags(&b, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL).is_ok()
        });
        let c = if sent { &self.counters.passed_on } else { &self.counters.pass_dropped };
        c.fetch_add(1, Ordering::Relaxed);
        sent
    }

    /// This member now listens (`on`) or no longer listens on `service_id` at `addr`: noted,
    /// and told to every other member.
    pub(crate) fn announce_listen(&self, service_id: u64, addr: IpAddr, on: bool) {
        self.note_listen(service_id, addr, self.slot, std::process::id(), on);
        let mut b = Vec::new();
        Msg::Listen { service_id, addr, on }.encode(&mut b);
        for a in &self.addrs {
            for p in a.peers.read().iter().flatten() {
                let _ = p.sock.send_with_flags(&b, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
            }
        }
    }

    fn note_listen(&self, service_id: u64, addr: IpAddr, slot: u8, pid: u32, on: bool) {
        let mut l = self.listens.write();
        let v = l.entry(service_id).or_default();
        v.retain(|e| (e.0, e.1) != (addr, slot));
        if on {
            v.push((addr, slot, pid));
        }
        if v.is_empty() {
            l.remove(&service_id);
        }
    }

    /// Engine 0's turn at the members' sockets: accepts joiners, reads what members sent
    /// (calling `f` for each datagram passed on to this member), notices members that have
    /// gone. Returns whether anything happened.
    pub(crate) fn poll_io(self: &Arc<Self>, f: &mut dyn FnMut(Datagram<'_>)) -> bool {
        let mut guard = self.io.lock();
        let Some(io) = guard.as_mut() else { return false };
        let mut any = false;
        // Until no socket is ready: the engine's poll hears of this one again only when it
        // goes from nothing ready to something ready.
        for _ in 0..64 {
            if io.poll.poll(&mut io.events, Some(Duration::ZERO)).is_err() {
                break;
            }
            let tokens: Vec<usize> = io.events.iter().map(|e| e.token().0).collect();
            if tokens.is_empty() {
                break;
            }
            for t in tokens {
                any = true;
                if t < FIRST_CONN {
                    self.accept(io, t - LISTENER);
                } else {
                    self.read_conn(io, t, f);
                }
            }
        }
        drop(guard);
        // Steady passing on means the kernel's numbering moved under the steering (a member
        // left while another probed, say): renew it, at most once a second.
        let now = self.epoch.elapsed().as_nanos() as u64;
        if now.saturating_sub(self.last_reprobe.load(Ordering::Relaxed)) > 1_000_000_000 {
            let passed = self.counters.passed_on.load(Ordering::Relaxed);
            if passed.saturating_sub(self.passed_seen.swap(passed, Ordering::Relaxed)) > 64 {
                self.request_reprobe();
            }
        }
        any
    }

    fn accept(&self, io: &mut ShareIo, i: usize) {
        let Some(listener) = io.listeners.get(i) else { return };
        loop {
            let (c, _) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return,
            };
            match unix::peer_cred(&c) {
                Ok((_, uid)) if uid == self.uid => {}
                _ => continue,
            }
            if c.set_nonblocking(true).is_err() {
                continue;
            }
            let t = io.next_token;
            io.next_token += 1;
            let fd = c.as_raw_fd();
            if io
                .poll
                .registry()
                .register(&mut mio::unix::SourceFd(&fd), mio::Token(t), mio::Interest::READABLE)
                .is_ok()
            {
                io.conns.insert(t, (Arc::new(c), i, None));
            }
        }
    }

    fn read_conn(self: &Arc<Self>, io: &mut ShareIo, t: usize, f: &mut dyn FnMut(Datagram<'_>)) {
        let Some((sock, i, _)) = io.conns.get(&t).cloned() else { return };
        loop {
            let n = match std::io::Read::read(&mut &*sock, &mut io.buf) {
                Ok(0) => {
                    self.gone(io, t);
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.gone(io, t);
                    return;
                }
            };
            match Msg::decode(&io.buf[..n]) {
                Some(Msg::Hello { slot }) if usize::from(slot) < MAX_SLOTS && slot != self.slot => {
                    let pid = unix::peer_cred(&sock).map_or(0, |(p, _)| p);
                    if let Some(c) = io.conns.get_mut(&t) {
                        c.2 = Some(slot);
                    }
                    self.addrs[i].peers.write()[usize::from(slot)] = Some(Peer { sock: sock.clone(), pid });
                    self.addrs[i].live.fetch_or(1 << slot, Ordering::SeqCst);
                    // Tell the newcomer where this member listens.
                    let mine: Vec<(u64, IpAddr)> = self
                        .listens
                        .read()
                        .iter()
                        .flat_map(|(sid, v)| v.iter().filter(|e| e.1 == self.slot).map(|e| (*sid, e.0)))
                        .collect();
                    let mut b = Vec::new();
                    for (service_id, addr) in mine {
                        Msg::Listen { service_id, addr, on: true }.encode(&mut b);
                        let _ = sock.send_with_flags(&b, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
                    }
                }
                Some(Msg::Listen { service_id, addr, on }) => {
                    if let Some(slot) = io.conns.get(&t).and_then(|c| c.2) {
                        let pid = unix::peer_cred(&sock).map_or(0, |(p, _)| p);
                        self.note_listen(service_id, addr, slot, pid, on);
                    }
                }
                Some(Msg::Packet { src, dst, dst_port, ecn, payload }) => {
                    self.counters.passed_in.fetch_add(1, Ordering::Relaxed);
                    f(Datagram { payload, src, dst, dst_port, ecn, ip_header: None });
                }
                _ => {
                    self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The member behind connection `t` has gone: forget it and its listeners; the lowest
    /// remaining member renews the steering.
    fn gone(self: &Arc<Self>, io: &mut ShareIo, t: usize) {
        let Some((sock, i, slot)) = io.conns.remove(&t) else { return };
        let fd = sock.as_raw_fd();
        let _ = io.poll.registry().deregister(&mut mio::unix::SourceFd(&fd));
        let Some(slot) = slot else { return };
        let a = &self.addrs[i];
        let pid = {
            let mut peers = a.peers.write();
            match &peers[usize::from(slot)] {
                Some(p) if Arc::ptr_eq(&p.sock, &sock) => {
                    let pid = p.pid;
                    peers[usize::from(slot)] = None;
                    pid
                }
                _ => return,
            }
        };
        a.live.fetch_and(!(1u64 << slot), Ordering::SeqCst);
        self.listens.write().retain(|_, v| {
            v.retain(|e| (e.1, e.2) != (slot, pid));
            !v.is_empty()
        });
        tracing::debug!(addr = %a.sa, slot, "softroce: a member of the shared address has gone");
        if a.live.load(Ordering::SeqCst).trailing_zeros() == u32::from(self.slot) {
            self.request_reprobe();
        }
    }

    /// Renews the steering on a thread of its own (one at a time).
    pub(crate) fn request_reprobe(self: &Arc<Self>) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        if self.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        self.last_reprobe.store(now.max(1), Ordering::Relaxed);
        let me = self.clone();
        let spawned = std::thread::Builder::new().name("softroce-share".into()).spawn(move || {
            for i in 0..me.addrs.len() {
                if me.is_closed() {
                    break;
                }
                let r = unix::NameLock::acquire(&me.name(i, "lock"), LOCK_PATIENCE).and_then(|_lock| me.steer(i));
                if let Err(e) = r
                    && !me.is_closed()
                {
                    tracing::warn!(addr = %me.addrs[i].sa, "softroce: could not renew the shared address's steering: {e}");
                }
            }
            me.probing.store(false, Ordering::SeqCst);
        });
        if spawned.is_err() {
            self.probing.store(false, Ordering::SeqCst);
        }
    }

    /// Whether the device has closed (its probe rounds stop: nobody would use their answer,
    /// and a round holds the address's membership lock, which the next device to open there
    /// waits for).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Probes address `i`'s group and attaches the program for what it found (the caller
    /// holds its membership lock).
    pub(crate) fn steer(&self, i: usize) -> io::Result<()> {
        // Probes are steered by the group's program: make sure it has one (a group whose
        // first member never probed has none, and hashes every probe to one socket). The
        // last map this member knew (at first none: then everything but probes and MADs is
        // hashed, and passed on, for the moment of the round).
        let known = self.addrs[i].map.lock().clone();
        self.attach(i, &steer::program(&known))?;
        let map = probe::discover(self, i)?;
        self.attach(i, &steer::program(&map))?;
        tracing::debug!(addr = %self.addrs[i].sa, sockets = map.owners.len(), "softroce: steering renewed");
        *self.addrs[i].map.lock() = map;
        self.counters.steerings.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Attaches `prog` to address `i`'s group through this member's handle on it (nothing
    /// once the device has closed).
    fn attach(&self, i: usize, prog: &[libc::sock_filter]) -> io::Result<()> {
        let guard = self.io.lock();
        match guard.as_ref().and_then(|io| io.attach.get(i)) {
            Some(s) => crate::engine::backend::udp::attach_program(s, prog),
            None => Ok(()),
        }
    }

    /// Answers a probe that reached engine `engine` (see [`probe`]); false if `payload` is
    /// not one.
    pub(crate) fn answer_probe(&self, payload: &[u8], src: SocketAddr, engine: usize) -> bool {
        let Some(answer) = probe::answer(payload, self.slot, engine as u16) else { return false };
        // Probes come from a member of this address, on this address: answer nothing else.
        if let Some(i) = self.addr_index(src.ip()) {
            let _ = self.addrs[i].answer.send_to(&answer, src);
            self.counters.probes_answered.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// The other members (on the device's own address), by slot: `(slot, process id)`.
    pub(crate) fn peer_pids(&self) -> Vec<(u8, u32)> {
        self.addrs[0]
            .peers
            .read()
            .iter()
            .enumerate()
            .filter_map(|(s, p)| p.as_ref().map(|p| (s as u8, p.pid)))
            .collect()
    }

    /// How many members the device's own address has (this one included).
    pub(crate) fn members(&self) -> u32 {
        self.addrs[0].live.load(Ordering::Relaxed).count_ones()
    }

    /// Address `i` (with its port; a link-local one with its scope).
    pub(crate) fn addr(&self, i: usize) -> SocketAddr {
        self.addrs[i].sa
    }

    /// Closes the member's sockets (its engines have stopped and closed theirs): the other
    /// members see it go.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let io = self.io.lock().take();
        if let Some(io) = io {
            // Its group sockets first: the connections' end tells the others it has left.
            drop(io.attach);
            drop(io.conns);
            drop(io.listeners);
        }
        for a in &self.addrs {
            for p in a.peers.write().iter_mut() {
                *p = None;
            }
        }
    }
}

impl Joining {
    /// Probes the groups now that this member's engines run (they answer their own probes),
    /// steers them, and lets go of the membership locks.
    pub(crate) fn finish(self) {
        for i in 0..self.share.addrs.len() {
            // Alone on the address with one socket: every packet is this member's, and the
            // kernel needs no program to pick its only socket (a joiner attaches one first).
            let alone = self.share.addrs[i].live.load(Ordering::Relaxed).count_ones() == 1;
            if alone && self.engines == 1 {
                continue;
            }
            if let Err(e) = self.share.steer(i) {
                tracing::warn!(addr = %self.share.addr(i), "softroce: shared address not steered yet: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_has_its_own_qpns_and_slot_63_leaves_the_probes_alone() {
        assert_eq!(qpn_range(None), (0x11, 0xff_ffe0));
        assert_eq!(qpn_range(Some(0)), (0x11, (1 << 18) - 0x11));
        let (b, n) = qpn_range(Some(5));
        assert_eq!(slot_of_qpn(b), 5);
        assert_eq!(slot_of_qpn(b + n - 1), 5);
        let (b, n) = qpn_range(Some(63));
        assert!(b + n <= PROBE_BASE);
        assert_eq!(slot_of_qpn(b + n - 1), 63);
    }
}
