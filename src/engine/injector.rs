//! A device's fault injection state: its SPEC, the `fault_*` counters, the `rnr=K` budget, the
//! black holes' clock, and the summary line on stderr at close or exit.
//!
//! The packet faults themselves are applied by the backend decorator
//! ([`super::backend::faulty`]); this is what the device's engines share (one per device, the
//! same for every engine thread), and the `rnr=K` hook around the transport's responder.
//!
//! The summary line is printed once per device: when the device closes, or, if the process
//! exits with the device still open (C programs often do), by an `atexit` handler. That
//! handler runs on the exiting thread while the engine threads may still run: it reads atomics
//! only, formats into a stack buffer and writes with one `write(2)` — no lock, no allocation.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::error::{Error, Result};
use crate::faults::FaultSpec;
use crate::transport::Qp;
use crate::wire::{Opcode, Operation, Packet, Transport};

/// What fault injection did to a device's packets (`fault_*` in the counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Packets lost (`loss`, a black hole, or a full delay queue).
    pub dropped: u64,
    /// Packets delivered twice (`dup`).
    pub duplicated: u64,
    /// Packets held back behind later ones (`reorder`).
    pub reordered: u64,
    /// Packets held for `delay`/`jitter`.
    pub delayed: u64,
    /// Packets with a bit flipped (`corrupt`).
    pub corrupted: u64,
    /// SENDs answered with a forced RNR NAK (`rnr`).
    pub rnr: u64,
}

impl FaultCounters {
    /// Every counter as `(name, value)`, with the names `softroce counters` shows.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("fault_dropped", self.dropped),
            ("fault_duplicated", self.duplicated),
            ("fault_reordered", self.reordered),
            ("fault_delayed", self.delayed),
            ("fault_corrupted", self.corrupted),
            ("fault_rnr", self.rnr),
        ]
        .into_iter()
    }
}

/// A fault the decorator or the RNR hook injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dropped,
    Duplicated,
    Reordered,
    Delayed,
    Corrupted,
    Rnr,
}

/// The counters of one device, leaked so that the exit handler can read them whenever the
/// process ends (one small block per device opened with faults).
struct Stats {
    seed: u64,
    pid: u32,
    counts: [AtomicU64; 6],
    reported: AtomicBool,
    /// The next device's stats in the exit handler's list.
    next: AtomicPtr<Stats>,
}

/// The devices the exit handler reports on: a list that only grows, pushed with a CAS.
static REGISTERED: AtomicPtr<Stats> = AtomicPtr::new(std::ptr::null_mut());

impl Stats {
    fn counters(&self) -> FaultCounters {
        let c = |k: Kind| self.counts[k as usize].load(Ordering::Relaxed);
        FaultCounters {
            dropped: c(Kind::Dropped),
            duplicated: c(Kind::Duplicated),
            reordered: c(Kind::Reordered),
            delayed: c(Kind::Delayed),
            corrupted: c(Kind::Corrupted),
            rnr: c(Kind::Rnr),
        }
    }

    /// Prints the summary line, once, in the process that opened the device (a child after
    /// `fork` inherits the list, not the device).
    fn report(&self) {
        if self.pid != std::process::id() || self.reported.swap(true, Ordering::SeqCst) {
            return;
        }
        let c = self.counters();
        let mut line = LineBuf { buf: [0; 256], len: 0 };
        let _ = writeln!(
            line,
            "softroce faults: seed={} dropped={} duplicated={} reordered={} delayed={} corrupted={} rnr={}",
            self.seed, c.dropped, c.duplicated, c.reordered, c.delayed, c.corrupted, c.rnr
        );
        // SAFETY: `line.buf[..line.len]` is initialised memory we own; write(2) only reads it.
        // One call, so that the line is not interleaved with other output.
        let _ = unsafe { libc::write(2, line.buf.as_ptr().cast(), line.len) };
    }
}

/// A line formatted on the stack (the exit handler must not allocate).
struct LineBuf {
    buf: [u8; 256],
    len: usize,
}

impl std::fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len.checked_add(s.len()).filter(|e| *e <= self.buf.len()).ok_or(std::fmt::Error)?;
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

extern "C" fn report_at_exit() {
    let mut p = REGISTERED.load(Ordering::SeqCst);
    while !p.is_null() {
        // SAFETY: every pointer in the list comes from `Box::leak` and is never freed.
        let s = unsafe { &*p };
        s.report();
        p = s.next.load(Ordering::SeqCst);
    }
}

fn register(stats: &'static Stats) {
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: registers a handler that takes no lock and touches only leaked statics.
        unsafe { libc::atexit(report_at_exit) };
    });
    let me = stats as *const Stats as *mut Stats;
    let mut head = REGISTERED.load(Ordering::SeqCst);
    loop {
        stats.next.store(head, Ordering::SeqCst);
        match REGISTERED.compare_exchange(head, me, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
}

/// A device's fault injection, shared by its engines and their backend decorators.
pub(crate) struct FaultState {
    pub spec: FaultSpec,
    /// When the device started (the black holes' clock).
    pub start: Instant,
    stats: &'static Stats,
    /// Forced RNR NAKs still to send.
    rnr_left: AtomicU32,
}

impl std::fmt::Debug for FaultState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultState").field("spec", &self.spec.to_string()).finish_non_exhaustive()
    }
}

impl FaultState {
    /// The fault state of a device opened with SPEC `text` (`None` or blank: no faults); a
    /// malformed SPEC is refused.
    pub(crate) fn open(text: Option<&str>) -> Result<Option<std::sync::Arc<FaultState>>> {
        let Some(text) = text.filter(|t| !t.trim().is_empty()) else { return Ok(None) };
        let spec = FaultSpec::parse(text).map_err(Error::Faults)?;
        let stats: &'static Stats = Box::leak(Box::new(Stats {
            seed: spec.seed,
            pid: std::process::id(),
            counts: Default::default(),
            reported: AtomicBool::new(false),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }));
        register(stats);
        tracing::info!(target: "softroce::faults", spec = %spec, "fault injection on");
        Ok(Some(std::sync::Arc::new(FaultState {
            rnr_left: AtomicU32::new(spec.rnr),
            spec,
            start: Instant::now(),
            stats,
        })))
    }

    /// Counts one injected fault.
    pub(crate) fn count(&self, kind: Kind) {
        self.stats.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters so far.
    pub(crate) fn counters(&self) -> FaultCounters {
        self.stats.counters()
    }

    /// Prints the summary line (once; the device closes).
    pub(crate) fn report(&self) {
        self.stats.report();
    }

    /// Whether a black hole swallows packets at `now`.
    pub(crate) fn blackholed(&self, now: Instant) -> bool {
        !self.spec.blackholes.is_empty() && {
            let since = now.saturating_duration_since(self.start);
            self.spec.blackholes.iter().any(|b| b.covers(since))
        }
    }

    /// `rnr=K`, before a received packet goes to its QP: arms the QP to answer it with an RNR
    /// NAK if it is an RC SEND that starts a message, the budget is not spent, and the filters
    /// select it. Returns whether it armed the QP (then call [`FaultState::rnr_after`]).
    pub(crate) fn rnr_before(&self, p: &Packet<'_>, qp: &mut Qp) -> bool {
        if self.rnr_left.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let info = p.info();
        let bth = p.bth();
        let arm = info.transport == Transport::Rc
            && info.operation == Operation::Send
            && info.position.starts()
            && self.spec.selects(bth.dest_qp(), bth.opcode().0);
        if arm {
            qp.force_rnr_nak(true);
        }
        arm
    }

    /// After the packet [`FaultState::rnr_before`] armed the QP for: counts the forced RNR NAK
    /// if the QP sent one (a duplicate or out-of-sequence SEND leaves it unsent) and disarms.
    pub(crate) fn rnr_after(&self, p: &Packet<'_>, qp: &mut Qp) {
        if !qp.force_rnr_nak(false) {
            return;
        }
        let _ = self.rnr_left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |k| k.checked_sub(1));
        self.count(Kind::Rnr);
        let bth = p.bth();
        event("rx", bth.dest_qp(), bth.psn().value(), bth.opcode(), 0, "rnr_nak");
    }
}

/// The `tracing` event of one injected fault (target `softroce::faults`).
pub(crate) fn event(dir: &'static str, qpn: u32, psn: u32, opcode: Opcode, nth: u32, fault: &'static str) {
    let psn = crate::wire::Psn::new(psn);
    tracing::debug!(target: "softroce::faults", dir, qpn, %psn, %opcode, nth, fault, "fault injected");
}

/// The longest a reordered packet waits for the packets that are to overtake it: past this it
/// goes anyway (a reordered packet at the end of a burst is late, not lost).
pub(crate) const REORDER_MAX_HOLD: Duration = Duration::from_millis(1);

/// Most packets held (delayed or reordered) per direction; past it a packet is dropped, as
/// netem drops past its queue limit.
pub(crate) const MAX_HELD: usize = 8192;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_fits_its_buffer() {
        let mut line = LineBuf { buf: [0; 256], len: 0 };
        let m = u64::MAX;
        writeln!(
            line,
            "softroce faults: seed={m} dropped={m} duplicated={m} reordered={m} delayed={m} corrupted={m} rnr={m}"
        )
        .unwrap();
        assert!(line.len < 256);
    }

    #[test]
    fn a_blank_spec_is_no_faults_and_a_bad_one_is_refused() {
        assert!(FaultState::open(None).unwrap().is_none());
        assert!(FaultState::open(Some("  ")).unwrap().is_none());
        let e = FaultState::open(Some("loss=2")).unwrap_err();
        assert!(e.to_string().contains("loss=2"), "{e}");
    }

    #[test]
    fn black_holes_follow_the_clock() {
        let f = FaultState::open(Some("blackhole=50ms+100ms")).unwrap().unwrap();
        let t = f.start;
        assert!(!f.blackholed(t));
        assert!(f.blackholed(t + Duration::from_millis(60)));
        assert!(!f.blackholed(t + Duration::from_millis(151)));
        f.report();
        f.report();
    }
}
