//! Packet I/O backends: where the engine's packets go and come from.
//!
//! - [`udp`]: an unprivileged UDP socket on port 4791 (batched receive with `recvmmsg` and
//!   GRO, batched send with GSO, through quinn-udp).
//! - [`raw`]: an `AF_PACKET` socket on a network interface (needs `CAP_NET_RAW`): whole
//!   Ethernet frames built here, every received IP header visible, so every ICRC is checked at
//!   full strength and DSCP/ECN and the other header fields are set exactly.
//! - [`memory`]: an in-process network of devices joined by the transport simulator's lossy
//!   link, for tests that run the full verbs path with loss.
//!
//! Any of them can be wrapped in the `faulty` decorator, which applies a fault SPEC to the
//! packets that pass through it (`SOFTROCE_FAULTS`, `DeviceConfig::faults`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

pub(crate) mod bpf;
pub(crate) mod faulty;
pub(crate) mod filter;
pub mod memory;
pub(crate) mod neigh;
pub mod raw;
pub mod udp;

/// One received datagram: the UDP payload (BTH through ICRC) and what the backend knows of
/// the headers around it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Datagram<'a> {
    pub payload: &'a [u8],
    pub src: SocketAddr,
    pub dst: IpAddr,
    pub dst_port: u16,
    /// ECN bits of the IP header, when known.
    pub ecn: u8,
    /// The UDP checksum as received, when known (the ICRC covers the header with the
    /// checksum masked, so its value does not matter to it).
    pub ip_header: Option<&'a [u8]>,
}

/// A batch to send: `contents` holds `ceil(len / segment_size)` packets of `segment_size`
/// bytes (the last may be shorter), all to `dst` from `src_port`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outgoing<'a> {
    pub dst: SocketAddr,
    /// The source address (one of the device's addresses).
    pub src_ip: IpAddr,
    pub src_port: u16,
    pub contents: &'a [u8],
    pub segment_size: usize,
    /// IP traffic class / TOS byte (DSCP << 2 | ECN).
    pub tos: u8,
    /// TTL / hop limit (backends that build the IP header).
    pub hop_limit: u8,
    /// IPv6 flow label (backends that build the IP header).
    pub flow_label: u32,
    /// The local QP that sent the packets (1: the GSI's MADs), for decorators that act per QP
    /// (`faulty`).
    pub qpn: u32,
}

/// What the engine needs from a backend.
pub(crate) trait Backend: Send {
    /// The UDP port (4791 unless configured otherwise).
    fn port(&self) -> u16;
    /// Receives what is available without blocking; calls `f` for every datagram.
    fn recv(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<usize>;
    /// Sends a batch (blocking when the socket buffer is full).
    fn send(&mut self, out: Outgoing<'_>) -> io::Result<()>;
    /// Registers the backend's readable source with the engine's poll.
    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()>;
    /// Takes the backend's sockets out of `registry` (`on` false) or puts them back (`on`
    /// true, as [`Backend::register`]): a quiet engine is not woken by arriving packets
    /// while an application thread reads them itself (see the engine). Backends that wake
    /// their engine otherwise ignore it.
    fn listen(&mut self, registry: &mio::Registry, token: mio::Token, on: bool) -> io::Result<()> {
        let _ = (registry, token, on);
        Ok(())
    }
    /// A time at which packets become available without a readiness event (in-memory links
    /// with delay).
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Most packets one [`Backend::send`] may carry.
    fn max_segments(&self) -> usize;
    /// Whether segment `k` of a batch leaves with IPv4 identification `k` (kernel GSO from a
    /// DF socket numbers segments from 0); otherwise every packet has identification 0.
    fn gso_numbers_ip_id(&self) -> bool;
    /// Wakes the engine when a packet arrives (in-memory networks need it).
    fn set_waker(&mut self, _waker: std::sync::Arc<mio::Waker>) {}
    /// The receive socket's buffer in bytes, as the kernel granted it (what it holds before it
    /// drops), where the backend has one.
    fn recv_buffer_size(&self) -> Option<usize> {
        None
    }
    /// Brings the counters the backend keeps outside the engine (the kernel's drops on the
    /// receive socket) up to date; called before counters are read or published.
    fn refresh_counters(&mut self) {}
    /// Restricts the backend's kernel receive filter to datagrams for the QPs in `qpns`
    /// (besides its other checks, see [`filter`]); false if it has no such filter.
    fn admit_qpns(&mut self, _qpns: &filter::QpnSet) -> bool {
        false
    }
    /// How many datagrams one the engine finds to be junk stands for: the sampling rate of
    /// the backend's kernel filter ([`filter::SAMPLE`]), 1 without one.
    fn junk_weight(&self) -> u64 {
        1
    }
}

/// Counters of the device's receive path, beside the per-QP ones.
#[derive(Debug, Default)]
pub(crate) struct RxCounters {
    pub icrc_err: AtomicU64,
    pub malformed: AtomicU64,
    /// Of `malformed`: per [`crate::engine::backend::filter::Junk`] reason but the last (unknown QPs
    /// are `unknown_qp`).
    pub junk: [AtomicU64; 7],
    pub unknown_qp: AtomicU64,
    pub bad_source: AtomicU64,
    pub icrc_unexpected_id: AtomicU64,
    pub send_err: AtomicU64,
    pub ecn_ce: AtomicU64,
    /// Packets the kernel dropped because the receive socket was full.
    pub socket_drops: AtomicU64,
    // Raw backend: frames dropped before the engine sees them, and sends without a MAC.
    pub frame_truncated: AtomicU64,
    pub vlan_tagged: AtomicU64,
    pub ip_hdr_err: AtomicU64,
    pub ipv6_ext_hdr: AtomicU64,
    pub udp_len_err: AtomicU64,
    pub not_for_us: AtomicU64,
    pub neigh_unresolved: AtomicU64,
    // QP1 (GSI): packets dropped before the CM sees them.
    pub mad_bad_opcode: AtomicU64,
    pub mad_bad_pkey: AtomicU64,
    pub mad_bad_qkey: AtomicU64,
    pub mad_no_route: AtomicU64,
    /// Packets an engine received on its socket for a QP of another engine, and passed on.
    pub forwarded: AtomicU64,
    /// Packets dropped because the owning engine's forward queue was full.
    pub forward_dropped: AtomicU64,
    /// Sends from the RoCE port because the QP's UDP source port could not be bound.
    pub send_port_fallback: AtomicU64,
}
