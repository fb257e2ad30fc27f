//! The raw packet backend: an `AF_PACKET` socket on one network interface, complete Ethernet
//! frames built here, every received IP header visible (needs `CAP_NET_RAW`).
//!
//! # Why
//!
//! A UDP socket hides the IPv4 identification and flags of what it receives, which the ICRC
//! covers, so the UDP backend can only check received ICRCs at reduced strength (see
//! [`crate::wire::icrc::recover_ipv4_id`]), and it cannot set every header field. Here the whole
//! frame is ours in both directions: every received packet's ICRC is checked over its real IP
//! header, and DSCP/ECN, hop limit, identification and the UDP checksum are what we write.
//!
//! # Receiving
//!
//! One packet socket (`SOCK_RAW`, `ETH_P_ALL`) bound to the interface, with a classic BPF
//! filter attached before the socket is bound (so nothing unfiltered is ever queued): IPv4 or
//! IPv6 to one of the device's addresses, UDP (no IPv6 extension header, no IPv4 fragment),
//! destination port 4791. The process then sees only its own traffic.
//!
//! The kernel writes what passes the filter into a receive ring shared with the process
//! (`PACKET_RX_RING`, `TPACKET_V2`: 240 slots of 68 KiB, 16 MiB, each slot one frame with its
//! virtio-net header), and the backend parses every frame where it lies and hands the packets
//! (or the segments of a super-frame) to the engine as slices of the ring: no copy and no
//! system call per frame; a slot goes back to the kernel once the engine has seen its packets.
//! V2 rather than V3, whose blocks reach the process only when full or when a timer of at
//! least a millisecond retires them: a lone packet would wait for it. A slot holds the
//! largest frame the kernel can hand over (a 64 KiB GSO super-frame); one cut short anyway
//! (`tp_snaplen < tp_len`) is counted in `rcvd_frame_truncated` and never parsed. A full ring
//! drops in the kernel (`rcvd_socket_drops`, from `PACKET_STATISTICS`). If the kernel refuses
//! the ring, the backend reads frames in batches with `recvmmsg` into its own buffers, one copy
//! each, and says so once in the log.
//!
//! Either way the backend re-checks in userspace everything it relies on (lengths, IHL, IPv4
//! header checksum, addresses) and drops and counts what fails (`rcvd_frame_truncated`,
//! `rcvd_vlan_tagged`, `rcvd_ip_hdr_err`, `rcvd_ipv6_ext_hdr`, `rcvd_udp_len_err`,
//! `rcvd_not_for_us`); no frame can make it panic.
//!
//! The kernel's own stack sees the same frames. So that it does not answer them with ICMP
//! port unreachable, the backend binds an ordinary UDP socket to `<address>:4791` for each of
//! its addresses and never reads it: a BPF filter that accepts nothing is attached to it, so
//! the kernel discards what arrives there at once (counted in the kernel's UDP `InErrors`)
//! instead of queuing it.
//!
//! # Sending
//!
//! Each packet gets an Ethernet, IP and UDP header built with etherparse (IPv4: DF, UDP
//! checksum 0 as rxe sends; IPv6: the UDP checksum IPv6 requires); the engine has already
//! computed the ICRC for exactly these fields. A run of equal-sized packets to one peer (up to
//! 64, at most 64 KiB) leaves as one GSO super-frame: the virtio-net header asks the kernel for
//! UDP segmentation with the checksum completed per segment, so one system call and one skb
//! carry the run, and it is cut on the wire, or at the first device that cannot carry it
//! whole, into segments with IPv4 identification `k` for segment `k` (the ICRCs were computed
//! for that, as for the UDP backend's GSO). If the kernel refuses, runs go out one frame per
//! packet, 64 per `sendmmsg`, virtio-net header, frame header and payload as three iovecs (the
//! payload is not copied), with the same identifications. Every message names the interface
//! and the EtherType, so the kernel's `skb->protocol` is right for the egress path (qdiscs,
//! nftables `netdev egress`, which do apply: the socket does not bypass the qdisc).
//!
//! The destination MAC is the next hop's, from the kernel's routing and neighbour tables (see
//! `neigh`). Packets to a neighbour that is not resolved yet are dropped and counted
//! (`send_neigh_unresolved`) while the kernel resolves it; RC retransmission recovers them.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, UdpHeader};

use super::RxCounters;
use super::bpf::{
    Insn, JSET, LD_B_ABS, LD_H_ABS, LD_H_IND, LD_W_ABS, LDX_B_MSH, LDX_IMM, RET, Target, assemble,
    attach_filter, goto, jeq, label, op,
};
use super::filter;
use super::neigh::Neighbours;
use super::{Backend, Datagram, Outgoing};

/// Frames per `recvmmsg`/`sendmmsg`.
const BATCH: usize = 64;
/// Bytes per receive slot: the virtio-net header and the largest frame, a GSO super-frame of
/// 64 KiB of UDP (see [`VNET`]). Longer frames are truncated by the kernel, seen with
/// `MSG_TRUNC` and dropped.
const SLOT: usize = VNET + ETH + 60 + 65536;
/// Length of the `virtio_net_hdr` in front of every frame (`PACKET_VNET_HDR`). Frames that
/// never met a NIC — across a veth pair, or on loopback — may still be GSO super-frames
/// (a UDP-socket peer sends 64 KiB with UDP GSO and veth passes it on whole); the header
/// says so (`gso_type`, `gso_size`), and the backend cuts such a frame into the packets the
/// wire would carry, as the kernel's segmentation would: IPv4 identification `id + k` for
/// segment `k`, lengths per segment.
const VNET: usize = 10;
/// `virtio_net_hdr.gso_type` of UDP GSO (`VIRTIO_NET_HDR_GSO_UDP_L4`).
const GSO_UDP_L4: u8 = 5;
/// `virtio_net_hdr.gso_type` of UDP fragmentation offload (`VIRTIO_NET_HDR_GSO_UDP`).
const GSO_UDP: u8 = 3;
/// A zero `virtio_net_hdr` for sending: no offload asked.
static VNET_NONE: [u8; VNET] = [0; VNET];
/// Ethernet header.
const ETH: usize = 14;
const ETH_P_ALL: u16 = 0x0003;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;

/// Why opening the raw backend failed.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The process lacks `CAP_NET_RAW`.
    Permission,
    /// Binding `<address>:port` (the ICMP guard) failed.
    Bind(SocketAddr, io::Error),
    /// Any other failure of the packet socket.
    Io(io::Error),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> OpenError {
        if e.raw_os_error() == Some(libc::EPERM) || e.raw_os_error() == Some(libc::EACCES) {
            OpenError::Permission
        } else {
            OpenError::Io(e)
        }
    }
}

pub(crate) struct RawBackend {
    /// The receive ring, mapped from `fd` (declared first: unmapped before `fd` closes);
    /// `None`: the kernel refused it, frames are read with `recvmmsg` into `bufs`.
    ring: Option<Ring>,
    fd: OwnedFd,
    ifindex: i32,
    mac: [u8; 6],
    ips: Vec<IpAddr>,
    port: u16,
    rx: Arc<RxCounters>,
    /// Send runs as GSO super-frames (until the kernel refuses one).
    gso: bool,
    /// The interface's MTU: no packet larger than this leaves, GSO or not.
    mtu: usize,
    neigh: Neighbours,
    /// Bound, filtered to drop everything, never read: see the module documentation.
    _guards: Vec<UdpSocket>,
    /// Receive slots of the `recvmmsg` fallback (empty with a ring).
    bufs: Vec<Vec<u8>>,
    /// Ethernet + IP + UDP header of each packet of a batch.
    hdrs: Vec<[u8; ETH + 40 + 8]>,
}

const L_V4: u32 = 0;
const L_V4OK: u32 = 1;
const L_V6: u32 = 2;
const L_V6OK: u32 = 3;
const L_ACCEPT: u32 = 4;
const L_DROP: u32 = 5;
/// The RoCE checks of the UDP payload ([`filter::roce_checks`]), X the IP header's length.
const L_ROCE: u32 = 6;
/// What the RoCE checks reject: a sample for the engine to count, the rest dropped.
const L_JUNK: u32 = 7;
/// Labels from here on: "try the next IPv6 address".
const L_NEXT6: u32 = 8;

/// The receive filter: UDP to `port` at one of `ips`, not fragmented, no IPv6 extension
/// header, untagged Ethernet, and a UDP payload that can be a RoCEv2 packet
/// ([`filter::roce_checks`]; a random 1 in [`filter::SAMPLE`] of those that cannot is let
/// through for the engine to count).
fn filter(ips: &[IpAddr], port: u16) -> Option<Vec<libc::sock_filter>> {
    use Target::{Label as L, Next};
    let mut p = vec![
        op(LD_H_ABS, 12),
        jeq(ETH_P_IP as u32, L(L_V4), Next),
        jeq(ETH_P_IPV6 as u32, L(L_V6), L(L_DROP)),
        label(L_V4),
        op(LD_W_ABS, ETH as u32 + 16),
    ];
    for ip in ips {
        if let IpAddr::V4(a) = ip {
            p.push(jeq(u32::from(*a), L(L_V4OK), Next));
        }
    }
    p.extend([
        goto(L_DROP),
        label(L_V4OK),
        op(LD_B_ABS, ETH as u32 + 9),
        jeq(17, Next, L(L_DROP)),
        op(LD_H_ABS, ETH as u32 + 6),
        Insn { code: JSET, jt: L(L_DROP), jf: Next, k: 0x3fff }, // MF or a fragment offset
        op(LDX_B_MSH, ETH as u32),
        op(LD_H_IND, ETH as u32 + 2),
        jeq(port as u32, Next, L(L_DROP)),
        goto(L_ROCE),
        label(L_V6),
        op(LD_B_ABS, ETH as u32 + 6),
        jeq(17, Next, L(L_DROP)),
    ]);
    let mut next = L_NEXT6;
    for ip in ips {
        if let IpAddr::V6(a) = ip {
            let o = a.octets();
            for w in 0..4 {
                let word = u32::from_be_bytes([o[4 * w], o[4 * w + 1], o[4 * w + 2], o[4 * w + 3]]);
                p.push(op(LD_W_ABS, (ETH + 24 + 4 * w) as u32));
                p.push(jeq(word, if w == 3 { L(L_V6OK) } else { Next }, L(next)));
            }
            p.push(label(next));
            next = next.checked_add(1)?;
        }
    }
    p.extend([
        goto(L_DROP),
        label(L_V6OK),
        op(LD_H_ABS, (ETH + 40 + 2) as u32),
        jeq(port as u32, Next, L(L_DROP)),
        op(LDX_IMM, 40),
        label(L_ROCE),
    ]);
    // The same checks of the RoCE packet as a UDP backend's socket filter, the UDP header at
    // X + ETH (X: the IPv4 header's length, or 40).
    p.extend(filter::roce_checks(
        ETH as u32,
        filter::UdpLen::Header,
        None,
        L_ACCEPT,
        L_JUNK,
        filter::ROCE_LABELS,
    ));
    p.push(label(L_JUNK));
    p.extend(filter::sample_or_drop(filter::SAMPLE, L_ACCEPT));
    p.extend([label(L_ACCEPT), op(RET, 0x0004_0000), label(L_DROP), op(RET, 0)]);
    assemble(&p)
}

fn set_int(fd: i32, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: a plain int option; the kernel reads `size_of::<i32>()` bytes from `&v`.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn sockaddr_ll(ifindex: i32, protocol: u16) -> libc::sockaddr_ll {
    libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: protocol.to_be(),
        sll_ifindex: ifindex,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    }
}

/// A UDP socket bound to `addr` that drops everything it would receive.
fn guard(addr: SocketAddr) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    // Freebind: an address still in duplicate address detection (an interface just brought
    // up) cannot be bound otherwise.
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
        s.set_freebind_v6(true)?;
    } else {
        s.set_freebind_v4(true)?;
    }
    attach_filter(s.as_raw_fd(), &[libc::sock_filter { code: RET, jt: 0, jf: 0, k: 0 }])?;
    let _ = s.set_recv_buffer_size(0);
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// `PACKET_VERSION` value of the ring format used here (`TPACKET_V2`).
const TPACKET_V2: i32 = 1;
/// `tpacket2_hdr` (32 bytes) and the `sockaddr_ll` after it: what the kernel writes in front
/// of every frame's data (`TPACKET2_HDRLEN`).
const RING_HDR: usize = 32 + std::mem::size_of::<libc::sockaddr_ll>();
/// Bytes per ring frame: the kernel puts the frame's MAC header at `tp_mac` (76 here: the
/// aligned header, then [`VNET`]), so this holds a whole [`SLOT`] — a 64 KiB GSO super-frame —
/// rounded up to pages. Anything longer arrives with `tp_snaplen < tp_len` and is dropped.
const RING_FRAME: usize = (RING_HDR + 16 + SLOT).div_ceil(4096) * 4096;
// The largest frame the kernel hands over fits a slot whole: `tp_mac` (the aligned header,
// at least 16 bytes of room for the MAC header, the virtio-net header, less the MAC header)
// and an Ethernet header, the largest IP header and 64 KiB of IP payload.
const _: () = assert!((RING_HDR + 16).next_multiple_of(16) + VNET - ETH + ETH + 60 + 65535 <= RING_FRAME);
/// Frames per ring block: one block is one contiguous kernel allocation of a power-of-two
/// number of pages, and 15 frames of 68 KiB fill 1 MiB but for one page.
const RING_FRAMES_PER_BLOCK: usize = 15;
/// Blocks in the ring: 240 frames, 16 MiB, the receive buffer the `recvmmsg` path asks for.
const RING_BLOCKS: usize = 16;
/// Frames to walk per [`Backend::recv`] (the engine sends between batches).
const RING_BATCH: usize = 64;

/// A `PACKET_RX_RING` (`TPACKET_V2`) mapped into this process: the kernel writes each frame
/// that passes the filter into the next free slot and sets its `tp_status` to
/// `TP_STATUS_USER`; we hand its bytes, in place, to the parser and give the slot back with
/// `TP_STATUS_KERNEL`. No copy and no system call per frame; `epoll` still wakes us (the
/// kernel signals the socket per frame).
///
/// `TPACKET_V2` rather than V3: a V3 block becomes visible only when it is full or its
/// retire timer (at least 1 ms) fires, which a one-packet ping-pong would wait for every
/// time; V2 hands over every frame at once.
struct Ring {
    base: std::ptr::NonNull<u8>,
    len: usize,
    /// The slot the kernel fills next, once it is ours.
    next: usize,
}

// SAFETY: the mapping is owned by this value alone (nothing else holds `base`); the kernel
// side synchronises through `tp_status` only, whatever thread reads it.
unsafe impl Send for Ring {}

impl Ring {
    const FRAMES: usize = RING_FRAMES_PER_BLOCK * RING_BLOCKS;

    /// Sets up and maps the ring on packet socket `fd`. Must come after `PACKET_VNET_HDR`
    /// (the kernel refuses to change that once a ring exists).
    fn new(fd: i32) -> io::Result<Ring> {
        set_int(fd, libc::SOL_PACKET, libc::PACKET_VERSION, TPACKET_V2)?;
        let req = libc::tpacket_req {
            tp_block_size: (RING_FRAME * RING_FRAMES_PER_BLOCK) as u32,
            tp_block_nr: RING_BLOCKS as u32,
            tp_frame_size: RING_FRAME as u32,
            tp_frame_nr: Ring::FRAMES as u32,
        };
        set_ring(fd, &req)?;
        let len = RING_FRAME * Ring::FRAMES;
        // SAFETY: a fresh shared mapping of the socket's ring, exactly its size from offset 0
        // as the kernel requires; no existing memory is touched.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // Without the mapping the ring would swallow every frame: take it down again so
            // that `recvmmsg` works.
            // SAFETY: all-zero is a valid tpacket_req (it frees the ring).
            let _ = set_ring(fd, &unsafe { std::mem::zeroed() });
            return Err(e);
        }
        let base =
            std::ptr::NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(Ring { base, len, next: 0 })
    }

    /// The status word of slot `i`, shared with the kernel.
    fn status(&self, i: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: slot `i < FRAMES` starts `i * RING_FRAME` bytes into the mapping (each block
        // is exactly `RING_FRAMES_PER_BLOCK` frames, blocks are mapped back to back), which is
        // 16-byte aligned; its first field is the u32 `tp_status`, which the kernel and we
        // only ever access as a whole word. The mapping lives as long as `self`.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.base.as_ptr().add(i * RING_FRAME).cast()) }
    }

    /// Hands the next frame to `f` if the kernel has filled it: its header and the whole
    /// slot, in place. Gives the slot back to the kernel afterwards and moves on.
    fn next_frame<R>(&mut self, f: impl FnOnce(&libc::tpacket2_hdr, &[u8]) -> R) -> Option<R> {
        let i = self.next;
        // Acquire: pairs with the kernel's barrier between writing the frame and setting its
        // status, so the header and data read below are the ones it wrote.
        if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the slot lies inside the mapping and is ours while its status is USER: the
        // kernel writes only slots marked TP_STATUS_KERNEL. `tpacket2_hdr` is plain data
        // (read unaligned-safe); the slice covers exactly this slot and cannot outlive the
        // call of `f` (it is not `'static`), which ends before the slot is given back below.
        let r = unsafe {
            let p = self.base.as_ptr().add(i * RING_FRAME);
            let h = std::ptr::read_unaligned(p.cast::<libc::tpacket2_hdr>());
            f(&h, std::slice::from_raw_parts(p, RING_FRAME))
        };
        // Release: every read of the slot happens before the kernel may refill it.
        self.status(i).store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (i + 1) % Ring::FRAMES;
        Some(r)
    }
}

impl std::ops::Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `new`, unmapped once, here; no slice
        // into it outlives a `recv` call.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn set_ring(fd: i32, req: &libc::tpacket_req) -> io::Result<()> {
    // SAFETY: the kernel reads `size_of::<tpacket_req>()` bytes from `req`, which is live.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            (req as *const libc::tpacket_req).cast(),
            std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Set once a backend in this process fell back to `recvmmsg`, so that the reason is logged once.
static RING_FALLBACK_LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn count(c: &RxCounters, d: Drop) {
    match d {
        Drop::Truncated => &c.frame_truncated,
        Drop::Vlan => &c.vlan_tagged,
        Drop::IpHeader => &c.ip_hdr_err,
        Drop::Ipv6Ext => &c.ipv6_ext_hdr,
        Drop::UdpLength => &c.udp_len_err,
        Drop::NotForUs => &c.not_for_us,
    }
    .fetch_add(1, Ordering::Relaxed);
}

/// What a frame that passed every check carries.
struct Parsed {
    ip: std::ops::Range<usize>,
    payload: std::ops::Range<usize>,
    src: SocketAddr,
    dst: IpAddr,
    dst_port: u16,
    ecn: u8,
}

/// Why a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drop {
    Truncated,
    Vlan,
    IpHeader,
    Ipv6Ext,
    UdpLength,
    NotForUs,
}

/// The IPv4 header checksum: the ones' complement sum of a valid header is 0xffff.
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// Checks an Ethernet frame for a RoCEv2 datagram to one of `ips` on `port`. Never panics:
/// every index is checked against the frame's length first.
fn parse(f: &[u8], ips: &[IpAddr], port: u16) -> Result<Parsed, Drop> {
    if f.len() < ETH {
        return Err(Drop::Truncated);
    }
    let ty = u16::from_be_bytes([f[12], f[13]]);
    let (ip, src, dst, ecn, l4) = match ty {
        ETH_P_IP => {
            let h = f.get(ETH..ETH + 20).ok_or(Drop::Truncated)?;
            let ihl = (h[0] & 0x0f) as usize * 4;
            if h[0] >> 4 != 4 || ihl < 20 {
                return Err(Drop::IpHeader);
            }
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            let hdr = f.get(ETH..ETH + ihl).ok_or(Drop::Truncated)?;
            if total < ihl || ETH + total > f.len() {
                return Err(if total < ihl { Drop::IpHeader } else { Drop::Truncated });
            }
            if !ipv4_checksum_ok(hdr) || u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
                return Err(Drop::IpHeader);
            }
            if h[9] != 17 {
                return Err(Drop::NotForUs);
            }
            let src = IpAddr::from([h[12], h[13], h[14], h[15]]);
            let dst = IpAddr::from([h[16], h[17], h[18], h[19]]);
            (ETH..ETH + ihl, src, dst, h[1] & 3, ETH + ihl..ETH + total)
        }
        ETH_P_IPV6 => {
            let h = f.get(ETH..ETH + 40).ok_or(Drop::Truncated)?;
            if h[0] >> 4 != 6 {
                return Err(Drop::IpHeader);
            }
            let total = 40 + u16::from_be_bytes([h[4], h[5]]) as usize;
            if ETH + total > f.len() {
                return Err(Drop::Truncated);
            }
            if h[6] != 17 {
                // RoCEv2 puts UDP right after the IPv6 header; extension headers (hop-by-hop,
                // routing, fragments) are not for us.
                return Err(Drop::Ipv6Ext);
            }
            let a =
                |o: usize| <[u8; 16]>::try_from(&h[o..o + 16]).map(IpAddr::from).map_err(|_| Drop::Truncated);
            (ETH..ETH + 40, a(8)?, a(24)?, (h[1] >> 4) & 3, ETH + 40..ETH + total)
        }
        ETH_P_8021Q | ETH_P_8021AD => return Err(Drop::Vlan),
        _ => return Err(Drop::NotForUs),
    };
    let udp = f.get(l4.clone()).ok_or(Drop::Truncated)?;
    if udp.len() < 8 {
        return Err(Drop::Truncated);
    }
    let ulen = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    if ulen != udp.len() {
        return Err(Drop::UdpLength);
    }
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    if dst_port != port || !ips.contains(&dst) {
        return Err(Drop::NotForUs);
    }
    Ok(Parsed {
        ip,
        payload: l4.start + 8..l4.end,
        src: SocketAddr::new(src, u16::from_be_bytes([udp[0], udp[1]])),
        dst,
        dst_port,
        ecn,
    })
}

/// Checks one frame (`vnet`: its virtio-net header) and hands what it carries to `f`: one
/// datagram, or each segment of a GSO super-frame. Returns the number of datagrams.
fn deliver(
    vnet: &[u8],
    frame: &[u8],
    ips: &[IpAddr],
    port: u16,
    rx: &RxCounters,
    f: &mut dyn FnMut(Datagram<'_>),
) -> usize {
    let p = match parse(frame, ips, port) {
        Ok(p) => p,
        Err(d) => {
            count(rx, d);
            return 0;
        }
    };
    let gso_size = u16::from_le_bytes([vnet[4], vnet[5]]) as usize;
    let payload = &frame[p.payload.clone()];
    if !matches!(vnet[1], GSO_UDP_L4 | GSO_UDP) || gso_size == 0 || payload.len() <= gso_size {
        f(Datagram {
            payload,
            src: p.src,
            dst: p.dst,
            dst_port: p.dst_port,
            ecn: p.ecn,
            ip_header: Some(&frame[p.ip]),
        });
        return 1;
    }
    // A super-frame: each segment with the IP header segmentation would give it.
    let ip = &frame[p.ip.clone()];
    let mut hdr = [0u8; 60];
    let hdr = &mut hdr[..ip.len()];
    hdr.copy_from_slice(ip);
    let mut n = 0;
    for (k, seg) in payload.chunks(gso_size).enumerate() {
        let l4 = (8 + seg.len()) as u16;
        if hdr[0] >> 4 == 4 {
            hdr[2..4].copy_from_slice(&(ip.len() as u16 + l4).to_be_bytes());
            let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(k as u16);
            hdr[4..6].copy_from_slice(&id.to_be_bytes());
        } else {
            hdr[4..6].copy_from_slice(&l4.to_be_bytes());
        }
        f(Datagram {
            payload: seg,
            src: p.src,
            dst: p.dst,
            dst_port: p.dst_port,
            ecn: p.ecn,
            ip_header: Some(hdr),
        });
        n += 1;
    }
    n
}

/// One slot of the receive ring (`h`, its header; `slot`, all its bytes): checks what the
/// kernel says of it, then [`deliver`]s the frame in place. Returns the number of datagrams.
fn ring_frame(
    h: &libc::tpacket2_hdr,
    slot: &[u8],
    ips: &[IpAddr],
    port: u16,
    rx: &RxCounters,
    f: &mut dyn FnMut(Datagram<'_>),
) -> usize {
    // The sockaddr_ll after the header: `sll_pkttype` is its byte 10.
    if slot.get(32 + 10) == Some(&libc::PACKET_OUTGOING) {
        return 0;
    }
    // A tag the NIC took off the frame: the data looks untagged, the header says otherwise.
    if h.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
        count(rx, Drop::Vlan);
        return 0;
    }
    let (mac, snap) = (h.tp_mac as usize, h.tp_snaplen as usize);
    // Cut to fit the slot (`tp_snaplen < tp_len`), or a header that points outside the slot:
    // never parsed, only counted.
    let Some(bytes) = mac.checked_sub(VNET).filter(|&v| v >= RING_HDR).and_then(|v| slot.get(v..mac + snap))
    else {
        count(rx, Drop::Truncated);
        return 0;
    };
    if h.tp_status & libc::TP_STATUS_COPY != 0 || snap < h.tp_len as usize {
        count(rx, Drop::Truncated);
        return 0;
    }
    let (vnet, frame) = bytes.split_at(VNET);
    deliver(vnet, frame, ips, port, rx, f)
}

/// The network interface a raw backend opens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    /// Interface index.
    pub ifindex: i32,
    /// Its MAC address (zero for loopback).
    pub mac: [u8; 6],
    /// Loopback: no neighbours, zero MACs.
    pub loopback: bool,
    /// Its MTU.
    pub mtu: u32,
}

impl RawBackend {
    /// Opens a packet socket on `link` for the addresses `ips` (the first is the device's
    /// address); `gso`: send runs of packets as GSO super-frames.
    pub(crate) fn new(
        link: Link,
        ips: Vec<IpAddr>,
        port: u16,
        gso: bool,
        rx: Arc<RxCounters>,
    ) -> Result<RawBackend, OpenError> {
        RawBackend::open(link, ips, port, gso, rx, true)
    }

    /// [`RawBackend::new`]; `ring`: try the receive ring (else `recvmmsg` from the start).
    fn open(
        link: Link,
        ips: Vec<IpAddr>,
        port: u16,
        gso: bool,
        rx: Arc<RxCounters>,
        ring: bool,
    ) -> Result<RawBackend, OpenError> {
        let Link { ifindex, mac, loopback, mtu } = link;
        let prog = filter(&ips, port).ok_or(OpenError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many addresses for one filter",
        )))?;
        // Protocol 0: the socket receives nothing until it is bound below, after the filter.
        let sock = socket2::Socket::new(
            socket2::Domain::from(libc::AF_PACKET),
            socket2::Type::from(libc::SOCK_RAW),
            None,
        )?;
        let fd: OwnedFd = sock.into();
        let raw = fd.as_raw_fd();
        attach_filter(raw, &prog)?;
        // Every frame comes with a virtio-net header (see `VNET`); sends carry one too.
        set_int(raw, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)?;
        // Our own transmissions are not to be read back.
        let _ = set_int(raw, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);
        // Frames straight from a shared ring, or, if the kernel will not give us one, read
        // with `recvmmsg` (logged once a process).
        let ring =
            match if ring { Ring::new(raw) } else { Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT)) } {
                Ok(r) => Some(r),
                Err(e) => {
                    if !RING_FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(error = %e, "raw backend: no PACKET_RX_RING, receiving with recvmmsg");
                    }
                    None
                }
            };
        // recvmmsg fallback: room for a full window of the peer arriving back to back (root may
        // exceed rmem_max). A ring does not use it.
        if set_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20).is_err() {
            let _ = set_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, 16 << 20);
        }
        if set_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20).is_err() {
            let _ = set_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20);
        }
        let sll = sockaddr_ll(ifindex, ETH_P_ALL);
        // SAFETY: `sll` is a valid sockaddr_ll of the length given.
        let r = unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error().into());
        }
        let mut guards = Vec::new();
        for ip in &ips {
            let addr = match ip {
                IpAddr::V6(a) if a.is_unicast_link_local() => {
                    SocketAddrV6::new(*a, port, 0, ifindex as u32).into()
                }
                _ => SocketAddr::new(*ip, port),
            };
            guards.push(guard(addr).map_err(|e| OpenError::Bind(addr, e))?);
        }
        let bufs = if ring.is_some() { Vec::new() } else { (0..BATCH).map(|_| vec![0u8; SLOT]).collect() };
        Ok(RawBackend {
            ring,
            fd,
            ifindex,
            mac,
            ips,
            port,
            rx,
            gso,
            mtu: mtu as usize,
            neigh: Neighbours::new(ifindex, loopback),
            _guards: guards,
            bufs,
            hdrs: vec![[0u8; ETH + 48]; BATCH],
        })
    }

    fn count(&self, d: Drop) {
        count(&self.rx, d)
    }

    /// Writes the Ethernet, IP and UDP headers of one packet into `h`; returns their length.
    ///
    /// `id` is the IPv4 identification. With `gso`, `seg` is a whole run to be segmented by the
    /// kernel: the UDP checksum field gets the pseudo-header sum the segmentation completes.
    fn header(
        &self,
        h: &mut [u8; ETH + 48],
        out: &Outgoing<'_>,
        dst_mac: [u8; 6],
        seg: &[u8],
        id: u16,
        gso: bool,
    ) -> Option<usize> {
        let len = u16::try_from(8 + seg.len()).ok()?;
        let (ether_type, ip_len) = match (out.src_ip, out.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut ip =
                    Ipv4Header::new(len, out.hop_limit, IpNumber::UDP, s.octets(), d.octets()).ok()?;
                ip.dscp = etherparse::IpDscp::try_new(out.tos >> 2).ok()?;
                ip.ecn = etherparse::IpEcn::try_new(out.tos & 3).ok()?;
                ip.identification = id;
                ip.dont_fragment = true;
                ip.header_checksum = ip.calc_header_checksum();
                h[ETH..ETH + 20].copy_from_slice(&ip.to_bytes());
                // rxe sends UDP checksum 0 over IPv4; a GSO run needs the partial sum.
                let checksum = if gso { pseudo_sum(&s.octets(), &d.octets(), len) } else { 0 };
                let udp = UdpHeader {
                    source_port: out.src_port,
                    destination_port: out.dst.port(),
                    length: len,
                    checksum,
                };
                h[ETH + 20..ETH + 28].copy_from_slice(&udp.to_bytes());
                (EtherType::IPV4, 20)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ip = Ipv6Header {
                    traffic_class: out.tos,
                    flow_label: Ipv6FlowLabel::try_new(out.flow_label & 0xf_ffff).ok()?,
                    payload_length: len,
                    next_header: IpNumber::UDP,
                    hop_limit: out.hop_limit,
                    source: s.octets(),
                    destination: d.octets(),
                };
                let udp = if gso {
                    let checksum = pseudo_sum(&s.octets(), &d.octets(), len);
                    UdpHeader {
                        source_port: out.src_port,
                        destination_port: out.dst.port(),
                        length: len,
                        checksum,
                    }
                } else {
                    UdpHeader::with_ipv6_checksum(out.src_port, out.dst.port(), &ip, seg).ok()?
                };
                h[ETH..ETH + 40].copy_from_slice(&ip.to_bytes());
                h[ETH + 40..ETH + 48].copy_from_slice(&udp.to_bytes());
                (EtherType::IPV6, 40)
            }
            _ => return None,
        };
        let eth = Ethernet2Header { source: self.mac, destination: dst_mac, ether_type };
        h[..ETH].copy_from_slice(&eth.to_bytes());
        Some(ETH + ip_len + 8)
    }
}

impl RawBackend {
    /// Sends a run as one GSO super-frame: the virtio-net header asks the kernel to cut it
    /// into `segment_size` pieces (UDP GSO, checksum completed per segment, IPv4
    /// identification `k` for segment `k`), on the wire or at the first device that cannot
    /// carry it whole. One system call and one skb for up to 64 packets.
    fn send_gso(
        &mut self,
        out: &Outgoing<'_>,
        dst_mac: [u8; 6],
        sll: &mut libc::sockaddr_ll,
    ) -> io::Result<()> {
        let mut hdr = [0u8; ETH + 48];
        let hl = self
            .header(&mut hdr, out, dst_mac, out.contents, 0, true)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let mut vnet = [0u8; VNET];
        vnet[0] = 1; // VIRTIO_NET_HDR_F_NEEDS_CSUM
        vnet[1] = GSO_UDP_L4;
        vnet[2..4].copy_from_slice(&(hl as u16).to_le_bytes());
        vnet[4..6].copy_from_slice(&(out.segment_size as u16).to_le_bytes());
        vnet[6..8].copy_from_slice(&((hl - 8) as u16).to_le_bytes()); // checksum start: UDP
        vnet[8..10].copy_from_slice(&6u16.to_le_bytes()); // its checksum field
        let mut iov = [
            libc::iovec { iov_base: vnet.as_mut_ptr().cast(), iov_len: VNET },
            libc::iovec { iov_base: hdr.as_mut_ptr().cast(), iov_len: hl },
            libc::iovec { iov_base: out.contents.as_ptr() as *mut _, iov_len: out.contents.len() },
        ];
        // SAFETY: as above, all-zero is valid for msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (sll as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        for _ in 0..1000 {
            // SAFETY: `msg` points at `sll`, at `iov` and through it at `vnet`, `hdr` and
            // `out.contents`, all live for the call; the kernel only reads them.
            let r = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, 0) };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR)) {
                return Err(e);
            }
            std::thread::yield_now();
        }
        Err(io::Error::from_raw_os_error(libc::ENOBUFS))
    }
}

/// The UDP pseudo-header sum (folded, not complemented) that a partial checksum starts from:
/// source and destination address, protocol 17, UDP length.
fn pseudo_sum(src: &[u8], dst: &[u8], udp_len: u16) -> u16 {
    let mut sum: u32 =
        src.chunks(2).chain(dst.chunks(2)).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    sum += 17 + udp_len as u32;
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

impl Backend for RawBackend {
    fn port(&self) -> u16 {
        self.port
    }

    fn junk_weight(&self) -> u64 {
        // The frame filter lets a random 1 in SAMPLE of the junk it rejects through.
        u64::from(filter::SAMPLE)
    }

    fn refresh_counters(&mut self) {
        // The packet socket's drops since the last look (reading resets them).
        let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes; the kernel writes at most `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.rx.socket_drops.fetch_add(u64::from(st.tp_drops), std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn recv(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<usize> {
        if let Some(ring) = self.ring.as_mut() {
            let (ips, port, rx) = (&self.ips, self.port, &*self.rx);
            let (mut frames, mut count) = (0, 0);
            while frames < RING_BATCH {
                let Some(n) = ring.next_frame(|h, slot| ring_frame(h, slot, ips, port, rx, &mut *f)) else {
                    break;
                };
                frames += 1;
                count += n;
            }
            // Frames dropped here still count as work done: read on until the ring is empty.
            return Ok(count.max(frames));
        }
        // SAFETY: all-zero is a valid value of these plain C structs.
        let mut addrs: [libc::sockaddr_ll; BATCH] = unsafe { std::mem::zeroed() };
        let mut iovs: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() })
            .collect();
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_ll).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            m.msg_hdr.msg_iov = &mut iovs[i];
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: every mmsghdr points at a live iovec over a buffer of `SLOT` bytes in
        // `self.bufs` and at a live sockaddr_ll; none of them moves or is read until the call
        // returns, and the kernel writes at most the lengths given.
        let n = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(0) } else { Err(e) };
        }
        let n = n as usize;
        let mut count = 0;
        for i in 0..n {
            let m = &msgs[i];
            if addrs[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.count(Drop::Truncated);
                continue;
            }
            let buf = &self.bufs[i][..(m.msg_len as usize).min(SLOT)];
            if buf.len() < VNET {
                self.count(Drop::Truncated);
                continue;
            }
            let (vnet, frame) = buf.split_at(VNET);
            count += deliver(vnet, frame, &self.ips, self.port, &self.rx, f);
        }
        // Frames dropped here still count as work done: read on until the socket is empty.
        Ok(count.max(n))
    }

    fn send(&mut self, out: Outgoing<'_>) -> io::Result<()> {
        let seg = out.segment_size.max(1);
        let total = out.contents.len().div_ceil(seg);
        let Some(dst_mac) = self.neigh.lookup(out.dst.ip()) else {
            self.rx.neigh_unresolved.fetch_add(total as u64, Ordering::Relaxed);
            return Ok(());
        };
        let proto = if out.dst.is_ipv4() { ETH_P_IP } else { ETH_P_IPV6 };
        let ip_len = if out.dst.is_ipv4() { 20 } else { 40 };
        if ip_len + 8 + seg > self.mtu {
            // A path MTU above the link's (the kernel refuses such frames with EMSGSIZE; a
            // GSO run would slip through and be dropped further on): nothing can be sent.
            self.rx.send_err.fetch_add(total as u64, Ordering::Relaxed);
            return Ok(());
        }
        let mut sll = sockaddr_ll(self.ifindex, proto);
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&dst_mac);
        if total > 1 && self.gso {
            match self.send_gso(&out, dst_mac, &mut sll) {
                Ok(()) => return Ok(()),
                // The kernel cannot take GSO from a packet socket: one frame per packet.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                    self.gso = false
                }
                Err(_) => {
                    self.rx.send_err.fetch_add(total as u64, Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
        let mut segs = out.contents.chunks(seg);
        let mut hdrs = std::mem::take(&mut self.hdrs);
        let mut result = Ok(());
        let mut index = 0;
        loop {
            let mut iovs: [[libc::iovec; 3]; BATCH] =
                [[libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 3]; BATCH];
            let mut k = 0;
            for s in segs.by_ref().take(BATCH) {
                // Segment k of a run leaves with IPv4 identification k, as from a GSO send.
                let Some(hl) = self.header(&mut hdrs[k], &out, dst_mac, s, (index + k) as u16, false) else {
                    self.rx.send_err.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                iovs[k] = [
                    // The kernel only reads it (no offload asked).
                    libc::iovec { iov_base: VNET_NONE.as_ptr() as *mut _, iov_len: VNET },
                    libc::iovec { iov_base: hdrs[k].as_mut_ptr().cast(), iov_len: hl },
                    libc::iovec { iov_base: s.as_ptr() as *mut _, iov_len: s.len() },
                ];
                k += 1;
            }
            if k == 0 {
                break;
            }
            index += k;
            // SAFETY: as above, all-zero is valid for mmsghdr.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()).take(k) {
                m.msg_hdr.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                m.msg_hdr.msg_iov = iov.as_mut_ptr();
                m.msg_hdr.msg_iovlen = 3;
            }
            let mut done = 0;
            let mut spins = 0;
            while done < k {
                // SAFETY: messages `done..k` point at live iovecs over `hdrs` and over
                // `out.contents`, and at `sll`; the kernel only reads them during the call.
                let r = unsafe {
                    libc::sendmmsg(self.fd.as_raw_fd(), msgs[done..].as_mut_ptr(), (k - done) as u32, 0)
                };
                if r > 0 {
                    done += r as usize;
                    continue;
                }
                let e = io::Error::last_os_error();
                // The device queue is full (ENOBUFS) or the send buffer (EAGAIN): wait a little.
                if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR))
                    && spins < 1000
                {
                    spins += 1;
                    std::thread::yield_now();
                    continue;
                }
                self.rx.send_err.fetch_add((k - done) as u64, Ordering::Relaxed);
                result = Err(e);
                break;
            }
            if result.is_err() {
                break;
            }
        }
        self.hdrs = hdrs;
        // Failures are counted here; the engine counts whole failed batches on error, so
        // report success and let retransmission do its work.
        let _ = result;
        Ok(())
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        registry.register(&mut mio::unix::SourceFd(&self.fd.as_raw_fd()), token, mio::Interest::READABLE)
    }

    fn listen(&mut self, registry: &mio::Registry, token: mio::Token, on: bool) -> io::Result<()> {
        if on {
            return self.register(registry, token);
        }
        registry.deregister(&mut mio::unix::SourceFd(&self.fd.as_raw_fd()))
    }

    fn max_segments(&self) -> usize {
        BATCH
    }

    fn gso_numbers_ip_id(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ip: &[u8], udp_payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&(if ip[0] >> 4 == 4 { ETH_P_IP } else { ETH_P_IPV6 }).to_be_bytes());
        f.extend_from_slice(ip);
        f.extend_from_slice(udp_payload);
        f
    }

    fn v4(total: u16, flags: u16) -> Vec<u8> {
        let mut h = Ipv4Header::new(total - 20, 64, IpNumber::UDP, [10, 0, 0, 2], [10, 0, 0, 1]).unwrap();
        h.dont_fragment = flags & 0x4000 != 0;
        h.more_fragments = flags & 0x2000 != 0;
        h.header_checksum = h.calc_header_checksum();
        h.to_bytes().to_vec()
    }

    fn udp(len: u16, dport: u16) -> Vec<u8> {
        let mut u = UdpHeader { source_port: 0xc000, destination_port: dport, length: len, checksum: 0 }
            .to_bytes()
            .to_vec();
        u.resize(len as usize, 0xab);
        u
    }

    #[test]
    fn parses_good_frames_and_drops_the_rest() {
        let me: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap()];
        let good = frame(&v4(20 + 40, 0x4000), &udp(40, 4791));
        let p = parse(&good, &me, 4791).unwrap();
        assert_eq!(p.payload.len(), 32);
        assert_eq!(p.ip, 14..34);
        assert_eq!(parse(&frame(&v4(60, 0x4000), &udp(40, 4792)), &me, 4791).err(), Some(Drop::NotForUs));
        assert_eq!(parse(&frame(&v4(60, 0x2000), &udp(40, 4791)), &me, 4791).err(), Some(Drop::IpHeader));
        assert_eq!(parse(&frame(&v4(60, 0x4000), &udp(39, 4791)), &me, 4791).err(), Some(Drop::Truncated));
        let mut bad_sum = good.clone();
        bad_sum[14 + 8] ^= 1; // TTL, outside the ICRC but inside the header checksum
        assert_eq!(parse(&bad_sum, &me, 4791).err(), Some(Drop::IpHeader));
        let mut bad_ihl = good.clone();
        bad_ihl[14] = 0x44;
        assert_eq!(parse(&bad_ihl, &me, 4791).err(), Some(Drop::IpHeader));
        let mut vlan = good.clone();
        vlan[12..14].copy_from_slice(&ETH_P_8021Q.to_be_bytes());
        assert_eq!(parse(&vlan, &me, 4791).err(), Some(Drop::Vlan));
        // Every truncation of a good frame is dropped without a panic.
        for n in 0..good.len() {
            assert!(parse(&good[..n], &me, 4791).is_err());
        }
        // And so is every single-byte change somewhere, whatever it does.
        for i in 0..good.len() {
            for v in [0u8, 0x45, 0xff] {
                let mut g = good.clone();
                g[i] = v;
                let _ = parse(&g, &me, 4791);
            }
        }
    }

    #[test]
    fn ipv6_extension_headers_are_dropped() {
        let me: Vec<IpAddr> = vec!["fd00::1".parse().unwrap()];
        let mut h = Ipv6Header {
            traffic_class: 0,
            flow_label: Ipv6FlowLabel::ZERO,
            payload_length: 40,
            next_header: IpNumber::UDP,
            hop_limit: 64,
            source: "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            destination: "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        };
        let good = frame(&h.to_bytes(), &udp(40, 4791));
        assert!(parse(&good, &me, 4791).is_ok());
        h.next_header = IpNumber::IPV6_HEADER_HOP_BY_HOP;
        assert_eq!(parse(&frame(&h.to_bytes(), &udp(40, 4791)), &me, 4791).err(), Some(Drop::Ipv6Ext));
    }

    /// The partial sum plus the UDP header and payload gives the checksum etherparse computes.
    #[test]
    fn pseudo_sum_completes_to_the_udp_checksum() {
        let payload = [0x12u8, 0x34, 0x56, 0x78, 0x9a];
        let (src, dst) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let len = (8 + payload.len()) as u16;
        let ip = Ipv4Header::new(len, 64, IpNumber::UDP, src, dst).unwrap();
        let want = UdpHeader::with_ipv4_checksum(0xc000, 4791, &ip, &payload).unwrap().checksum;
        let mut data = UdpHeader { source_port: 0xc000, destination_port: 4791, length: len, checksum: 0 }
            .to_bytes()
            .to_vec();
        data.extend_from_slice(&payload);
        data.push(0);
        let mut sum = pseudo_sum(&src, &dst, len) as u32;
        sum += data.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum::<u32>();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(!(sum as u16), want);
    }

    /// A ring slot as the kernel writes it: header, sockaddr_ll, virtio-net header ending at
    /// `tp_mac` (76, as for an Ethernet frame on this socket), the frame.
    fn slot(frame: &[u8], vnet: [u8; VNET], len: u32, status: u32) -> (libc::tpacket2_hdr, Vec<u8>) {
        let mac = 76usize;
        let mut s = vec![0u8; RING_FRAME];
        let snap = frame.len().min(RING_FRAME - mac);
        s[mac - VNET..mac].copy_from_slice(&vnet);
        s[mac..mac + snap].copy_from_slice(&frame[..snap]);
        // SAFETY: all-zero is a valid tpacket2_hdr.
        let mut h: libc::tpacket2_hdr = unsafe { std::mem::zeroed() };
        h.tp_status = libc::TP_STATUS_USER | status;
        h.tp_len = len;
        h.tp_snaplen = snap as u32;
        h.tp_mac = mac as u16;
        h.tp_net = (mac + ETH) as u16;
        (h, s)
    }

    fn run(h: &libc::tpacket2_hdr, s: &[u8], rx: &RxCounters) -> Vec<(usize, u16)> {
        let me: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap()];
        let mut got = Vec::new();
        let n = ring_frame(h, s, &me, 4791, rx, &mut |d| {
            let ip = d.ip_header.unwrap();
            got.push((d.payload.len(), u16::from_be_bytes([ip[4], ip[5]])));
        });
        assert_eq!(n, got.len());
        got
    }

    #[test]
    fn ring_slots_are_checked_before_parsing() {
        let good = frame(&v4(20 + 40, 0x4000), &udp(40, 4791));
        let rx = RxCounters::default();
        let (h, s) = slot(&good, [0; VNET], good.len() as u32, 0);
        assert_eq!(run(&h, &s, &rx), vec![(32, 0)]);

        // Cut short by the kernel (tp_snaplen < tp_len): counted, never parsed.
        let (h, s) = slot(&good, [0; VNET], good.len() as u32 + 1, 0);
        assert!(run(&h, &s, &rx).is_empty());
        assert_eq!(rx.frame_truncated.load(Ordering::Relaxed), 1);
        // A header pointing outside the slot or into the ring header.
        for (mac, snap) in [(u16::MAX, 6000), (40, 60), (76, u32::MAX), (0, 0)] {
            let (mut h, s) = slot(&good, [0; VNET], good.len() as u32, 0);
            h.tp_mac = mac;
            h.tp_snaplen = snap;
            h.tp_len = snap;
            assert!(run(&h, &s, &rx).is_empty());
        }
        assert_eq!(rx.frame_truncated.load(Ordering::Relaxed), 5);
        // A tag the NIC took off.
        let (h, s) = slot(&good, [0; VNET], good.len() as u32, libc::TP_STATUS_VLAN_VALID);
        assert!(run(&h, &s, &rx).is_empty());
        assert_eq!(rx.vlan_tagged.load(Ordering::Relaxed), 1);
        // Our own transmission: skipped, not counted.
        let (h, mut s) = slot(&good, [0; VNET], good.len() as u32, 0);
        s[32 + 10] = libc::PACKET_OUTGOING;
        assert!(run(&h, &s, &rx).is_empty());
        // The parse checks still apply.
        let (h, s) = slot(&good[..good.len() - 1], [0; VNET], good.len() as u32 - 1, 0);
        assert!(run(&h, &s, &rx).is_empty());
        assert_eq!(rx.frame_truncated.load(Ordering::Relaxed), 6);
    }

    /// A 64 KiB GSO super-frame fits a slot whole and is cut into its segments in place.
    #[test]
    fn ring_slot_holds_a_64k_super_frame() {
        let seg = 4096 + 28;
        let n = 65535 / seg; // as many segments as a UDP length allows
        let udp_len = (8 + n * seg) as u16;
        let mut ip = v4(20 + udp_len, 0x4000);
        ip[4..6].copy_from_slice(&7u16.to_be_bytes());
        let mut h = Ipv4Header::from_slice(&ip).unwrap().0;
        h.header_checksum = h.calc_header_checksum();
        let f = frame(&h.to_bytes(), &udp(udp_len, 4791));
        let mut vnet = [0u8; VNET];
        vnet[1] = GSO_UDP_L4;
        vnet[4..6].copy_from_slice(&(seg as u16).to_le_bytes());
        let rx = RxCounters::default();
        let (hdr, s) = slot(&f, vnet, f.len() as u32, 0);
        let got = run(&hdr, &s, &rx);
        assert_eq!(got.len(), n);
        assert!(got.iter().enumerate().all(|(k, &(len, id))| len == seg && id == 7 + k as u16));
    }

    /// Two backends on `lo`, one reading its ring and one with `recvmmsg`, exchange a single
    /// packet and a 64 KiB GSO run each way: every packet arrives once, whole, in order.
    /// Needs CAP_NET_RAW (skipped, saying so, without it).
    #[test]
    fn ring_and_recvmmsg_receive_the_same_on_loopback() {
        // SAFETY: a NUL-terminated name.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) } as i32;
        let link = Link { ifindex: lo, mac: [0; 6], loopback: true, mtu: 65536 };
        let pid = std::process::id();
        let ip = |h: u8| IpAddr::from([127, 82, (pid % 250) as u8 + 1, h]);
        let port = 4791;
        let open = |h: u8, ring: bool| {
            RawBackend::open(link, vec![ip(h)], port, true, Arc::new(RxCounters::default()), ring)
        };
        let (mut a, mut b) = match (open(1, true), open(2, false)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(OpenError::Permission), _) | (_, Err(OpenError::Permission)) => {
                eprintln!("skipped: needs CAP_NET_RAW");
                return;
            }
            (Err(e), _) | (_, Err(e)) => panic!("{e:?}"),
        };
        assert!(a.ring.is_some() && b.ring.is_none());
        let mut run: Vec<u8> = (0..16 * 4096).map(|i| (i * 7 + i / 4096) as u8).collect();
        // Every packet must look like RoCE to the receive filter: an RC SEND Middle BTH
        // (version 0, default P_Key) at the start of each.
        for seg in run.chunks_mut(4096) {
            seg[..4].copy_from_slice(&[0x01, 0x00, 0xff, 0xff]);
        }
        exchange(&mut a, &mut b, &run);
        exchange(&mut b, &mut a, &run);

        // Junk (a P_Key outside the default partition, a reserved opcode, a pad that cannot
        // fit, too short): the frame filter drops it but for a random 1 in SAMPLE.
        let junk: [&[u8]; 4] = [
            &[0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0x11, 0, 0, 0, 0, 1, 2, 3, 4],
            &[0x1f, 0x00, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 0, 1, 2, 3, 4],
            &[0x11, 0x30, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4],
            &[0x01, 0x00, 0xff, 0xff, 0, 0, 0, 0x11],
        ];
        for k in 0..400 {
            send_one(&mut b, &a, junk[k % 4]);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut got = 0;
        while a.recv(&mut |_| got += 1).unwrap() > 0 {}
        // 400 / 64 ≈ 6 expected; 30 is beyond any chance.
        assert!(got < 30, "{got} of 400 junk frames passed the filter");

        // More frames than the ring has slots, none read meanwhile: the kernel drops the rest
        // and says so in PACKET_STATISTICS; every frame is either received or counted.
        let sent = Ring::FRAMES + 60;
        for _ in 0..sent {
            send_one(&mut b, &a, &run[..64]);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut got = 0;
        while a.recv(&mut |_| got += 1).unwrap() > 0 {}
        a.refresh_counters();
        let drops = a.rx.socket_drops.load(Ordering::Relaxed) as usize;
        assert_eq!((got, drops), (Ring::FRAMES, sent - Ring::FRAMES));
    }

    /// One packet of `contents` from `tx` to `rx`.
    fn send_one(tx: &mut RawBackend, rx: &RawBackend, contents: &[u8]) {
        let out = Outgoing {
            dst: SocketAddr::new(rx.ips[0], rx.port),
            src_ip: tx.ips[0],
            src_port: 0xc000,
            contents,
            segment_size: contents.len(),
            tos: 0,
            hop_limit: 64,
            flow_label: 0,
            qpn: 0,
        };
        tx.send(out).unwrap();
    }

    /// One packet, then a 64 KiB GSO run, from `tx` to `rx`: all of it arrives, once, whole.
    fn exchange(tx: &mut RawBackend, rx: &mut RawBackend, run: &[u8]) {
        let (from, to, port) = (tx.ips[0], rx.ips[0], rx.port);
        for (contents, seg) in [(&run[..100], 100), (run, 4096)] {
            let out = Outgoing {
                dst: SocketAddr::new(to, port),
                src_ip: from,
                src_port: 0xc000,
                contents,
                segment_size: seg,
                tos: 0,
                hop_limit: 64,
                flow_label: 0,
                qpn: 0,
            };
            tx.send(out).unwrap();
            let mut got: Vec<Vec<u8>> = Vec::new();
            let t = std::time::Instant::now();
            while got.len() < contents.len().div_ceil(seg) && t.elapsed().as_secs() < 5 {
                rx.recv(&mut |d| {
                    assert_eq!((d.src.ip(), d.dst, d.dst_port), (from, to, port));
                    got.push(d.payload.to_vec());
                })
                .unwrap();
            }
            assert_eq!(got.concat(), contents, "ring {}", rx.ring.is_some());
            assert!(got.iter().all(|p| p.len() == seg));
        }
        assert_eq!(rx.rx.frame_truncated.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn filter_assembles() {
        let ips: Vec<IpAddr> =
            vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap(), "fe80::1".parse().unwrap()];
        let p = filter(&ips, 4791).unwrap();
        assert!(p.len() < 256, "{} instructions", p.len());
        // The last two instructions return: accept, drop.
        assert_eq!((p[p.len() - 2].code, p[p.len() - 2].k), (RET, 0x40000));
        assert_eq!((p[p.len() - 1].code, p[p.len() - 1].k), (RET, 0));
    }
}
