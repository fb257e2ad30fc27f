//! How long the engine thread was kept from running: what the local ACK timer does not count
//! (`Qp::handle_timeout_stalled`).
//!
//! A userspace engine can be descheduled, kernel rxe (softirq) cannot. While the engine waits
//! for a CPU, responses pile up unread in its socket and the peer — usually on the same
//! overloaded machine — is as slow to answer; a timer that counted that time would spend the
//! retry budget on a busy machine, not a dead peer. Linux reports, per thread, the time it
//! spent runnable but waiting on a run queue (`/proc/thread-self/schedstat`, second field,
//! `CONFIG_SCHED_INFO`). The engine reads it at most once a millisecond (about a microsecond
//! a read), also when it wakes from sleep, and always before it fires timers; a wait of a
//! millisecond or more between two readings is recorded as a stall. A wake-up followed by
//! such a wait is always read: the wait itself puts the clock a millisecond past the last
//! reading.
//!
//! Short waits are ordinary scheduling latency on a loaded machine — every round trip there
//! includes some — and the timeout already allows for them: a QP counts only the part of each
//! stall beyond a grace of an eighth of its timeout ([`grace`]). Where the file cannot be
//! read the clock reports no stall, and timers count wall time.
//!
//! With inline progress an application thread moves the device's packets while it holds the
//! engine's state; if it is preempted there, the engine thread waits for the state (asleep,
//! not on a run queue) and nothing moves. Such holds of a millisecond or more are recorded as
//! stalls too ([`StallClock::record_hold`]).

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use crate::transport::Time;

/// Stalls kept: a few seconds of history on the busiest machine (at most one a
/// millisecond). A timer armed before the oldest is measured without the older ones (less
/// stall found: the timer fires sooner, never later than it should).
const STALLS: usize = 4096;
/// Least spacing of readings taken while the engine is busy, and the least wait recorded.
const SPACING: Duration = Duration::from_millis(1);

/// How much of each stall a QP with local ACK timeout `rto` ignores: an eighth of the
/// timeout (at least a millisecond).
pub(crate) fn grace(rto: Duration) -> Duration {
    (rto / 8).max(SPACING)
}

/// The engine thread's run-queue waits, read against engine time.
#[derive(Debug)]
pub(crate) struct StallClock {
    file: Option<File>,
    /// The last reading: when, and the thread's total run-queue delay in ns.
    last: Option<(Time, u64)>,
    /// `(end, length)` of each wait of at least [`SPACING`] between two readings, oldest
    /// first.
    stalls: VecDeque<(Time, Duration)>,
}

impl StallClock {
    /// The clock of the calling thread (call it on the engine thread).
    pub(crate) fn for_this_thread() -> StallClock {
        StallClock {
            file: File::open("/proc/thread-self/schedstat").ok(),
            last: None,
            stalls: VecDeque::new(),
        }
    }

    /// A clock that reads nothing until [`StallClock::for_this_thread`] replaces it.
    pub(crate) fn unread() -> StallClock {
        StallClock { file: None, last: None, stalls: VecDeque::new() }
    }

    /// Records that the device could not make progress for `len` up to `end` for another
    /// reason than the engine thread's scheduling: an application thread doing inline
    /// progress held the engine's state that long (it was preempted mid-pass). Waits shorter
    /// than [`SPACING`] are ordinary and not recorded.
    pub(crate) fn record_hold(&mut self, end: Time, len: Duration) {
        if len < SPACING {
            return;
        }
        if self.stalls.len() == STALLS {
            self.stalls.pop_front();
        }
        // Kept in order of their ends (a hold ends at the latest reading or after it).
        let at = self.stalls.partition_point(|&(e, _)| e <= end);
        self.stalls.insert(at, (end, len));
    }

    /// The thread's total run-queue delay in nanoseconds.
    fn read(&self) -> Option<u64> {
        let f = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(buf.get(..n)?).ok()?;
        text.split_whitespace().nth(1)?.parse().ok()
    }

    /// Reads the delay at `now`: always when `force`, else at most once per [`SPACING`].
    pub(crate) fn sample(&mut self, now: Time, force: bool) {
        if self.file.is_none() {
            return;
        }
        self.sample_with(now, force, |c| c.read());
    }

    /// [`StallClock::sample`] with the reading taken by `read` (only when one is due).
    fn sample_with(&mut self, now: Time, force: bool, read: impl FnOnce(&Self) -> Option<u64>) {
        if !force && self.last.is_some_and(|(t, _)| now - t < SPACING) {
            return;
        }
        if let Some(total) = read(self) {
            self.record(now, total);
        }
    }

    /// Takes a reading of the total run-queue delay `total` (ns) made at `now`.
    fn record(&mut self, now: Time, total: u64) {
        if let Some((_, prev)) = self.last {
            let waited = Duration::from_nanos(total.saturating_sub(prev));
            if waited >= SPACING {
                if self.stalls.len() == STALLS {
                    self.stalls.pop_front();
                }
                self.stalls.push_back((now, waited));
            }
        }
        let total = self.last.map_or(total, |(_, prev)| total.max(prev));
        self.last = Some((now, total));
    }

    /// How long the thread waited for a CPU after `since`, counting of each stall only what
    /// exceeds `grace`.
    pub(crate) fn stalled_since(&self, since: Time, grace: Duration) -> Duration {
        let first = self.stalls.partition_point(|&(end, _)| end <= since);
        self.stalls.range(first..).map(|&(end, len)| len.min(end - since).saturating_sub(grace)).sum()
    }
}

/// The run-queue waits of an application thread that makes inline progress, read the same
/// way (at most once per [`SPACING`]) and handed to the device's clock: while such a thread
/// spins on a CQ it is the one moving the device's packets, so a wait for a CPU there is a
/// stall of the device as much as one of the engine thread.
#[derive(Debug)]
pub(crate) struct ThreadWaits {
    file: Option<File>,
    last: Option<(std::time::Instant, u64)>,
}

impl ThreadWaits {
    /// The calling thread's waits.
    pub(crate) fn for_this_thread() -> ThreadWaits {
        ThreadWaits { file: File::open("/proc/thread-self/schedstat").ok(), last: None }
    }

    /// A wait of at least [`SPACING`] since the last reading, if one is due (`now`: the
    /// caller's clock reading, taken moments ago) and there was one: `(when the reading was
    /// taken, how long the thread waited)`.
    pub(crate) fn poll(&mut self, now: std::time::Instant) -> Option<(std::time::Instant, Duration)> {
        if self.last.is_some_and(|(t, _)| now - t < SPACING) {
            return None;
        }
        let f = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        let total: u64 = std::str::from_utf8(buf.get(..n)?).ok()?.split_whitespace().nth(1)?.parse().ok()?;
        let prev = self.last.replace((now, total));
        let waited = Duration::from_nanos(total.saturating_sub(prev?.1));
        (waited >= SPACING).then_some((now, waited))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Time {
        Time::from_nanos(n * 1_000_000)
    }

    #[test]
    fn reads_this_threads_delay() {
        let mut c = StallClock::for_this_thread();
        if c.file.is_none() {
            return; // no schedstat on this kernel
        }
        assert!(c.read().is_some());
        c.sample(ms(1), true);
        assert!(c.last.is_some());
        assert_eq!(c.stalled_since(ms(0), Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn records_waits_and_counts_what_exceeds_the_grace() {
        let mut c = StallClock { file: None, last: None, stalls: VecDeque::new() };
        c.record(ms(10), 0);
        c.record(ms(12), 500_000); // 0.5 ms: ordinary latency, not recorded
        c.record(ms(60), 40_500_000); // a 40 ms stall ending at 60 ms
        c.record(ms(70), 43_500_000); // 3 ms
        assert_eq!(c.stalls.len(), 2);
        assert_eq!(c.stalled_since(ms(0), Duration::ZERO), Duration::from_millis(43));
        // With an 8 ms grace the 3 ms wait does not count, the 40 ms one counts 32 ms.
        assert_eq!(c.stalled_since(ms(0), Duration::from_millis(8)), Duration::from_millis(32));
        // A stall that began before `since` counts only from `since`.
        assert_eq!(c.stalled_since(ms(40), Duration::ZERO), Duration::from_millis(23));
        assert_eq!(c.stalled_since(ms(70), Duration::ZERO), Duration::ZERO);
        // The total never goes backwards.
        c.record(ms(80), 1);
        assert_eq!(c.last, Some((ms(80), 43_500_000)));
        assert_eq!(grace(Duration::from_millis(67)), Duration::from_nanos(8_375_000));
        assert_eq!(grace(Duration::from_micros(500)), Duration::from_millis(1));
    }

    #[test]
    fn holds_of_the_state_count_as_stalls() {
        let mut c = StallClock::unread();
        c.record_hold(ms(20), Duration::from_micros(300)); // a normal pass: not recorded
        c.record_hold(ms(50), Duration::from_millis(30));
        c.record(ms(60), 0);
        c.record(ms(70), 5_000_000); // the engine's own 5 ms wait, ending at 70 ms
        c.record_hold(ms(65), Duration::from_millis(2)); // recorded late, kept in order
        assert_eq!(c.stalls.iter().map(|s| s.0).collect::<Vec<_>>(), vec![ms(50), ms(65), ms(70)]);
        assert_eq!(c.stalled_since(ms(0), Duration::ZERO), Duration::from_millis(37));
        assert_eq!(c.stalled_since(ms(40), Duration::ZERO), Duration::from_millis(17));
    }

    #[test]
    fn a_wait_after_a_wake_up_is_read_without_forcing() {
        // The engine samples unforced when it wakes (no /proc read per wake-up). A wake-up
        // soon after the last reading reads nothing; one that then waited 5 ms for a CPU
        // comes 5 ms later, so the reading is due and the wait is recorded where it ended.
        let mut c = StallClock::unread();
        c.sample_with(ms(10), true, |_| Some(0));
        let mut read = false;
        c.sample_with(Time::from_nanos(10_300_000), false, |_| {
            read = true;
            Some(200_000)
        });
        assert!(!read, "a reading within SPACING of the last is not taken");
        c.sample_with(Time::from_nanos(15_300_000), false, |_| Some(5_200_000));
        assert_eq!(
            c.stalls.iter().copied().collect::<Vec<_>>(),
            vec![(Time::from_nanos(15_300_000), Duration::from_micros(5200))]
        );
    }

    #[test]
    fn history_is_bounded() {
        let mut c = StallClock { file: None, last: None, stalls: VecDeque::new() };
        for i in 0..(STALLS as u64 + 100) {
            c.record(ms(10 * i), i * 2_000_000);
        }
        assert_eq!(c.stalls.len(), STALLS);
    }
}
