//! What every handle of a device shares with its engines: the device's attributes, the
//! links to its engine threads, its receive counters and the counters it reports, and the
//! handle that stops the engines.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use crossbeam_queue::SegQueue;
use parking_lot::{Mutex, RwLock};

use super::memory::MrTable;
use crate::engine::core::Command;
use crate::engine::error::{Error, Result};
use crate::transport::{Counters, Mtu};
use crate::wire::gid::Gid;

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
        /// Which CQ (`CompletionQueue::cq_num`).
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
    pub ahs: RwLock<std::collections::HashMap<u32, super::qp::AhEntry>>,
    /// The receive socket's buffer, as granted.
    pub recv_buffer: Option<usize>,
    /// Where the engine hands the IB CM's events (the RDMA CM layer installs it). It runs on
    /// the engine thread with the endpoint, so it may answer at once (reject, MRA); it must
    /// never wait for the engine ([`DeviceShared::call`]).
    pub cm_sink: Mutex<Option<Box<CmSink>>>,
    /// The RDMA CM's state for this device (its connections and listeners, and the device
    /// itself, weakly), which the verbs layer keeps here: its handlers run on the engine
    /// thread, in `cm_sink` and in commands, and find it beside the endpoint. The engine
    /// only carries it.
    pub cm_state: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>,
    /// Time zero of the engine's clock.
    pub epoch: std::time::Instant,
    /// [`DeviceConfig::spin`]: also how long `CompletionQueue::wait` polls before
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
pub(crate) fn progress_on(core: &Mutex<crate::engine::core::Core>, recv: bool) -> Pass {
    let Some(mut c) = core.try_lock() else { return Pass::default() };
    c.progress_inline(recv)
}

pub(crate) struct EngineHandle {
    pub shared: Arc<DeviceShared>,
    pub threads: Mutex<Vec<JoinHandle<()>>>,
    /// The engines' state, by index, for application threads' inline progress (empty: off).
    pub cores: Vec<Arc<Mutex<crate::engine::core::Core>>>,
    /// The addresses and UDP port the engines bind (see [`closing`]).
    pub bound: Vec<(IpAddr, u16)>,
}

/// The addresses whose engines this process is closing. A device opened on one of them in
/// that moment (a thread opening a context as another closes the last one) waits until the
/// close has ended instead of finding the closing engine's sockets still there: with a shared
/// address it would join the closing device's group as a second member of its own process, and
/// then, as the first leaves, steer the group anew while its own engines were not yet
/// running to answer the probes (naps and probe rounds of up to hundreds of milliseconds,
/// holding up every open after it).
pub(crate) mod closing {
    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    use parking_lot::{Condvar, Mutex};

    static CLOSING: Mutex<Vec<(IpAddr, u16)>> = Mutex::new(Vec::new());
    static ENDED: Condvar = Condvar::new();

    /// Marks `bound` as closing until the guard drops.
    pub(crate) fn begin(bound: &[(IpAddr, u16)]) -> Guard<'_> {
        CLOSING.lock().extend_from_slice(bound);
        Guard(bound)
    }

    pub(crate) struct Guard<'a>(&'a [(IpAddr, u16)]);

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
    pub(crate) fn wait(bound: &[(IpAddr, u16)], patience: Duration) {
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
    pub faults: crate::engine::injector::FaultCounters,
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
pub(crate) fn next_mr_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
