//! When an application thread that polls an empty CQ gives its CPU away (issues 28 and 30).
//!
//! With inline progress the thread that polls a CQ moves the device's packets itself, so a
//! busy-polling application is what makes softroce fast. But the work that only another thread
//! can do — the *peer's* engine acknowledging this side's WRITEs, a sprayer's junk read and
//! dropped, another process's spinning application — needs a CPU too, and on a machine with
//! fewer cores than busy threads a poller that finds nothing keeps that CPU until the scheduler
//! takes it away at the end of its time slice (milliseconds). Measured on this 2-core machine
//! (`softroce perf write-bw -s 65536` with both processes on one CPU): 780 MB/s against
//! ~2,500 MB/s on two, the client application burning two thirds of the CPU on empty polls
//! while the server's engine waited for it; and under a junk flood that took one core,
//! goodput fell to 0.16–0.19 of the clean run (docs/design/flood.md).
//!
//! Yielding after every empty poll fixes both, but costs latency when nothing else wants the
//! CPU except this device's own engine thread (woken by the very datagram the poller is about
//! to read: a yield hands the packet to it). So the pacer yields only
//! - when the CPU is **contended**: this thread was kept off it for [`CONTENDED_GAP`] or more
//!   between two idle polls (preempted while spinning), or a yield of its own lasted that long
//!   (somebody else ran); then it yields after every idle poll for [`CONTENDED_FOR`];
//! - or when the thread has polled in vain for [`IDLE_YIELD_AFTER`], whatever else runs (a
//!   wait that long is not a latency a yield could spoil).
//!
//! "Idle" means the poll returned no completion and its inline pass moved nothing (or did not
//! run: another thread held the engine's state). A pure state machine, time in, decision out:
//! [`CompletionQueue::poll`](crate::verbs::CompletionQueue::poll) keeps one per thread.

use std::time::{Duration, Instant};

/// A gap this long between two idle polls of one thread, or a yield that took this long,
/// means another thread had this CPU: an engine's pass over a packet takes microseconds, a
/// time slice of another busy thread hundreds of them.
pub const CONTENDED_GAP: Duration = Duration::from_micros(100);

/// How long a poller keeps yielding after every idle poll once it saw contention.
pub const CONTENDED_FOR: Duration = Duration::from_millis(20);

/// Without contention, a poller yields after polling in vain this long.
pub const IDLE_YIELD_AFTER: Duration = Duration::from_micros(50);

/// One polling thread's recent history.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    /// When the last idle poll (or the yield after it) ended.
    last: Option<Instant>,
    /// Since when every poll has been idle (`None`: the last one was not).
    idle_since: Option<Instant>,
    /// Contention seen recently: yield on every idle poll until then.
    contended_until: Option<Instant>,
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new()
    }
}

impl Pacer {
    /// A thread that has not polled yet.
    pub const fn new() -> Pacer {
        Pacer { last: None, idle_since: None, contended_until: None }
    }

    /// A poll that ended at `now`: `idle` when it found no completion and moved nothing.
    /// Returns whether the thread should yield its CPU now (then report the yield with
    /// [`Pacer::yielded`]).
    pub fn polled(&mut self, now: Instant, idle: bool) -> bool {
        if !idle {
            self.busy();
            return false;
        }
        let gap = self.last.map(|l| now.saturating_duration_since(l));
        self.last = Some(now);
        // Kept off the CPU between two idle polls (nothing of the application's own ran in
        // between: it was spinning on this CQ).
        if self.idle_since.is_some() && gap.is_some_and(|g| g >= CONTENDED_GAP) {
            self.contended_until = Some(now + CONTENDED_FOR);
        }
        let since = *self.idle_since.get_or_insert(now);
        self.contended(now) || now.saturating_duration_since(since) >= IDLE_YIELD_AFTER
    }

    /// A poll that found a completion or moved something. It needs no clock: the gap before
    /// the next poll is the application's own work, which [`Pacer::polled`] never counts as
    /// contention (only a gap between two idle polls does), so a busy poll costs no time
    /// reading on the hot path.
    pub fn busy(&mut self) {
        self.idle_since = None;
    }

    /// A yield that began at `start` returned at `now`.
    pub fn yielded(&mut self, start: Instant, now: Instant) {
        if now.saturating_duration_since(start) >= CONTENDED_GAP {
            self.contended_until = Some(now + CONTENDED_FOR);
        }
        // The yield is not a gap between polls.
        self.last = Some(now);
    }

    /// Whether contention was seen within the last [`CONTENDED_FOR`].
    pub fn contended(&self, now: Instant) -> bool {
        self.contended_until.is_some_and(|t| now < t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn a_quiet_poller_spins_then_yields_after_a_long_idle_wait() {
        let t0 = Instant::now();
        let mut p = Pacer::new();
        // Polls every 2 µs, all idle: no yield until IDLE_YIELD_AFTER has passed.
        let mut first_yield = None;
        for i in 0..100 {
            let now = t0 + us(2 * i);
            if p.polled(now, true) {
                first_yield.get_or_insert(now - t0);
                p.yielded(now, now + us(1));
            }
        }
        let first = first_yield.expect("yields in the end");
        assert!(first >= IDLE_YIELD_AFTER && first < IDLE_YIELD_AFTER + us(3), "{first:?}");
        assert!(!p.contended(t0 + us(200)));
    }

    #[test]
    fn progress_resets_the_idle_clock() {
        let t0 = Instant::now();
        let mut p = Pacer::new();
        for i in 0..1000 {
            let now = t0 + us(2 * i);
            // Something every 20 µs: never a long idle wait, never a yield.
            assert!(!p.polled(now, i % 10 != 0), "poll {i}");
        }
    }

    #[test]
    fn preemption_while_spinning_turns_on_yielding_for_a_while() {
        let t0 = Instant::now();
        let mut p = Pacer::new();
        assert!(!p.polled(t0, true));
        assert!(!p.polled(t0 + us(2), true));
        // Off the CPU for a millisecond between two idle polls.
        let back = t0 + us(1002);
        assert!(p.polled(back, true), "contended: yields at once");
        p.yielded(back, back + us(1));
        // Every idle poll yields for CONTENDED_FOR, even right after a completion.
        assert!(!p.polled(back + us(3), false));
        assert!(p.polled(back + us(5), true));
        assert!(p.contended(back + CONTENDED_FOR - us(1)));
        // Then it ends, and the quiet rule applies again.
        let later = back + CONTENDED_FOR + us(10);
        assert!(!p.polled(later, false));
        assert!(!p.polled(later + us(2), true));
    }

    #[test]
    fn a_gap_after_a_completion_is_the_application_s_own_work() {
        let t0 = Instant::now();
        let mut p = Pacer::new();
        assert!(!p.polled(t0, false));
        // The application worked (or spun on memory) for 5 ms after its completion.
        assert!(!p.polled(t0 + us(5000), true));
        assert!(!p.contended(t0 + us(5000)));
    }

    #[test]
    fn a_long_yield_means_somebody_else_wanted_the_cpu() {
        let t0 = Instant::now();
        let mut p = Pacer::new();
        let mut now = t0;
        while !p.polled(now, true) {
            now += us(2);
        }
        // A short yield (nobody else runnable): still not contended.
        p.yielded(now, now + us(1));
        assert!(!p.contended(now + us(1)));
        now += us(3);
        assert!(p.polled(now, true));
        // A yield that lasted 300 µs: contended.
        p.yielded(now, now + us(300));
        assert!(p.contended(now + us(300)));
        // And the yield itself was not taken for a preemption gap.
        assert!(p.polled(now + us(302), true));
    }
}
