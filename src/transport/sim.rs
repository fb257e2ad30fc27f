//! A virtual-time simulator: endpoints with queue pairs joined by a seeded lossy link.
//!
//! After quinn-proto's test `Pair`: [`Pair::step`] jumps to the next event (a packet arriving,
//! a timer, a transmitter becoming free), and [`Pair::run_until`] steps until a condition
//! holds. The [`LossyLink`] drops, duplicates, reorders, corrupts and delays packets, each at
//! its own rate, from a seeded generator, so that every run replays exactly from its seed.
//! Packets travel with a real ICRC over a fixed IPv4/UDP pseudo header: corruption is caught
//! the way the engine catches it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;
use std::time::Duration;

use super::memory::VecMemory;
use super::qp::{Mtu, Qp, QpAttrUpdate, QpCaps, QpState, QpType};
use super::wr::WorkCompletion;
use super::{Access, Time};
use crate::wire::roce::{IpRepr, RoceFrameRepr};
use crate::wire::{Packet, Psn, ROCEV2_UDP_PORT};

/// A small, fast, seedable generator (SplitMix64). Deterministic across platforms.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A float in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// How a link mistreats packets. Rates are probabilities per packet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Packets lost.
    pub drop: f64,
    /// Packets delivered twice.
    pub duplicate: f64,
    /// Packets held back so that later ones overtake them.
    pub reorder: f64,
    /// Packets with one bit flipped (caught by the ICRC).
    pub corrupt: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Extra random delay, uniform in `0..jitter` (jitter also reorders).
    pub jitter: Duration,
    /// Serialization time per byte (the link's speed); zero for infinitely fast.
    pub ns_per_byte: f64,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::from_micros(5),
            jitter: Duration::ZERO,
            ns_per_byte: 0.1,
        }
    }
}

impl LinkConfig {
    /// A link that loses `p` of its packets and mistreats others at related rates: a quarter
    /// as many duplicated, reordered and corrupted.
    pub fn lossy(p: f64) -> LinkConfig {
        LinkConfig {
            drop: p,
            duplicate: p / 4.0,
            reorder: p / 4.0,
            corrupt: p / 4.0,
            ..LinkConfig::default()
        }
    }
}

/// What a link did, for the test's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered.
    pub sent: u64,
    /// Packets delivered (duplicates count twice).
    pub delivered: u64,
    /// Dropped.
    pub dropped: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Reordered.
    pub reordered: u64,
    /// Corrupted.
    pub corrupted: u64,
}

/// A one-way link with loss, duplication, reordering, corruption and delay.
#[derive(Debug)]
pub struct LossyLink {
    cfg: LinkConfig,
    rng: Rng,
    seq: u64,
    queue: BinaryHeap<Reverse<(Time, u64, Vec<u8>)>>,
    free_at: Time,
    /// What happened so far.
    pub stats: LinkStats,
}

impl LossyLink {
    /// A link with its own seed.
    pub fn new(cfg: LinkConfig, seed: u64) -> LossyLink {
        LossyLink {
            cfg,
            rng: Rng::new(seed),
            seq: 0,
            queue: BinaryHeap::new(),
            free_at: Time::ZERO,
            stats: LinkStats::default(),
        }
    }

    /// Changes the link's behaviour from now on.
    pub fn set_config(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
    }

    /// The link's behaviour.
    pub fn config(&self) -> LinkConfig {
        self.cfg
    }

    /// When the transmitter can start the next packet.
    pub fn free_at(&self) -> Time {
        self.free_at
    }

    /// Offers a packet at `now`.
    pub fn send(&mut self, now: Time, mut pkt: Vec<u8>) {
        self.stats.sent += 1;
        let start = now.max(self.free_at);
        let ser = Duration::from_nanos((pkt.len() as f64 * self.cfg.ns_per_byte) as u64);
        self.free_at = start + ser;
        if self.rng.chance(self.cfg.drop) {
            self.stats.dropped += 1;
            return;
        }
        if self.rng.chance(self.cfg.corrupt) && !pkt.is_empty() {
            let bit = self.rng.below(pkt.len() as u64 * 8);
            pkt[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        let copies = if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for c in 0..copies {
            let mut at = self.free_at + self.cfg.delay;
            if !self.cfg.jitter.is_zero() {
                at = at + Duration::from_nanos(self.rng.below(self.cfg.jitter.as_nanos() as u64));
            }
            if c == 1 || self.rng.chance(self.cfg.reorder) {
                // Held back by a few packet times plus a delay: later packets overtake it.
                self.stats.reordered += (c == 0) as u64;
                at = at + self.cfg.delay * 2 + Duration::from_nanos(self.rng.below(50_000));
            }
            self.seq += 1;
            let p = if c + 1 == copies { std::mem::take(&mut pkt) } else { pkt.clone() };
            self.queue.push(Reverse((at, self.seq, p)));
        }
    }

    /// The next packet due at or before `now`.
    pub fn poll_deliver(&mut self, now: Time) -> Option<Vec<u8>> {
        if self.queue.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
            self.stats.delivered += 1;
            self.queue.pop().map(|Reverse((_, _, p))| p)
        } else {
            None
        }
    }

    /// When the next packet arrives.
    pub fn next_delivery(&self) -> Option<Time> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Packets in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}

/// The pseudo IP/UDP headers the simulator's ICRC covers.
fn frame_repr(from_a: bool) -> RoceFrameRepr {
    let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (src, dst) = if from_a { (a, b) } else { (b, a) };
    RoceFrameRepr {
        ip: IpRepr::V4 { src, dst, tos: 0, ttl: 64, id: 0, df: true },
        src_port: 0xc000,
        dst_port: ROCEV2_UDP_PORT,
        udp_checksum: false,
    }
}

/// One side of a [`Pair`]: queue pairs, their memory and what they completed.
#[derive(Debug)]
pub struct Endpoint {
    /// The queue pairs; `qps[i]` is connected to the other side's `qps[i]`.
    pub qps: Vec<Qp>,
    /// Registered memory.
    pub mem: VecMemory,
    /// Send completions, in the order they were produced.
    pub send_wcs: Vec<WorkCompletion>,
    /// Receive completions, in the order they were produced.
    pub recv_wcs: Vec<WorkCompletion>,
    /// Packets dropped on receive because their ICRC was wrong.
    pub icrc_errors: u64,
    /// Packets dropped on receive because they did not parse or named no QP here.
    pub malformed: u64,
    from_a: bool,
    buf: Vec<u8>,
    /// A packet was sent in the last round: there may be more.
    busy: bool,
}

impl Endpoint {
    fn new(from_a: bool) -> Endpoint {
        Endpoint {
            qps: Vec::new(),
            mem: VecMemory::new(),
            send_wcs: Vec::new(),
            recv_wcs: Vec::new(),
            icrc_errors: 0,
            malformed: 0,
            from_a,
            buf: vec![0; 4096 + 28 + 64],
            busy: false,
        }
    }

    /// The QP at index `i`.
    pub fn qp(&mut self, i: usize) -> &mut Qp {
        &mut self.qps[i]
    }

    fn receive(&mut self, now: Time, bytes: &[u8]) {
        let f = frame_repr(!self.from_a);
        let Ok(p) = Packet::new_checked(bytes) else {
            self.malformed += 1;
            return;
        };
        if f.icrc(p.without_icrc()).ok() != Some(p.icrc()) {
            self.icrc_errors += 1;
            return;
        }
        let qpn = p.bth().dest_qp();
        let Some(qp) = self.qps.iter_mut().find(|q| q.qpn() == qpn) else {
            self.malformed += 1;
            return;
        };
        qp.handle_packet(now, &p, &self.mem);
        self.drain();
    }

    fn drain(&mut self) {
        for qp in &mut self.qps {
            while let Some(wc) = qp.poll_send_completion() {
                self.send_wcs.push(wc);
            }
            while let Some(wc) = qp.poll_recv_completion() {
                self.recv_wcs.push(wc);
            }
        }
    }

    fn timers(&mut self, now: Time) {
        for qp in &mut self.qps {
            if qp.poll_timeout().is_some_and(|t| t <= now) {
                qp.handle_timeout(now, &self.mem);
            }
        }
        self.drain();
    }

    fn next_timer(&self) -> Option<Time> {
        self.qps.iter().filter_map(|q| q.poll_timeout()).min()
    }

    /// Sends what the QPs have, while the link's transmitter is free at `now`.
    fn transmit(&mut self, now: Time, link: &mut LossyLink) {
        self.busy = false;
        let f = frame_repr(self.from_a);
        loop {
            if link.free_at() > now {
                self.busy = true;
                break;
            }
            let mut sent = false;
            for qp in &mut self.qps {
                if let Some(t) = qp.poll_transmit(now, &self.mem, &mut self.buf) {
                    let pkt = &mut self.buf[..t.len];
                    let body = t.len - crate::wire::ICRC_LEN;
                    let crc = f.icrc(&pkt[..body]).expect("well-formed packet");
                    pkt[body..].copy_from_slice(&crc.to_le_bytes());
                    link.send(now, pkt.to_vec());
                    sent = true;
                }
            }
            if !sent {
                // Nothing more to send: an RC QP with outstanding work must be waiting on a
                // timer, or no retry and no error would ever come.
                for qp in &self.qps {
                    assert!(!qp.silently_stalled(), "silent stall at {now:?}: {}", qp.debug_state());
                }
                break;
            }
        }
        self.drain();
    }
}

/// Settings of a [`Pair`].
#[derive(Debug, Clone, Copy)]
pub struct PairConfig {
    /// Seed of both links.
    pub seed: u64,
    /// Path MTU.
    pub mtu: Mtu,
    /// Link from A to B.
    pub a_to_b: LinkConfig,
    /// Link from B to A.
    pub b_to_a: LinkConfig,
    /// Number of connected QP pairs.
    pub qps: usize,
    /// Transport type.
    pub qp_type: QpType,
    /// QP capacities.
    pub caps: QpCaps,
    /// Local ACK timeout code.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// RNR timer code the responders ask for.
    pub min_rnr_timer: u8,
    /// READ/atomic depth both ways.
    pub rd_atomic: u8,
    /// Initial PSNs (A's send PSN is `psn`, B's is `psn + 0x100000`).
    pub psn: u32,
    /// The QPs' least probe interval ([`super::QpTuning::probe_min`]).
    pub probe_min: Duration,
    /// The QPs' least tail probe interval ([`super::QpTuning::tail_probe_min`]).
    pub tail_probe_min: Option<Duration>,
}

impl Default for PairConfig {
    fn default() -> PairConfig {
        PairConfig {
            seed: 1,
            mtu: Mtu::Mtu1024,
            a_to_b: LinkConfig::default(),
            b_to_a: LinkConfig::default(),
            qps: 1,
            qp_type: QpType::Rc,
            caps: QpCaps {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 8,
                max_recv_sge: 8,
                max_inline_data: 256,
            },
            timeout: 8, // 4.096 us * 2^8 ~ 1 ms
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
            psn: 0x12_3456,
            probe_min: super::qp::PROBE_MIN,
            tail_probe_min: Some(super::qp::TAIL_PROBE_MIN),
        }
    }
}

/// Protection domain of both endpoints' QPs and regions.
pub const PD: u32 = 1;

/// Two endpoints and the links between them, in virtual time.
#[derive(Debug)]
pub struct Pair {
    /// Endpoint A.
    pub a: Endpoint,
    /// Endpoint B.
    pub b: Endpoint,
    /// A to B.
    pub ab: LossyLink,
    /// B to A.
    pub ba: LossyLink,
    /// Current virtual time.
    pub now: Time,
}

impl Pair {
    /// Two endpoints with `cfg.qps` connected QPs each, in RTS.
    pub fn new(cfg: PairConfig) -> Pair {
        let mut p = Pair {
            a: Endpoint::new(true),
            b: Endpoint::new(false),
            ab: LossyLink::new(cfg.a_to_b, cfg.seed),
            ba: LossyLink::new(cfg.b_to_a, cfg.seed ^ 0x5555_5555_5555_5555),
            now: Time::ZERO,
        };
        for i in 0..cfg.qps {
            let (qa, qb) = (0x11 + 2 * i as u32, 0x12 + 2 * i as u32);
            let (pa, pb) =
                (Psn::new(cfg.psn + i as u32 * 1000), Psn::new(cfg.psn + 0x10_0000 + i as u32 * 1000));
            p.a.qps.push(Self::connected(cfg, qa, qb, pb, pa));
            p.b.qps.push(Self::connected(cfg, qb, qa, pa, pb));
        }
        p
    }

    fn connected(cfg: PairConfig, qpn: u32, dest: u32, rq_psn: Psn, sq_psn: Psn) -> Qp {
        let mut qp = Qp::new(qpn, cfg.qp_type, PD, cfg.caps);
        let ud = cfg.qp_type == QpType::Ud;
        let init = QpAttrUpdate {
            state: Some(QpState::Init),
            access: (!ud).then_some(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC),
            qkey: ud.then_some(super::Qkey::new(0x1111_1111)),
            port: true,
            pkey_index: true,
            ..Default::default()
        };
        qp.modify(&init).expect("RESET->INIT");
        let rc = cfg.qp_type == QpType::Rc;
        let rtr = if ud {
            QpAttrUpdate { state: Some(QpState::Rtr), ..Default::default() }
        } else {
            QpAttrUpdate {
                state: Some(QpState::Rtr),
                av: true,
                path_mtu: Some(cfg.mtu),
                dest_qpn: Some(super::Qpn::new(dest)),
                rq_psn: Some(rq_psn),
                max_dest_rd_atomic: rc.then_some(cfg.rd_atomic),
                min_rnr_timer: rc.then_some(cfg.min_rnr_timer),
                ..Default::default()
            }
        };
        qp.modify(&rtr).expect("INIT->RTR");
        // UD has no path MTU attribute: the port's active MTU applies.
        qp.set_ud_mtu(cfg.mtu);
        let rts = QpAttrUpdate {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: rc.then_some(cfg.timeout),
            retry_cnt: rc.then_some(cfg.retry_cnt),
            rnr_retry: rc.then_some(cfg.rnr_retry),
            max_rd_atomic: rc.then_some(cfg.rd_atomic),
            ..Default::default()
        };
        qp.modify(&rts).expect("RTR->RTS");
        qp.set_tuning(super::QpTuning {
            probe_min: cfg.probe_min,
            tail_probe_min: cfg.tail_probe_min,
            ..qp.tuning()
        });
        qp
    }

    /// Processes everything due now, then advances virtual time to the next event.
    /// Returns `false` when nothing is left to happen (no packet in flight, no timer, no
    /// transmitter busy).
    pub fn step(&mut self) -> bool {
        let now = self.now;
        while let Some(p) = self.ab.poll_deliver(now) {
            self.b.receive(now, &p);
        }
        while let Some(p) = self.ba.poll_deliver(now) {
            self.a.receive(now, &p);
        }
        self.a.timers(now);
        self.b.timers(now);
        self.a.transmit(now, &mut self.ab);
        self.b.transmit(now, &mut self.ba);
        let mut next: Option<Time> = None;
        let mut consider = |t: Option<Time>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        consider(self.ab.next_delivery());
        consider(self.ba.next_delivery());
        consider(self.a.next_timer());
        consider(self.b.next_timer());
        consider(self.a.busy.then(|| self.ab.free_at()));
        consider(self.b.busy.then(|| self.ba.free_at()));
        match next {
            Some(t) => {
                self.now = t.max(self.now);
                true
            }
            None => false,
        }
    }

    /// Steps until `done` holds or nothing is left to happen, for at most `limit` of virtual
    /// time. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair) -> bool) -> bool {
        let deadline = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.now > deadline || !self.step() {
                return done(self);
            }
        }
    }

    /// Steps until nothing is left to happen (or `limit` of virtual time passed).
    pub fn drive(&mut self, limit: Duration) -> bool {
        let deadline = self.now + limit;
        while self.step() {
            if self.now > deadline {
                return false;
            }
        }
        true
    }
}
