//! What every handle of a device shares with its engines: the device's attributes, the
//! links to its engine threads, its receive counters and the counters it reports, and the
//! handle that stops the engines.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crossbeam_channel::Sender;
use crossbeam_queue::SegQueue;
use parking_lot::{Mutex, RwLock};

use super::memory::MrTable;
use crate::engine::backend::RxCounters;
use crate::engine::command::Command;
use crate::engine::counters::DeviceCounters;
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
    /// 0: never): a quiet engine listens again `QUIET_LIMIT` (engine core) after it.
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

/// A receiver of asynchronous events ([`Device::on_async_event`](crate::verbs::Device::on_async_event)).
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
/// ([`Device::sharing`](crate::verbs::Device::sharing)).
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

/// A value for [`DeviceShared::mr_generation`] that no device has had before (process-wide,
/// so that a memo of one device's region can never match another device's table).
pub(crate) fn next_mr_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
