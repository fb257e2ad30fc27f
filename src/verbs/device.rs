//! The device (`ibv_context`): a network address, its GID table and port, the registered
//! memory, and the engine thread that drives every queue pair.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use crossbeam_queue::SegQueue;
use parking_lot::{Mutex, RwLock};

use super::error::{Error, Result};
use super::mr::MrTable;
use crate::engine::backend::memory::MemoryNetwork;
use crate::engine::core::{Command, Engine};
use crate::transport::{Counters, Mtu};
use crate::wire::gid::{Gid, GidIndex, GidType};

/// The IANA port of RoCEv2.
pub const ROCE_PORT: u16 = crate::wire::ROCEV2_UDP_PORT;

/// How long the engine polls after activity before it sleeps (50 µs; `SOFTROCE_SPIN_US`
/// overrides it).
fn default_spin() -> std::time::Duration {
    let us = std::env::var("SOFTROCE_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    std::time::Duration::from_micros(us)
}

/// How packets leave and arrive.
#[derive(Debug, Clone, Default)]
pub enum BackendKind {
    /// A UDP socket bound to `<address>:4791` (unprivileged; the default).
    #[default]
    Udp,
    /// An `AF_PACKET` socket on the network interface of the address (needs `CAP_NET_RAW`;
    /// see [`crate::engine::backend::raw`]): whole frames built by softroce, every received ICRC
    /// checked over the real IP header. Opened by interface name, the device serves every
    /// address of the interface (IPv4 and IPv6, each a GID); opened by address, that address.
    Raw,
    /// An in-process network for tests.
    Memory(MemoryNetwork),
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    /// `udp` or `raw` (what `--backend` takes).
    fn from_str(s: &str) -> std::result::Result<BackendKind, String> {
        match s {
            "udp" => Ok(BackendKind::Udp),
            "raw" => Ok(BackendKind::Raw),
            _ => Err(format!("unknown backend {s:?} (udp or raw)")),
        }
    }
}

/// What to open.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// A local IP address, or an interface name (its first IPv4 address, else IPv6).
    pub address: String,
    /// The backend.
    pub backend: BackendKind,
    /// UDP port (4791; another value only pairs with softroce devices using the same).
    pub port: u16,
    /// How long the engine keeps polling after the last activity before it sleeps
    /// (lower latency, more CPU); also how long [`super::CompletionQueue::wait`] looks at
    /// an empty CQ (yielding the CPU between looks) before it sleeps.
    pub spin: std::time::Duration,
    /// Device name (`softroce0` by default).
    pub name: Option<String>,
    /// Send runs of equal-sized packets with UDP GSO (one system call for up to 64
    /// packets; the raw backend sends them as one GSO super-frame). Without it, every packet
    /// is its own `sendmsg` (the raw backend: its own frame, 64 per `sendmmsg`).
    pub gso: bool,
    /// Mark packets that carry payload ECN-capable (ECT(0)) unless the address vector's
    /// traffic class already sets ECN bits, so that switches mark congestion (CE) instead
    /// of dropping. Received CE marks are counted (`rcvd_ecn_ce`) either way.
    pub ecn: bool,
    /// Inline progress (on by default; `SOFTROCE_INLINE_PROGRESS=0` turns it off for every
    /// device the process opens): an application thread that polls an empty CQ or posts a send drives the device itself —
    /// reads the socket, runs the transport, sends, publishes completions — when no other
    /// thread is doing so at that moment, instead of handing the work to the engine thread
    /// and waiting for it to wake. The engine thread stays: it runs timers and the IB CM, and
    /// moves packets whenever no application thread calls in (one-sided operations complete
    /// without the target's application), and it sleeps rather than spin while an
    /// application polls. Off, every packet goes through the engine thread.
    pub inline_progress: bool,
    /// With inline progress, an application thread whose CQ polls find nothing gives its
    /// CPU away (`sched_yield`) when the CPU is contended or after 50 µs of polling in vain
    /// ([`crate::engine::pacer`]), so that the threads that must do the work it waits for — the
    /// peer's engine on the same host, another process — are not kept waiting for the end of
    /// its time slice. On by default; `SOFTROCE_POLL_YIELD=0` turns it off for every device
    /// the process opens.
    pub poll_yield: bool,
    /// With inline progress, an application thread whose CQ polls keep finding nothing
    /// takes the device's sockets out of the engine threads' poll sets while it reads them
    /// itself, so that each arriving datagram does not also wake an engine thread (a context
    /// switch, on a small machine the preemption of another spinning thread) for a packet
    /// the poller reads. A poll that finds an RDMA WRITE's completion (the application may
    /// now wait on memory for the peer's WRITE, which only the engine executes; unless the
    /// same poll executed a request of the peer on that QP and held its ACK:
    /// [`DeviceConfig::hold_acks`]), the thread's
    /// next send after other completions (until its next poll in vain), a CQ armed for a
    /// notification or a wait that goes to sleep puts them back, and an engine listens again
    /// on its own once nobody has read its socket inline for a millisecond. On by default;
    /// `SOFTROCE_QUIET_ENGINE=0` turns it off for every device the process opens.
    pub quiet_engine: bool,
    /// With quiet engines ([`DeviceConfig::quiet_engine`]), a plain ACK that an application
    /// thread's poll produces (the receive of a SEND it is about to answer, say) waits for
    /// that QP's next packet and leaves with it in one system call, instead of costing one
    /// of its own between the completion and the answer. It waits at most until the
    /// thread's next call into the device (a poll, a post, destroying or modifying the QP,
    /// closing the device, the process's `exit` through the drop-in library) or a quiet
    /// engine's next turn, a millisecond at the most. The engine thread holds the ACK of a
    /// request it executed too, when the QP's application answered the last two within
    /// 100 µs: then for 100 µs at most (the one-sided ping-pong, `ib_write_lat`, whose
    /// application sees the peer's WRITE in memory and answers with its own; the ACK and the
    /// answer reach the peer as it polls for that ACK, and its poll executes the answer). On
    /// by default; `SOFTROCE_HOLD_ACKS=0` turns it off for every device the process opens.
    pub hold_acks: bool,
    /// Progress engine threads (1 by default; `SOFTROCE_ENGINE_THREADS` sets the default for
    /// every device the process opens). With `n > 1` the device runs `n` engines, each a
    /// thread with its own QPs and its own UDP socket on `<address>:<port>` (`SO_REUSEPORT`);
    /// the kernel steers each arriving packet to the socket of the engine that owns its
    /// destination QP (QP number modulo `n`) with a classic BPF program, so a process with
    /// many QPs can use as many cores. The IB CM (QP1) runs on engine `1 % n`; a QP that uses
    /// an SRQ gets a number on the SRQ's engine. Only the UDP backend steers packets: the raw
    /// and in-memory backends run one engine whatever this says (with a logged warning).
    pub engine_threads: usize,
    /// Share the address with the devices of other processes (on by default;
    /// `SOFTROCE_SHARE=0` turns it off for every device the process opens): a UDP device on
    /// `<address>:<port>` joins the other softroce devices of the same user on it, as the
    /// processes of a host share a kernel RDMA device — QP numbers unique per address, each
    /// packet steered by the kernel to the process that owns its QP, the CM's messages to the
    /// process whose connection or listener they are for (docs/design/shared-device.md). Off,
    /// the device binds the port alone and a second device on the address fails with "address
    /// in use". The raw and in-memory backends never share; nor does port 0.
    pub share: bool,
    /// A fault SPEC (see [`crate::faults::spec`]): the device loses, duplicates, corrupts,
    /// reorders and delays its packets, goes dark, or forces RNR NAKs, reproducibly from a
    /// seed; `None` or blank: none. By default `SOFTROCE_FAULTS` (or what
    /// [`crate::faults::set_default`] set). A malformed SPEC makes [`Device::open`] fail with
    /// [`Error::Faults`], naming the bad item.
    pub faults: Option<String>,
}

/// Whether devices share their address by default: yes; `SOFTROCE_SHARE=0` turns it off.
fn default_share() -> bool {
    std::env::var("SOFTROCE_SHARE").as_deref() != Ok("0")
}

/// The default number of engine threads: `SOFTROCE_ENGINE_THREADS` (1 to
/// [`MAX_ENGINE_THREADS`]), else 1.
fn default_engine_threads() -> usize {
    std::env::var("SOFTROCE_ENGINE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(1, |n| n.clamp(1, MAX_ENGINE_THREADS))
}

/// The most engine threads a device runs ([`DeviceConfig::engine_threads`] is capped to it).
pub const MAX_ENGINE_THREADS: usize = 64;

/// Whether inline progress is on by default: yes (the interop matrix against kernel rxe passes
/// with it); `SOFTROCE_INLINE_PROGRESS=0` turns it off for the process (any other value on).
fn default_inline_progress() -> bool {
    std::env::var("SOFTROCE_INLINE_PROGRESS").as_deref() != Ok("0")
}

impl DeviceConfig {
    /// A UDP device on `address` (an IP address or an interface name).
    pub fn new(address: impl Into<String>) -> DeviceConfig {
        DeviceConfig {
            address: address.into(),
            backend: BackendKind::Udp,
            port: ROCE_PORT,
            spin: default_spin(),
            name: None,
            gso: true,
            ecn: false,
            inline_progress: default_inline_progress(),
            poll_yield: std::env::var("SOFTROCE_POLL_YIELD").as_deref() != Ok("0"),
            quiet_engine: std::env::var("SOFTROCE_QUIET_ENGINE").as_deref() != Ok("0"),
            hold_acks: std::env::var("SOFTROCE_HOLD_ACKS").as_deref() != Ok("0"),
            engine_threads: default_engine_threads(),
            share: default_share(),
            faults: crate::faults::default_spec(),
        }
    }
    /// The same with sharing of the address on or off (see [`DeviceConfig::share`]).
    pub fn with_share(self, share: bool) -> DeviceConfig {
        DeviceConfig { share, ..self }
    }
    /// The same with fault SPEC `spec` (see [`DeviceConfig::faults`]; `""`: no faults,
    /// whatever `SOFTROCE_FAULTS` says).
    pub fn with_faults(self, spec: impl Into<String>) -> DeviceConfig {
        DeviceConfig { faults: Some(spec.into()), ..self }
    }
    /// The same with `n` engine threads (see [`DeviceConfig::engine_threads`]).
    pub fn with_engine_threads(self, n: usize) -> DeviceConfig {
        DeviceConfig { engine_threads: n, ..self }
    }
    /// The same with another backend.
    pub fn with_backend(self, backend: BackendKind) -> DeviceConfig {
        DeviceConfig { backend, ..self }
    }
    /// The same on an in-memory network.
    pub fn in_memory(net: &MemoryNetwork, address: impl Into<String>) -> DeviceConfig {
        DeviceConfig { backend: BackendKind::Memory(net.clone()), ..DeviceConfig::new(address) }
    }
}

/// Port state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// Down.
    Down,
    /// Active.
    Active,
}

/// Port attributes (`ibv_port_attr`).
#[derive(Debug, Clone)]
pub struct PortAttr {
    /// State.
    pub state: PortState,
    /// Largest MTU (always 4096, as rxe).
    pub max_mtu: Mtu,
    /// Active MTU: the netdev MTU minus 80 bytes of headers, rounded down to an IB MTU.
    pub active_mtu: Mtu,
    /// The netdev's MTU.
    pub netdev_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Port capability flags (rxe: CM supported).
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u64,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Link layer ("Ethernet").
    pub link_layer: &'static str,
    /// The network interface.
    pub netdev: String,
}

/// Device limits (`ibv_device_attr`), enforced by the verbs layer.
#[derive(Debug, Clone)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (EUI-64 of the MAC, as rxe).
    pub node_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Page sizes.
    pub page_size_cap: u64,
    /// Vendor ID.
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// QPs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// Inline bytes per send.
    pub max_inline_data: u32,
    /// CQs.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// MRs.
    pub max_mr: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// PDs.
    pub max_pd: u32,
    /// READs/atomics outstanding as responder, per QP.
    pub max_qp_rd_atom: u32,
    /// READs/atomics outstanding as requester, per QP.
    pub max_qp_init_rd_atom: u32,
    /// SRQs.
    pub max_srq: u32,
    /// Work requests per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Address handles.
    pub max_ah: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Atomic capability (rxe: atomic with respect to this device's own operations).
    pub atomic_cap: &'static str,
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

/// A packet an engine received for a QP another engine owns (the kernel's steering puts
/// each packet on the right socket; a GRO super-packet whose segments are for QPs of two
/// engines, or a socket that joined the group from elsewhere, can still land one wrong).
pub(crate) struct Forwarded {
    pub payload: Vec<u8>,
    pub src: std::net::SocketAddr,
    pub dst: IpAddr,
    pub dst_port: u16,
    pub ecn: u8,
    pub ip_header: Option<Vec<u8>>,
}

/// Most packets waiting in an engine's forward queue; more are dropped (and counted).
pub(crate) const MAX_FORWARDED: usize = 4096;

/// What application threads and the other engines share with one engine thread.
pub(crate) struct EngineLink {
    pub cmd_tx: Sender<Command>,
    pub waker: Arc<mio::Waker>,
    pub sleeping: AtomicBool,
    /// QPs (and SRQs, tagged) with newly posted work.
    pub posted: SegQueue<u32>,
    /// Packets other engines received for this engine's QPs.
    pub inbox: SegQueue<Forwarded>,
    /// When an application thread last made progress inline on this engine (engine-clock
    /// ns; 0: never).
    pub inline_at: AtomicU64,
    /// The deadline the sleeping engine thread will wake at (engine-clock ns; `u64::MAX`:
    /// none): an application thread that arms an earlier timer wakes it.
    pub engine_deadline: AtomicU64,
    /// The engine's socket is out of its poll set (`Core::set_quiet`).
    pub quiet: AtomicBool,
    /// An application thread asked a quiet engine to listen again while its state was held.
    pub hear: AtomicBool,
    /// When an application thread last read this engine's socket inline (engine-clock ns;
    /// 0: never): a quiet engine listens again [`crate::engine::core::QUIET_LIMIT`] after it.
    pub read_at: AtomicU64,
    /// Datagrams this engine read from its own socket.
    pub rcvd: AtomicU64,
    /// Of those, probes of a shared address's steering (answered, not a QP's).
    pub probes: AtomicU64,
    /// This engine's counters as of its last publication (for the counters file).
    pub snapshot: Mutex<DeviceCounters>,
}

impl EngineLink {
    /// Tells the engine a QP (or tagged SRQ) has new work; wakes it if it sleeps.
    pub(crate) fn schedule(&self, qpn: u32) {
        self.posted.push(qpn);
        self.wake_if_sleeping();
    }

    /// Wakes the engine thread if it sleeps (it checks its queues after raising the flag).
    pub(crate) fn wake_if_sleeping(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
    }
}

/// A receiver of asynchronous events ([`Device::on_async_event`]).
pub type AsyncEventHook = Arc<dyn Fn(AsyncEvent) + Send + Sync>;

/// An asynchronous event (`ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A QP event.
    Qp {
        /// The QP number.
        qpn: crate::transport::Qpn,
        /// What happened.
        event: crate::transport::QpEvent,
    },
    /// A CQ overflowed (`IBV_EVENT_CQ_ERR`).
    CqError {
        /// Which CQ ([`super::CompletionQueue::cq_num`]).
        cq: u32,
    },
    /// A shared receive queue fell below its armed limit (`IBV_EVENT_SRQ_LIMIT_REACHED`);
    /// the limit is disarmed until armed again.
    SrqLimitReached {
        /// The SRQ number.
        srqn: u32,
    },
}

/// A device's part in an address it shares with the devices of other processes
/// ([`Device::sharing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharing {
    /// This device's slot (0..63): bits 23..18 of its QP numbers.
    pub slot: u8,
    /// Devices on the address now, this one included.
    pub members: u32,
    /// The other members: `(slot, process id)`.
    pub peers: Vec<(u8, u32)>,
}

/// What every handle of a device shares with the engine.
pub(crate) struct DeviceShared {
    pub name: String,
    pub ip: IpAddr,
    pub netdev: String,
    pub mac: [u8; 6],
    pub gids: Vec<Gid>,
    /// Every address the device sends from and receives on (the first is `ip`).
    pub addresses: Vec<IpAddr>,
    pub port: PortAttr,
    pub attr: DeviceAttr,
    pub mrs: RwLock<MrTable>,
    /// Changes whenever a registered region goes or changes (deregistration, `rereg`): a
    /// value no earlier state of any device's table had ([`next_mr_generation`]). Posts
    /// check their SGEs against a per-thread memo of the last region they checked while it
    /// holds (`check_sges`), without taking `mrs`, whose lock word the engine takes too.
    /// (On a cache line of its own: the lock word of `mrs` beside it is written by every
    /// reader.)
    pub mr_generation: crossbeam_utils::CachePadded<AtomicU64>,
    /// The engines, by index: QP `q` lives on engine `q % engines.len()`.
    pub engines: Vec<EngineLink>,
    pub events: SegQueue<AsyncEvent>,
    /// Where asynchronous events go instead of `events` ([`Device::on_async_event`]).
    pub event_hook: RwLock<Option<AsyncEventHook>>,
    pub rx: Arc<RxCounters>,
    /// Mark data packets ECT(0) (`DeviceConfig::ecn`).
    pub ecn: bool,
    pub next_id: AtomicU32,
    pub next_qpn: AtomicU32,
    pub qp_count: AtomicU32,
    pub cq_count: AtomicU32,
    pub pd_count: AtomicU32,
    /// QP counters folded in as QPs are destroyed.
    pub retired_counters: Mutex<Counters>,
    /// Address handles by number.
    pub ahs: RwLock<std::collections::HashMap<u32, super::ah::AhEntry>>,
    /// The receive socket's buffer, as granted.
    pub recv_buffer: Option<usize>,
    /// The device itself, weakly (what the RDMA CM's new ids hold), set once it is open.
    pub weak_self: std::sync::OnceLock<WeakDevice>,
    /// Where the engine hands the IB CM's events (the RDMA CM layer installs it). It runs on
    /// the engine thread with the endpoint, so it may answer at once (reject, MRA); it must
    /// never wait for the engine ([`DeviceShared::call`]).
    pub cm_sink: Mutex<Option<Box<CmSink>>>,
    /// The RDMA CM's connections and listeners on this device.
    pub rdma_cm: Mutex<super::cm::id::DevCm>,
    /// Time zero of the engine's clock.
    pub epoch: std::time::Instant,
    /// [`DeviceConfig::spin`]: also how long [`super::CompletionQueue::wait`] polls before
    /// it sleeps.
    pub spin: std::time::Duration,
    /// [`DeviceConfig::poll_yield`].
    pub poll_yield: bool,
    /// [`DeviceConfig::quiet_engine`].
    pub quiet_engine: bool,
    /// [`DeviceConfig::hold_acks`].
    pub hold_acks: bool,
    /// The device's part of a shared address ([`DeviceConfig::share`]); `None`: unshared.
    pub share: Option<Arc<crate::engine::share::Share>>,
    /// QP numbers in use (a member of a shared address has 2^18 of them and reuses them).
    pub qpns: Mutex<std::collections::HashSet<u32>>,
    /// Fault injection ([`DeviceConfig::faults`]), if any.
    pub faults: Option<Arc<crate::engine::injector::FaultState>>,
}

/// The engine's outlet for IB CM events: `(endpoint, now, event)`.
pub(crate) type CmSink = dyn FnMut(&mut crate::transport::cm::CmEndpoint, crate::transport::Time, crate::transport::cm::CmEvent)
    + Send;

/// How long after an application thread's inline progress the engine thread counts it as
/// busy polling and sleeps instead of spinning beside it.
const INLINE_BUSY_NS: u64 = 1_000_000;

/// How long [`Device::open`] waits for this process's engine on the same address to finish
/// closing (see [`closing`]); past it, the open goes ahead as before.
const CLOSE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

impl DeviceShared {
    /// A region went or changed (call it with the MR table's write lock held): posts'
    /// per-thread memos of checked regions no longer hold ([`DeviceShared::mr_generation`]).
    pub(crate) fn mr_table_changed(&self) {
        self.mr_generation.store(next_mr_generation(), Ordering::Release);
    }

    /// Raises an asynchronous event: to the hook if one is set, else to the queue.
    pub(crate) fn raise(&self, ev: AsyncEvent) {
        let hook = self.event_hook.read().clone();
        match hook {
            Some(h) => h(ev),
            None => self.events.push(ev),
        }
    }

    /// Whether an application thread made progress inline on engine `idx` within
    /// [`INLINE_BUSY_NS`] of `now`.
    pub(crate) fn inline_recently(&self, idx: usize, now: crate::transport::Time) -> bool {
        self.inline_busy_until(idx).is_some_and(|t| now < t)
    }

    /// Until when engine `idx` counts as driven by an application thread's inline progress
    /// (its last inline pass and [`INLINE_BUSY_NS`]); `None` before any.
    pub(crate) fn inline_busy_until(&self, idx: usize) -> Option<crate::transport::Time> {
        let at = self.engines[idx].inline_at.load(Ordering::Relaxed);
        (at != 0).then(|| crate::transport::Time::from_nanos(at.saturating_add(INLINE_BUSY_NS)))
    }

    /// The engine that owns QP (or SRQ) number `n`: `n % engines`, exactly what the
    /// kernel-side steering program computes from a packet's destination QP.
    pub(crate) fn engine_of(&self, n: u32) -> usize {
        (n & 0xff_ffff) as usize % self.engines.len()
    }

    /// The engine that runs the IB CM: the owner of QP1, where its MADs arrive.
    pub(crate) fn cm_engine(&self) -> usize {
        self.engine_of(1)
    }

    /// Tells the owning engine a QP has new work (an SRQ: `SRQ_TAG | srqn`); wakes it if it
    /// sleeps.
    pub(crate) fn schedule(&self, qpn: u32) {
        self.engines[self.engine_of(qpn)].schedule(qpn);
    }

    /// Sends a command to the IB CM's engine without waiting for an answer.
    pub(crate) fn post(&self, cmd: Command) {
        let link = &self.engines[self.cm_engine()];
        if link.cmd_tx.send(cmd).is_ok() {
            let _ = link.waker.wake();
        }
    }

    /// Runs `f` on the device's IB CM endpoint in the engine and waits for its result; what
    /// the command sends goes out and its events reach the sink before the call returns.
    pub(crate) fn cm_call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut crate::transport::cm::CmEndpoint, crate::transport::Time) -> T + Send + 'static,
    ) -> Result<T> {
        self.call(|tx| {
            Command::Cm(Box::new(move |cm, now| {
                let _ = tx.send(f(cm, now));
            }))
        })
    }

    /// Runs `f` on the IB CM endpoint without waiting (usable from the engine thread).
    pub(crate) fn cm_post(
        &self,
        f: impl FnOnce(&mut crate::transport::cm::CmEndpoint, crate::transport::Time) + Send + 'static,
    ) {
        self.post(Command::Cm(Box::new(f)));
    }

    /// The device's counters from every engine's part (`part(idx)`): the IB CM's engine's
    /// carries the device-wide counters, the others their QPs' (see [`DeviceCounters::combine`]).
    pub(crate) fn combine_engines(
        &self,
        mut part: impl FnMut(usize) -> Result<DeviceCounters>,
    ) -> Result<DeviceCounters> {
        let cm = self.cm_engine();
        let base = part(cm)?;
        let others = (0..self.engines.len()).filter(|&i| i != cm).map(part).collect::<Result<Vec<_>>>()?;
        Ok(DeviceCounters::combine(base, others))
    }

    /// Sends a command to the IB CM's engine and waits for the answer.
    pub(crate) fn call<T>(&self, make: impl FnOnce(Sender<T>) -> Command) -> Result<T> {
        self.call_on(self.cm_engine(), make)
    }

    /// Sends a command to the engine that owns QP (or SRQ) number `n` and waits for the
    /// answer.
    pub(crate) fn call_for<T>(&self, n: u32, make: impl FnOnce(Sender<T>) -> Command) -> Result<T> {
        self.call_on(self.engine_of(n), make)
    }

    /// Sends a command to engine `idx` and waits for the answer.
    pub(crate) fn call_on<T>(&self, idx: usize, make: impl FnOnce(Sender<T>) -> Command) -> Result<T> {
        let link = &self.engines[idx];
        let (tx, rx) = crossbeam_channel::bounded(1);
        link.cmd_tx.send(make(tx)).map_err(|_| Error::EngineGone)?;
        let _ = link.waker.wake();
        rx.recv().map_err(|_| Error::EngineGone)
    }
}

/// What a turn of inline progress did ([`Device::progress_inline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pass {
    /// The calling thread got an engine's state and ran a turn.
    pub ran: bool,
    /// The turn moved something: a packet read, a work request taken, a packet sent.
    pub work: bool,
    /// A QP whose plain ACK the turn held back for its answer: it executed a request of the
    /// peer (`CompletionQueue::pace`).
    pub held: Option<u32>,
    /// When the (last) turn ended: a clock reading the caller may use instead of its own.
    pub at: Option<std::time::Instant>,
}

impl std::ops::BitOr for Pass {
    type Output = Pass;
    fn bitor(self, o: Pass) -> Pass {
        Pass {
            ran: self.ran | o.ran,
            work: self.work | o.work,
            held: self.held.or(o.held),
            at: self.at.max(o.at),
        }
    }
}

/// One turn of inline progress on an engine's state, unless another thread holds it.
fn progress_on(core: &Mutex<crate::engine::core::Core>, recv: bool) -> Pass {
    let Some(mut c) = core.try_lock() else { return Pass::default() };
    c.progress_inline(recv)
}

struct EngineHandle {
    shared: Arc<DeviceShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The engines' state, by index, for application threads' inline progress (empty: off).
    cores: Vec<Arc<Mutex<crate::engine::core::Core>>>,
    /// The addresses and UDP port the engines bind (see [`closing`]).
    bound: Vec<(IpAddr, u16)>,
}

/// The addresses whose engines this process is closing. A device opened on one of them in
/// that moment (a thread opening a context as another closes the last one) waits until the
/// close has ended instead of finding the closing engine's sockets still there: with a shared
/// address it would join the closing device's group as a second member of its own process, and
/// then, as the first leaves, steer the group anew while its own engines were not yet
/// running to answer the probes (naps and probe rounds of up to hundreds of milliseconds,
/// holding up every open after it).
mod closing {
    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    use parking_lot::{Condvar, Mutex};

    static CLOSING: Mutex<Vec<(IpAddr, u16)>> = Mutex::new(Vec::new());
    static ENDED: Condvar = Condvar::new();

    /// Marks `bound` as closing until the guard drops.
    pub(super) fn begin(bound: &[(IpAddr, u16)]) -> Guard<'_> {
        CLOSING.lock().extend_from_slice(bound);
        Guard(bound)
    }

    pub(super) struct Guard<'a>(&'a [(IpAddr, u16)]);

    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            let mut c = CLOSING.lock();
            for b in self.0 {
                if let Some(i) = c.iter().position(|x| x == b) {
                    c.swap_remove(i);
                }
            }
            drop(c);
            ENDED.notify_all();
        }
    }

    /// Waits (at most `patience`) until no engine of this process bound to one of `bound` is
    /// closing.
    pub(super) fn wait(bound: &[(IpAddr, u16)], patience: Duration) {
        let until = Instant::now() + patience;
        let mut c = CLOSING.lock();
        while c.iter().any(|b| bound.contains(b)) {
            if ENDED.wait_until(&mut c, until).timed_out() {
                return;
            }
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        let bound = std::mem::take(&mut self.bound);
        let _closing = closing::begin(&bound);
        for link in &self.shared.engines {
            let _ = link.cmd_tx.send(Command::Shutdown);
            let _ = link.waker.wake();
        }
        for t in self.threads.lock().drain(..) {
            if t.thread().id() != std::thread::current().id() {
                // (An engine thread itself may drop the last handle, through an object it
                // held for the application: it then stops on the Shutdown without joining
                // itself.)
                let _ = t.join();
            }
        }
        // Then the engines' sockets (inline progress holds their state too) and only then the
        // member's connections: the other members of a shared address see this one go when
        // its sockets have left the group, and renew their steering without it.
        self.cores.clear();
        if let Some(share) = &self.shared.share {
            share.close();
        }
        if let Some(f) = &self.shared.faults {
            f.report();
        }
    }
}

/// A device that does not keep its engine running ([`Device::downgrade`]): the RDMA CM's
/// registry and new ids, and the drop-in library, which adopts a device's running engine for a
/// context opened while objects of an earlier one still hold it.
#[derive(Clone)]
pub struct WeakDevice {
    shared: std::sync::Weak<DeviceShared>,
    engine: std::sync::Weak<EngineHandle>,
}

impl WeakDevice {
    /// The device, if it is still open.
    pub fn upgrade(&self) -> Option<Device> {
        Some(Device { shared: self.shared.upgrade()?, _engine: self.engine.upgrade()? })
    }
    /// Whether the device is still open.
    pub(crate) fn is_alive(&self) -> bool {
        self.engine.strong_count() > 0
    }
    /// Whether this is `dev`.
    pub(crate) fn is(&self, dev: &Device) -> bool {
        std::sync::Weak::ptr_eq(&self.shared, &Arc::downgrade(&dev.shared))
    }
    /// What the engine shares, to send it commands (this does not keep the engine running).
    pub(crate) fn shared(&self) -> Option<Arc<DeviceShared>> {
        self.shared.upgrade()
    }
}

/// An open device. Cheap to clone; the engine stops when the last clone and the last
/// object created from it are dropped.
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<DeviceShared>,
    _engine: Arc<EngineHandle>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("name", &self.shared.name).field("ip", &self.shared.ip).finish()
    }
}

/// An interface as softroce sees it.
#[derive(Debug, Clone)]
struct Iface {
    name: String,
    index: u32,
    loopback: bool,
    mac: [u8; 6],
    ips: Vec<IpAddr>,
    mtu: u32,
}

/// `IFA_F_DADFAILED`: duplicate address detection found the address in use on the link.
const IFA_F_DADFAILED: u32 = 0x08;

/// The IPv6 addresses of `/proc/net/if_inet6` (`address ifindex prefixlen scope flags name`,
/// hex) whose duplicate address detection failed, with their interface index: the kernel keeps
/// them, never usable.
fn dad_failed(if_inet6: &str) -> Vec<(u32, IpAddr)> {
    if_inet6
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(4)?, 16).ok()?;
            if flags & IFA_F_DADFAILED == 0 {
                return None;
            }
            let addr = u128::from_str_radix(f.first()?, 16).ok()?;
            Some((u32::from_str_radix(f.get(1)?, 16).ok()?, IpAddr::V6(std::net::Ipv6Addr::from(addr))))
        })
        .collect()
}

fn interfaces() -> Vec<Iface> {
    let failed = dad_failed(&std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default());
    pnet_datalink::interfaces()
        .into_iter()
        .map(|i| {
            let mtu = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", i.name))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(1500);
            Iface {
                index: i.index,
                loopback: i.is_loopback(),
                mac: i.mac.map(|m| m.octets()).unwrap_or_default(),
                ips: i.ips.iter().map(|n| n.ip()).filter(|a| !failed.contains(&(i.index, *a))).collect(),
                name: i.name,
                mtu,
            }
        })
        .collect()
}

/// Finds the interface and address to open: an IP address (127.0.0.0/8 always belongs to
/// the loopback interface) or an interface name.
fn resolve(address: &str) -> Result<(Iface, IpAddr)> {
    let ifaces = interfaces();
    if let Ok(ip) = address.parse::<IpAddr>() {
        if let Some(i) = ifaces.iter().find(|i| i.ips.contains(&ip)) {
            return Ok((i.clone(), ip));
        }
        if ip.is_loopback() {
            let lo = ifaces.iter().find(|i| i.name == "lo").cloned().unwrap_or(Iface {
                name: "lo".into(),
                index: 1,
                loopback: true,
                mac: [0; 6],
                ips: vec![],
                mtu: 65536,
            });
            return Ok((lo, ip));
        }
        return Err(Error::NoSuchAddress(ip));
    }
    let i = ifaces
        .into_iter()
        .find(|i| i.name == address)
        .ok_or_else(|| Error::NoSuchInterface(address.into()))?;
    let ip = i
        .ips
        .iter()
        .find(|a| a.is_ipv4())
        .or(i.ips.first())
        .copied()
        .ok_or_else(|| Error::NoAddress(i.name.clone()))?;
    Ok((i, ip))
}

/// Whether `ip` is an IPv6 link-local address (`fe80::/10`).
fn is_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
}

/// The GID table of a device serving `addresses` (the device's own address first).
///
/// Index 0 is the port's default GID. On kernel rxe that is the interface's link-local
/// address (`fe80::` + EUI-64 of the MAC): here it is the link-local address the device
/// serves, if it serves one (a device opened on an interface). A device that serves none (one
/// opened on a single address, on loopback, which has no link-local address, or on an
/// interface without IPv6) has a copy of its own address's GID at index 0: every listed GID
/// must work, and index 0 is what programs use when told nothing (rdma-core's tests,
/// libfabric). The addresses follow from index 1 in the order given (the device's own address
/// at 1: the index perftest and `-g 1` users pass; then IPv4, IPv6 global, IPv6 link-local, as
/// rxe orders them), the link-local address of index 0 not again.
fn gid_table(addresses: &[IpAddr]) -> Vec<Gid> {
    let ip = addresses.first().copied().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let link_local = addresses.iter().copied().find(is_link_local);
    let mut gids = vec![Gid::from_ip(link_local.unwrap_or(ip))];
    gids.extend(addresses.iter().filter(|a| Some(**a) != link_local).map(|a| Gid::from_ip(*a)));
    gids
}

/// The interface's IPv6 link-local address a device on it serves as GID 0: the one rxe
/// would list (`fe80::` + EUI-64 of the MAC) if the interface has it, else its first
/// link-local address; none on an interface without IPv6 (or whose link-local addresses all
/// failed duplicate address detection, which the caller has left out).
fn link_local_of(iface: &Iface) -> Option<IpAddr> {
    let eui64 = IpAddr::V6(std::net::Ipv6Addr::from(Gid::link_local_from_mac(iface.mac).0));
    let mut lls = iface.ips.iter().copied().filter(is_link_local);
    let first = lls.next()?;
    Some(if iface.ips.contains(&eui64) { eui64 } else { first })
}

/// The addresses a device serves, its own address `ip` first. A device opened on a single
/// address (or an in-memory one) serves that address. A device opened by interface name also
/// serves the interface's link-local address (GID 0, see [`gid_table`]); the raw backend
/// serves every address of the interface (the first IPv4 one first, then the other IPv4 ones,
/// IPv6 global, IPv6 link-local, as rxe orders its GID table).
fn served_ips(cfg: &DeviceConfig, iface: &Iface, ip: IpAddr) -> Vec<IpAddr> {
    let mut ips = vec![ip];
    let by_name = cfg.address.parse::<IpAddr>().is_err();
    match cfg.backend {
        BackendKind::Raw if by_name => {
            let preferred = link_local_of(iface);
            let mut rest: Vec<IpAddr> = iface.ips.iter().copied().filter(|a| *a != ip).collect();
            // (the link-local address of GID 0 first among the link-local ones)
            rest.sort_by_key(|a| (a.is_ipv6(), is_link_local(a), Some(*a) != preferred));
            ips.extend(rest);
        }
        BackendKind::Udp if by_name => ips.extend(link_local_of(iface).filter(|a| *a != ip)),
        _ => {}
    }
    ips
}

/// What a device is, without opening it (no port bound, no thread): what `devinfo` shows.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// The local address it uses.
    pub ip: IpAddr,
    /// The interface's MAC address (zero for loopback).
    pub mac: [u8; 6],
    /// The GID table.
    pub gids: Vec<Gid>,
    /// Every local address the device serves (the first is [`DeviceInfo::ip`]).
    pub addresses: Vec<IpAddr>,
    ifindex: u32,
    loopback: bool,
    /// Port attributes.
    pub port: PortAttr,
    /// Device attributes and limits.
    pub attr: DeviceAttr,
}

impl DeviceInfo {
    /// Describes the device `cfg` would open.
    pub fn query(cfg: &DeviceConfig) -> Result<DeviceInfo> {
        let (iface, ip) = match &cfg.backend {
            BackendKind::Udp | BackendKind::Raw => resolve(&cfg.address)?,
            BackendKind::Memory(_) => {
                let ip: IpAddr = cfg
                    .address
                    .parse()
                    .map_err(|_| Error::InvalidArgument("in-memory devices need an IP address"))?;
                (
                    Iface {
                        name: "mem".into(),
                        index: 0,
                        loopback: false,
                        mac: [0; 6],
                        ips: vec![ip],
                        mtu: 4200,
                    },
                    ip,
                )
            }
        };
        let mac = iface.mac;
        let node_guid =
            u64::from_be_bytes(Gid::link_local_from_mac(mac).0[8..].try_into().unwrap_or_default());
        let addresses = served_ips(cfg, &iface, ip);
        let gids = gid_table(&addresses);
        let active = Mtu::active_for_netdev(iface.mtu);
        Ok(DeviceInfo {
            name: cfg.name.clone().unwrap_or_else(|| "softroce0".into()),
            ip,
            mac,
            port: PortAttr {
                state: PortState::Active,
                max_mtu: Mtu::Mtu4096,
                active_mtu: active,
                netdev_mtu: iface.mtu,
                gid_tbl_len: gids.len() as u32,
                port_cap_flags: 0x0001_0000,
                max_msg_sz: crate::transport::MAX_MSG_SIZE,
                lid: 0,
                link_layer: "Ethernet",
                netdev: iface.name.clone(),
            },
            gids,
            addresses,
            ifindex: iface.index,
            loopback: iface.loopback,
            attr: DeviceAttr {
                fw_ver: env!("CARGO_PKG_VERSION").into(),
                node_guid,
                max_mr_size: u64::MAX,
                page_size_cap: 0xffff_f000,
                vendor_id: 0xffffff,
                vendor_part_id: 0,
                max_qp: 0x10000,
                max_qp_wr: 0x4000,
                max_sge: 32,
                max_inline_data: 512,
                max_cq: 0x10000,
                max_cqe: (1 << 20) - 1,
                max_mr: 0x80000,
                max_mw: 0x7ffff,
                max_pd: 0x10000,
                max_qp_rd_atom: crate::transport::MAX_RD_ATOMIC as u32,
                max_qp_init_rd_atom: crate::transport::MAX_RD_ATOMIC as u32,
                max_srq: 0x10000,
                max_srq_wr: 0x4000,
                max_srq_sge: 27,
                max_ah: 0x8000,
                phys_port_cnt: 1,
                atomic_cap: "ATOMIC_HCA",
            },
        })
    }
}

impl Device {
    /// Opens a device on a local address or interface.
    pub fn open(cfg: DeviceConfig) -> Result<Device> {
        let info = DeviceInfo::query(&cfg)?;
        let faults = crate::engine::injector::FaultState::open(cfg.faults.as_deref())?;
        let ip = info.ip;
        let rx = Arc::new(RxCounters::default());
        let mut threads = cfg.engine_threads.clamp(1, MAX_ENGINE_THREADS);
        if threads > 1 && !matches!(cfg.backend, BackendKind::Udp) {
            // Only UDP sockets are steered by the kernel (SO_ATTACH_REUSEPORT_CBPF).
            tracing::warn!(
                requested = threads,
                "engine_threads > 1 needs the UDP backend; this device runs one engine thread"
            );
            threads = 1;
        }
        // What the engines bind, marked while they close (see [`closing`]).
        let bound: Vec<(IpAddr, u16)> = if cfg.port == 0 || matches!(cfg.backend, BackendKind::Memory(_)) {
            Vec::new()
        } else {
            info.addresses.iter().map(|a| (*a, cfg.port)).collect()
        };
        closing::wait(&bound, CLOSE_PATIENCE);
        // A shared address's membership, held until its engines run and it has steered.
        let mut joining: Option<crate::engine::share::Joining> = None;
        let backends: Vec<Box<dyn crate::engine::backend::Backend>> = match &cfg.backend {
            BackendKind::Raw => {
                use crate::engine::backend::raw::{Link, OpenError, RawBackend};
                let link = Link {
                    ifindex: info.ifindex as i32,
                    mac: info.mac,
                    loopback: info.loopback,
                    mtu: info.port.netdev_mtu,
                };
                let b = RawBackend::new(link, info.addresses.clone(), cfg.port, cfg.gso, rx.clone())
                    .map_err(|e| match e {
                        OpenError::Permission => Error::NeedsCapNetRaw { netdev: info.port.netdev.clone() },
                        OpenError::Bind(addr, source) => Error::Bind { addr, source },
                        OpenError::Io(source) => {
                            Error::RawSocket { netdev: info.port.netdev.clone(), source }
                        }
                    })?;
                vec![Box::new(b)]
            }
            BackendKind::Udp if cfg.share && cfg.port != 0 => {
                use crate::engine::backend::udp::{UdpBackend, local_socket_addr};
                let addrs: Vec<_> =
                    info.addresses.iter().map(|a| local_socket_addr(*a, cfg.port, info.ifindex)).collect();
                let here = addrs[0];
                let mut j = crate::engine::share::Share::join(&addrs, threads).map_err(|e| match e {
                    crate::engine::share::JoinError::Io(source, _) => Error::Bind { addr: here, source },
                    other => Error::Bind {
                        addr: here,
                        source: std::io::Error::new(std::io::ErrorKind::AddrInUse, other.to_string()),
                    },
                })?;
                let sockets = std::mem::take(&mut j.sockets);
                joining = Some(j);
                let mut v: Vec<Box<dyn crate::engine::backend::Backend>> = Vec::with_capacity(threads);
                for s in sockets {
                    let b = UdpBackend::from_shared(s, cfg.gso, rx.clone())
                        .map_err(|(addr, source)| Error::Bind { addr, source })?;
                    v.push(Box::new(b));
                }
                v
            }
            BackendKind::Udp => {
                use crate::engine::backend::udp::{UdpBackend, local_socket_addr};
                let addrs: Vec<_> =
                    info.addresses.iter().map(|a| local_socket_addr(*a, cfg.port, info.ifindex)).collect();
                let group = if threads > 1 {
                    UdpBackend::group(&addrs, cfg.gso, rx.clone(), threads)
                } else {
                    UdpBackend::new(&addrs, cfg.gso, rx.clone()).map(|b| vec![b])
                };
                group
                    .map_err(|(addr, source)| Error::Bind { addr, source })?
                    .into_iter()
                    .map(|b| Box::new(b) as Box<dyn crate::engine::backend::Backend>)
                    .collect()
            }
            BackendKind::Memory(net) => {
                vec![Box::new(crate::engine::backend::memory::MemoryBackend::new(net, ip, cfg.port))]
            }
        };
        let backends: Vec<Box<dyn crate::engine::backend::Backend>> = match &faults {
            Some(f) => backends
                .into_iter()
                .map(|b| {
                    Box::new(crate::engine::backend::faulty::FaultBackend::new(b, f.clone()))
                        as Box<dyn crate::engine::backend::Backend>
                })
                .collect(),
            None => backends,
        };
        let recv_buffer = backends[0].recv_buffer_size();
        let mut links = Vec::with_capacity(backends.len());
        let mut ends = Vec::with_capacity(backends.len());
        for _ in 0..backends.len() {
            let poll = mio::Poll::new()?;
            let waker = Arc::new(mio::Waker::new(poll.registry(), crate::engine::core::WAKE)?);
            let (cmd_tx, cmd_rx): (Sender<Command>, Receiver<Command>) = crossbeam_channel::unbounded();
            links.push(EngineLink {
                cmd_tx,
                waker,
                sleeping: AtomicBool::new(false),
                posted: SegQueue::new(),
                inbox: SegQueue::new(),
                inline_at: AtomicU64::new(0),
                engine_deadline: AtomicU64::new(u64::MAX),
                quiet: AtomicBool::new(false),
                hear: AtomicBool::new(false),
                read_at: AtomicU64::new(0),
                rcvd: AtomicU64::new(0),
                probes: AtomicU64::new(0),
                snapshot: Mutex::new(DeviceCounters::default()),
            });
            ends.push((poll, cmd_rx));
        }
        let shared = Arc::new(DeviceShared {
            name: info.name,
            ip,
            netdev: info.port.netdev.clone(),
            mac: info.mac,
            gids: info.gids,
            addresses: info.addresses.clone(),
            port: info.port,
            attr: info.attr,
            mrs: RwLock::new(MrTable::default()),
            mr_generation: crossbeam_utils::CachePadded::new(AtomicU64::new(next_mr_generation())),
            engines: links,
            events: SegQueue::new(),
            event_hook: RwLock::new(None),
            rx,
            ecn: cfg.ecn,
            next_id: AtomicU32::new(1),
            // A member joining others starts its QP numbers at a random point of its slot's
            // range: the slot may have been a process's that just died, whose peers still
            // retransmit to its QPs (a READ to a reused number would hit the new QP with a
            // stale R_Key and take it to the error state). Alone on the address it counts
            // from 0x11, as a fresh rxe device.
            next_qpn: AtomicU32::new(match &joining {
                Some(j) if j.share.members() > 1 => super::mr::random_u32() % (1 << 17),
                _ => 0,
            }),
            qp_count: AtomicU32::new(0),
            cq_count: AtomicU32::new(0),
            pd_count: AtomicU32::new(0),
            retired_counters: Mutex::new(Counters::default()),
            ahs: RwLock::new(std::collections::HashMap::new()),
            recv_buffer,
            weak_self: std::sync::OnceLock::new(),
            cm_sink: Mutex::new(None),
            rdma_cm: Mutex::new(Default::default()),
            epoch: std::time::Instant::now(),
            spin: cfg.spin,
            poll_yield: cfg.poll_yield,
            quiet_engine: cfg.quiet_engine,
            hold_acks: cfg.hold_acks,
            share: joining.as_ref().map(|j| j.share.clone()),
            qpns: Mutex::new(std::collections::HashSet::new()),
            faults,
        });
        let stats = crate::engine::core::StatsFile::shared(&shared);
        let mut engines = Vec::with_capacity(backends.len());
        for (idx, (backend, (poll, cmd_rx))) in backends.into_iter().zip(ends).enumerate() {
            engines.push(Engine::new(shared.clone(), idx, backend, poll, cmd_rx, cfg.spin, stats.clone())?);
        }
        let cores = if cfg.inline_progress { engines.iter().map(|e| e.core()).collect() } else { Vec::new() };
        let mut handle =
            EngineHandle { shared: shared.clone(), threads: Mutex::new(Vec::new()), cores, bound };
        let n = engines.len();
        for (idx, engine) in engines.into_iter().enumerate() {
            let name = if n == 1 { format!("softroce-{ip}") } else { format!("softroce-{ip}/{idx}") };
            match std::thread::Builder::new().name(name).spawn(move || engine.run()) {
                Ok(t) => handle.threads.get_mut().push(t),
                // (Dropping the handle stops the engines already running.)
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(j) = joining {
            j.finish();
        }
        let dev = Device { _engine: Arc::new(handle), shared };
        let _ = dev.shared.weak_self.set(dev.downgrade());
        super::cm::registry::register(&dev);
        Ok(dev)
    }

    /// The device without keeping it open.
    pub fn downgrade(&self) -> WeakDevice {
        WeakDevice { shared: Arc::downgrade(&self.shared), engine: Arc::downgrade(&self._engine) }
    }

    /// Inline progress from an application thread (see [`DeviceConfig::inline_progress`]):
    /// if no other thread is making progress on the device right now, moves what has arrived
    /// (when `recv`), what was posted and what is to send, and publishes the completions.
    /// Returns whether it ran and whether it moved anything; not run at once when the device
    /// has inline progress off or another thread holds the engine's state.
    /// With several engines, each engine not busy on another thread takes a turn.
    pub(crate) fn progress_inline(&self, recv: bool) -> Pass {
        self._engine.cores.iter().fold(Pass::default(), |p, core| progress_on(core, recv) | p)
    }

    /// Makes the engines quiet (`Core::set_quiet`): an application thread polls in vain and
    /// reads their sockets itself. An engine whose state another thread holds stays as it is.
    pub(crate) fn quiet_engines(&self) {
        if !self.shared.quiet_engine {
            return;
        }
        for (core, link) in self._engine.cores.iter().zip(&self.shared.engines) {
            if !link.quiet.load(Ordering::Relaxed)
                && let Some(mut c) = core.try_lock()
            {
                c.set_quiet(true);
            }
        }
    }

    /// Ends the engines' inline windows ([`DeviceShared::inline_busy_until`]): the calling
    /// thread, which made the last inline pass, is about to sleep on a CQ. An engine then works
    /// as it does without a polling thread (it polls on for a while after work instead of
    /// leaving the next packet to a poll that will not come) until some thread's next inline
    /// pass opens a window again.
    pub(crate) fn polling_stops(&self) {
        for link in &self.shared.engines {
            link.inline_at.store(0, Ordering::Relaxed);
        }
    }

    /// Makes quiet engines listen to their sockets again (see [`Device::quiet_engines`]). An
    /// engine whose state another thread holds (it may be this thread's caller, on the
    /// engine thread) is asked to, and woken. A sleeping engine with work posted to it is
    /// woken too: posts behind others were left to the polling thread
    /// (`QueuePair::schedule`), which now stops polling.
    pub(crate) fn hear_engines(&self) {
        for (core, link) in self._engine.cores.iter().zip(&self.shared.engines) {
            if link.quiet.load(Ordering::Relaxed) {
                match core.try_lock() {
                    Some(mut c) => c.set_quiet(false),
                    None => {
                        link.hear.store(true, Ordering::SeqCst);
                        let _ = link.waker.wake();
                        continue;
                    }
                }
            }
            if !link.posted.is_empty() {
                link.wake_if_sleeping();
            }
        }
    }

    /// Sends at once the plain ACKs application threads' polls held back for their QPs'
    /// next packets ([`DeviceConfig::hold_acks`]). Closing the device, destroying or
    /// modifying the QP and the device's next progress do it anyway; this is for a process
    /// that ends without any of them (the drop-in library calls it from its `exit`
    /// handler). An engine busy for longer than a few milliseconds is left as it is.
    pub fn flush(&self) {
        for core in &self._engine.cores {
            if let Some(mut c) = core.try_lock_for(std::time::Duration::from_millis(20)) {
                c.flush_held(None);
            }
        }
    }

    /// Inline progress on the engine that owns QP `qpn` only (see
    /// [`Device::progress_inline`]).
    pub(crate) fn progress_inline_for(&self, qpn: u32, recv: bool) -> bool {
        self._engine.cores.get(self.shared.engine_of(qpn)).is_some_and(|core| progress_on(core, recv).ran)
    }

    /// Whether application threads that poll this device's CQs or post to its QPs make
    /// progress themselves ([`DeviceConfig::inline_progress`]).
    pub fn inline_progress(&self) -> bool {
        !self._engine.cores.is_empty()
    }

    /// How many engine threads the device runs ([`DeviceConfig::engine_threads`]).
    pub fn engine_threads(&self) -> usize {
        self.shared.engines.len()
    }

    /// The datagrams each engine has read from its own socket so far, by engine index (QP
    /// `q` lives on engine `q % engine_threads()`). With the kernel's steering every packet
    /// arrives at its QP's engine; the few that do not are passed on and counted as
    /// `rcvd_forwarded`.
    pub fn engine_received(&self) -> Vec<u64> {
        // (A shared address's steering probes are read there too; they are no QP's.)
        self.shared
            .engines
            .iter()
            .map(|l| l.rcvd.load(Ordering::Relaxed).saturating_sub(l.probes.load(Ordering::Relaxed)))
            .collect()
    }

    /// The device's part in a shared address ([`DeviceConfig::share`]): `None` for a device
    /// that does not share its address.
    pub fn sharing(&self) -> Option<Sharing> {
        let s = self.shared.share.as_ref()?;
        Some(Sharing { slot: s.slot, members: s.members(), peers: s.peer_pids() })
    }

    /// Whether `other` is a handle to the same device.
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }
    /// The local IP address packets use.
    pub fn ip(&self) -> IpAddr {
        self.shared.ip
    }
    /// The interface's MAC address (zero for loopback).
    pub fn mac(&self) -> [u8; 6] {
        self.shared.mac
    }
    /// The network interface.
    pub fn netdev(&self) -> &str {
        &self.shared.netdev
    }
    /// `ibv_query_device`.
    pub fn query_device(&self) -> &DeviceAttr {
        &self.shared.attr
    }
    /// `ibv_query_port` (port 1).
    pub fn query_port(&self) -> &PortAttr {
        &self.shared.port
    }
    /// `ibv_query_gid`: the GID at `index`.
    pub fn gid(&self, index: GidIndex) -> Result<Gid> {
        self.shared
            .gids
            .get(usize::from(index.value()))
            .copied()
            .ok_or(Error::GidIndex { index, len: self.shared.gids.len() })
    }
    /// The GID table with entry types.
    pub fn gid_table(&self) -> Vec<(Gid, GidType)> {
        self.shared.gids.iter().map(|g| (*g, GidType::RoceV2)).collect()
    }
    /// The index of the GID of the device's own IP address ([`Device::ip`]): the source GID
    /// to use unless there is a reason to pick another (what the tools default to).
    pub fn default_gid_index(&self) -> GidIndex {
        self.gid_index_for(self.shared.ip).unwrap_or(GidIndex::LINK_LOCAL)
    }
    /// The index of the GID of local address `ip`, if the device serves it.
    ///
    /// ```no_run
    /// # use softroce::prelude::*;
    /// let dev = Device::open(DeviceConfig::new("127.0.0.1"))?;
    /// let index = dev.gid_index_for("127.0.0.1".parse()?).expect("the device's own address");
    /// assert_eq!(index, dev.default_gid_index());
    /// assert_eq!(dev.gid(index)?, Gid::from_ip(dev.ip()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// An address listed twice (a device without a link-local address has its own address at
    /// index 0 and 1) gives its entry past index 0: the index it would have without the copy.
    pub fn gid_index_for(&self, ip: IpAddr) -> Option<GidIndex> {
        let g = Gid::from_ip(ip);
        let gids = &self.shared.gids;
        let i = gids
            .iter()
            .skip(1)
            .position(|x| *x == g)
            .map(|i| i + 1)
            .or_else(|| gids.iter().position(|x| *x == g))?;
        u8::try_from(i).ok().map(GidIndex::new)
    }
    /// Every local address the device sends from and receives on (the first is
    /// [`Device::ip`]; the raw backend opened on an interface serves all of its addresses).
    pub fn addresses(&self) -> &[IpAddr] {
        &self.shared.addresses
    }
    /// Whether the device sends from and receives on local address `ip`.
    pub fn serves(&self, ip: IpAddr) -> bool {
        self.shared.addresses.contains(&ip)
    }
    /// The GID of the device's own IP address: what a peer sends to.
    pub fn own_gid(&self) -> Gid {
        Gid::from_ip(self.shared.ip)
    }
    /// The bytes the kernel holds for this device's receive socket before it drops packets
    /// (`rcvd_socket_drops`), where the backend has one: softroce asks for 32 MiB, an
    /// unprivileged process gets at most twice `net.core.rmem_max`.
    pub fn socket_receive_buffer(&self) -> Option<usize> {
        self.shared.recv_buffer
    }
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<super::ProtectionDomain> {
        let n = self.shared.pd_count.fetch_add(1, Ordering::Relaxed);
        if n >= self.shared.attr.max_pd {
            self.shared.pd_count.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Limit { what: "max_pd", max: self.shared.attr.max_pd as u64 });
        }
        Ok(super::ProtectionDomain {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            device: self.clone(),
        })
    }
    /// `ibv_create_cq` with room for `cqe` completions.
    pub fn create_cq(&self, cqe: usize) -> Result<super::CompletionQueue> {
        if cqe == 0 || cqe > self.shared.attr.max_cqe as usize {
            return Err(Error::Limit { what: "max_cqe", max: self.shared.attr.max_cqe as u64 });
        }
        let n = self.shared.cq_count.fetch_add(1, Ordering::Relaxed);
        if n >= self.shared.attr.max_cq {
            self.shared.cq_count.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Limit { what: "max_cq", max: self.shared.attr.max_cq as u64 });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(super::CompletionQueue {
            shared: Arc::new(super::cq::CqShared::new(id, cqe)?),
            device: self.clone(),
        })
    }
    /// The next asynchronous event, if any (`ibv_get_async_event`).
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.shared.events.pop()
    }

    /// Hands every asynchronous event from now on to `hook`, as it is raised, instead of
    /// queueing it for [`Device::poll_async_event`] (events already queued stay there). The
    /// hook runs on the engine's thread: it must be quick, must not block, and must not call
    /// into this device (deliver the event to a queue, a pipe, a channel). For a program
    /// that waits for events without calling anything else meanwhile (an `ibv_asyncwatch`
    /// thread): with the queue alone, nothing would wake it.
    pub fn on_async_event(&self, hook: impl Fn(AsyncEvent) + Send + Sync + 'static) {
        *self.shared.event_hook.write() = Some(Arc::new(hook));
    }
    /// Counters summed over every QP, past and present, plus the receive path's own.
    pub fn counters(&self) -> Result<DeviceCounters> {
        self.shared.combine_engines(|idx| self.shared.call_on(idx, Command::Counters))
    }

    /// Waits until no packet has arrived for `quiet`, or `limit` has passed; returns whether
    /// the device went quiet.
    ///
    /// Call it before a program ends whose peer may still be retransmitting. When the last
    /// acknowledgement of a conversation is lost (or, as seen once with kernel rxe, received
    /// and not acted on), the peer resends the message after its ACK timeout; a device that
    /// still exists acknowledges the duplicate, one that is gone leaves the peer retrying until
    /// `retry_cnt` runs out, which kernel rxe never does with `retry_cnt` 7. Like TCP's
    /// TIME-WAIT, but bounded by `limit`.
    pub fn wait_quiet(&self, quiet: std::time::Duration, limit: std::time::Duration) -> Result<bool> {
        let received = |c: &DeviceCounters| {
            c.qp.rcvd_pkts + c.rcvd_icrc_err + c.rcvd_malformed + c.rcvd_unknown_qp + c.rcvd_bad_source
        };
        let start = std::time::Instant::now();
        let mut last = received(&self.counters()?);
        let mut since = start;
        let step =
            (quiet / 8).clamp(std::time::Duration::from_millis(1), std::time::Duration::from_millis(20));
        loop {
            if since.elapsed() >= quiet {
                return Ok(true);
            }
            if start.elapsed() >= limit {
                return Ok(false);
            }
            std::thread::sleep(step);
            let now = received(&self.counters()?);
            if now != last {
                last = now;
                since = std::time::Instant::now();
            }
        }
    }
}

/// The directory where devices publish their counters (see [`crate::engine::rundir`]):
/// `$SOFTROCE_RUN_DIR`, else `/run/softroce` for root, else `$XDG_RUNTIME_DIR/softroce`, else
/// `/tmp/softroce-<uid>`.
pub fn counters_dir() -> std::path::PathBuf {
    crate::engine::rundir::run_dir_path()
}

/// Datagrams dropped as not RoCEv2 for the device, by reason, in the order the receive
/// filter checks them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JunkCounters {
    /// Fewer bytes than a BTH and an ICRC.
    pub short: u64,
    /// A BTH transport version other than 0.
    pub tver: u64,
    /// A P_Key outside the default partition.
    pub pkey: u64,
    /// A reserved opcode.
    pub opcode: u64,
    /// Shorter than the opcode's headers and the ICRC.
    pub truncated: u64,
    /// A pad count that does not fit, or a pad on an opcode without payload.
    pub pad: u64,
    /// A length that is not a multiple of 4.
    pub unaligned: u64,
}

impl JunkCounters {
    pub(crate) fn from_array(a: [u64; 7]) -> JunkCounters {
        let [short, tver, pkey, opcode, truncated, pad, unaligned] = a;
        JunkCounters { short, tver, pkey, opcode, truncated, pad, unaligned }
    }
}

/// Device counters: rxe's hw_counters names plus the receive path's drops.
#[derive(Debug, Clone, Default)]
pub struct DeviceCounters {
    /// Summed QP counters.
    pub qp: Counters,
    /// Packets dropped for a bad ICRC.
    pub rcvd_icrc_err: u64,
    /// Packets dropped because they are not RoCEv2 for this device: they did not parse, or
    /// carry a transport version other than 0 or a P_Key outside the default partition (the
    /// sum of `rcvd_junk`'s counts and the other parse failures).
    pub rcvd_malformed: u64,
    /// `rcvd_malformed` by reason. With a kernel socket filter (UDP and raw backends) the
    /// engine sees a random 1 in 64 of what the filter drops, so these count that sample
    /// (the total the kernel dropped is in `rcvd_socket_drops`).
    pub rcvd_junk: JunkCounters,
    /// Packets for a QP that does not exist.
    pub rcvd_unknown_qp: u64,
    /// Packets from an address the QP is not connected to.
    pub rcvd_bad_source: u64,
    /// ICRCs that matched only with an IPv4 identification other than the one predicted.
    pub icrc_unexpected_id: u64,
    /// Packets the backend failed to send (listed once, under `send_err`, with the QPs'
    /// own send failures).
    pub send_err: u64,
    /// Packets received with ECN Congestion Experienced (mlx5 calls it
    /// `np_ecn_marked_roce_packets`).
    pub rcvd_ecn_ce: u64,
    /// Packets the kernel dropped on the device's receive socket: the socket was full (the
    /// engine fell behind its peers), or, UDP backend, its filter rejected the datagram as
    /// not RoCEv2 for this device (UDP backend: the socket's `drops` in `/proc/net/udp`; raw
    /// backend: the packet socket's `tp_drops`, which counts only the first kind). Without
    /// junk on the wire and on a lossless path this stays 0.
    pub rcvd_socket_drops: u64,
    /// Raw backend: frames shorter than their headers say, or longer than a receive slot.
    pub rcvd_frame_truncated: u64,
    /// Raw backend: VLAN-tagged frames (softroce serves the untagged interface).
    pub rcvd_vlan_tagged: u64,
    /// Raw backend: bad IP version, IHL, total length or IPv4 header checksum; fragments.
    pub rcvd_ip_hdr_err: u64,
    /// Raw backend: IPv6 packets with an extension header before UDP.
    pub rcvd_ipv6_ext_hdr: u64,
    /// Raw backend: a UDP length that disagrees with the IP length.
    pub rcvd_udp_len_err: u64,
    /// Raw backend: frames that passed the socket filter but are not RoCEv2 to this device.
    pub rcvd_not_for_us: u64,
    /// Raw backend: packets dropped because the next hop's MAC was not resolved yet.
    pub send_neigh_unresolved: u64,
    /// QP1: packets other than UD SEND Only (dropped).
    pub rcvd_mad_bad_opcode: u64,
    /// QP1: packets whose P_Key does not match the port's (0xffff), as rxe's `check_keys`.
    /// The receive filter drops such packets for every QP first (`rcvd_junk.pkey`), so this
    /// stays 0 unless that check is bypassed.
    pub rcvd_mad_bad_pkey: u64,
    /// QP1: packets whose Q_Key is not the GSI's 0x80010000.
    pub rcvd_mad_bad_qkey: u64,
    /// QP1: MADs the CM sent to an address no device address can reach (not sent).
    pub send_mad_no_route: u64,
    /// Packets an engine received for a QP of another engine of the device and passed on
    /// ([`DeviceConfig::engine_threads`]; 0 with one engine).
    pub rcvd_forwarded: u64,
    /// Packets dropped because the owning engine had too many passed-on packets waiting.
    pub rcvd_forward_dropped: u64,
    /// Sends (each a run of packets) that left from the RoCE port instead of the QP's UDP
    /// source port, which another socket held; their ICRC covers the port they left from.
    pub send_port_fallback: u64,
    /// What fault injection did ([`DeviceConfig::faults`]; all 0 without).
    pub faults: super::FaultCounters,
    /// The IB CM's counters (messages, retries, duplicates, every drop and refusal).
    pub cm: crate::transport::cm::CmCounters,
    /// A shared address ([`DeviceConfig::share`]): how many devices share it now (this one
    /// included; 0 for an unshared device).
    pub share_members: u64,
    /// Shared address: datagrams this device received for another member and passed on
    /// (while the kernel's steering is renewed; MADs for another member's CM).
    pub share_passed_on: u64,
    /// Shared address: datagrams another member passed on to this one.
    pub share_passed_in: u64,
    /// Shared address: datagrams that could not be passed on (the member's connection full
    /// or gone).
    pub share_pass_dropped: u64,
    /// Shared address: packets for a QP of a member that has gone (dropped, also counted in
    /// `rcvd_unknown_qp`).
    pub share_gone_qp: u64,
    /// Shared address: times this device renewed the kernel's steering (after members came
    /// or went).
    pub share_steerings: u64,
    /// Shared address: probe rounds that found the group incomplete and were repeated.
    pub share_probe_retries: u64,
}

impl DeviceCounters {
    /// One device's counters from its engines' parts: the one part that carries the
    /// device-wide counters (the IB CM's engine) plus every other engine's QP counters.
    pub(crate) fn combine(
        base: DeviceCounters,
        others: impl IntoIterator<Item = DeviceCounters>,
    ) -> DeviceCounters {
        let mut total = base;
        for p in others {
            total.qp.add(&p.qp);
        }
        total
    }

    /// The counters that are not zero, as `name=value` separated by spaces: the one-line
    /// post-mortem the tools and examples print.
    pub fn nonzero_summary(&self) -> String {
        self.iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// Every counter as `(name, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        // One `send_err`, as rxe has: the QPs' failures (no route) and the backend's.
        let qp = self.qp.iter().map(|(k, v)| if k == "send_err" { (k, v + self.send_err) } else { (k, v) });
        qp.chain([
            ("rcvd_icrc_err", self.rcvd_icrc_err),
            ("rcvd_malformed", self.rcvd_malformed),
            ("rcvd_junk_short", self.rcvd_junk.short),
            ("rcvd_junk_tver", self.rcvd_junk.tver),
            ("rcvd_junk_pkey", self.rcvd_junk.pkey),
            ("rcvd_junk_opcode", self.rcvd_junk.opcode),
            ("rcvd_junk_truncated", self.rcvd_junk.truncated),
            ("rcvd_junk_pad", self.rcvd_junk.pad),
            ("rcvd_junk_unaligned", self.rcvd_junk.unaligned),
            ("rcvd_unknown_qp", self.rcvd_unknown_qp),
            ("rcvd_bad_source", self.rcvd_bad_source),
            ("icrc_unexpected_id", self.icrc_unexpected_id),
            ("rcvd_ecn_ce", self.rcvd_ecn_ce),
            ("rcvd_socket_drops", self.rcvd_socket_drops),
            ("rcvd_frame_truncated", self.rcvd_frame_truncated),
            ("rcvd_vlan_tagged", self.rcvd_vlan_tagged),
            ("rcvd_ip_hdr_err", self.rcvd_ip_hdr_err),
            ("rcvd_ipv6_ext_hdr", self.rcvd_ipv6_ext_hdr),
            ("rcvd_udp_len_err", self.rcvd_udp_len_err),
            ("rcvd_not_for_us", self.rcvd_not_for_us),
            ("send_neigh_unresolved", self.send_neigh_unresolved),
            ("rcvd_mad_bad_opcode", self.rcvd_mad_bad_opcode),
            ("rcvd_mad_bad_pkey", self.rcvd_mad_bad_pkey),
            ("rcvd_mad_bad_qkey", self.rcvd_mad_bad_qkey),
            ("send_mad_no_route", self.send_mad_no_route),
            ("rcvd_forwarded", self.rcvd_forwarded),
            ("rcvd_forward_dropped", self.rcvd_forward_dropped),
            ("send_port_fallback", self.send_port_fallback),
            ("share_members", self.share_members),
            ("share_passed_on", self.share_passed_on),
            ("share_passed_in", self.share_passed_in),
            ("share_pass_dropped", self.share_pass_dropped),
            ("share_gone_qp", self.share_gone_qp),
            ("share_steerings", self.share_steerings),
            ("share_probe_retries", self.share_probe_retries),
        ])
        .chain(self.faults.iter())
    }
}

/// A value for [`DeviceShared::mr_generation`] that no device has had before (process-wide,
/// so that a memo of one device's region can never match another device's table).
fn next_mr_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn veth() -> Iface {
        Iface {
            name: "veth0".into(),
            index: 7,
            loopback: false,
            mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            ips: vec![ip("10.0.0.1"), ip("fe80::5054:ff:fe12:3456"), ip("fd00::1"), ip("10.0.0.9")],
            mtu: 1500,
        }
    }

    fn served(address: &str, backend: BackendKind, iface: &Iface) -> Vec<IpAddr> {
        let cfg = DeviceConfig::new(address).with_backend(backend);
        let own = address.parse().unwrap_or(ip("10.0.0.1"));
        served_ips(&cfg, iface, own)
    }

    #[test]
    fn an_interface_device_serves_its_link_local_address_as_gid_0() {
        let ll = ip("fe80::5054:ff:fe12:3456");
        // UDP: the IPv4 address and the link-local one.
        let udp = served("veth0", BackendKind::Udp, &veth());
        assert_eq!(udp, vec![ip("10.0.0.1"), ll]);
        assert_eq!(gid_table(&udp), vec![Gid::from_ip(ll), Gid::from_ip(ip("10.0.0.1"))]);
        // Raw: every address, the link-local one at 0 only (rxe's table for an EUI-64
        // link-local address).
        let raw = served("veth0", BackendKind::Raw, &veth());
        assert_eq!(raw, vec![ip("10.0.0.1"), ip("10.0.0.9"), ip("fd00::1"), ll]);
        let gids: Vec<IpAddr> = gid_table(&raw).iter().map(|g| g.to_ip()).collect();
        assert_eq!(gids, vec![ll, ip("10.0.0.1"), ip("10.0.0.9"), ip("fd00::1")]);
    }

    #[test]
    fn a_device_without_a_link_local_address_lists_its_own_at_0_and_1() {
        let own = Gid::from_ip(ip("10.0.0.1"));
        // Opened on one address (any backend), or on an interface without IPv6.
        for backend in [BackendKind::Udp, BackendKind::Raw] {
            let one = served("10.0.0.1", backend, &veth());
            assert_eq!(one, vec![ip("10.0.0.1")]);
            assert_eq!(gid_table(&one), vec![own, own]);
        }
        let mut v4_only = veth();
        v4_only.ips.retain(|a| a.is_ipv4());
        assert_eq!(gid_table(&served("veth0", BackendKind::Udp, &v4_only)), vec![own, own]);
        // Loopback.
        let lo = Gid::from_ip(ip("127.0.0.7"));
        assert_eq!(gid_table(&[ip("127.0.0.7")]), vec![lo, lo]);
        // A device on a link-local address: that address, once.
        assert_eq!(gid_table(&[ip("fe80::1")]), vec![Gid::from_ip(ip("fe80::1"))]);
    }

    #[test]
    fn gid_0_prefers_the_eui64_link_local_address() {
        // A stable-privacy link-local address first, the EUI-64 one (rxe's default GID) too.
        let mut i = veth();
        i.ips = vec![ip("10.0.0.1"), ip("fe80::1234:5678:9abc:def0"), ip("fe80::5054:ff:fe12:3456")];
        assert_eq!(link_local_of(&i), Some(ip("fe80::5054:ff:fe12:3456")));
        let raw = served("veth0", BackendKind::Raw, &i);
        assert_eq!(gid_table(&raw)[0], Gid::from_ip(ip("fe80::5054:ff:fe12:3456")));
        // Only a stable-privacy one: that one.
        i.ips.pop();
        assert_eq!(link_local_of(&i), Some(ip("fe80::1234:5678:9abc:def0")));
    }

    #[test]
    fn addresses_that_failed_duplicate_detection_are_found() {
        let text = "\
fe80000000000000505400fffe123456 07 40 20 80    veth0
fe800000000000000000000000000001 07 40 20 c8    veth0
fd000000000000000000000000000001 07 40 00 48    veth0
00000000000000000000000000000001 01 80 10 80       lo
";
        assert_eq!(dad_failed(text), vec![(7, ip("fe80::1")), (7, ip("fd00::1"))]);
        assert_eq!(dad_failed("garbage\n\n1 2"), vec![]);
    }
}
