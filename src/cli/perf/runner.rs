//! The local side of a perftest run: verbs resources (spec B5, B8), the session hooks that
//! print what perftest prints (B10), and the data phase of every test (B9).
//!
//! Timestamps are nanoseconds from [`Instant`] (plus a constant offset, so that no stamp is 0:
//! perftest's peak search relies on unstamped entries being 0 and every stamp being large);
//! `report.rs` turns them into perftest's numbers with ticks = nanoseconds.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use softroce::verbs::{
    Access, AddressHandle, CompletionQueue, Device, Error as VerbsError, GidIndex, MemoryRegion, Mtu,
    Payload, ProtectionDomain, Psn, Qkey, QpAttrs, QpCaps, QpInitAttr, QpType, Qpn, QueuePair, RecvWr,
    RemoteAddr, Rkey, SendOp, SendWr, UdDest, WcStatus, WorkCompletion,
};

use crate::cli::common::{CliError, Progress, cpu_time, random_psn};
use crate::cli::oob::perftest::{
    Negotiated, PerftestDest, PerftestTest, SessionHooks, buff_size, inc, mtu_bytes,
};
use crate::cli::oob::{PeerState, Role, peek_peer};
use crate::cli::report::{
    AtomicType, BwParams, BwReport, ConnectionType, LAT_DURATION_HEADER, LAT_HEADER, LatDurationReport,
    LatReport, NS_PER_SEC, NS_PER_USEC, RESULT_LINE, Side, TestInfo, TestType, Verb, compute_bw, compute_lat,
    compute_lat_duration, format_address_line, format_bw_row, format_gid_line, format_lat_duration_row,
    format_lat_row, format_test_info,
};

use super::cm::{CmCtx, GRH, TestQp};
use super::params::{DurationMode, Params};

/// perftest's `DEF_QKEY`: the Q_Key of UD QPs connected over the TCP exchange.
const DEF_QKEY: u32 = 0x1111_1111;

/// Added to every timestamp (see the module documentation).
const TICK_OFFSET: u64 = 1_000_000_000;
/// perftest's `CTX_POLL_BATCH`.
const POLL_BATCH: usize = 16;
/// How long a waiting loop spins before it sleeps (the engine threads need the CPU).
const SPIN: Duration = Duration::from_micros(20);
/// How long a loop waiting for a completion polls before it sleeps on a device with inline
/// progress: there the polling thread is the one that moves packets (the engine thread sleeps
/// meanwhile), as in perftest's busy-polling loops.
const SPIN_INLINE: Duration = Duration::from_millis(2);
/// How often a waiting loop looks at the side channel for a peer that closed or spoke.
const PEEK_EVERY: Duration = Duration::from_millis(50);
/// How long a receiver waits for more messages once its peer has finished sending (it wrote
/// its next side-channel message), and any wait goes on after the peer closed the channel:
/// what is still on its way arrives well within this.
const AFTER_PEER_DONE: Duration = Duration::from_millis(2000);
/// `ATOMIC_ADD_VALUE`.
const ATOMIC_ADD: u64 = 1;

/// Where the human-readable report goes: stdout, or stderr when stdout carries JSON.
#[derive(Clone, Copy, Debug)]
pub struct Out {
    to_stderr: bool,
}

impl Out {
    /// The report sink for `--json` (`true`: stderr) or not.
    pub fn new(json: bool) -> Out {
        Out { to_stderr: json }
    }

    /// Prints `text` as is.
    pub fn text(&self, text: &str) {
        // A closed pipe must not abort the run: ignore write errors.
        if self.to_stderr {
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
        } else {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(text.as_bytes());
            let _ = o.flush();
        }
    }

    /// Prints one line.
    pub fn line(&self, line: &str) {
        self.text(&format!("{line}\n"));
    }
}

/// perftest's buffer geometry (spec B5) for the negotiated page and cache-line sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// max(page size) of both sides.
    pub cycle_buffer: u64,
    /// max(cache line) of both sides.
    pub cache_line: u64,
    /// `BUFF_SIZE(size, cycle_buffer)`: the per-QP region (and `vaddr` stride).
    pub buff: u64,
    /// `INC(BUFF_SIZE, cache_line)`: perftest's `send_qp_buff_size` (receive region stride).
    pub qp_buff: u64,
    /// Number of QPs.
    pub qps: u64,
}

impl Layout {
    /// The layout for buffer size `size` (`MAX_SIZE` with `-a`) and `qps` QPs.
    pub fn new(size: u64, qps: u64, cycle_buffer: u64, cache_line: u64) -> Layout {
        let buff = buff_size(size, cycle_buffer);
        Layout { cycle_buffer, cache_line, buff, qp_buff: inc(buff, cache_line), qps }
    }

    /// The MR size: `INC(BUFF_SIZE, cache_line) * 2 * N`.
    pub fn mr_len(&self) -> u64 {
        self.qp_buff * 2 * self.qps
    }

    /// Offset of QP `i`'s local (send / READ destination) region: `buf[i]`.
    pub fn local(&self, i: usize) -> u64 {
        i as u64 * self.buff
    }

    /// Offset of QP `i`'s remote-target region, what `vaddr` points at.
    pub fn target(&self, i: usize) -> u64 {
        (self.qps + i as u64) * self.buff
    }

    /// Offset of QP `i`'s receive region (send tests).
    pub fn recv(&self, i: usize) -> u64 {
        (self.qps + i as u64) * self.qp_buff
    }

    /// Address cycling for message `k` of `size` bytes: perftest advances by
    /// `INC(size, cache_line)` and wraps every `cycle_buffer / INC` messages, when
    /// `size <= cycle_buffer / 2`.
    pub fn cycle(&self, size: u64, k: u64) -> u64 {
        if size > self.cycle_buffer / 2 {
            return 0;
        }
        let step = inc(size, self.cache_line);
        let slots = (self.cycle_buffer / step).max(1);
        (k % slots) * step
    }
}

/// A result row, kept for `--json`.
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    /// A BW row; `source` is `local`, `peer` (the non-duplex server prints the client's
    /// report) or `combined` (duplex: own + peer).
    Bw {
        /// Whose numbers.
        source: &'static str,
        /// The numbers.
        report: BwReport,
    },
    /// A latency row.
    Lat(LatReport),
    /// A `-D` latency row.
    LatDuration(LatDurationReport),
}

/// The verbs objects of a run.
struct Resources {
    /// With `-R`, the rdma_cm ids of the QPs (dropped first: that disconnects them).
    ids: Vec<softroce::verbs::cm::CmId>,
    /// UD: where each QP sends (and the address handles that must outlive the sends).
    ud: Vec<Option<UdDest>>,
    _ahs: Vec<AddressHandle>,
    _cm_peers: Vec<super::cm::UdPeer>,
    qps: Vec<Arc<QueuePair>>,
    send_cq: CompletionQueue,
    recv_cq: Option<CompletionQueue>,
    mr: MemoryRegion,
    pd: ProtectionDomain,
}

impl Resources {
    fn recv_cq(&self) -> &CompletionQueue {
        self.recv_cq.as_ref().unwrap_or(&self.send_cq)
    }
}

/// `-D` phases (perftest's START, SAMPLE, STOP_SAMPLE and END states).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    Warmup = 0,
    Sample = 1,
    Cooldown = 2,
    End = 3,
}

/// The `-D` timer: samples between `margin` and `secs - margin` after `start`. A timer
/// thread moves the phase on at each boundary (perftest flips its state from `SIGALRM`), so
/// that the data loops read an atomic instead of the clock on every iteration: a
/// `clock_gettime` per iteration was 5 % of a 64 B `send-bw` client's CPU.
#[derive(Debug)]
struct Clock {
    start: Instant,
    margin: Duration,
    total: Duration,
    /// The current [`Phase`] as its `u8`, set by the timer thread (`None`: the thread could
    /// not be started, and [`Clock::phase`] reads the clock).
    phase: Option<Arc<AtomicU8>>,
}

impl Clock {
    fn new(d: DurationMode) -> Clock {
        let start = Instant::now();
        let (margin, total) = (Duration::from_secs(d.margin), Duration::from_secs(d.secs));
        let mut c = Clock { start, margin, total, phase: None };
        let phase = Arc::new(AtomicU8::new(c.phase_at(Duration::ZERO) as u8));
        let p = phase.clone();
        let bounds =
            [(margin, Phase::Sample), (total.saturating_sub(margin), Phase::Cooldown), (total, Phase::End)];
        let timer = std::thread::Builder::new().name("perf-clock".into()).spawn(move || {
            for (at, next) in bounds {
                loop {
                    let e = start.elapsed();
                    if e >= at {
                        break;
                    }
                    std::thread::sleep(at - e);
                }
                // (A phase never goes back: boundaries that coincide leave the later one.)
                p.fetch_max(next as u8, Ordering::Release);
                if Arc::strong_count(&p) == 1 {
                    return;
                }
            }
        });
        if timer.is_ok() {
            c.phase = Some(phase);
        }
        c
    }

    /// The phase `e` after the start.
    fn phase_at(&self, e: Duration) -> Phase {
        if e < self.margin {
            Phase::Warmup
        } else if e < self.total.saturating_sub(self.margin) {
            Phase::Sample
        } else if e < self.total {
            Phase::Cooldown
        } else {
            Phase::End
        }
    }

    fn phase(&self) -> Phase {
        match &self.phase {
            Some(p) => match p.load(Ordering::Acquire) {
                0 => Phase::Warmup,
                1 => Phase::Sample,
                2 => Phase::Cooldown,
                _ => Phase::End,
            },
            None => self.phase_at(self.start.elapsed()),
        }
    }
}

/// The phase of an optional clock (not started: warm-up).
fn phase(c: &Option<Clock>) -> Phase {
    c.as_ref().map_or(Phase::Warmup, Clock::phase)
}

/// Waiting without starving the engine threads: spin briefly, then sleep on the CQ (or yield,
/// for memory polling); with `-e`, always sleep on the CQ. Gives up after `--peer-timeout`
/// without progress, or at once when the peer closes the side channel.
struct Idle {
    events: bool,
    /// How long [`Idle::wait_cq`] polls before it sleeps.
    spin_cq: Duration,
    since: Option<Instant>,
    last_progress: Instant,
    /// Progress was made since `last_progress` was set: the next clock reading (a wait's or
    /// [`Idle::peer_done`]'s) moves it, so that a poll that finds completions reads no clock.
    progressed: bool,
    /// `--peer-timeout` (`None`: wait forever).
    stall: Option<Duration>,
    /// The side channel, looked at (never read) every [`PEEK_EVERY`].
    link: Option<std::net::TcpStream>,
    last_peek: Instant,
    peer: PeerState,
}

/// Why a wait ended.
enum Stop {
    /// Nothing happened for `--peer-timeout`.
    Stalled(Duration),
    /// The peer closed the side channel.
    PeerClosed,
}

impl Idle {
    fn new(events: bool, inline: bool, stall: Option<Duration>, link: Option<std::net::TcpStream>) -> Idle {
        let now = Instant::now();
        let spin_cq = if inline { SPIN_INLINE } else { SPIN };
        Idle {
            events,
            spin_cq,
            since: None,
            last_progress: now,
            progressed: false,
            stall,
            link,
            last_peek: now,
            peer: PeerState::Quiet,
        }
    }

    fn progress(&mut self) {
        self.since = None;
        self.progressed = true;
    }

    /// The last progress was made by `now` (a fresh clock reading).
    fn settle(&mut self, now: Instant) {
        if std::mem::take(&mut self.progressed) {
            self.last_progress = now;
        }
    }

    /// What the peer did on the side channel, looked at every [`PEEK_EVERY`].
    fn peer(&mut self, now: Instant) -> PeerState {
        if self.peer == PeerState::Quiet
            && now.saturating_duration_since(self.last_peek) >= PEEK_EVERY
            && let Some(link) = &self.link
        {
            self.last_peek = now;
            self.peer = peek_peer(link);
        }
        self.peer
    }

    /// True once the peer has finished its part of the run (it wrote its next message) and
    /// nothing has arrived for [`AFTER_PEER_DONE`]: the rest is not coming.
    fn peer_done(&mut self) -> bool {
        let now = Instant::now();
        self.settle(now);
        self.peer(now) == PeerState::Spoke
            && now.saturating_duration_since(self.last_progress) >= AFTER_PEER_DONE
    }

    /// How long this wait has lasted (the clock read once).
    fn check(&mut self) -> Result<Duration, Stop> {
        let now = Instant::now();
        self.settle(now);
        if let Some(stall) = self.stall
            && now.duration_since(self.last_progress) > stall
        {
            return Err(Stop::Stalled(stall));
        }
        // A closed channel ends the wait once nothing has progressed for a moment: at the very
        // end of a latency test the peer may exit (and close) while this side's last
        // acknowledgement is still on its way.
        if self.peer(now) == PeerState::Closed && now.duration_since(self.last_progress) >= AFTER_PEER_DONE {
            return Err(Stop::PeerClosed);
        }
        Ok(now.saturating_duration_since(*self.since.get_or_insert(now)))
    }

    fn wait_cq(&mut self, cq: &CompletionQueue) -> Result<(), CliError> {
        let waited = self.check().map_err(|s| stalled(s, "a completion"))?;
        if self.events {
            cq.wait(Duration::from_millis(10))?;
        } else if waited < self.spin_cq {
            std::hint::spin_loop();
        } else {
            cq.wait(Duration::from_millis(1))?;
        }
        Ok(())
    }

    fn wait_mem(&mut self) -> Result<(), CliError> {
        let e = self.check().map_err(|s| stalled(s, "the peer's RDMA WRITE"))?;
        if e < SPIN {
            std::hint::spin_loop();
        } else if e < Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }
}

fn stalled(stop: Stop, what: &str) -> CliError {
    match stop {
        Stop::Stalled(stall) => CliError::network(format!(
            "no progress for {} s while waiting for {what}: the peer stopped or is unreachable \
             (check its output, and that both sides run the same test with the same -s/-n/-q/-a; \
             --peer-timeout sets the limit)",
            stall.as_secs()
        )),
        Stop::PeerClosed => CliError::network(format!(
            "the peer closed the side channel while this side waited for {what}: it exited or was \
             stopped (see its output)"
        )),
    }
}

/// The one-line report of an error completion, with what usually causes it.
fn wc_error(wc: &WorkCompletion, side: &str, posted: u64, done: u64) -> CliError {
    let hint = match wc.status {
        WcStatus::RetryExcErr => {
            "the peer did not acknowledge: check that it is reachable over RoCEv2 (UDP 4791), that the \
             GID/address (-d, -x) is right on both sides and that the peer is still running"
        }
        WcStatus::RnrRetryExcErr => {
            "the peer had no receive posted: both sides must run the same test with the same -n/-q/-a"
        }
        WcStatus::RemAccessErr | WcStatus::RemInvReqErr => {
            "the peer refused the access: both sides must run the same test with the same -s/-a/-q"
        }
        WcStatus::LocLenErr => "a message was longer than the receive buffer: give both sides the same -s/-a",
        WcStatus::WrFlushErr => "the QP was already in the error state after an earlier failure",
        _ => "see the peer's output",
    };
    CliError::failed(format!(
        "completion with error at {side}: {} (status {}) on QP {} after {posted} posted and {done} completed; {hint}",
        wc.status,
        wc.status.code(),
        wc.wr_id
    ))
}

/// What a latency run measured.
enum LatRun {
    /// Iterations mode: the post timestamps.
    Iters(Vec<u64>),
    /// `-D` mode: iterations counted and the sample window in ticks.
    Duration { counted: u64, elapsed: u64 },
}

/// The session hooks and the data phase of one `softroce perf` run.
pub struct Runner<'a> {
    p: &'a Params,
    dev: Device,
    out: Out,
    gid_index: GidIndex,
    out_reads: u32,
    inline_size: u32,
    epoch: Instant,
    res: Option<Resources>,
    layout: Layout,
    local: Vec<PerftestDest>,
    remote: Vec<PerftestDest>,
    mtu: u8,
    /// Receives posted so far per QP (the next receive's index for address cycling).
    recv_posted: Vec<u64>,
    own: Option<BwReport>,
    /// Result rows, for `--json`.
    pub rows: Vec<Row>,
    cpu_start: Option<(Duration, Instant)>,
    /// This side's CPU time and wall time over the measurement window (see [`Runner::finish`]).
    pub cpu: Option<(Duration, Duration)>,
    /// The side channel, only looked at during the run (see [`Idle`]).
    link: Option<std::net::TcpStream>,
    /// Messages received and expected, when a receiver ended short because its peer had
    /// finished sending.
    short: Option<(u64, u64)>,
    /// `-R`: the RDMA CM context that connects the test QPs.
    cm: Option<&'a CmCtx>,
    /// The message size (UD: lowered to the MTU when `-s` was not given).
    size: u64,
}

impl<'a> Runner<'a> {
    /// A runner for `p` on `dev`, sending from GID `gid_index`, accepting `out_reads`
    /// outstanding READs/atomics as responder and sending up to `inline_size` bytes inline;
    /// `link` is (a clone of) the side channel, looked at while waiting.
    pub fn new(
        p: &'a Params,
        dev: Device,
        out: Out,
        gid_index: GidIndex,
        out_reads: u32,
        inline_size: u32,
        link: Option<std::net::TcpStream>,
    ) -> Self {
        Runner {
            cm: None,
            size: p.size,
            p,
            dev,
            out,
            gid_index,
            out_reads,
            inline_size,
            epoch: Instant::now(),
            res: None,
            layout: Layout::default(),
            local: Vec::new(),
            remote: Vec::new(),
            mtu: 0,
            recv_posted: Vec::new(),
            own: None,
            rows: Vec::new(),
            cpu_start: None,
            cpu: None,
            link,
            short: None,
        }
    }

    /// The same connecting its test QPs through the RDMA CM (`-R`).
    pub fn with_cm(self, cm: &'a CmCtx) -> Self {
        Runner { cm: Some(cm), ..self }
    }

    /// The error a run that ended short returns after its report: messages lost (UC), or a
    /// peer that sent fewer than this side expects.
    pub fn lost(&self) -> Option<CliError> {
        let (got, want) = self.short?;
        let drops = self.dev.counters().map_or(0, |c| c.rcvd_socket_drops);
        let why = if self.p.connection != ConnectionType::Rc {
            let mut why = format!(
                "{} does not retransmit: a message with a lost packet is lost, and the report above \
                 counts the received ones",
                self.p.connection.name()
            );
            if drops > 0 {
                why += &format!(
                    "; this side's receive socket dropped {drops} packets (rcvd_socket_drops): the sender \
                     outran it{}",
                    match self.dev.socket_receive_buffer() {
                        Some(b) => format!(
                            " and its {} KiB buffer (an unprivileged process gets at most twice \
                             net.core.rmem_max; as root, or after sysctl -w net.core.rmem_max=33554432, it gets the 32 MiB softroce asks for)",
                            b / 1024
                        ),
                        None => String::new(),
                    }
                );
            }
            why
        } else {
            "the peer finished first: do both sides use the same -n and -q?".to_string()
        };
        Some(CliError::failed(format!("received {got} of {want} messages, {} missing ({why})", want - got)))
    }

    /// A waiting helper with `--peer-timeout` and a look at the side channel.
    fn idle(&self) -> Idle {
        Idle::new(
            self.p.events,
            self.dev.inline_progress(),
            self.p.wait.idle(),
            self.link.as_ref().and_then(|l| l.try_clone().ok()),
        )
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Ends the measurement window that started when the QPs were connected (at the closing
    /// `RESULT_LINE`, or now if that was not printed); later calls do nothing.
    pub fn finish(&mut self) {
        if let Some((cpu0, wall0)) = self.cpu_start.take() {
            self.cpu = Some((cpu_time().saturating_sub(cpu0), wall0.elapsed()));
        }
    }

    fn ticks(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64 + TICK_OFFSET
    }

    fn now(&self) -> u64 {
        self.ticks(Instant::now())
    }

    fn res(&self) -> Result<&Resources, CliError> {
        self.res.as_ref().ok_or_else(|| CliError::failed("internal error: no verbs resources"))
    }

    fn is_client(&self) -> bool {
        self.p.role == Role::Client
    }

    fn ud(&self) -> bool {
        self.p.connection == ConnectionType::Ud
    }

    /// The message size of run `round`.
    fn round_size(&self, round: usize) -> u64 {
        if self.p.all { self.p.round_size(round) } else { self.size }
    }

    /// With `-R`: the client disconnects its test connections and waits a moment for the
    /// peer's answer (`rdma_cm_disconnect_nodes`); then (both sides) the ids go.
    pub fn close_cm(&mut self) {
        if let (Some(cm), Some(r)) = (self.cm, self.res.as_mut()) {
            if self.p.role == Role::Client {
                cm.disconnect(&mut r.ids);
            }
            r.ids.clear();
        }
    }

    // --- posting ------------------------------------------------------------------------------

    /// Posts QP `qi`'s work request: `len` bytes at local offset `local`, to the peer's `vaddr +
    /// remote` for one-sided operations.
    fn post(&self, qi: usize, local: u64, remote: u64, len: u64, signaled: bool) -> Result<(), CliError> {
        let r = self.res()?;
        let peer = self.remote.get(qi).copied().unwrap_or_default();
        let target = RemoteAddr { addr: peer.vaddr.wrapping_add(remote), rkey: Rkey::new(peer.rkey) };
        let op = match self.p.verb() {
            Verb::Write => SendOp::RdmaWrite(target),
            Verb::Read => SendOp::RdmaRead(target),
            Verb::Send => SendOp::Send,
            Verb::Atomic => match self.p.atomic_type {
                AtomicType::FetchAndAdd => SendOp::FetchAdd { remote: target, add: ATOMIC_ADD },
                AtomicType::CmpAndSwap => SendOp::CompareSwap { remote: target, compare: 0, swap: 0 },
            },
        };
        let mut wr = SendWr::new(qi as u64, op, &[r.mr.sge(local as usize, len as u32)]);
        wr.signaled = signaled;
        if matches!(self.p.verb(), Verb::Send | Verb::Write) && len <= u64::from(self.inline_size) {
            let mut bytes = vec![0u8; len as usize];
            r.mr.read(local as usize, &mut bytes).map_err(VerbsError::from)?;
            wr.payload = Payload::Inline(bytes.into_boxed_slice());
        }
        if let Some(Some(dest)) = r.ud.get(qi) {
            wr.ud = Some(*dest);
        }
        let qp = r.qps.get(qi).ok_or_else(|| CliError::failed(format!("internal error: no QP {qi}")))?;
        qp.post_send(wr).map_err(|e| CliError::failed(format!("couldn't post send on QP {qi}: {e}")))
    }

    /// Posts QP `qi`'s next receive of `len` bytes, cycling through its receive region like
    /// perftest (BW tests) or always at its start (latency tests).
    fn post_recv(&mut self, qi: usize, len: u64) -> Result<(), CliError> {
        // UD receives start with the 40-byte GRH (perftest's `UD_ADDITION`).
        let len = if self.ud() { len + GRH } else { len };
        let k = self.recv_posted[qi];
        let off = self.layout.recv(qi) + if self.p.test.is_bw() { self.layout.cycle(len, k) } else { 0 };
        let r = self.res()?;
        let wr = RecvWr::new(qi as u64, &[r.mr.sge(off as usize, len as u32)]);
        r.qps[qi]
            .post_recv(wr)
            .map_err(|e| CliError::failed(format!("couldn't post receive on QP {qi}: {e}")))?;
        self.recv_posted[qi] = k + 1;
        Ok(())
    }

    // --- BW data phase ------------------------------------------------------------------------

    /// perftest's `run_iter_bw` (client, and both sides of duplex write/read/atomic).
    fn bw_client(&mut self, size: u64) -> Result<BwReport, CliError> {
        let p = self.p;
        let n = p.num_qps as usize;
        let iters = p.iters;
        let tot = iters * n as u64;
        let dur = p.duration.is_some();
        let no_peak = p.no_peak;
        let cq_mod = u64::from(p.cq_mod);
        let tx = u64::from(p.tx_depth);
        let samples = if no_peak { 1 } else { tot as usize };
        let (mut tposted, mut tcompleted) = (vec![0u64; samples], vec![0u64; samples]);
        let (mut scnt, mut ccnt) = (vec![0u64; n], vec![0u64; n]);
        let (mut totscnt, mut totccnt, mut counted) = (0u64, 0u64, 0u64);
        let clock = p.duration.map(Clock::new);
        let mut idle = self.idle();
        let mut progress = Progress::new("msgs");
        let mut wcs = [WorkCompletion::default(); POLL_BATCH];
        if !dur && no_peak {
            tposted[0] = self.now();
        }
        while totscnt < tot || totccnt < tot || (dur && phase(&clock) != Phase::End) {
            let mut posted = false;
            for qi in 0..n {
                while (scnt[qi] < iters || dur) && scnt[qi] < tx + ccnt[qi] {
                    let k = scnt[qi];
                    let signaled = k % cq_mod == cq_mod - 1 || (!dur && k == iters - 1);
                    if !no_peak {
                        tposted[totscnt as usize] = self.now();
                    }
                    if dur && phase(&clock) == Phase::End {
                        break;
                    }
                    let off = self.layout.cycle(size, k);
                    self.post(qi, self.layout.local(qi) + off, off, size, signaled)?;
                    scnt[qi] += 1;
                    totscnt += 1;
                    posted = true;
                }
            }
            if totccnt < tot || (dur && totccnt < totscnt) {
                let r = self.res()?;
                let ne = r.send_cq.poll(&mut wcs)?;
                for wc in &wcs[..ne] {
                    if wc.status != WcStatus::Success {
                        return Err(wc_error(wc, "client", totscnt, totccnt));
                    }
                    if let Some(c) = ccnt.get_mut(wc.wr_id as usize) {
                        *c += cq_mod;
                    }
                    totccnt += cq_mod;
                    if !no_peak {
                        tcompleted[(totccnt.min(tot) - 1) as usize] = self.now();
                    }
                    if dur && phase(&clock) == Phase::Sample {
                        counted += cq_mod;
                    }
                }
                if ne > 0 {
                    idle.progress();
                } else if !posted {
                    idle.wait_cq(&r.send_cq)?;
                }
            } else if !posted {
                std::thread::yield_now();
            }
            progress.tick(totccnt.min(totscnt), tot, totccnt.min(totscnt) * size);
        }
        progress.finish();
        if !dur && no_peak {
            tcompleted[0] = self.now();
        }
        if let Some(c) = clock {
            tposted[0] = self.ticks(c.start + c.margin);
            tcompleted[0] = self.ticks(c.start + c.total - c.margin);
        }
        self.bw_report(size, if dur { counted } else { tot }, &tposted, &tcompleted)
    }

    /// perftest's `run_iter_bw_server` (send_bw server): count `iters * N` receives.
    fn bw_server(&mut self, size: u64) -> Result<BwReport, CliError> {
        let p = self.p;
        let n = p.num_qps as usize;
        let iters = p.iters;
        let tot = iters * n as u64;
        let dur = p.duration;
        let (mut t0, mut t1) = (0u64, 0u64);
        let mut clock: Option<Clock> = None;
        let (mut rcnt, mut counted) = (0u64, 0u64);
        let mut first = true;
        let mut idle = self.idle();
        let mut progress = Progress::new("msgs");
        let mut wcs = [WorkCompletion::default(); POLL_BATCH];
        while rcnt < tot || (dur.is_some() && phase(&clock) != Phase::End) {
            if dur.is_some() && phase(&clock) == Phase::End {
                break;
            }
            let ne = self.res()?.recv_cq().poll(&mut wcs)?;
            if ne > 0 && first {
                first = false;
                match dur {
                    Some(d) => clock = Some(Clock::new(d)),
                    None => t0 = self.now(),
                }
            }
            if ne > 0 {
                t1 = self.now();
            }
            for wc in &wcs[..ne] {
                if wc.status != WcStatus::Success {
                    return Err(wc_error(wc, "server", self.recv_posted.iter().sum(), rcnt));
                }
                rcnt += 1;
                if phase(&clock) == Phase::Sample {
                    counted += 1;
                }
                let qi = wc.wr_id as usize;
                if qi < n && (dur.is_some() || self.recv_posted[qi] < iters) {
                    self.post_recv(qi, size)?;
                }
            }
            if ne > 0 {
                idle.progress();
            } else if dur.is_none() && idle.peer_done() {
                // The client has sent everything and the rest is not coming (UC loss, or a
                // smaller -n there): report what arrived instead of waiting forever.
                self.short = Some((rcnt, tot));
                break;
            } else {
                let r = self.res()?;
                idle.wait_cq(r.recv_cq()).map_err(|e| CliError {
                    msg: format!("{} (received {rcnt} of {tot} messages)", e.msg),
                    ..e
                })?;
            }
            progress.tick(rcnt, tot, rcnt * size);
        }
        progress.finish();
        if let Some(c) = clock {
            t0 = self.ticks(c.start + c.margin);
            t1 = self.ticks(c.start + c.total - c.margin);
        } else if dur.is_none() && self.short.is_none() {
            t1 = self.now();
        }
        self.bw_report(size, if dur.is_some() { counted } else { rcnt }, &[t0], &[t1])
    }

    /// perftest's `run_iter_bi` (duplex send_bw): send and receive at once; the server starts
    /// sending at its first receive.
    fn bw_duplex_send(&mut self, size: u64) -> Result<BwReport, CliError> {
        let p = self.p;
        let n = p.num_qps as usize;
        let iters = p.iters;
        let tot = iters * n as u64;
        let dur = p.duration;
        let no_peak = p.no_peak;
        let cq_mod = u64::from(p.cq_mod);
        let tx = u64::from(p.tx_depth);
        let samples = if no_peak { 1 } else { tot as usize };
        let (mut tposted, mut tcompleted) = (vec![0u64; samples], vec![0u64; samples]);
        let (mut scnt, mut ccnt) = (vec![0u64; n], vec![0u64; n]);
        let (mut totscnt, mut totccnt, mut totrcnt, mut counted) = (0u64, 0u64, 0u64, 0u64);
        let mut before_first_rx = !self.is_client();
        let mut clock = if self.is_client() { dur.map(Clock::new) } else { None };
        let mut idle = self.idle();
        let mut progress = Progress::new("msgs");
        let mut wcs = [WorkCompletion::default(); 64];
        if no_peak {
            tposted[0] = self.now();
        }
        while (dur.is_some() && phase(&clock) != Phase::End) || totccnt < tot || totrcnt < tot {
            let mut busy = false;
            for qi in 0..n {
                while !before_first_rx && (scnt[qi] < iters || dur.is_some()) && scnt[qi] < tx + ccnt[qi] {
                    let k = scnt[qi];
                    let signaled = k % cq_mod == cq_mod - 1 || (dur.is_none() && k == iters - 1);
                    if !no_peak {
                        tposted[totscnt as usize] = self.now();
                    }
                    if dur.is_some() && phase(&clock) == Phase::End {
                        break;
                    }
                    let off = self.layout.cycle(size, k);
                    self.post(qi, self.layout.local(qi) + off, 0, size, signaled)?;
                    scnt[qi] += 1;
                    totscnt += 1;
                    busy = true;
                }
            }
            let ne = self.res()?.recv_cq().poll(&mut wcs)?;
            if ne > 0 && before_first_rx {
                before_first_rx = false;
                clock = dur.map(Clock::new);
            }
            for wc in &wcs[..ne] {
                if wc.status != WcStatus::Success {
                    return Err(wc_error(wc, "receiver", totscnt, totrcnt));
                }
                totrcnt += 1;
                if phase(&clock) == Phase::Sample {
                    counted += 1;
                }
                let qi = wc.wr_id as usize;
                if qi < n && (dur.is_some() || self.recv_posted[qi] < iters) {
                    self.post_recv(qi, size)?;
                }
            }
            busy |= ne > 0;
            let ne = self.res()?.send_cq.poll(&mut wcs[..POLL_BATCH])?;
            for wc in &wcs[..ne] {
                if wc.status != WcStatus::Success {
                    return Err(wc_error(wc, "sender", totscnt, totccnt));
                }
                if let Some(c) = ccnt.get_mut(wc.wr_id as usize) {
                    *c += cq_mod;
                }
                totccnt += cq_mod;
                if !no_peak {
                    tcompleted[(totccnt.min(tot) - 1) as usize] = self.now();
                }
                if phase(&clock) == Phase::Sample {
                    counted += cq_mod;
                }
            }
            busy |= ne > 0;
            if busy {
                idle.progress();
            } else if dur.is_none() && totccnt >= tot && totrcnt < tot && idle.peer_done() {
                // Both sides have sent everything and the rest is not coming (UC loss).
                self.short = Some((totrcnt, tot));
                break;
            } else {
                let r = self.res()?;
                idle.check().map_err(|s| stalled(s, "a completion"))?;
                if idle.events || idle.since.is_some_and(|s| s.elapsed() >= SPIN) {
                    r.recv_cq().wait(Duration::from_micros(200))?;
                }
            }
            progress.tick(totccnt.min(totscnt) + totrcnt, 2 * tot, (totccnt.min(totscnt) + totrcnt) * size);
        }
        progress.finish();
        if dur.is_none() && no_peak {
            tcompleted[0] = self.now();
        }
        if let Some(c) = clock {
            tposted[0] = self.ticks(c.start + c.margin);
            tcompleted[0] = self.ticks(c.start + c.total - c.margin);
        }
        self.bw_report(size, if dur.is_some() { counted } else { tot }, &tposted, &tcompleted)
    }

    fn bw_report(
        &self,
        size: u64,
        msgs: u64,
        tposted: &[u64],
        tcompleted: &[u64],
    ) -> Result<BwReport, CliError> {
        let p = self.p;
        let params = BwParams {
            size,
            msgs,
            cq_mod: u64::from(p.cq_mod),
            post_list: 1,
            no_peak: p.no_peak,
            units: p.units,
            ticks_per_sec: NS_PER_SEC,
        };
        compute_bw(&params, tposted, tcompleted)
            .map_err(|e| CliError::failed(format!("cannot compute the report: {e}")))
    }

    // --- latency data phase -------------------------------------------------------------------

    /// perftest's `run_iter_lat_write`: ping-pong through memory, the server first. Each
    /// write's last byte is the sender's 8-bit iteration counter; the receiver polls for it.
    fn lat_write(&mut self, size: u64) -> Result<LatRun, CliError> {
        let p = self.p;
        let iters = p.iters;
        let dur = p.duration.is_some();
        let server = !self.is_client();
        let post_off = (size - 1) as usize;
        let poll_off = (self.layout.target(0) + size - 1) as usize;
        let clock = p.duration.map(Clock::new);
        let mut tposted = vec![0u64; iters as usize];
        let (mut scnt, mut ccnt, mut rcnt, mut counted) = (0u64, 0u64, 0u64, 0u64);
        let mut idle = self.idle();
        // Both applications poll memory, not the library: every WRITE is executed, and its ACK
        // sent, by the peer's engine thread. Polling for that ACK longer than briefly only
        // keeps a CPU from the engine threads (on two cores measured: typical 1-2 ms instead of
        // 85 us under load).
        idle.spin_cq = SPIN;
        let mut progress = Progress::new("iters");
        while scnt < iters || ccnt < iters || rcnt < iters || (dur && phase(&clock) != Phase::End) {
            if (rcnt < iters || dur) && !(scnt < 1 && server) {
                rcnt += 1;
                loop {
                    if self.res()?.mr.load_u8(poll_off).map_err(VerbsError::from)? == rcnt as u8
                        || (dur && phase(&clock) == Phase::End)
                    {
                        break;
                    }
                    idle.wait_mem()?;
                }
                idle.progress();
            }
            if scnt < iters || dur {
                if !dur {
                    tposted[scnt as usize] = self.now();
                }
                scnt += 1;
                self.res()?.mr.write(post_off, &[scnt as u8]).map_err(VerbsError::from)?;
                self.post(0, 0, 0, size, true)?;
            }
            if dur && phase(&clock) == Phase::End {
                break;
            }
            if ccnt < iters || dur {
                let wc = self.wait_one_send(&mut idle)?;
                if wc.status != WcStatus::Success {
                    return Err(wc_error(&wc, if server { "server" } else { "client" }, scnt, ccnt));
                }
                ccnt += 1;
                if phase(&clock) == Phase::Sample {
                    counted += 1;
                }
            }
            progress.tick(ccnt, iters, ccnt * size);
        }
        progress.finish();
        Ok(self.lat_run(tposted, clock, counted))
    }

    /// perftest's `run_iter_lat` (read_lat / atomic_lat client): one signaled READ or atomic
    /// at a time, always to the peer's `vaddr`.
    fn lat_read_atomic(&mut self, size: u64) -> Result<LatRun, CliError> {
        let p = self.p;
        let iters = p.iters;
        let dur = p.duration.is_some();
        let clock = p.duration.map(Clock::new);
        let mut tposted = vec![0u64; iters as usize];
        let (mut scnt, mut counted) = (0u64, 0u64);
        let mut idle = self.idle();
        let mut progress = Progress::new("iters");
        while scnt < iters || (dur && phase(&clock) != Phase::End) {
            if !dur {
                tposted[scnt as usize] = self.now();
                scnt += 1;
            }
            self.post(0, 0, 0, size, true)?;
            if dur && phase(&clock) == Phase::End {
                break;
            }
            let wc = self.wait_one_send(&mut idle)?;
            if wc.status != WcStatus::Success {
                return Err(wc_error(&wc, "client", scnt, scnt));
            }
            if phase(&clock) == Phase::Sample {
                counted += 1;
            }
            progress.tick(scnt, iters, scnt * size);
        }
        progress.finish();
        Ok(self.lat_run(tposted, clock, counted))
    }

    /// perftest's `run_iter_lat_send`: SEND ping-pong, the client first; receives are reposted
    /// while more messages are due.
    fn lat_send(&mut self, size: u64) -> Result<LatRun, CliError> {
        let p = self.p;
        let iters = p.iters;
        let dur = p.duration;
        let client = self.is_client();
        let cq_mod = u64::from(p.cq_mod);
        let per_qp = u64::from(p.rx_depth);
        let mut clock: Option<Clock> = None;
        let mut tposted = vec![0u64; iters as usize];
        let (mut scnt, mut rcnt, mut counted) = (0u64, 0u64, 0u64);
        let mut idle = self.idle();
        let mut progress = Progress::new("iters");
        let running = |scnt: u64, rcnt: u64, clock: &Option<Clock>| {
            scnt < iters || rcnt < iters || (dur.is_some() && phase(clock) != Phase::End)
        };
        while running(scnt, rcnt, &clock) {
            if (rcnt < iters || dur.is_some()) && !(scnt < 1 && client) {
                loop {
                    let wc = self.res()?.recv_cq().poll_one()?;
                    if dur.is_some() && phase(&clock) == Phase::End {
                        break;
                    }
                    let Some(wc) = wc else {
                        let r = self.res()?;
                        idle.wait_cq(r.recv_cq())?;
                        continue;
                    };
                    idle.progress();
                    if clock.is_none()
                        && let Some(d) = dur
                    {
                        clock = Some(Clock::new(d));
                    }
                    if wc.status != WcStatus::Success {
                        return Err(wc_error(&wc, "receiver", scnt, rcnt));
                    }
                    rcnt += 1;
                    if phase(&clock) == Phase::Sample {
                        counted += 1;
                    }
                    if dur.is_some() || rcnt + per_qp <= iters {
                        self.post_recv(0, size)?;
                    }
                    break;
                }
            }
            if scnt < iters || (dur.is_some() && phase(&clock) != Phase::End) {
                if dur.is_none() {
                    tposted[scnt as usize] = self.now();
                }
                scnt += 1;
                let signaled = scnt % cq_mod == 0 || (dur.is_none() && scnt == iters);
                if dur.is_some() && phase(&clock) == Phase::End {
                    break;
                }
                self.post(0, 0, 0, size, signaled)?;
                if signaled {
                    let wc = self.wait_one_send(&mut idle)?;
                    if wc.status != WcStatus::Success {
                        return Err(wc_error(&wc, "sender", scnt, scnt));
                    }
                }
            }
            progress.tick(rcnt, iters, rcnt * size);
        }
        progress.finish();
        Ok(self.lat_run(tposted, clock, counted))
    }

    /// Waits for one send completion.
    fn wait_one_send(&self, idle: &mut Idle) -> Result<WorkCompletion, CliError> {
        let r = self.res()?;
        loop {
            if let Some(wc) = r.send_cq.poll_one()? {
                idle.progress();
                return Ok(wc);
            }
            idle.wait_cq(&r.send_cq)?;
        }
    }

    fn lat_run(&self, tposted: Vec<u64>, clock: Option<Clock>, counted: u64) -> LatRun {
        match clock {
            Some(c) => LatRun::Duration { counted, elapsed: (c.total - 2 * c.margin).as_nanos() as u64 },
            None if self.p.duration.is_some() => LatRun::Duration { counted, elapsed: 0 },
            None => LatRun::Iters(tposted),
        }
    }

    fn lat_done(&mut self, size: u64, run: LatRun) -> Result<(), CliError> {
        let rtt = self.p.verb().rtt_factor();
        match run {
            LatRun::Iters(tposted) => {
                let r = compute_lat(size, self.p.iters, &tposted, NS_PER_USEC, rtt)
                    .map_err(|e| CliError::failed(format!("cannot compute the report: {e}")))?;
                self.out.line(&format_lat_row(&r));
                self.rows.push(Row::Lat(r));
            }
            LatRun::Duration { counted, elapsed } => {
                let r = compute_lat_duration(size, counted, elapsed, NS_PER_USEC, rtt);
                self.out.line(&format_lat_duration_row(&r));
                self.rows.push(Row::LatDuration(r));
            }
        }
        Ok(())
    }

    fn bw_done(&mut self, r: BwReport) -> Option<BwReport> {
        let p = self.p;
        if p.duplex && !(p.is_send() && p.duration.is_some()) {
            // Printed with the peer's report added, after the exchange.
            self.own = Some(r);
        } else {
            self.out.line(&format_bw_row(&r, p.units));
            self.rows.push(Row::Bw { source: "local", report: r });
        }
        Some(r)
    }

    // --- setup --------------------------------------------------------------------------------

    fn create(&mut self, n: &Negotiated) -> Result<Vec<PerftestDest>, CliError> {
        let p = self.p;
        let nqps = p.num_qps as usize;
        let ud = self.ud();
        if ud {
            // perftest's `check_mtu()`: UD messages fit in one packet.
            let mtu = mtu_bytes(n.mtu);
            if self.size > mtu {
                if p.req_size {
                    return Err(CliError::usage(format!(
                        "-s {}: Max message size in UD cannot be greater than MTU ({mtu})",
                        self.size
                    )));
                }
                eprintln!(" Max msg size in UD is MTU {mtu}\n Changing to this MTU");
                self.size = mtu;
            }
        }
        // UD receive buffers carry the GRH first.
        let buf_size = if ud { self.size + GRH } else { self.size };
        self.layout = Layout::new(buf_size, nqps as u64, u64::from(n.cycle_buffer), u64::from(n.cache_line));
        let mr_len = usize::try_from(self.layout.mr_len())
            .map_err(|_| CliError::setup("the message buffers do not fit in memory"))?;
        // The size depends on the peer's page size: refuse what cannot be allocated rather
        // than abort (the probe reserves address space only).
        let mut probe: Vec<u8> = Vec::new();
        probe.try_reserve_exact(mr_len).map_err(|_| {
            CliError::setup(format!(
                "cannot allocate {mr_len} bytes of message buffers (size {}, {nqps} QPs, page size {})",
                self.size, n.cycle_buffer
            ))
        })?;
        drop(probe);
        let pd = self.dev.alloc_pd()?;
        let send_cq = self.dev.create_cq((p.tx_depth as usize * nqps).max(1) + 1)?;
        let recv_cq = if p.is_send() {
            Some(self.dev.create_cq((p.rx_depth as usize * nqps).max(1) + 1)?)
        } else {
            None
        };
        let remote_access = match p.verb() {
            Verb::Write => Access::REMOTE_WRITE,
            Verb::Read => Access::REMOTE_READ,
            Verb::Atomic => Access::REMOTE_ATOMIC,
            Verb::Send => Access::NONE,
        };
        let mr = pd.alloc_mr(mr_len, Access::LOCAL_WRITE | remote_access)?;
        if p.test != PerftestTest::WriteLat {
            fill_random(&mr)?;
        }
        let qp_access = match p.verb() {
            Verb::Write => Access::REMOTE_WRITE,
            Verb::Read => Access::REMOTE_READ,
            Verb::Atomic => Access::REMOTE_ATOMIC,
            Verb::Send => Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        };
        let gid = self.dev.gid(self.gid_index)?;
        let qp_type = match p.connection {
            ConnectionType::Rc => QpType::Rc,
            ConnectionType::Uc => QpType::Uc,
            ConnectionType::Ud => QpType::Ud,
        };
        let mut qps = Vec::with_capacity(nqps);
        let mut dests = Vec::with_capacity(nqps);
        let mut ids = Vec::new();
        let mut ud_dests = Vec::with_capacity(nqps);
        let mut cm_peers = Vec::new();
        for i in 0..nqps {
            let init = QpInitAttr {
                qp_type,
                send_cq: &send_cq,
                recv_cq: recv_cq.as_ref().unwrap_or(&send_cq),
                cap: QpCaps {
                    max_send_wr: p.tx_depth,
                    // One more for the UD QP-number message of `-R`.
                    max_recv_wr: p.rx_depth + 1,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: self.inline_size,
                },
                sq_sig_all: false,
                srq: None,
            };
            let qp = if let Some(cm) = self.cm {
                let t = TestQp {
                    pd: &pd,
                    send_cq: &send_cq,
                    recv_cq: recv_cq.as_ref().unwrap_or(&send_cq),
                    mr: &mr,
                    recv_off: self.layout.recv(i),
                    init,
                    ud,
                    exchange_qpn: ud && (!p.test.is_bw() || p.duplex),
                    read_atomic: p.is_read_or_atomic(),
                    out_reads: self.out_reads.min(255) as u8,
                    gid_index: self.gid_index,
                };
                let (id, qp, peer) = cm.connect_test_qp(&t)?;
                ud_dests.push(peer.as_ref().map(|p| p.dest));
                cm_peers.extend(peer);
                ids.push(id);
                qp
            } else {
                let qp = Arc::new(pd.create_qp(&init)?);
                let init_attrs =
                    if ud { QpAttrs::init_ud(Qkey::new(DEF_QKEY)) } else { QpAttrs::init(qp_access) };
                qp.modify(&init_attrs)
                    .map_err(|e| CliError::failed(format!("Failed to modify QP to INIT: {e}")))?;
                ud_dests.push(None);
                qp
            };
            dests.push(PerftestDest {
                lid: self.dev.query_port().lid,
                out_reads: self.out_reads as u16,
                qpn: qp.qp_num().value(),
                psn: random_psn(),
                rkey: mr.rkey().value(),
                vaddr: mr.addr() + self.layout.target(i),
                gid: gid.0,
                srqn: 0,
            });
            qps.push(qp);
        }
        self.recv_posted = vec![0; nqps];
        self.res = Some(Resources {
            ids,
            ud: ud_dests,
            _ahs: Vec::new(),
            _cm_peers: cm_peers,
            qps,
            send_cq,
            recv_cq,
            mr,
            pd,
        });
        Ok(dests)
    }

    fn test_info(&self, n: &Negotiated) -> TestInfo {
        let p = self.p;
        TestInfo {
            verb: p.verb(),
            atomic_type: p.atomic_type,
            test: if p.test.is_bw() { TestType::Bw } else { TestType::Lat },
            duplex: p.duplex,
            post_list: 1,
            recv_post_list: 1,
            events_eq_num: p.events.then_some(0),
            dual_port: false,
            device: self.dev.name().to_string(),
            num_qps: p.num_qps,
            transport: "IB".into(),
            connection: p.connection,
            use_srq: false,
            // As Debian's build (HAVE_RO) shows it; write_lat always disables it.
            pcie_relaxed: p.test != PerftestTest::WriteLat,
            pcie_ro_warning: false,
            ibv_wr_api: false,
            is_client: self.is_client(),
            tx_depth: p.tx_depth,
            rx_depth: p.rx_depth,
            cq_mod: p.cq_mod,
            mtu_bytes: mtu_bytes(n.mtu),
            link_type: self.dev.query_port().link_layer.to_string(),
            gid_index: i32::from(self.gid_index.value()),
            inline_size: self.inline_size,
            out_reads: self.out_reads,
            rdma_cm: p.rdma_cm,
        }
    }

    fn connect_qps(&mut self, remote: &[PerftestDest], mtu: Mtu) -> Result<(), CliError> {
        let p = self.p;
        if self.cm.is_some() {
            // The RDMA CM has connected them.
            return Ok(());
        }
        if self.ud() {
            return self.connect_ud(remote);
        }
        let rts = !p.test.is_bw() || self.is_client() || p.duplex;
        let r = self.res()?;
        for (i, qp) in r.qps.iter().enumerate() {
            let peer = remote.get(i).copied().unwrap_or_default();
            let av = softroce::verbs::AddressVector {
                dgid: softroce::verbs::Gid(peer.gid),
                sgid_index: self.gid_index,
                hop_limit: 0xff,
                traffic_class: p.tclass,
                flow_label: 0,
                sl: p.sl,
            };
            let uc = p.connection == ConnectionType::Uc;
            let rtr = if uc {
                QpAttrs::rtr_uc(av, mtu, Qpn::new(peer.qpn), Psn::new(peer.psn))
            } else {
                let mut rtr = QpAttrs::rtr(av, mtu, Qpn::new(peer.qpn), Psn::new(peer.psn));
                rtr.max_dest_rd_atomic = Some(self.out_reads.min(255) as u8);
                rtr.min_rnr_timer = Some(12);
                rtr
            };
            qp.modify(&rtr).map_err(|e| {
                CliError::failed(format!(
                    "Failed to modify QP {:#x} to RTR: {e} (peer GID {}, QPN {:#x})",
                    qp.qp_num(),
                    softroce::verbs::Gid(peer.gid),
                    peer.qpn
                ))
            })?;
            if rts && uc {
                qp.modify(&QpAttrs::rts_unreliable(Psn::new(self.p_psn(i))))
                    .map_err(|e| CliError::failed(format!("Failed to modify QP to RTS: {e}")))?;
            } else if rts {
                let mut a = QpAttrs::rts(Psn::new(self.p_psn(i)));
                a.timeout = Some(p.qp_timeout);
                a.retry_cnt = Some(7);
                a.rnr_retry = Some(7);
                // The initiator keeps at most what the responder advertised in flight.
                a.max_rd_atomic =
                    Some(u32::from(peer.out_reads).clamp(1, super::params::MAX_OUT_READS) as u8);
                qp.modify(&a).map_err(|e| CliError::failed(format!("Failed to modify QP to RTS: {e}")))?;
            }
        }
        Ok(())
    }

    /// perftest's `ctx_connect` for UD: RTR, RTS, and an address handle to the peer's GID
    /// for the sides that send (client, latency, duplex).
    fn connect_ud(&mut self, remote: &[PerftestDest]) -> Result<(), CliError> {
        let p = self.p;
        let sends = self.is_client() || !p.test.is_bw() || p.duplex;
        let psns: Vec<u32> = (0..remote.len()).map(|i| self.p_psn(i)).collect();
        let gid_index = self.gid_index;
        let r = self.res.as_mut().ok_or_else(|| CliError::failed("internal error: no verbs resources"))?;
        for (i, qp) in r.qps.iter().enumerate() {
            qp.modify(&QpAttrs::rtr_ud())
                .map_err(|e| CliError::failed(format!("Failed to modify QP to RTR: {e}")))?;
            qp.modify(&QpAttrs::rts_unreliable(Psn::new(psns.get(i).copied().unwrap_or(0))))
                .map_err(|e| CliError::failed(format!("Failed to modify QP to RTS: {e}")))?;
            if sends {
                let peer = remote.get(i).copied().unwrap_or_default();
                let av = softroce::verbs::AddressVector {
                    dgid: softroce::verbs::Gid(peer.gid),
                    sgid_index: gid_index,
                    hop_limit: 0xff,
                    traffic_class: p.tclass,
                    flow_label: 0,
                    sl: p.sl,
                };
                let ah =
                    r.pd.create_ah(&av)
                        .map_err(|e| CliError::failed(format!("Failed to create AH for UD: {e}")))?;
                r.ud[i] = Some(ah.dest(Qpn::new(peer.qpn), Qkey::new(DEF_QKEY)));
                r._ahs.push(ah);
            }
        }
        Ok(())
    }

    fn p_psn(&self, i: usize) -> u32 {
        self.local.get(i).map_or(0, |d| d.psn)
    }

    fn round(&mut self, round: usize) -> Result<Option<BwReport>, CliError> {
        use PerftestTest::*;
        let p = self.p;
        let size = self.round_size(round);
        match p.test {
            WriteBw | ReadBw | AtomicBw => {
                let r = self.bw_client(size)?;
                Ok(self.bw_done(r))
            }
            SendBw => {
                let r = if p.duplex {
                    self.bw_duplex_send(size)?
                } else if self.is_client() {
                    self.bw_client(size)?
                } else {
                    self.bw_server(size)?
                };
                Ok(self.bw_done(r))
            }
            WriteLat => {
                let run = self.lat_write(size)?;
                self.lat_done(size, run)?;
                Ok(None)
            }
            ReadLat | AtomicLat => {
                let run = self.lat_read_atomic(size)?;
                self.lat_done(size, run)?;
                Ok(None)
            }
            SendLat => {
                let run = self.lat_send(size)?;
                self.lat_done(size, run)?;
                Ok(None)
            }
        }
    }
}

impl SessionHooks for Runner<'_> {
    type Error = CliError;

    fn setup(&mut self, n: &Negotiated) -> Result<Vec<PerftestDest>, CliError> {
        let dests = self.create(n)?;
        self.local = dests.clone();
        self.mtu = n.mtu;
        self.out.text(&format_test_info(&self.test_info(n)));
        Ok(dests)
    }

    fn connect(&mut self, remote: &[PerftestDest]) -> Result<(), CliError> {
        let mtu = Mtu::from_ibv(u32::from(self.mtu))
            .ok_or_else(|| CliError::failed(format!("internal error: MTU enum {}", self.mtu)))?;
        self.remote = remote.to_vec();
        self.connect_qps(remote, mtu)?;
        self.cpu_start = Some((cpu_time(), Instant::now()));
        Ok(())
    }

    fn show_local(&mut self, local: &[PerftestDest]) {
        for d in local {
            self.out.line(&format_address_line(Side::Local, self.p.verb(), d));
            self.out.line(&format_gid_line(&d.gid));
        }
    }

    fn show_remote(&mut self, index: usize, remote: &PerftestDest) {
        if let Some(slot) = self.remote.get_mut(index) {
            *slot = *remote;
        }
        self.out.line(&format_address_line(Side::Remote, self.p.verb(), remote));
        self.out.line(&format_gid_line(&remote.gid));
    }

    fn show_header(&mut self) {
        let p = self.p;
        let header = if p.test.is_bw() {
            p.units.header()
        } else if p.duration.is_some() {
            LAT_DURATION_HEADER
        } else {
            LAT_HEADER
        };
        self.out.line(RESULT_LINE);
        self.out.line(header);
    }

    fn prepare_round(&mut self, round: usize) -> Result<(), CliError> {
        let p = self.p;
        if !p.is_send() || (p.test.is_bw() && self.is_client() && !p.duplex) {
            return Ok(());
        }
        let size = self.round_size(round);
        for qi in 0..p.num_qps as usize {
            self.recv_posted[qi] = 0;
            for _ in 0..p.rx_depth {
                self.post_recv(qi, size)?;
            }
        }
        Ok(())
    }

    fn run_round(&mut self, round: usize) -> Result<Option<BwReport>, CliError> {
        self.round(round)
    }

    fn peer_report(&mut self, peer: &BwReport) {
        let p = self.p;
        if p.duplex {
            let own = self.own.take().unwrap_or_default();
            let sum = own.combined(peer);
            self.out.line(&format_bw_row(&sum, p.units));
            self.rows.push(Row::Bw { source: "combined", report: sum });
        } else {
            self.out.line(&format_bw_row(peer, p.units));
            self.rows.push(Row::Bw { source: "peer", report: *peer });
        }
    }

    fn show_footer(&mut self) {
        // The measurement window ends with the last result (before the closing exchanges
        // where the session allows).
        self.finish();
        self.out.line(RESULT_LINE);
    }
}

/// Fills the region with pseudo-random bytes (perftest: `rand()` after `srand(time(NULL))`).
fn fill_random(mr: &MemoryRegion) -> Result<(), CliError> {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
        | 1;
    let mut chunk = vec![0u8; 1 << 16];
    let mut off = 0;
    while off < mr.len() {
        let len = chunk.len().min(mr.len() - off);
        for word in chunk[..len].chunks_mut(8) {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            word.copy_from_slice(&v[..word.len()]);
        }
        mr.write(off, &chunk[..len]).map_err(VerbsError::from)?;
        off += len;
    }
    Ok(())
}
