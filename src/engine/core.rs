//! The progress engine: one thread per device that owns every queue pair's state machine and
//! moves packets between them and the backend.
//!
//! One-sided operations must complete even when the target application never calls into the
//! library, so progress does not depend on the application: the engine receives in batches
//! (`recvmmsg` + GRO), hands each packet to its QP, takes newly posted work from lock-free
//! queues, fires timers, builds outgoing packets into one contiguous buffer and sends runs of
//! equal-sized packets to one peer in a single GSO system call, then publishes completions.
//! Nothing on that path allocates or takes a lock per packet: the memory-region table is
//! read-locked once per batch, QPs are owned by the engine outright.
//!
//! A device may run several engines (`DeviceConfig::engine_threads`), each a thread with its
//! own QPs (QP `q` on engine `q % n`), its own socket and this same loop; the kernel steers
//! every packet to the socket of its QP's engine, so they share nothing on the fast path but
//! the memory-region table's read lock and the completion queues. The IB CM lives on the
//! engine that owns QP1.
//!
//! After activity the engine keeps polling for a short while (`DeviceConfig::spin`) before it
//! sleeps in `epoll`, which trades a little CPU for latency.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::command::Command;

use parking_lot::Mutex;

use super::backend::filter::{self, QpnSet};
use super::backend::{Backend, Datagram, Outgoing};
use super::flood::{self, FloodWatch};
use super::rundir::RunDir;
use super::stall::{StallClock, ThreadWaits};
use crate::engine::counters::DeviceCounters;
use crate::engine::error::{Error, Result};
use crate::engine::shared::cq::CqShared;
use crate::engine::shared::device::{AsyncEvent, DeviceShared, EngineLink, Forwarded, MAX_FORWARDED};
use crate::engine::shared::memory::MrTable;
use crate::engine::shared::qp::{AddressVector, QpAttrs, QpInfo, QpShared};
use crate::engine::shared::srq::{SRQ_TAG, SrqAttr, SrqShared};
use crate::transport::cm::{self as transport_cm, CmConfig, CmEndpoint, CmTransmit, MadAddr};
use crate::transport::{Counters, GRH_LEN, Qp, QpType, Qpn, Srq, Time, WcOpcode, WcStatus, WorkCompletion};
use crate::wire::bth::BthRepr;
use crate::wire::cm::RejReason;
use crate::wire::deth::DethRepr;
use crate::wire::gid::{Gid, rc_udp_sport, ud_udp_sport};
use crate::wire::icrc::{self, RecoveredIpv4};
use crate::wire::mad::MAD_LEN;
use crate::wire::roce::{IpRepr, RoceFrameRepr};
use crate::wire::{ICRC_LEN, Opcode, Packet, PacketRepr, Psn};

/// Token of the waker (commands, posts).
pub(crate) const WAKE: mio::Token = mio::Token(0);
/// Token of the backend's socket.
const SOCKET: mio::Token = mio::Token(1);
/// Token of a shared address's member sockets (engine 0 of a shared device).
const SHARE: mio::Token = mio::Token(2);
/// How often a busy engine 0 looks at the member sockets of a shared address (when idle it
/// sleeps in a poll that includes them).
const SHARE_LOOK: Duration = Duration::from_micros(200);

/// Where a datagram came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// This engine's socket.
    Socket,
    /// Another engine of the device, which received it for one of this engine's QPs.
    Engine,
    /// Another process's device on the same address, which received it for this one.
    Peer,
}

/// The timer-heap key of the IB CM (QPNs are 24-bit, so it never names a QP).
const CM_TIMER: u32 = u32::MAX;
/// QP1, the GSI QP.
const GSI_QPN: u32 = 1;
/// The GSI's well-known Q_Key.
const GSI_QKEY: u32 = 0x8001_0000;

/// A shared receive queue and its handle's side.
struct SrqSlot {
    srq: Srq,
    shared: Arc<SrqShared>,
}

impl SrqSlot {
    /// Moves the WQEs posted to the handle into the SRQ.
    fn take_posts(&mut self) {
        while let Some(wr) = self.shared.recv_wrq.pop() {
            if self.srq.post_recv(wr).is_err() {
                // The handle checked depth and SGEs; a resize raced with the post.
                self.shared.outstanding.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Where a connected QP's packets go (a UD QP's: each send's address handle).
#[derive(Debug, Clone, Copy)]
struct Path {
    dst: SocketAddr,
    src_ip: IpAddr,
    src_port: u16,
    tos: u8,
    hop_limit: u8,
    flow_label: u32,
    /// The IP/UDP headers the ICRC covers (identification set per packet).
    frame: RoceFrameRepr,
}

struct Slot {
    qp: Qp,
    shared: Arc<QpShared>,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    av: Option<AddressVector>,
    path: Option<Path>,
    active: bool,
    timer: Option<Time>,
    send_retired_seen: u64,
    /// Plain ACKs in a row whose QP's application answered promptly: its next request left
    /// with the held ACK, or within [`ANSWER_WINDOW`] of the ACK (see [`Hold::Engine`]).
    answers: u8,
    /// When this QP last sent a lone plain ACK (to see whether an answer follows).
    acked_at: Option<Time>,
}

/// How a turn treats a QP's lone plain ACK ([`Core::transmit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Everything leaves, held ACKs too.
    Nothing,
    /// An inline pass of a quiet engine: what earlier turns held leaves; every lone plain ACK
    /// waits for its QP's next packet, at most [`QUIET_LIMIT`] (the thread usually answers,
    /// or polls again, within microseconds).
    Inline,
    /// The engine thread's turn: what is held stays until its QP's answer or its deadline;
    /// a lone plain ACK waits for its QP's next packet, at most [`ANSWER_WAIT`], when the
    /// application answered the last [`ANSWERS_TO_HOLD`] promptly. This is the one-sided
    /// ping-pong (`ib_write_lat`): the application spins on memory, sees the WRITE the
    /// engine executed, posts its own, and then polls for that one's completion. An ACK that
    /// leaves with the answer reaches the peer as it polls for the same ACK: the peer's pass
    /// executes the answer too, its memory holds it by the time it looks, and no engine
    /// thread needs waking on either side.
    Engine,
}

/// A plain ACK held back ([`State::held`]).
#[derive(Clone, Copy, Debug)]
struct Held {
    qpn: u32,
    /// It leaves by then.
    until: Time,
    /// The engine thread held it ([`Hold::Engine`]).
    by_engine: bool,
}

/// Answers in a row after which the engine thread holds a QP's ACK ([`Hold::Engine`]).
const ANSWERS_TO_HOLD: u8 = 2;
/// A request that leaves this soon after its QP's plain ACK answers it ([`Hold::Engine`]).
const ANSWER_WINDOW: Duration = Duration::from_micros(100);
/// How long the engine thread holds an ACK for its answer ([`Hold::Engine`]): well under
/// a requester's tail probe (softroce's waits at least
/// [`TAIL_PROBE_MIN`](crate::transport::TAIL_PROBE_MIN), 250 µs, plus the engine's timer
/// slack) and any local ACK timeout but the very shortest.
const ANSWER_WAIT: Duration = Duration::from_micros(100);

/// Everything but the backend, so the receive callback can borrow it while the backend is
/// borrowed too.
struct State {
    shared: Arc<DeviceShared>,
    /// This engine's index among the device's engines.
    idx: usize,
    id_solver: icrc::Ipv4IdSolver,
    qps: HashMap<u32, Slot>,
    srqs: HashMap<u32, SrqSlot>,
    active: VecDeque<u32>,
    touched: Vec<u32>,
    /// QPs whose plain ACK a turn held back for the QP's next packet
    /// ([`DeviceConfig::hold_acks`](crate::verbs::DeviceConfig::hold_acks), [`Hold`]): the QP,
    /// when the ACK leaves at the latest, and whether the engine thread held it.
    held: Vec<Held>,
    /// Armed deadlines, `(when, qpn)` ([`CM_TIMER`] for the CM's). Re-arming pushes a new
    /// entry and leaves the old one, superseded, in the heap; [`State::prune_timers`] drops
    /// such entries from its head, so that the head is always a live deadline.
    timers: BinaryHeap<Reverse<(Time, u32)>>,
    epoch: Instant,
    port: u16,
    /// The IB CM of the device (QP1's consumer).
    cm: CmEndpoint,
    /// The CM's armed deadline.
    cm_timer: Option<Time>,
    /// The CM got input (MAD, command, timeout): transmit and publish its events.
    cm_dirty: bool,
    /// QP1's next BTH PSN.
    gsi_psn: u32,
    /// Who sends junk, and the warning when it is a flood.
    flood: FloodWatch,
    /// The QPs the backend's kernel filter admits (a superset of this engine's), if it has
    /// one that takes them; and how many dropped datagrams a junk one the engine sees
    /// stands for ([`Backend::junk_weight`]).
    admitted: Option<QpnSet>,
    junk_weight: u64,
    /// Whether to tell the backend the QPs (until it says it has no filter for them).
    admit_qpns: bool,
    /// When the set was last given, and whether it was exactly this engine's QPs.
    admitted_at: Option<Time>,
    admitted_exact: bool,
}

/// What the engine thread and, with inline progress, application threads share behind the
/// device's progress lock: every QP's state machine, the backend and the transmit buffer.
pub(crate) struct Core {
    stats: Stats,
    /// The engine thread's run-queue waits and long holds of this state (see
    /// [`super::stall`]).
    stall: StallClock,
    st: State,
    backend: Box<dyn Backend>,
    tx: Vec<u8>,
    /// The engine's poll registry, for [`Core::set_quiet`] from application threads.
    registry: Option<mio::Registry>,
    /// The backend's sockets are out of the engine's poll set (see [`Core::set_quiet`]).
    quiet: bool,
}

pub(crate) struct Engine {
    core: Arc<Mutex<Core>>,
    poll: mio::Poll,
    cmd_rx: Receiver<Command>,
    spin: Duration,
}

thread_local! {
    /// The run-queue waits of an application thread that makes inline progress.
    static APP_WAITS: std::cell::RefCell<Option<ThreadWaits>> = const { std::cell::RefCell::new(None) };
}

/// [`flood::REASONS`] indices of the drops the receive filter does not name.
const JUNK_BAD_SOURCE: usize = 8;
const JUNK_ICRC: usize = 9;

/// QP numbers past this engine's highest that its kernel filter admits ahead while QPs are
/// created in a burst (per engine of the device: QPNs are handed out in order, round robin
/// over the engines), so that not every new QP replaces the filter: the kernel takes about
/// 0.3 µs per instruction to take a new program (70 µs for the usual 170).
const ADMIT_AHEAD: u32 = 64;
/// QPs created less than this apart are a burst.
const ADMIT_BURST: Duration = Duration::from_millis(1);
/// A filter that admits more than the engine's QPs (a burst's QP numbers ahead, destroyed
/// QPs) is made exact again after this long.
const ADMIT_TIGHTEN: Duration = Duration::from_millis(250);

/// How long a quiet engine ([`Core::set_quiet`]) stays deaf to its socket after an
/// application thread last read it inline.
pub(crate) const QUIET_LIMIT: Duration = Duration::from_millis(1);

/// Receive batches read before due timers fire (at most 64 datagrams each).
const MAX_BATCHES_BEFORE_TIMERS: usize = 16;

/// Largest packet the engine builds: BTH + longest header chain + 4096 + ICRC.
const MAX_PKT: usize = 12 + 32 + 4096 + ICRC_LEN;

impl Engine {
    pub(crate) fn new(
        shared: Arc<DeviceShared>,
        idx: usize,
        mut backend: Box<dyn Backend>,
        poll: mio::Poll,
        cmd_rx: Receiver<Command>,
        spin: Duration,
        stats: Arc<Mutex<StatsFile>>,
    ) -> std::io::Result<Engine> {
        backend.register(poll.registry(), SOCKET)?;
        let registry = poll.registry().try_clone().ok();
        backend.set_waker(shared.engines[idx].waker.clone());
        if idx == 0
            && let Some(fd) = shared.share.as_ref().and_then(|s| s.poll_fd())
        {
            poll.registry().register(&mut mio::unix::SourceFd(&fd), SHARE, mio::Interest::READABLE)?;
        }
        let port = backend.port();
        let stats = Stats { dirty: true, last: Instant::now() - Duration::from_secs(1), file: stats };
        let cm = CmEndpoint::new(cm_config(&shared), super::random::u64());
        let core = Core {
            stats,
            // Opened on the engine thread when it starts.
            stall: StallClock::unread(),
            st: State {
                epoch: shared.epoch,
                shared,
                idx,
                id_solver: icrc::Ipv4IdSolver::new(),
                qps: HashMap::new(),
                srqs: HashMap::new(),
                active: VecDeque::new(),
                touched: Vec::new(),
                held: Vec::new(),
                timers: BinaryHeap::new(),
                port,
                cm,
                cm_timer: None,
                cm_dirty: false,
                gsi_psn: 0,
                flood: FloodWatch::default(),
                admitted: None,
                junk_weight: backend.junk_weight(),
                admit_qpns: true,
                admitted_at: None,
                admitted_exact: true,
            },
            backend,
            // Room for a full GSO batch of the largest packets.
            tx: vec![0u8; 64 * MAX_PKT],
            registry,
            quiet: false,
        };
        Ok(Engine { core: Arc::new(Mutex::new(core)), poll, cmd_rx, spin })
    }

    /// The progress lock, for application threads' inline progress.
    pub(crate) fn core(&self) -> Arc<Mutex<Core>> {
        self.core.clone()
    }

    pub(crate) fn run(mut self) {
        let mut events = mio::Events::with_capacity(8);
        let mut idle_since: Option<Instant> = None;
        let mut woke = true;
        let core_arc = self.core.clone();
        // Opened here, on the engine thread: the thread whose scheduling it measures.
        core_arc.lock().stall = StallClock::for_this_thread();
        let shares = {
            let c = core_arc.lock();
            c.st.idx == 0 && c.st.shared.share.is_some()
        };
        let mut share_looked = Instant::now();
        loop {
            let mut core = core_arc.lock();
            let mut work = match self.commands(&mut core) {
                Some(w) => w,
                None => return,
            };
            if core.st.shared.engines[core.st.idx].hear.swap(false, Ordering::SeqCst) {
                core.set_quiet(false);
            }
            let now = core.now();
            // (Not forced on waking: a wait for a CPU of SPACING or more after the wake-up
            // also puts `now` that far past the last reading, so it is read then anyway;
            // forcing it cost a `pread` of /proc per wake-up, thousands a second.)
            core.stall.sample(now, false);
            if shares && (woke || share_looked.elapsed() >= SHARE_LOOK) {
                share_looked = Instant::now();
                work |= core.share_turn(now);
            }
            woke = false;
            work |= core.receive(now);
            work |= core.take_posts();
            let now = core.now();
            if core.timer_due(now) {
                // A timer is due: first read what has arrived (up to a bound), so that a
                // response that waited in the socket while the engine could not run counts
                // before the timeout does.
                for _ in 0..MAX_BATCHES_BEFORE_TIMERS {
                    if !core.receive(now) {
                        break;
                    }
                }
                core.stall.sample(now, true);
                work |= core.timers(now);
            }
            work |= core.cm_pump(now);
            work |= core.transmit(now, Hold::Engine);
            core.publish();
            core.stats.dirty |= work;
            core.tighten_admitted(now);
            if core.stats.dirty && core.stats.due() {
                core.backend.refresh_counters();
                let c = core.st.counters();
                let Core { stats, st, .. } = &mut *core;
                stats.write(st, c, false);
            }
            if work {
                idle_since = None;
                drop(core);
                continue;
            }
            let shared = core.st.shared.clone();
            let since = *idle_since.get_or_insert_with(Instant::now);
            // A quiet engine listens again once no application thread has read the socket
            // inline for QUIET_LIMIT (one that stopped polling without saying so): what
            // arrived since is then read at once (the socket is readable).
            let quiet_until = core.quiet.then(|| {
                let at = shared.engines[core.st.idx].read_at.load(Ordering::Relaxed);
                Time::from_nanos(at.saturating_add(QUIET_LIMIT.as_nanos() as u64))
            });
            if let Some(until) = quiet_until
                && core.now() >= until
            {
                core.set_quiet(false);
                drop(core);
                continue;
            }
            // While an application thread makes progress itself (it polls its CQ), the engine
            // does not spin beside it: on a small machine the spinning would take the CPU the
            // application needs.
            let idx = core.st.idx;
            let inline_busy = shared.inline_recently(idx, core.now());
            if since.elapsed() < self.spin && !inline_busy {
                drop(core);
                std::thread::yield_now();
                continue;
            }
            // Sleep until a packet, a post, a command or a timer. The flag is raised before
            // the last look at the queues, so a poster either sees it and wakes us or its
            // work is seen here. The deadline is published before the flag: a poster that
            // leaves its send to a polling thread (`QueuePair::schedule`) relies on it.
            let link = &shared.engines[idx];
            // (While an application thread drives this engine, sends posted behind others
            // are left to its next poll, unwoken: the engine looks again once that thread's
            // inline window has passed.)
            let inline_until = shared.inline_busy_until(idx).filter(|&t| t > core.now());
            let deadline = [core.next_deadline(), quiet_until, inline_until].into_iter().flatten().min();
            // Application threads that arm an earlier timer wake the engine.
            link.engine_deadline.store(deadline.map_or(u64::MAX, |t| t.as_nanos()), Ordering::SeqCst);
            link.sleeping.store(true, Ordering::SeqCst);
            if link.posted.is_empty() && link.inbox.is_empty() && self.cmd_rx.is_empty() {
                let now = core.now();
                let mut timeout = deadline.map(|t| if t > now { t - now } else { Duration::ZERO });
                if core.stats.dirty {
                    // Wake once more to publish the last counters of a burst.
                    let cap = Duration::from_millis(300);
                    timeout = Some(timeout.map_or(cap, |t| t.min(cap)));
                }
                drop(core);
                let _ = self.poll.poll(&mut events, timeout);
                woke = true;
            } else {
                drop(core);
            }
            link.sleeping.store(false, Ordering::SeqCst);
            idle_since = None;
        }
    }

    /// Handles queued commands; `None` on shutdown.
    fn commands(&mut self, core: &mut Core) -> Option<bool> {
        let mut any = false;
        while let Ok(cmd) = self.cmd_rx.try_recv() {
            any = true;
            let st = &mut core.st;
            match cmd {
                Command::Shutdown => {
                    // Send what is queued (ACKs above all) before going away.
                    let now = core.now();
                    core.transmit(now, Hold::Nothing);
                    core.backend.refresh_counters();
                    let c = core.st.counters();
                    core.stats.write(&core.st, c, true);
                    return None;
                }
                Command::CreateQp { shared, send_cq, recv_cq, reply } => {
                    let mut qp = if shared.srq.is_some() {
                        Qp::new_with_srq(shared.qpn, shared.qp_type, shared.pd, shared.caps)
                    } else {
                        Qp::new(shared.qpn, shared.qp_type, shared.pd, shared.caps)
                    };
                    if shared.qp_type == QpType::Ud {
                        // A UD message is limited by the port's active MTU.
                        let mtu = st.shared.port.active_mtu;
                        qp.set_ud_mtu(mtu);
                        shared.path_mtu.store(mtu as u8, Ordering::Relaxed);
                    }
                    let qpn = shared.qpn;
                    st.qps.insert(
                        shared.qpn,
                        Slot {
                            qp,
                            shared,
                            send_cq,
                            recv_cq,
                            av: None,
                            path: None,
                            active: false,
                            timer: None,
                            send_retired_seen: 0,
                            answers: 0,
                            acked_at: None,
                        },
                    );
                    // Before the caller learns the QP number, the kernel filter admits it.
                    core.admit(qpn);
                    let _ = reply.send(());
                }
                Command::ResizeCq { cq, cqe, reply } => {
                    core.take_posts();
                    let now = core.now();
                    core.transmit(now, Hold::Nothing);
                    core.publish();
                    let _ = reply.send(cqe.map_or(Ok(()), |n| cq.resize(n)));
                }
                Command::ModifyQp { qpn, attrs, reply } => {
                    core.flush_held(Some(qpn));
                    let st = &mut core.st;
                    let r = st.modify(qpn, &attrs);
                    // The caller may post the moment modify returns: publish first.
                    st.publish_one(qpn);
                    let _ = reply.send(r);
                }
                Command::QueryQp { qpn, reply } => {
                    let info = st.qps.get(&qpn).map(|s| QpInfo {
                        state: s.qp.state(),
                        attr: *s.qp.attr(),
                        av: s.av,
                        cap: *s.qp.caps(),
                        sq_psn: s.qp.next_send_psn(),
                        rq_psn: s.qp.expected_psn(),
                        counters: s.qp.counters().clone(),
                    });
                    let _ = reply.send(info);
                }
                Command::DestroyQp { qpn, reply } => {
                    core.flush_held(Some(qpn));
                    let st = &mut core.st;
                    if let Some(s) = st.qps.remove(&qpn) {
                        st.shared.retired_counters.lock().add(s.qp.counters());
                        // (the filter still admits it: tightened later)
                        st.admitted_exact = false;
                    }
                    let _ = reply.send(());
                }
                Command::Cm(f) => {
                    let now = core.now();
                    f(&mut core.st.cm, now);
                    core.st.cm_dirty = true;
                    // Send at once: the caller may wait for what this produces.
                    core.cm_pump(now);
                }
                Command::Counters(reply) => {
                    core.backend.refresh_counters();
                    let _ = reply.send(core.st.counters());
                }
                Command::CreateSrq { shared, max_wr, max_sge, limit, reply } => {
                    let r = Srq::new(shared.srqn, shared.pd, max_wr, max_sge, limit).map(|srq| {
                        st.srqs.insert(shared.srqn, SrqSlot { srq, shared });
                    });
                    let _ = reply.send(r.map_err(Error::from));
                }
                Command::ModifySrq { srqn, max_wr, limit, reply } => {
                    let r = match st.srqs.get_mut(&srqn) {
                        None => Err(Error::InvalidArgument("SRQ destroyed")),
                        Some(s) => {
                            s.take_posts();
                            let mut r = Ok(());
                            if let Some(m) = max_wr {
                                r = s.srq.resize(m).map_err(Error::from);
                            }
                            if let (Some(l), Ok(())) = (limit, &r) {
                                r = s.srq.set_limit(l).map_err(Error::from);
                            }
                            if s.srq.poll_limit_event() {
                                st.shared.raise(AsyncEvent::SrqLimitReached { srqn });
                            }
                            r
                        }
                    };
                    let _ = reply.send(r);
                }
                Command::QuerySrq { srqn, reply } => {
                    let a = st.srqs.get_mut(&srqn).map(|s| {
                        s.take_posts();
                        SrqAttr { max_wr: s.srq.max_wr(), max_sge: s.srq.max_sge(), srq_limit: s.srq.limit() }
                    });
                    let _ = reply.send(a);
                }
                Command::DestroySrq { srqn, reply } => {
                    st.srqs.remove(&srqn);
                    let _ = reply.send(());
                }
            }
        }
        Some(any)
    }
}

/// The engine time of `at`: how long after the device's `epoch` (0 before it).
fn engine_time(epoch: Instant, at: Instant) -> Time {
    Time::from_nanos(at.saturating_duration_since(epoch).as_nanos() as u64)
}

impl Core {
    fn now(&self) -> Time {
        engine_time(self.st.epoch, Instant::now())
    }

    /// Has the backend's kernel filter admit QP `qpn` (see [`Backend::admit_qpns`]) before
    /// the QP's creator learns its number. When the filter's set lacks it, the set becomes
    /// this engine's QPs and QP1, and, when QPs come in a burst, [`ADMIT_AHEAD`] QP numbers
    /// past the highest. A set that admits more than the QPs (those, or destroyed QPs: a
    /// superset is safe, the engine drops what the filter passes) is made exact again by
    /// [`Core::tighten_admitted`] within [`ADMIT_TIGHTEN`].
    fn admit(&mut self, qpn: u32) {
        let st = &self.st;
        if !st.admit_qpns || st.admitted.as_ref().is_some_and(|s| s.contains(qpn)) {
            return;
        }
        let now = self.now();
        let burst = self.st.admitted_at.is_some_and(|t| now - t < ADMIT_BURST);
        self.admit_now(now, burst);
    }

    /// Gives the backend's filter this engine's QPs (and, with `ahead`, the QP numbers of a
    /// burst to come).
    fn admit_now(&mut self, now: Time, ahead: bool) {
        let st = &mut self.st;
        let engines = st.shared.engines.len() as u32;
        let top = st.qps.keys().copied().max().unwrap_or(1);
        let more = if ahead { (top + 1)..(top + 1 + ADMIT_AHEAD * engines).min(1 << 24) } else { 0..0 };
        // A shared address's probes reach every member's sockets (docs/design/shared-device.md).
        let probes = if st.shared.share.is_some() {
            super::share::PROBE_BASE..super::share::PROBE_BASE + super::share::MAX_SOCKETS as u32
        } else {
            0..0
        };
        let set = QpnSet::from_ranges(st.qps.keys().map(|&q| q..q + 1).chain([1..2, more, probes]).collect());
        st.admitted_at = Some(now);
        st.admitted_exact = !ahead && set.ranges().len() < QpnSet::MAX_RANGES;
        if self.backend.admit_qpns(&set) {
            st.admitted = Some(set);
        } else {
            // No filter that takes QP numbers (or the kernel refused it): the engine drops
            // unknown QPs itself, and asks no more.
            st.admit_qpns = false;
            st.admitted = None;
        }
    }

    /// Makes the filter's QP set exact again some time after it was last widened (see
    /// [`Core::admit`]); a QP destroyed leaves it wide.
    fn tighten_admitted(&mut self, now: Time) {
        let st = &self.st;
        if st.admit_qpns
            && st.admitted.is_some()
            && !st.admitted_exact
            && st.admitted_at.is_none_or(|t| now - t >= ADMIT_TIGHTEN)
        {
            self.admit_now(now, false);
        }
    }

    /// One round of progress on an application thread (inline progress): what has arrived,
    /// what was posted, what is to send, and the completions; `recv` says whether to read
    /// the socket. Timers and the IB CM stay with the engine thread, which is woken when
    /// this arms a timer earlier than the one it sleeps for, or gives the CM input.
    pub(crate) fn progress_inline(&mut self, recv: bool) -> crate::engine::shared::device::Pass {
        let now = self.now();
        let shared = self.st.shared.clone();
        let link = &shared.engines[self.st.idx];
        link.inline_at.store(now.as_nanos().max(1), Ordering::Relaxed);
        if recv {
            link.read_at.store(now.as_nanos().max(1), Ordering::Relaxed);
        }
        let mut work = recv && self.receive(now);
        work |= self.take_posts();
        // Plain ACKs may wait for their QP's next packet while the engine is quiet: it then
        // sleeps at most until QUIET_LIMIT after this read, and sends them when it wakes.
        let hold = if recv && self.quiet { Hold::Inline } else { Hold::Nothing };
        work |= self.transmit(now, hold);
        // (What is held now, this pass held: it executed requests of the peer, whom the
        // application is likely to answer.)
        let held = self.st.held.first().map(|h| h.qpn);
        self.publish();
        // A pass takes microseconds; one that took a millisecond or more was preempted, and
        // the engine thread could not move anything meanwhile: a stall for the ACK timers.
        // (The one clock reading after the pass serves the stall clocks here and the caller's
        // pacing: an idle poll reads the clock twice, at the start and the end of its pass.)
        let end_at = Instant::now();
        let end = engine_time(self.st.epoch, end_at);
        self.stall.record_hold(end, end - now);
        // So is a wait for a CPU of this thread between its passes (read once a millisecond).
        let epoch = self.st.epoch;
        APP_WAITS.with(|w| {
            if let Some((at, waited)) =
                w.borrow_mut().get_or_insert_with(ThreadWaits::for_this_thread).poll(end_at)
            {
                let at = engine_time(epoch, at);
                self.stall.record_hold(at, waited);
            }
        });
        if work {
            self.stats.dirty = true;
            // (QP timers, and packets the backend holds back: fault injection's delays)
            let next = self.next_deadline().map_or(u64::MAX, |t| t.as_nanos());
            if self.st.cm_dirty || next < link.engine_deadline.load(Ordering::SeqCst) {
                link.engine_deadline.store(next, Ordering::SeqCst);
                let _ = link.waker.wake();
            }
        }
        crate::engine::shared::device::Pass { ran: true, work, held, at: Some(end_at) }
    }

    /// Takes the backend's sockets out of the engine thread's poll set (`quiet`) or puts them
    /// back. An application thread that polls a CQ in vain makes the engine quiet: it reads
    /// the socket itself on each poll, and every datagram would otherwise wake the engine
    /// thread as well (on a small machine, onto the CPU of another spinning thread) for a
    /// packet it does not get to read. A poll that finds an RDMA WRITE's completion, the next
    /// send after other completions, a thread that arms a CQ's notification or goes to sleep
    /// on it, and the engine itself once nobody has read the socket inline for
    /// [`QUIET_LIMIT`] make it listen again (the rules: `CompletionQueue::pace`). A backend
    /// that cannot do it listens on.
    pub(crate) fn set_quiet(&mut self, quiet: bool) {
        if quiet == self.quiet {
            return;
        }
        let Some(registry) = self.registry.as_ref() else { return };
        match self.backend.listen(registry, SOCKET, !quiet) {
            Ok(()) => self.quiet = quiet,
            Err(e) => {
                tracing::debug!("engine: could not {} the socket: {e}", if quiet { "quiet" } else { "hear" })
            }
        }
        let link = &self.st.shared.engines[self.st.idx];
        link.quiet.store(self.quiet, Ordering::Relaxed);
        if self.quiet {
            // The engine thread may sleep with a later deadline (or none), taken while it
            // listened: it must wake by the time it is to listen again.
            let until = link.read_at.load(Ordering::Relaxed).saturating_add(QUIET_LIMIT.as_nanos() as u64);
            if link.engine_deadline.load(Ordering::SeqCst) > until {
                link.engine_deadline.store(until, Ordering::SeqCst);
                let _ = link.waker.wake();
            }
        }
    }

    /// Sends the ACKs held back ([`Core::transmit`]), if QP `qpn` (or, with `None`, any QP)
    /// has one.
    pub(crate) fn flush_held(&mut self, qpn: Option<u32>) {
        if qpn.map_or(!self.st.held.is_empty(), |q| self.st.held.iter().any(|h| h.qpn == q)) {
            let now = self.now();
            self.transmit(now, Hold::Nothing);
            self.publish();
        }
    }

    fn next_deadline(&mut self) -> Option<Time> {
        self.st.prune_timers();
        let held = self.st.held.iter().map(|h| h.until).min();
        let timer = self.st.timers.peek().map(|Reverse((t, _))| *t);
        let backend = self.backend.next_deadline().map(|i| engine_time(self.st.epoch, i));
        [held, timer, backend].into_iter().flatten().min()
    }

    fn receive(&mut self, now: Time) -> bool {
        let Core { st, backend, .. } = self;
        let shared = st.shared.clone();
        let mrs = shared.mrs.read();
        let link = &shared.engines[st.idx];
        let mut got = 0;
        // One batch per turn: acknowledgements and new packets go out between batches, which
        // keeps the peer's window moving.
        for _ in 0..1 {
            match backend.recv(&mut |d| st.on_datagram(d, now, &mrs, Origin::Socket)) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        link.rcvd.fetch_add(got as u64, Ordering::Relaxed);
        // What the other engines received for this one's QPs (at most a queue's worth per
        // turn, however fast they keep passing packets on).
        for _ in 0..MAX_FORWARDED {
            let Some(f) = link.inbox.pop() else { break };
            got += 1;
            let d = Datagram {
                payload: &f.payload,
                src: f.src,
                dst: f.dst,
                dst_port: f.dst_port,
                ecn: f.ecn,
                ip_header: f.ip_header.as_deref(),
            };
            st.on_datagram(d, now, &mrs, Origin::Engine);
        }
        got > 0
    }

    /// Engine 0 of a shared address: members joining and leaving, and the datagrams other
    /// members passed on to this one.
    fn share_turn(&mut self, now: Time) -> bool {
        let st = &mut self.st;
        let Some(share) = st.shared.share.clone() else { return false };
        let shared = st.shared.clone();
        let mrs = shared.mrs.read();
        share.poll_io(&mut |d| st.on_datagram(d, now, &mrs, Origin::Peer))
    }

    /// Moves posted work requests into their QPs.
    fn take_posts(&mut self) -> bool {
        let st = &mut self.st;
        let mut any = false;
        let shared = st.shared.clone();
        while let Some(qpn) = shared.engines[st.idx].posted.pop() {
            any = true;
            if qpn & SRQ_TAG != 0 {
                if let Some(s) = st.srqs.get_mut(&(qpn & !SRQ_TAG)) {
                    s.take_posts();
                }
                continue;
            }
            let Some(slot) = st.qps.get_mut(&qpn) else { continue };
            slot.shared.scheduled.store(false, Ordering::SeqCst);
            while let Some(wr) = slot.shared.send_wrq.pop() {
                let id = wr.wr_id;
                if slot.qp.post_send(wr).is_err() {
                    // The state changed under the post (e.g. to RESET): report it.
                    release(&slot.shared.send_outstanding, 1);
                    let wc = WorkCompletion::new(id, WcStatus::LocQpOpErr, WcOpcode::Send, Qpn::new(qpn));
                    slot.send_cq.push(wc);
                    slot.send_cq.notify();
                }
            }
            take_recvs(slot);
            st.touched.push(qpn);
        }
        any
    }

    /// Whether a QP timer is due at `now`.
    fn timer_due(&mut self, now: Time) -> bool {
        self.st.prune_timers();
        self.st.timers.peek().is_some_and(|Reverse((t, _))| *t <= now)
    }

    fn timers(&mut self, now: Time) -> bool {
        let Core { st, stall, .. } = self;
        let shared = st.shared.clone();
        let mut any = false;
        while let Some(&Reverse((t, qpn))) = st.timers.peek() {
            if t > now {
                break;
            }
            st.timers.pop();
            if qpn == CM_TIMER {
                if st.cm_timer == Some(t) {
                    st.cm_timer = None;
                    st.cm.handle_timeout(now);
                    st.cm_dirty = true;
                    any = true;
                }
                continue;
            }
            let Some(slot) = st.qps.get_mut(&qpn) else { continue };
            if slot.timer != Some(t) {
                continue; // superseded
            }
            slot.timer = None;
            let mrs = shared.mrs.read();
            // Each QP ignores the waits its timeout already allows for.
            let grace = super::stall::grace(slot.qp.local_ack_timeout().unwrap_or_default());
            slot.qp.handle_timeout_stalled(now, &*mrs, |since| stall.stalled_since(since, grace));
            st.touched.push(qpn);
            any = true;
        }
        any
    }

    /// Sends the MADs the IB CM has, hands its events to the sink (which may give it more
    /// to send) and arms its timer.
    fn cm_pump(&mut self, now: Time) -> bool {
        let Core { st, backend, .. } = self;
        if !st.cm_dirty {
            return false;
        }
        st.cm_dirty = false;
        let shared = st.shared.clone();
        let mut any = false;
        // The sink may answer an event with commands (reject, MRA) that send and produce
        // events in turn; each round is bounded by what the endpoint has queued.
        loop {
            let mut round = false;
            while let Some(t) = st.cm.poll_transmit() {
                round = true;
                st.send_mad(backend.as_mut(), &t);
            }
            while let Some(ev) = st.cm.poll_event() {
                round = true;
                let mut sink = shared.cm_sink.lock();
                match sink.as_mut() {
                    Some(f) => f(&mut st.cm, now, ev),
                    // No RDMA CM on this device: nobody will answer a request.
                    None => {
                        if let transport_cm::CmEvent::ReqReceived { id, .. } = ev {
                            let _ = st.cm.reject(now, id, RejReason::ConsumerDefined, &[], &[]);
                        }
                    }
                }
            }
            if !round {
                break;
            }
            any = true;
        }
        match st.cm.poll_timeout() {
            Some(t) if st.cm_timer != Some(t) => {
                st.cm_timer = Some(t);
                st.timers.push(Reverse((t, CM_TIMER)));
            }
            Some(_) => {}
            None => st.cm_timer = None,
        }
        any
    }

    /// Builds and sends what the active QPs have, batching equal-sized packets to one peer.
    /// `hold` says which lone plain ACKs may wait ([`Hold`]).
    fn transmit(&mut self, now: Time, hold: Hold) -> bool {
        // Whatever a packet, a post or a timer just gave a QP to send goes out in this turn,
        // before its completions are published: an application that sees the receive
        // completion of a message may exit at once, and the ACK must already be gone.
        // Except, by `hold`, a QP's lone plain ACK: it waits for the QP's next packet (the
        // answer the application is about to post) and leaves with it, or by its deadline
        // (the engine thread's sleep covers it: `next_deadline`), or with the next inline
        // pass, or when its QP is destroyed or modified, the device closes or the drop-in
        // library's exit handler runs ([`Core::flush_held`]).
        let held = std::mem::take(&mut self.st.held);
        let mut kept: Vec<Held> = Vec::new();
        let hold_acks = self.st.shared.hold_acks;
        for (i, qpn) in held.iter().map(|h| h.qpn).chain(self.st.touched.iter().copied()).enumerate() {
            let was_held = held.get(i);
            if was_held.is_none() && held.iter().any(|h| h.qpn == qpn) {
                continue;
            }
            let Some(slot) = self.st.qps.get_mut(&qpn) else { continue };
            if kept.iter().any(|h| h.qpn == qpn) || !slot.qp.wants_transmit() {
                continue;
            }
            if !slot.qp.only_plain_ack() {
                // More than an ACK to send: the answer, if it follows the ACK closely. Then the
                // request goes first, a held ACK as the GSO send's shorter last segment.
                if was_held.is_some() {
                    slot.answers = slot.answers.saturating_add(1);
                    slot.qp.requests_first();
                } else if let Some(at) = slot.acked_at {
                    slot.answers = if now - at <= ANSWER_WINDOW { slot.answers.saturating_add(1) } else { 0 };
                }
                slot.acked_at = None;
            } else if !slot.active {
                // (An active QP's ACK is queued to send already.)
                match was_held {
                    Some(h) if hold == Hold::Engine && h.by_engine && now < h.until => {
                        kept.push(*h);
                        continue;
                    }
                    // Its time is up and no answer came: hold no more until answers do.
                    Some(h) if h.by_engine && now >= h.until => slot.answers = 0,
                    None if hold_acks
                        && (hold == Hold::Inline
                            || hold == Hold::Engine && slot.answers >= ANSWERS_TO_HOLD) =>
                    {
                        let by_engine = hold == Hold::Engine;
                        let until = now + if by_engine { ANSWER_WAIT } else { QUIET_LIMIT };
                        kept.push(Held { qpn, until, by_engine });
                        slot.qp.counters_mut().ack_held += 1;
                        continue;
                    }
                    // Sent now, alone: the answer may still follow.
                    _ => slot.acked_at = Some(now),
                }
            }
            if slot.active {
                continue;
            }
            slot.active = true;
            self.st.active.push_back(qpn);
        }
        self.st.held = kept;
        let Core { st, backend, tx, .. } = self;
        let shared = st.shared.clone();
        let mrs = shared.mrs.read();
        let max_seg = backend.max_segments();
        // A GSO send is one UDP datagram to the kernel: at most 65507 bytes of payload.
        const MAX_GSO_BYTES: usize = 65_507;
        let numbered = backend.gso_numbers_ip_id();
        let port = st.port;
        // (UD only: the address handles, read-locked once per turn)
        let mut ahs = None;
        let ecn = shared.ecn;
        let mut batch: Option<Batch> = None;
        let mut pos = 0usize;
        let mut sent = false;
        for _ in 0..st.active.len() {
            let Some(qpn) = st.active.pop_front() else { break };
            let Some(slot) = st.qps.get_mut(&qpn) else { continue };
            slot.active = false;
            st.touched.push(qpn);
            let mut n = 0;
            loop {
                if tx.len() - pos < MAX_PKT {
                    flush(backend.as_mut(), tx, &mut batch, &shared);
                    pos = 0;
                }
                // UD: where the next work request's address handle points, from the UDP source
                // port rxe gives the QP. A send that cannot leave (its handle destroyed after
                // the post) ends in an error completion, never in silence.
                let ud_route = match slot.qp.next_ud_dest() {
                    Some(ud) => {
                        let route = ahs.get_or_insert_with(|| shared.ahs.read()).get(&ud.ah).and_then(|ah| {
                            path_to(&shared.addresses, &shared.gids, &ah.av, ud_udp_sport(qpn), port)
                        });
                        if route.is_none() {
                            slot.qp.counters_mut().send_err += 1;
                            slot.qp.fail_next_ud_send();
                            break;
                        }
                        route
                    }
                    None => None,
                };
                let Some(t) = slot.qp.poll_transmit(now, &*mrs, &mut tx[pos..pos + MAX_PKT]) else { break };
                n += 1;
                sent = true;
                let route = if t.ud.is_some() { ud_route } else { slot.path };
                let Some(path) = &route else {
                    // (A connected QP sends only once it has a path.)
                    slot.qp.counters_mut().send_err += 1;
                    continue;
                };
                let len = t.len;
                // ECT(0) on packets that carry payload, when the device asks for it and the
                // address vector left the ECN bits alone.
                let tos = if ecn && path.tos & 3 == 0 && carries_payload(&tx[pos..pos + len]) {
                    path.tos | ECT0
                } else {
                    path.tos
                };
                let joins = batch.as_ref().is_some_and(|b| {
                    b.dst == path.dst
                        && b.src_ip == path.src_ip
                        && b.src_port == path.src_port
                        && b.tos == tos
                        && b.hop_limit == path.hop_limit
                        && b.flow_label == path.flow_label
                        && b.qpn == qpn
                        && !b.closed
                        && b.count < max_seg
                        && (b.count + 1) * b.seg <= MAX_GSO_BYTES
                        && len <= b.seg
                        && b.end == pos
                });
                if !joins {
                    flush(backend.as_mut(), tx, &mut batch, &shared);
                    batch = Some(Batch {
                        dst: path.dst,
                        src_ip: path.src_ip,
                        src_port: path.src_port,
                        tos,
                        hop_limit: path.hop_limit,
                        flow_label: path.flow_label,
                        qpn,
                        start: pos,
                        end: pos,
                        seg: len,
                        count: 0,
                        closed: false,
                    });
                }
                let b = batch.as_mut().expect("a batch was just ensured");
                // Segment k of a GSO send leaves with IPv4 identification k (see the backend).
                let k = b.count;
                b.count += 1;
                b.end = pos + len;
                b.closed = len < b.seg;
                let mut frame = path.frame;
                if let IpRepr::V4 { id, .. } = &mut frame.ip {
                    *id = if numbered { k as u16 } else { 0 };
                }
                let body = len - ICRC_LEN;
                if let Ok(crc) = frame.icrc(&tx[pos..pos + body]) {
                    tx[pos + body..pos + len].copy_from_slice(&crc.to_le_bytes());
                }
                pos += len;
                if n >= 256 {
                    // Fairness: let the other QPs send too; come back next turn.
                    slot.active = true;
                    st.active.push_back(qpn);
                    break;
                }
            }
        }
        flush(backend.as_mut(), tx, &mut batch, &shared);
        sent
    }

    /// Publishes completions, states, events, slot counts, timers and activity of the QPs
    /// touched since the last call.
    fn publish(&mut self) {
        let st = &mut self.st;
        let mut touched = std::mem::take(&mut st.touched);
        touched.sort_unstable();
        touched.dedup();
        for qpn in touched.drain(..) {
            st.publish_one(qpn);
        }
        st.touched = touched;
    }
}

/// The file through which a running device publishes its counters to other processes
/// (`softroce counters` reads it): `name value` lines, rewritten at most four times a second
/// while the device is busy and at shutdown, replaced atomically (see [`super::rundir`], which
/// also bounds what ended devices leave behind).
pub(crate) struct StatsFile {
    /// The run directory and this device's file in it; `None` when publishing is off.
    target: Option<(RunDir, String)>,
    header: String,
    /// Engines of the device that have not stopped yet.
    alive: usize,
}

/// One engine's side of the counters file: whether its counters changed and when it last
/// published them.
struct Stats {
    /// Counters changed since the last write.
    dirty: bool,
    last: Instant,
    file: Arc<Mutex<StatsFile>>,
}

impl Stats {
    fn due(&self) -> bool {
        self.last.elapsed() >= Duration::from_millis(250) && self.file.lock().target.is_some()
    }

    /// Publishes this engine's counters `mine` and rewrites the device's file with every
    /// engine's latest; `stopping`: this engine's last.
    fn write(&mut self, st: &State, mine: DeviceCounters, stopping: bool) {
        self.last = Instant::now();
        self.dirty = false;
        let shared = &st.shared;
        *shared.engines[st.idx].snapshot.lock() = mine;
        let mut file = self.file.lock();
        if stopping {
            file.alive = file.alive.saturating_sub(1);
        }
        if file.target.is_none() {
            return;
        }
        let exited = file.alive == 0;
        if let Ok(c) = shared.combine_engines(|i| Ok(shared.engines[i].snapshot.lock().clone())) {
            file.write(&c, exited);
        }
    }
}

impl StatsFile {
    /// The counters file of a device, shared by its engines.
    pub(crate) fn shared(shared: &DeviceShared) -> Arc<Mutex<StatsFile>> {
        Arc::new(Mutex::new(StatsFile::new(shared)))
    }

    fn new(shared: &DeviceShared) -> StatsFile {
        let pid = std::process::id();
        let target = RunDir::for_publishing().ok().map(|dir| {
            // Every device that opens clears what ended devices left beyond the bound.
            dir.prune();
            (dir, format!("{}-{}-{}.counters", shared.name, shared.ip, pid))
        });
        let mut header =
            format!("device {}\nip {}\nnetdev {}\npid {pid}\n", shared.name, shared.ip, shared.netdev);
        if let Some(start) = super::rundir::process_start(pid) {
            header.push_str(&format!("start {start}\n"));
        }
        StatsFile { target, header, alive: shared.engines.len() }
    }

    fn write(&mut self, c: &DeviceCounters, exited: bool) {
        let Some((dir, name)) = &self.target else { return };
        let mut text = self.header.clone();
        text.push_str(&format!("state {}\n", if exited { "exited" } else { "running" }));
        for (k, v) in c.iter() {
            text.push_str(&format!("{k} {v}\n"));
        }
        for (k, v) in c.cm.iter() {
            text.push_str(&format!("{k} {v}\n"));
        }
        let _ = dir.publish(name, &text);
    }
}

/// A run of packets to one peer waiting in the transmit buffer: `count` packets of `seg`
/// bytes in `start..end` (the last may be shorter, which closes the run).
#[derive(Debug)]
struct Batch {
    dst: SocketAddr,
    src_ip: IpAddr,
    src_port: u16,
    tos: u8,
    hop_limit: u8,
    flow_label: u32,
    /// The QP whose packets these are (the fault decorator acts per QP).
    qpn: u32,
    start: usize,
    end: usize,
    seg: usize,
    count: usize,
    closed: bool,
}

impl State {
    /// Drops superseded deadlines (re-armed, disarmed, or of a QP that is gone) from the head
    /// of the timer heap. A QP's ACK timer moves with every ACK, so a busy QP leaves
    /// thousands of them a second; left at the head, each would come due, wake the sleeping
    /// engine at its old time and run a pass of timers for nothing.
    fn prune_timers(&mut self) {
        let (qps, cm_timer) = (&self.qps, self.cm_timer);
        prune_heap(&mut self.timers, |t, qpn| {
            if qpn == CM_TIMER {
                cm_timer == Some(t)
            } else {
                qps.get(&qpn).is_some_and(|s| s.timer == Some(t))
            }
        });
    }

    /// This engine's part of the device's counters: its QPs', and on the IB CM's engine
    /// also the device-wide ones (see [`DeviceCounters::combine`]).
    fn counters(&self) -> DeviceCounters {
        let device_wide = self.idx == self.shared.cm_engine();
        let mut c =
            if device_wide { self.shared.retired_counters.lock().clone() } else { Counters::default() };
        for s in self.qps.values() {
            c.add(s.qp.counters());
        }
        if !device_wide {
            return DeviceCounters { qp: c, ..DeviceCounters::default() };
        }
        let rx = &self.shared.rx;
        DeviceCounters {
            qp: c,
            rcvd_icrc_err: rx.icrc_err.load(Ordering::Relaxed),
            rcvd_malformed: rx.malformed.load(Ordering::Relaxed),
            rcvd_junk: crate::engine::counters::JunkCounters::from_array(
                rx.junk.each_ref().map(|c| c.load(Ordering::Relaxed)),
            ),
            rcvd_unknown_qp: rx.unknown_qp.load(Ordering::Relaxed),
            rcvd_bad_source: rx.bad_source.load(Ordering::Relaxed),
            icrc_unexpected_id: rx.icrc_unexpected_id.load(Ordering::Relaxed),
            send_err: rx.send_err.load(Ordering::Relaxed),
            rcvd_ecn_ce: rx.ecn_ce.load(Ordering::Relaxed),
            rcvd_socket_drops: rx.socket_drops.load(Ordering::Relaxed),
            rcvd_frame_truncated: rx.frame_truncated.load(Ordering::Relaxed),
            rcvd_vlan_tagged: rx.vlan_tagged.load(Ordering::Relaxed),
            rcvd_ip_hdr_err: rx.ip_hdr_err.load(Ordering::Relaxed),
            rcvd_ipv6_ext_hdr: rx.ipv6_ext_hdr.load(Ordering::Relaxed),
            rcvd_udp_len_err: rx.udp_len_err.load(Ordering::Relaxed),
            rcvd_not_for_us: rx.not_for_us.load(Ordering::Relaxed),
            send_neigh_unresolved: rx.neigh_unresolved.load(Ordering::Relaxed),
            rcvd_mad_bad_opcode: rx.mad_bad_opcode.load(Ordering::Relaxed),
            rcvd_mad_bad_pkey: rx.mad_bad_pkey.load(Ordering::Relaxed),
            rcvd_mad_bad_qkey: rx.mad_bad_qkey.load(Ordering::Relaxed),
            send_mad_no_route: rx.mad_no_route.load(Ordering::Relaxed),
            rcvd_forwarded: rx.forwarded.load(Ordering::Relaxed),
            rcvd_forward_dropped: rx.forward_dropped.load(Ordering::Relaxed),
            send_port_fallback: rx.send_port_fallback.load(Ordering::Relaxed),
            faults: self.shared.faults.as_ref().map(|f| f.counters()).unwrap_or_default(),
            cm: self.cm.counters().clone(),
            ..self.share_counters()
        }
    }

    /// The counters of a shared address (all zero for an unshared device).
    fn share_counters(&self) -> DeviceCounters {
        let Some(s) = &self.shared.share else { return DeviceCounters::default() };
        let c = &s.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        DeviceCounters {
            share_members: u64::from(s.members()),
            share_passed_on: get(&c.passed_on),
            share_passed_in: get(&c.passed_in),
            share_pass_dropped: get(&c.pass_dropped),
            share_gone_qp: get(&c.gone),
            share_steerings: get(&c.steerings),
            share_probe_retries: get(&c.probe_retries),
            ..DeviceCounters::default()
        }
    }

    fn modify(&mut self, qpn: u32, attrs: &QpAttrs) -> Result<()> {
        let port = self.port;
        let (locals, gids) = (&self.shared.addresses, &self.shared.gids);
        let slot = self.qps.get_mut(&qpn).ok_or(Error::NoSuchQp(Qpn::new(qpn)))?;
        slot.qp.modify(&attrs.to_update())?;
        if attrs.state == Some(crate::transport::QpState::Reset) {
            // RESET empties the work queues without completions: work requests not yet handed
            // to the transport go too, and the queue-depth accounting starts over (the new
            // transport QP counts retired sends from zero).
            while slot.shared.send_wrq.pop().is_some() {}
            if slot.shared.srq.is_none() {
                while slot.shared.recv_wrq.pop().is_some() {}
                slot.shared.recv_outstanding.store(0, Ordering::SeqCst);
            }
            slot.shared.send_outstanding.store(0, Ordering::SeqCst);
            slot.send_retired_seen = 0;
            // As mlx4/mlx5 do (and rdma-core's tests expect: they restate a QP that failed and
            // poll its CQ again), completions of the QP still in its CQs go with the reset.
            slot.send_cq.remove_qp(qpn);
            if !Arc::ptr_eq(&slot.send_cq, &slot.recv_cq) {
                slot.recv_cq.remove_qp(qpn);
            }
        }
        if let Some(av) = attrs.av {
            slot.av = Some(av);
        }
        slot.shared.path_mtu.store(slot.qp.attr().path_mtu as u8, Ordering::Relaxed);
        // Connected QPs know their peer once they have an address vector and a dest QPN.
        if let (Some(av), QpType::Rc | QpType::Uc) = (slot.av, slot.qp.qp_type())
            && slot.qp.attr().dest_qpn != Qpn::new(0)
        {
            let src_port = rc_udp_sport(av.flow_label, qpn, slot.qp.attr().dest_qpn.value());
            slot.path = Some(path_to(locals, gids, &av, src_port, port).ok_or(Error::Unreachable(av.dgid))?);
        }
        Ok(())
    }

    /// One received packet, and where it came from.
    fn on_datagram(&mut self, d: Datagram<'_>, now: Time, mrs: &MrTable, origin: Origin) {
        let rx = &self.shared.rx;
        if origin == Origin::Socket
            && let Some(share) = &self.shared.share
        {
            // A shared address: probes of the steering, and packets for another member's QPs
            // (while the steering is being renewed) go no further here.
            if let [_, _, _, _, _, a, b, c, ..] = *d.payload
                && u32::from_be_bytes([0, a, b, c]) >= super::share::PROBE_BASE
                && share.answer_probe(d.payload, d.src, self.idx)
            {
                self.shared.engines[self.idx].probes.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        // What the kernel filter rejects (a sample of it reaches us, and all of it where
        // there is no such filter), by reason.
        if let Err(j) = filter::verdict(d.payload, None) {
            rx.malformed.fetch_add(1, Ordering::Relaxed);
            if let Some(c) = rx.junk.get(j as usize) {
                c.fetch_add(1, Ordering::Relaxed);
            }
            self.junk(now, &d, j as usize, self.junk_weight);
            return;
        }
        let Ok(p) = Packet::new_checked(d.payload) else {
            rx.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let dest = p.bth().dest_qp();
        if origin == Origin::Socket
            && dest != GSI_QPN
            && let Some(share) = &self.shared.share
        {
            match share.owner_of_qpn(dest, d.dst) {
                super::share::Owner::Mine => {}
                super::share::Owner::Peer(i, slot) => {
                    share.pass_on(i, slot, &d);
                    return;
                }
                super::share::Owner::Gone => {
                    share.counters.gone.fetch_add(1, Ordering::Relaxed);
                    rx.unknown_qp.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
        if origin != Origin::Engine && self.shared.engines.len() > 1 {
            let owner = self.shared.engine_of(dest);
            if owner != self.idx {
                forward(&self.shared.engines[owner], rx, &d);
                return;
            }
        }
        // As rxe's `rxe_rcv`: the destination QP and the source address are checked before
        // the ICRC (`hdr_check`, then `rxe_icrc_check`), so junk for QPs that do not exist,
        // or from the wrong peer, costs no CRC.
        let qpn = dest;
        let slot = if qpn == GSI_QPN {
            None
        } else {
            let Some(slot) = self.qps.get_mut(&qpn) else {
                rx.unknown_qp.fetch_add(1, Ordering::Relaxed);
                // (a sample of what the filter drops, if it has the QP numbers)
                let sampled = self.admitted.as_ref().is_some_and(|s| !s.contains(qpn));
                self.junk(
                    now,
                    &d,
                    filter::Junk::UnknownQp as usize,
                    if sampled { self.junk_weight } else { 1 },
                );
                return;
            };
            if let (QpType::Rc | QpType::Uc, Some(path)) = (slot.qp.qp_type(), &slot.path)
                && path.dst.ip() != d.src.ip()
            {
                rx.bad_source.fetch_add(1, Ordering::Relaxed);
                self.junk(now, &d, JUNK_BAD_SOURCE, 1);
                return;
            }
            Some(slot)
        };
        let Some(v4) = icrc_check(&d, &p, &mut self.id_solver) else {
            rx.icrc_err.fetch_add(1, Ordering::Relaxed);
            self.junk(now, &d, JUNK_ICRC, 1);
            return;
        };
        if d.ecn == 3 {
            // Congestion Experienced: counted (the basis for congestion control).
            rx.ecn_ce.fetch_add(1, Ordering::Relaxed);
        }
        let Some(slot) = slot else {
            self.on_gsi(&d, &p, now, origin);
            return;
        };
        let grh = (slot.qp.qp_type() == QpType::Ud).then(|| grh_of(&d, v4));
        // Fault injection's `rnr=K`: the QP answers this SEND with an RNR NAK.
        let faults = self.shared.faults.as_deref();
        let forced_rnr = faults.is_some_and(|f| f.rnr_before(&p, &mut slot.qp));
        match &slot.shared.srq {
            Some(srq_shared) => {
                let srqn = srq_shared.srqn;
                match self.srqs.get_mut(&srqn) {
                    Some(s) => {
                        s.take_posts();
                        slot.qp.handle_packet_srq(now, &p, grh.as_ref(), mrs, &mut s.srq);
                        if s.srq.poll_limit_event() {
                            self.shared.raise(AsyncEvent::SrqLimitReached { srqn });
                        }
                    }
                    // (the SRQ outlives its QPs: cannot happen)
                    None => slot.qp.handle_packet_grh(now, &p, grh.as_ref(), mrs),
                }
            }
            None => {
                if !slot.shared.recv_wrq.is_empty() {
                    take_recvs(slot);
                }
                slot.qp.handle_packet_grh(now, &p, grh.as_ref(), mrs);
            }
        }
        if let (true, Some(f)) = (forced_rnr, faults) {
            f.rnr_after(&p, &mut slot.qp);
        }
        self.touched.push(qpn);
    }

    /// Records a dropped packet with the flood watch (reason: an index of
    /// [`flood::REASONS`]), and warns when it closes a window that was a flood.
    fn junk(&mut self, now: Time, d: &Datagram<'_>, reason: usize, weight: u64) {
        if let Some(f) = self.flood.record(now, d.src.ip(), reason, weight) {
            tracing::warn!(
                "junk flood on {}:{}: {f}; next report in {} s or later",
                d.dst,
                d.dst_port,
                flood::WARN_EVERY.as_secs()
            );
        }
    }

    /// A packet for QP1: checked as rxe checks a GSI QP's packets (UD SEND Only, P_Key
    /// matching the default partition, Q_Key 0x80010000), then given to the IB CM, which does
    /// the MAD layer's checks.
    fn on_gsi(&mut self, d: &Datagram<'_>, p: &Packet<'_>, now: Time, origin: Origin) {
        let rx = &self.shared.rx;
        let bth = p.bth();
        if bth.opcode() != Opcode::UD_SEND_ONLY {
            rx.mad_bad_opcode.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // rxe `pkey_match(pkey, 0xffff)`: the low 15 bits equal (and not 0); one side full.
        if bth.pkey() & 0x7fff != 0x7fff {
            rx.mad_bad_pkey.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(deth) = p.deth() else {
            rx.mad_bad_opcode.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if deth.qkey() != GSI_QKEY {
            rx.mad_bad_qkey.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let traffic_class = match d.ip_header {
            Some(ip) if ip.first().is_some_and(|b| b >> 4 == 4) && ip.len() >= 2 => ip[1],
            Some(ip) if ip.len() >= 2 => (ip[0] << 4) | (ip[1] >> 4),
            _ => 0,
        };
        // On a shared address the kernel hands every MAD to one member: the CM connection or
        // listener it is for may be another's. A member that has just died (its connection
        // broken before this engine heard) cannot take it: then the CM here answers, as for a
        // service nobody listens on (a REQ refused at once, not after the peer's retries).
        if origin == Origin::Socket
            && let Some(share) = &self.shared.share
            && let super::share::Owner::Peer(i, slot) = share.owner_of_mad(p.payload(), d.dst)
            && share.pass_on(i, slot, d)
        {
            return;
        }
        let from = MadAddr {
            remote_gid: Gid::from_ip(d.src.ip()).0,
            local_gid: Gid::from_ip(d.dst).0,
            traffic_class: traffic_class & !3,
            pkey: bth.pkey(),
            qpn: deth.src_qp(),
        };
        self.cm.handle_mad(now, &from, p.payload());
        self.cm_dirty = true;
    }

    /// Sends one MAD from QP1: a UD SEND Only with the GSI Q_Key, from the UDP source port
    /// rxe gives QP1 (55410), from the local address the CM names (else the device's first
    /// of the family), with the route's TTL.
    fn send_mad(&mut self, backend: &mut dyn Backend, t: &CmTransmit) {
        let dst_ip = Gid(t.to.remote_gid).to_ip();
        let want = Gid(t.to.local_gid).to_ip();
        let locals = &self.shared.addresses;
        let Some(src_ip) = locals
            .iter()
            .copied()
            .find(|a| *a == want && a.is_ipv4() == dst_ip.is_ipv4())
            .or_else(|| locals.iter().copied().find(|a| a.is_ipv4() == dst_ip.is_ipv4()))
        else {
            self.shared.rx.mad_no_route.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, t.to.qpn, Psn::new(self.gsi_psn));
        bth.pkey = t.to.pkey;
        bth.ack_req = true;
        self.gsi_psn = (self.gsi_psn + 1) & 0xff_ffff;
        let mut repr = PacketRepr::new(bth);
        repr.deth = Some(DethRepr { qkey: GSI_QKEY, resv8: 0, src_qp: GSI_QPN });
        let mut buf = [0u8; 12 + 8 + MAD_LEN + ICRC_LEN];
        let Ok(len) = repr.emit(&mut buf, &t.mad) else { return };
        let hop_limit = route_hop_limit(dst_ip);
        let tos = t.to.traffic_class;
        let src_port = ud_udp_sport(GSI_QPN);
        let Some(ip) = IpRepr::for_udp_socket(src_ip, dst_ip, tos, hop_limit, 0) else { return };
        let frame = RoceFrameRepr { ip, src_port, dst_port: self.port, udp_checksum: false };
        let body = len - ICRC_LEN;
        if let Ok(crc) = frame.icrc(&buf[..body]) {
            buf[body..len].copy_from_slice(&crc.to_le_bytes());
        }
        let out = Outgoing {
            dst: SocketAddr::new(dst_ip, self.port),
            src_ip,
            src_port,
            contents: &buf[..len],
            segment_size: len,
            tos,
            hop_limit,
            flow_label: 0,
            qpn: GSI_QPN,
        };
        if backend.send(out).is_err() {
            self.shared.rx.send_err.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn publish_one(&mut self, qpn: u32) {
        let Some(slot) = self.qps.get_mut(&qpn) else { return };
        let q = &mut slot.qp;
        // Free send slots before the completions are visible: an application that sees a
        // completion may post at once.
        let retired = q.send_retired();
        if retired > slot.send_retired_seen {
            release(&slot.shared.send_outstanding, (retired - slot.send_retired_seen) as usize);
            slot.send_retired_seen = retired;
        }
        // The state is visible before the completions that report its change.
        slot.shared.set_state(q.state());
        let (mut send_overrun, mut recv_overrun) = (false, false);
        // (Whether a completion went to each CQ: only then is its waiter woken.)
        let (mut to_send_cq, mut to_recv_cq) = (false, false);
        while let Some(wc) = q.poll_send_completion() {
            to_send_cq = true;
            send_overrun |= !slot.send_cq.push(wc);
        }
        while let Some(wc) = q.poll_recv_completion() {
            match &slot.shared.srq {
                Some(srq) => release(&srq.outstanding, 1),
                None => release(&slot.shared.recv_outstanding, 1),
            };
            to_recv_cq = true;
            recv_overrun |= !slot.recv_cq.push(wc);
        }
        if send_overrun || recv_overrun {
            // IBTA: a CQ overrun is a CQ error, reported against the CQ that overran; the
            // QPs that feed it cannot go on.
            let same = Arc::ptr_eq(&slot.send_cq, &slot.recv_cq);
            for (overran, cq) in
                [(send_overrun, &slot.send_cq), (recv_overrun && !(same && send_overrun), &slot.recv_cq)]
            {
                if overran {
                    self.shared.raise(AsyncEvent::CqError { cq: cq.id });
                }
            }
            let _ = q.modify(&crate::transport::QpAttrUpdate {
                state: Some(crate::transport::QpState::Err),
                ..Default::default()
            });
            while q.poll_send_completion().is_some() {}
            while q.poll_recv_completion().is_some() {}
        }
        // A CQ's notification fires when a completion is added to it after it was armed (or
        // it overran): not for the packets of a QP that completed nothing, such as the RDMA
        // WRITEs a responder executes or the ACKs of unsignaled sends. Those woke a thread
        // asleep on the CQ at every pass (37,000 times a second under a WRITE stream).
        if to_send_cq {
            slot.send_cq.notify();
        }
        if to_recv_cq {
            slot.recv_cq.notify();
        }
        while let Some(event) = q.poll_event() {
            self.shared.raise(AsyncEvent::Qp { qpn: Qpn::new(qpn), event });
        }
        slot.shared.set_state(q.state());
        if let Some(t) = q.poll_timeout()
            && slot.timer != Some(t)
        {
            slot.timer = Some(t);
            self.timers.push(Reverse((t, qpn)));
        } else if q.poll_timeout().is_none() {
            slot.timer = None;
        }
        if q.wants_transmit() && !slot.active {
            slot.active = true;
            self.active.push_back(qpn);
        }
    }
}

/// Hands a packet to the engine that owns its QP, and wakes it if it sleeps.
fn forward(link: &EngineLink, rx: &super::backend::RxCounters, d: &Datagram<'_>) {
    if link.inbox.len() >= MAX_FORWARDED {
        rx.forward_dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    rx.forwarded.fetch_add(1, Ordering::Relaxed);
    link.inbox.push(Forwarded {
        payload: d.payload.to_vec(),
        src: d.src,
        dst: d.dst,
        dst_port: d.dst_port,
        ecn: d.ecn,
        ip_header: d.ip_header.map(<[u8]>::to_vec),
    });
    link.wake_if_sleeping();
}

/// Frees `n` queue slots of a QP, never below zero (a post racing with a reset to RESET,
/// which zeroes the count, must not wrap it).
fn release(outstanding: &std::sync::atomic::AtomicUsize, n: usize) {
    let _ = outstanding.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(v.saturating_sub(n)));
}

/// Moves a QP's posted receives into it. Called before every packet it gets too: a receive
/// posted before the peer was told to send must be there when the SEND arrives, as it would
/// be on an HCA.
fn take_recvs(slot: &mut Slot) {
    while let Some(wr) = slot.shared.recv_wrq.pop() {
        let id = wr.wr_id;
        if slot.qp.post_recv(wr).is_err() {
            release(&slot.shared.recv_outstanding, 1);
            let wc = WorkCompletion::new(id, WcStatus::LocQpOpErr, WcOpcode::Recv, Qpn::new(slot.shared.qpn));
            slot.recv_cq.push(wc);
            slot.recv_cq.notify();
        }
    }
}

/// The path of a packet to the address vector's GID, leaving from UDP port `src_port`: from
/// the address of the source GID when the device serves it and it is of the destination's
/// family, else from the device's first address of that family (`None` if it has none).
fn path_to(locals: &[IpAddr], gids: &[Gid], av: &AddressVector, src_port: u16, port: u16) -> Option<Path> {
    let dst_ip = av.dgid.to_ip();
    let sgid = gids.get(usize::from(av.sgid_index.value())).map(|g| g.to_ip());
    let local = sgid
        .filter(|a| locals.contains(a) && a.is_ipv4() == dst_ip.is_ipv4())
        .or_else(|| locals.iter().copied().find(|a| a.is_ipv4() == dst_ip.is_ipv4()))?;
    let ip = IpRepr::for_udp_socket(local, dst_ip, av.traffic_class, av.hop_limit, av.flow_label)?;
    Some(Path {
        dst: SocketAddr::new(dst_ip, port),
        src_ip: local,
        src_port,
        tos: av.traffic_class,
        hop_limit: route_hop_limit(dst_ip),
        flow_label: av.flow_label,
        frame: RoceFrameRepr { ip, src_port, dst_port: port, udp_checksum: false },
    })
}

/// The IB CM's configuration for a device: its node GUID (for a device without a MAC, such as
/// one on loopback, a GUID made from its address, so that two such devices differ), GID 0, the
/// default partition.
fn cm_config(shared: &DeviceShared) -> CmConfig {
    let mut node_guid = shared.attr.node_guid;
    if shared.mac == [0; 6] {
        let g = Gid::from_ip(shared.ip).0;
        node_guid = 0x0200_0000_0000_0000
            | u64::from_be_bytes(g[8..16].try_into().unwrap_or_default()) & 0xffff_ffff_ffff;
    }
    CmConfig {
        node_guid,
        gid0: shared.gids.first().map_or([0; 16], |g| g.0),
        // A member of a shared address puts its slot in its communication IDs, so that the
        // member that receives an answer knows whose connection it is for.
        id_slot: shared.share.as_ref().map(|s| s.slot),
        ..CmConfig::default()
    }
}

/// Sends the pending batch, if any.
fn flush(backend: &mut dyn Backend, tx: &[u8], batch: &mut Option<Batch>, shared: &DeviceShared) {
    if let Some(b) = batch.take() {
        let out = Outgoing {
            dst: b.dst,
            src_ip: b.src_ip,
            src_port: b.src_port,
            contents: &tx[b.start..b.end],
            segment_size: b.seg,
            tos: b.tos,
            hop_limit: b.hop_limit,
            flow_label: b.flow_label,
            qpn: b.qpn,
        };
        if let Err(e) = backend.send(out) {
            tracing::debug!(dst = %b.dst, packets = b.count, error = %e, "send failed");
            shared.rx.send_err.fetch_add(b.count as u64, Ordering::Relaxed);
        }
    }
}

/// The TTL / hop limit packets to `dst` leave with: the system default, whatever the address
/// vector says, as on kernel RoCE (`ib_resolve_eth_dmac` replaces the AH's hop limit with the
/// route's, so kernel rxe sends TTL 64 where `ibv_rc_pingpong` asks for 1).
fn route_hop_limit(dst: IpAddr) -> u8 {
    // Read once per process: UD builds a path per packet.
    static V4: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    static V6: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    let (cell, file) = if dst.is_ipv4() {
        (&V4, "/proc/sys/net/ipv4/ip_default_ttl")
    } else {
        (&V6, "/proc/sys/net/ipv6/conf/default/hop_limit")
    };
    *cell.get_or_init(|| std::fs::read_to_string(file).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(64))
}

/// ECN codepoint ECT(0) (RFC 3168).
const ECT0: u8 = 0b10;

/// Whether a built packet (BTH first) is of an opcode that carries payload: what ECN marks.
fn carries_payload(pkt: &[u8]) -> bool {
    pkt.first().and_then(|&op| crate::wire::opcode::Opcode(op).info()).is_some_and(|i| i.payload)
}

/// Checks a received packet's ICRC with what the backend knows of its IP and UDP headers.
/// `None`: it is wrong. `Some(recovered)`: it is right, and for an IPv4 packet received
/// without its IP header, the identification and DF flag it was computed with.
fn icrc_check(
    d: &Datagram<'_>,
    p: &Packet<'_>,
    solver: &mut icrc::Ipv4IdSolver,
) -> Option<Option<RecoveredIpv4>> {
    let mut udp = [0u8; 8];
    udp[..2].copy_from_slice(&d.src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&d.dst_port.to_be_bytes());
    let udp_len = (8 + d.payload.len()) as u16;
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    if let Some(ip) = d.ip_header {
        // Backends that see the IP header check at full strength.
        return icrc::verify(ip, &udp, d.payload).unwrap_or(false).then_some(None);
    }
    match (d.src.ip(), d.dst) {
        (IpAddr::V4(s), IpAddr::V4(t)) => {
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            ip[9] = 17;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&t.octets());
            // The identification and DF are not visible here: recover them from the CRC.
            match solver.recover(&ip, &udp, p.without_icrc(), p.icrc()) {
                Ok(Some(r)) => Some(Some(r)),
                _ => None,
            }
        }
        (IpAddr::V6(s), IpAddr::V6(t)) => {
            let f = RoceFrameRepr {
                ip: IpRepr::V6 { src: s, dst: t, traffic_class: 0, flow_label: 0, hop_limit: 64 },
                src_port: d.src.port(),
                dst_port: d.dst_port,
                udp_checksum: false,
            };
            (f.icrc(p.without_icrc()).ok() == Some(p.icrc())).then_some(None)
        }
        _ => None,
    }
}

/// The 40-byte GRH area of a UD receive: the packet's IP header as received when the backend
/// sees it; otherwise rebuilt from what a UDP socket shows (addresses, ECN, and the IPv4
/// identification and DF recovered from the ICRC; the TTL/hop limit, DSCP and flow label are
/// not visible there and read 64, 0 and 0). IPv4 headers sit in the last 20 bytes, as ibverbs
/// lays out RoCEv2 GRHs.
fn grh_of(d: &Datagram<'_>, v4: Option<RecoveredIpv4>) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    if let Some(ip) = d.ip_header {
        match ip.first().map(|b| b >> 4) {
            Some(6) if ip.len() >= 40 => g.copy_from_slice(&ip[..40]),
            Some(4) if ip.len() >= 20 => g[20..].copy_from_slice(&ip[..20]),
            _ => {}
        }
        return g;
    }
    let (ip, off) = match (d.src.ip(), d.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let (id, df) = v4.map_or((0, true), |r| (r.id, r.df));
            (IpRepr::V4 { src, dst, tos: d.ecn & 3, ttl: 64, id, df }, 20)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            (IpRepr::V6 { src, dst, traffic_class: d.ecn & 3, flow_label: 0, hop_limit: 64 }, 0)
        }
        _ => return g,
    };
    let f = RoceFrameRepr { ip, src_port: d.src.port(), dst_port: d.dst_port, udp_checksum: false };
    let _ = f.emit_ip_header(&mut g[off..], d.payload.len());
    g
}

/// Pops entries of `heap` that are not `live` until its head is (or it is empty).
fn prune_heap(heap: &mut BinaryHeap<Reverse<(Time, u32)>>, live: impl Fn(Time, u32) -> bool) {
    while let Some(&Reverse((t, qpn))) = heap.peek() {
        if live(t, qpn) {
            break;
        }
        heap.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superseded_deadlines_leave_the_head_of_the_timer_heap() {
        let ms = |n: u64| Time::from_nanos(n * 1_000_000);
        // QP 7's ACK timer re-armed four times (only 40 ms is live), QP 9 at 25 ms, QP 8 gone.
        let mut heap: BinaryHeap<_> =
            [(10, 7), (20, 7), (30, 7), (40, 7), (25, 9), (5, 8)].map(|(t, q)| Reverse((ms(t), q))).into();
        let live = |t: Time, q: u32| (q == 7 && t == ms(40)) || (q == 9 && t == ms(25));
        prune_heap(&mut heap, live);
        // The head is QP 9's live deadline: the engine sleeps until 25 ms, not 5 or 10.
        assert_eq!(heap.peek(), Some(&Reverse((ms(25), 9))));
        // Stale entries behind a live head wait their turn (the heap is not scanned).
        assert_eq!(heap.len(), 3);
        heap.pop();
        prune_heap(&mut heap, live);
        assert_eq!(heap.peek(), Some(&Reverse((ms(40), 7))));
        assert_eq!(heap.len(), 1);
        heap.pop();
        prune_heap(&mut heap, live);
        assert!(heap.is_empty());
    }
}
