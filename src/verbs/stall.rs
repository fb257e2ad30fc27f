//! How long the engine thread was kept from running: what the local ACK timer does not count
//! (`Qp::handle_timeout_stalled`).
//!
//! A userspace engine can be descheduled, kernel rxe (softirq) cannot. While the engine waits
//! for a CPU, responses pile up unread in its socket and the peer — usually on the same
//! overloaded machine — is as slow to answer; a timer that counted that time would spend the
//! retry budget on a busy machine, not a dead peer. Linux reports, per thread, the time it
//! spent runnable but waiting on a run queue (`/proc/thread-self/schedstat`, second field,
//! `CONFIG_SCHED_INFO`); the engine samples it at most once a millisecond while it works,
//! whenever it wakes from sleep, and before it fires timers. Where the file cannot be read
//! the clock reports no stall, and timers count wall time as before.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use crate::transport::Time;

/// Samples kept: at one a millisecond while busy, a few seconds of history. A timer armed
/// before the oldest sample is measured from it (less stall found: the timer fires sooner,
/// never later than it should).
const SAMPLES: usize = 4096;
/// Least spacing of samples taken while the engine is busy.
const SPACING: Duration = Duration::from_millis(1);

/// The engine thread's accumulated run-queue delay, sampled against engine time.
#[derive(Debug)]
pub(crate) struct StallClock {
    file: Option<File>,
    /// `(when, total run-queue delay in ns)`, oldest first; both never decrease.
    samples: VecDeque<(Time, u64)>,
}

impl StallClock {
    /// The clock of the calling thread (call it on the engine thread).
    pub(crate) fn for_this_thread() -> StallClock {
        StallClock { file: File::open("/proc/thread-self/schedstat").ok(), samples: VecDeque::new() }
    }

    /// A clock that never reports a stall.
    #[cfg(test)]
    fn disabled() -> StallClock {
        StallClock { file: None, samples: VecDeque::new() }
    }

    /// The thread's total run-queue delay in nanoseconds.
    fn read(&self) -> Option<u64> {
        let f = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(buf.get(..n)?).ok()?;
        text.split_whitespace().nth(1)?.parse().ok()
    }

    /// Records the delay so far at `now`: always when `force`, else at most once per
    /// [`SPACING`].
    pub(crate) fn sample(&mut self, now: Time, force: bool) {
        if self.file.is_none() {
            return;
        }
        if !force && self.samples.back().is_some_and(|&(t, _)| now - t < SPACING) {
            return;
        }
        let Some(total) = self.read() else { return };
        let total = self.samples.back().map_or(total, |&(_, last)| total.max(last));
        if self.samples.back().is_some_and(|&(t, _)| t >= now) {
            // Same instant: keep the later reading.
            self.samples.pop_back();
        }
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((now, total));
    }

    /// How long the thread waited for a CPU between `since` and the latest sample, measured
    /// from the last sample at or before `since` (or the oldest kept).
    pub(crate) fn stalled_since(&self, since: Time) -> Duration {
        let Some(&(_, last)) = self.samples.back() else { return Duration::ZERO };
        let i = self.samples.partition_point(|&(t, _)| t <= since);
        let from = self.samples.get(i.saturating_sub(1)).map_or(last, |&(_, s)| s);
        Duration::from_nanos(last.saturating_sub(from))
    }

    /// Whether the thread's run-queue delay can be read here.
    #[cfg(test)]
    fn available(&self) -> bool {
        self.file.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_threads_delay_and_measures_between_samples() {
        let mut c = StallClock::for_this_thread();
        if !c.available() {
            return; // no schedstat on this kernel
        }
        assert!(c.read().is_some());
        let t0 = Time::from_nanos(1_000_000);
        c.sample(t0, true);
        assert_eq!(c.stalled_since(t0), Duration::ZERO);
        // Synthetic history: 5 ms of delay between 2 ms and 3 ms.
        c.samples.clear();
        c.samples.push_back((Time::from_nanos(1_000_000), 10_000_000));
        c.samples.push_back((Time::from_nanos(2_000_000), 10_000_000));
        c.samples.push_back((Time::from_nanos(3_000_000), 15_000_000));
        assert_eq!(c.stalled_since(Time::from_nanos(2_500_000)), Duration::from_millis(5));
        assert_eq!(c.stalled_since(Time::from_nanos(3_000_000)), Duration::ZERO);
        assert_eq!(c.stalled_since(Time::ZERO), Duration::from_millis(5), "before the oldest sample");
        // Spacing: a second sample within a millisecond is skipped unless forced.
        let n = c.samples.len();
        c.sample(Time::from_nanos(3_500_000), false);
        assert_eq!(c.samples.len(), n);
        c.sample(Time::from_nanos(3_500_000), true);
        assert_eq!(c.samples.len(), n + 1);
        assert!(c.samples.back().unwrap().1 >= 15_000_000, "never decreases");
    }

    #[test]
    fn disabled_clock_reports_nothing() {
        let mut c = StallClock::disabled();
        c.sample(Time::from_nanos(5), true);
        assert_eq!(c.stalled_since(Time::ZERO), Duration::ZERO);
    }
}
