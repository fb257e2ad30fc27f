//! The fate of a packet: a pure function of the SPEC's seed and the packet's identity.
//!
//! A packet is identified by its direction (sent or received), its local QP, its PSN, its BTH
//! opcode and how many times that PSN has passed before in that direction on that QP
//! ([`PacketKey`]). Nothing else — not the time, not the thread, not what else is in flight —
//! goes into [`fate`], so a program that sends the same packets in the same order meets the
//! same faults, run after run, and a retransmission (the same PSN once more) has a fate of its
//! own: a packet lost once is not lost forever.
//!
//! Programs pick a random first PSN (ibverbs examples, perftest, the RDMA CM), so the PSN that
//! goes into the key is counted from the first PSN the [`Tracker`] saw on that QP, in that
//! direction, for that kind of packet (requests, and responses, which carry the peer's PSNs).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::spec::FaultSpec;

/// A packet as the fate function sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketKey {
    /// Sent (`true`) or received.
    pub tx: bool,
    /// The local QP: the sender of a sent packet, the destination of a received one.
    pub qpn: u32,
    /// The PSN, counted from the first the [`Tracker`] saw (see the module documentation).
    pub psn: u32,
    /// The BTH opcode.
    pub opcode: u8,
    /// How many times this PSN passed before (0: the first transmission).
    pub nth: u32,
}

/// What happens to a packet. The default is nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fate {
    /// Lost.
    pub drop: bool,
    /// One bit flipped, chosen by this random number (see [`corrupt_bit`]).
    pub corrupt: Option<u64>,
    /// Delivered twice.
    pub duplicate: bool,
    /// Held back behind later packets.
    pub reorder: bool,
    /// Held for this long (delay plus jitter).
    pub delay: Duration,
}

impl Fate {
    /// Whether the packet goes through untouched.
    pub fn is_clean(&self) -> bool {
        *self == Fate::default()
    }
}

/// The SplitMix64 finalizer: a bijection of 64-bit words with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The packet's identity under `seed`, hashed: what every decision about it starts from.
fn identity(seed: u64, key: &PacketKey) -> u64 {
    // (tx, opcode and the QP's 24 bits in one word; the PSN's 24 bits and nth in another)
    let a = u64::from(key.tx) << 63 | u64::from(key.opcode) << 32 | u64::from(key.qpn);
    let b = u64::from(key.nth) << 32 | u64::from(key.psn);
    mix(mix(mix(seed ^ 0x5bd1_e995_7f4a_7c15) ^ a) ^ b)
}

/// 64 random bits for one decision (`salt`) about the packet whose [`identity`] is `id`.
fn draw(id: u64, salt: u64) -> u64 {
    mix(id ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// True with probability `percent` / 100, from 64 random bits.
fn chance(bits: u64, percent: f64) -> bool {
    percent > 0.0 && ((bits >> 11) as f64 / (1u64 << 53) as f64) * 100.0 < percent
}

// One salt per decision, so that they are independent of each other.
const LOSS: u64 = 1;
const CORRUPT: u64 = 2;
const CORRUPT_BIT: u64 = 3;
const DUP: u64 = 4;
const REORDER: u64 = 5;
const JITTER: u64 = 6;

/// The fate of packet `key` under `spec`: nothing for a packet of a direction or QP or opcode
/// the SPEC leaves alone. The black holes and `rnr` are not the packet's fate (they are
/// scheduled, not random) and are not decided here.
pub fn fate(spec: &FaultSpec, key: &PacketKey) -> Fate {
    if !spec.acts_on(key.tx) || !spec.selects(key.qpn, key.opcode) {
        return Fate::default();
    }
    let id = identity(spec.seed, key);
    if chance(draw(id, LOSS), spec.loss) {
        return Fate { drop: true, ..Fate::default() };
    }
    let corrupt = chance(draw(id, CORRUPT), spec.corrupt).then(|| draw(id, CORRUPT_BIT));
    let mut delay = spec.delay;
    let jitter = spec.jitter.as_nanos() as u64;
    if jitter > 0 {
        delay += Duration::from_nanos(draw(id, JITTER) % jitter);
    }
    Fate {
        drop: false,
        corrupt,
        duplicate: chance(draw(id, DUP), spec.dup),
        reorder: chance(draw(id, REORDER), spec.reorder),
        delay,
    }
}

/// Bytes of the BTH, which [`corrupt_bit`] leaves alone.
const BTH_LEN: usize = 12;

/// The bit to flip in a packet of `len` bytes (BTH through ICRC) for [`Fate::corrupt`]'s
/// random number: one after the BTH (its extension headers, payload or ICRC). The ICRC covers
/// all of them and catches every single-bit error there, so the receiver drops the packet for
/// its ICRC exactly as a NIC drops a corrupted frame; the BTH is left alone because one of its
/// bytes is masked out of the ICRC (a flip there would go unnoticed) and its opcode and pad
/// count decide how the packet parses. `None` for a packet too short to have a BTH and ICRC.
pub fn corrupt_bit(bits: u64, len: usize) -> Option<usize> {
    let covered = len.checked_sub(BTH_LEN).filter(|n| *n >= 4)?;
    Some(BTH_LEN * 8 + (bits % (covered as u64 * 8)) as usize)
}

/// PSNs whose transmissions are counted; past it the oldest is forgotten (a go-back-N window
/// is at most a few thousand packets).
const MAX_COUNTED: usize = 1 << 16;
/// QPs whose first PSNs are remembered; past it the table starts over.
const MAX_BASES: usize = 1 << 16;

/// Turns the packets of one direction pair into [`PacketKey`]s: remembers each QP's first PSN
/// per kind and counts the transmissions of every PSN. Deterministic: the keys depend only on
/// the sequence of packets it was shown.
#[derive(Debug, Default)]
pub struct Tracker {
    /// First PSN seen, by (sent, local QP, response), packed.
    bases: HashMap<u64, u32, Mixed>,
    /// Transmissions so far, by (sent, QP, response, PSN) packed, and the order they were
    /// first seen in (the oldest is forgotten first).
    counts: HashMap<u64, u32, Mixed>,
    order: VecDeque<u64>,
}

/// The maps' hasher: the keys are packed integers, so one [`mix`] of the word is as good as
/// SipHash here and several times cheaper (the tracker sees every packet).
#[derive(Debug, Clone, Copy, Default)]
struct Mixed;

impl std::hash::BuildHasher for Mixed {
    type Hasher = MixHasher;
    fn build_hasher(&self) -> MixHasher {
        MixHasher(0)
    }
}

/// See [`Mixed`].
#[derive(Debug)]
struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = mix(self.0 ^ u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(self.0 ^ v);
    }
}

impl Tracker {
    /// The key of a packet that is passing now: `tx` (sent), the local QP, the BTH opcode and
    /// PSN (24 bits), and whether the opcode is a response (its PSN is the peer's).
    pub fn key(&mut self, tx: bool, qpn: u32, opcode: u8, psn: u32, response: bool) -> PacketKey {
        // (sent, QP, response) in bits 24..50 above a PSN's 24 bits
        let qp_key = u64::from(tx) << 49 | u64::from(response) << 48 | u64::from(qpn & 0xff_ffff) << 24;
        if self.bases.len() >= MAX_BASES && !self.bases.contains_key(&qp_key) {
            self.bases.clear();
        }
        let base = *self.bases.entry(qp_key).or_insert(psn & 0xff_ffff);
        let rel = psn.wrapping_sub(base) & 0xff_ffff;
        let id = qp_key | u64::from(rel);
        let nth = match self.counts.get_mut(&id) {
            Some(n) => {
                *n = n.saturating_add(1);
                *n
            }
            None => {
                if self.order.len() >= MAX_COUNTED
                    && let Some(old) = self.order.pop_front()
                {
                    self.counts.remove(&old);
                }
                self.counts.insert(id, 0);
                self.order.push_back(id);
                0
            }
        };
        PacketKey { tx, qpn, psn: rel, opcode, nth }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> FaultSpec {
        FaultSpec::parse(s).unwrap()
    }

    fn key(psn: u32, nth: u32) -> PacketKey {
        PacketKey { tx: true, qpn: 17, psn, opcode: 4, nth }
    }

    #[test]
    fn the_same_packet_meets_the_same_fate() {
        let s = spec("seed=3,loss=5%,dup=5%,corrupt=5%,reorder=5%,delay=1ms,jitter=1ms");
        for psn in 0..2000 {
            assert_eq!(fate(&s, &key(psn, 0)), fate(&s, &key(psn, 0)));
        }
    }

    #[test]
    fn rates_come_out_as_asked() {
        let s = spec("seed=9,loss=5%,dup=2%,corrupt=1%,reorder=10%");
        let n = 200_000u32;
        let (mut lost, mut dup, mut corrupt, mut reorder) = (0u32, 0u32, 0u32, 0u32);
        for psn in 0..n {
            let f = fate(&s, &key(psn, 0));
            lost += f.drop as u32;
            dup += f.duplicate as u32;
            corrupt += f.corrupt.is_some() as u32;
            reorder += f.reorder as u32;
        }
        let kept = n - lost;
        let near = |got: u32, of: u32, pct: f64| {
            let want = of as f64 * pct / 100.0;
            (got as f64 - want).abs() < 5.0 * want.sqrt() + 1.0
        };
        assert!(near(lost, n, 5.0), "{lost}");
        assert!(near(dup, kept, 2.0), "{dup}");
        assert!(near(corrupt, kept, 1.0), "{corrupt}");
        assert!(near(reorder, kept, 10.0), "{reorder}");
        // 0% never, 100% always.
        let none = spec("loss=0%");
        let all = spec("loss=100%");
        assert!((0..1000).all(|p| !fate(&none, &key(p, 0)).drop && fate(&all, &key(p, 0)).drop));
    }

    #[test]
    fn a_retransmission_has_a_fate_of_its_own() {
        let s = spec("seed=1,loss=50%");
        // Of packets lost at their first transmission, about half are lost at the second.
        let lost: Vec<u32> = (0..10_000).filter(|p| fate(&s, &key(*p, 0)).drop).collect();
        let again = lost.iter().filter(|p| fate(&s, &key(**p, 1)).drop).count();
        assert!((again as f64 - lost.len() as f64 / 2.0).abs() < 200.0, "{again} of {}", lost.len());
        // And every packet gets through eventually.
        for p in lost {
            assert!((0..64).any(|n| !fate(&s, &key(p, n)).drop));
        }
    }

    #[test]
    fn seeds_directions_and_qps_draw_differently() {
        let a = spec("seed=1,loss=50%");
        let b = spec("seed=2,loss=50%");
        let lost = |s: &FaultSpec, k: &dyn Fn(u32) -> PacketKey| -> Vec<bool> {
            (0..256).map(|p| fate(s, &k(p)).drop).collect()
        };
        let base = lost(&a, &|p| key(p, 0));
        assert_ne!(base, lost(&b, &|p| key(p, 0)));
        assert_ne!(base, lost(&a, &|p| PacketKey { tx: false, ..key(p, 0) }));
        assert_ne!(base, lost(&a, &|p| PacketKey { qpn: 18, ..key(p, 0) }));
        assert_ne!(base, lost(&a, &|p| PacketKey { opcode: 0x11, ..key(p, 0) }));
    }

    #[test]
    fn filters_and_direction_leave_other_packets_alone() {
        let s = spec("loss=100%,dir=rx,qp=17,opcode=RC_SEND_ONLY");
        assert!(fate(&s, &PacketKey { tx: false, ..key(0, 0) }).drop);
        assert!(fate(&s, &key(0, 0)).is_clean(), "tx");
        assert!(fate(&s, &PacketKey { tx: false, qpn: 18, ..key(0, 0) }).is_clean());
        assert!(fate(&s, &PacketKey { tx: false, opcode: 0x11, ..key(0, 0) }).is_clean());
    }

    #[test]
    fn delay_and_jitter() {
        let s = spec("delay=1ms,jitter=500us");
        let mut seen = std::collections::HashSet::new();
        for p in 0..1000 {
            let d = fate(&s, &key(p, 0)).delay;
            assert!(d >= Duration::from_millis(1) && d < Duration::from_micros(1500), "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 900, "jitter varies: {}", seen.len());
        assert_eq!(fate(&spec("delay=2ms"), &key(5, 0)).delay, Duration::from_millis(2));
    }

    #[test]
    fn the_tracker_counts_from_the_first_psn_and_counts_retransmissions() {
        let mut t = Tracker::default();
        // Two runs of one program with different random first PSNs get the same keys.
        for first in [0x12_3456u32, 0xff_fffe] {
            let mut t = Tracker::default();
            let keys: Vec<PacketKey> =
                (0..4).map(|i| t.key(true, 17, 4, (first + i) & 0xff_ffff, false)).collect();
            assert_eq!(
                keys.iter().map(|k| (k.psn, k.nth)).collect::<Vec<_>>(),
                [(0, 0), (1, 0), (2, 0), (3, 0)]
            );
        }
        assert_eq!(t.key(true, 17, 4, 100, false).nth, 0);
        assert_eq!(t.key(true, 17, 4, 101, false).nth, 0);
        assert_eq!(t.key(true, 17, 4, 100, false).nth, 1, "a retransmission");
        assert_eq!(t.key(true, 17, 4, 100, false).nth, 2);
        // Responses count from their own first PSN; the other direction on its own.
        let r = t.key(true, 17, 0x11, 5000, true);
        assert_eq!((r.psn, r.nth), (0, 0));
        assert_eq!(t.key(false, 17, 4, 100, false).nth, 0);
        assert_eq!(t.key(false, 17, 4, 100, false).psn, 0);
        // Every PSN of a window keeps its own count, however many are in flight (a collision
        // between two PSNs resent in turn would lose one forever).
        let mut t = Tracker::default();
        for round in 0..5 {
            for psn in 0..4096 {
                assert_eq!(t.key(true, 9, 4, psn, false).nth, round);
            }
        }
    }

    #[test]
    fn corrupt_bits_are_caught_by_the_icrc() {
        use crate::wire::roce::{IpRepr, RoceFrameRepr};
        let frame = RoceFrameRepr {
            ip: IpRepr::V4 {
                src: [10, 0, 0, 1].into(),
                dst: [10, 0, 0, 2].into(),
                tos: 0,
                ttl: 64,
                id: 0,
                df: true,
            },
            src_port: 0xc000,
            dst_port: 4791,
            udp_checksum: false,
        };
        let mut pkt = vec![0x04u8, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1];
        pkt.extend((0..40u8).map(|i| i.wrapping_mul(37)));
        let crc = frame.icrc(&pkt).unwrap();
        pkt.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(corrupt_bit(7, 15), None);
        for r in 0..(pkt.len() as u64 * 8) {
            let bit = corrupt_bit(r.wrapping_mul(0x9e37_79b9_7f4a_7c15), pkt.len()).unwrap();
            assert!(bit >= 96 && bit < pkt.len() * 8);
            let mut bad = pkt.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let body = bad.len() - 4;
            let stored = u32::from_le_bytes(bad[body..].try_into().unwrap());
            assert_ne!(frame.icrc(&bad[..body]).unwrap(), stored, "bit {bit} went unnoticed");
        }
    }

    proptest::proptest! {
        /// Whatever the packet, the fate is the same twice, and a delay stays within delay + jitter.
        #[test]
        fn fate_is_a_function(seed: u64, tx: bool, qpn in 0u32..0x100_0000, psn in 0u32..0x100_0000, opcode: u8, nth in 0u32..100) {
            let s = FaultSpec { seed, loss: 10.0, dup: 10.0, corrupt: 10.0, reorder: 10.0,
                delay: Duration::from_micros(10), jitter: Duration::from_micros(7), ..FaultSpec::default() };
            let k = PacketKey { tx, qpn, psn, opcode, nth };
            let f = fate(&s, &k);
            proptest::prop_assert_eq!(f, fate(&s, &k));
            if !f.drop {
                proptest::prop_assert!(f.delay >= s.delay && f.delay < s.delay + s.jitter);
            }
        }
    }
}
