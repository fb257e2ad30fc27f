//! The flood watch: which source sends a device junk, and a warning, at most one per
//! [`WARN_EVERY`], when it is a flood (issue 30).
//!
//! Every packet an engine drops before a QP sees it (not RoCE, an unknown or foreign QP, a
//! wrong ICRC) is recorded with its source address, its reason and a weight: 1, or the
//! socket filter's sampling rate when the packet stands for the many the kernel dropped
//! unseen (`backend::filter::SAMPLE`). Per window of [`WINDOW`] the watch keeps the heaviest
//! sources (Misra-Gries over [`SOURCES`] slots: a source sending more than 1/`SOURCES` of
//! the junk is always among them) and the weight per reason; a window whose junk reaches
//! [`FLOOD_RATE`] per second is a flood, and the warning names its top source, that
//! source's share and the reasons, e.g.
//!
//! ```text
//! WARN softroce::verbs::flood: junk flood on 10.0.0.1: ~412000 datagrams/s dropped, 97 % from
//!     10.0.0.66 (pkey 51 %, unknown_qp 24 %, short 13 %, icrc 12 %); next report in 10 s or later
//! ```
//!
//! Nothing here allocates per packet: a few array updates.

use std::net::IpAddr;
use std::time::Duration;

use crate::transport::Time;

/// Length of a measuring window.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);
/// Junk per second (weighted) from which a window is a flood.
pub(crate) const FLOOD_RATE: u64 = 10_000;
/// Least time between two warnings of one engine.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(10);
/// Sources tracked per window.
const SOURCES: usize = 4;

/// Why a packet was dropped, as the watch tells it.
pub(crate) const REASONS: [&str; 10] =
    ["short", "tver", "pkey", "opcode", "truncated", "pad", "unaligned", "unknown_qp", "bad_source", "icrc"];

/// What one engine saw in the current window.
#[derive(Debug, Default)]
pub(crate) struct FloodWatch {
    start: Option<Time>,
    total: u64,
    sources: [(Option<IpAddr>, u64); SOURCES],
    reasons: [u64; REASONS.len()],
    last_warning: Option<Time>,
    /// Warnings given (for tests).
    pub(crate) warnings: u64,
}

/// A flood the watch found in a window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Flood {
    /// Junk per second (weighted).
    pub rate: u64,
    /// The heaviest source and its share (0..=1) of the window's junk.
    pub top: Option<(IpAddr, f64)>,
    /// The reasons, heaviest first, with their shares.
    pub reasons: Vec<(&'static str, f64)>,
}

impl FloodWatch {
    /// Records a dropped packet from `src` for reason `REASONS[reason]`, standing for `weight`
    /// packets; returns the flood found if this closes a window that was one and a warning
    /// is due.
    pub(crate) fn record(&mut self, now: Time, src: IpAddr, reason: usize, weight: u64) -> Option<Flood> {
        let flood = self.roll(now);
        self.total += weight;
        if let Some(r) = self.reasons.get_mut(reason) {
            *r += weight;
        }
        // Misra-Gries: the source's slot, else a free one, else every count goes down.
        if let Some(s) = self.sources.iter_mut().find(|s| s.0 == Some(src)) {
            s.1 += weight;
        } else if let Some(s) = self.sources.iter_mut().find(|s| s.1 == 0) {
            *s = (Some(src), weight);
        } else {
            let cut = self.sources.iter().map(|s| s.1).min().unwrap_or(0).min(weight);
            for s in &mut self.sources {
                s.1 -= cut;
            }
            if weight > cut
                && let Some(s) = self.sources.iter_mut().find(|s| s.1 == 0)
            {
                *s = (Some(src), weight - cut);
            }
        }
        flood
    }

    /// Closes the window if it has run its length: the flood it held, if a warning is due.
    fn roll(&mut self, now: Time) -> Option<Flood> {
        let start = *self.start.get_or_insert(now);
        let len = now - start;
        if len < WINDOW {
            return None;
        }
        let secs = len.as_secs_f64();
        let rate = (self.total as f64 / secs) as u64;
        let due = self.last_warning.is_none_or(|t| now - t >= WARN_EVERY);
        let flood = (rate >= FLOOD_RATE && due).then(|| {
            let total = self.total.max(1) as f64;
            let top = self.sources.iter().filter_map(|s| Some((s.0?, s.1))).max_by_key(|s| s.1);
            let mut reasons: Vec<(&'static str, f64)> = REASONS
                .iter()
                .zip(self.reasons)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (*r, n as f64 / total))
                .collect();
            reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
            Flood { rate, top: top.map(|(ip, n)| (ip, (n as f64 / total).min(1.0))), reasons }
        });
        if flood.is_some() {
            self.last_warning = Some(now);
            self.warnings += 1;
        }
        *self =
            FloodWatch { last_warning: self.last_warning, warnings: self.warnings, ..FloodWatch::default() };
        self.start = Some(now);
        flood
    }
}

impl std::fmt::Display for Flood {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "~{} datagrams/s dropped", self.rate)?;
        if let Some((ip, share)) = self.top {
            write!(f, ", {:.0} % from {ip}", share * 100.0)?;
        }
        let reasons: Vec<String> =
            self.reasons.iter().map(|(r, s)| format!("{r} {:.0} %", s * 100.0)).collect();
        write!(f, " ({})", reasons.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Time {
        Time::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn a_flood_is_reported_once_per_interval_naming_its_source() {
        let mut w = FloodWatch::default();
        let (attacker, peer): (IpAddr, IpAddr) = ("10.0.0.66".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut floods = Vec::new();
        // 25 s: 20 000 weighted junk/s from the attacker (5 records of weight 4 a ms), a trickle of
        // ICRC errors from the peer, a few other sources.
        for ms in 0..25_000u64 {
            for k in 0..5 {
                if let Some(f) = w.record(t(ms), attacker, (ms as usize + k) % 3 + 1, 4) {
                    floods.push((ms, f));
                }
            }
            if ms % 10 == 0 {
                w.record(t(ms), peer, 9, 1);
                let other: IpAddr = format!("10.0.1.{}", ms % 200).parse().unwrap();
                w.record(t(ms), other, 0, 1);
            }
        }
        assert_eq!(floods.iter().map(|(ms, _)| ms / 1000).collect::<Vec<_>>(), [1, 11, 21]);
        let f = &floods[0].1;
        assert!(f.rate >= 20_000 && f.rate < 21_000, "{f:?}");
        let (ip, share) = f.top.unwrap();
        assert_eq!(ip, attacker);
        assert!(share > 0.95, "{share}");
        assert_eq!(f.reasons.len(), 5);
        let text = f.to_string();
        assert!(text.contains("from 10.0.0.66") && text.contains("pkey 33 %"), "{text}");
    }

    #[test]
    fn the_reasons_begin_with_the_filters() {
        use crate::engine::backend::filter::Junk;
        for j in Junk::ALL {
            assert_eq!(REASONS[j as usize], j.name());
        }
    }

    #[test]
    fn a_trickle_is_no_flood() {
        let mut w = FloodWatch::default();
        let src: IpAddr = "10.0.0.2".parse().unwrap();
        for ms in 0..5_000u64 {
            assert!(w.record(t(ms), src, 9, 5).is_none());
        }
        assert_eq!(w.warnings, 0);
    }
}
