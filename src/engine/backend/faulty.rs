//! The fault-injecting decorator: any backend, with the SPEC's faults applied to the packets
//! that leave through it and arrive from it.
//!
//! Each packet's fate comes from [`crate::faults::fate`] (a pure function of the seed and the
//! packet's identity); this applies it. A lost packet is not sent (or not handed to the
//! engine); a duplicated one goes twice; a corrupted one gets one bit flipped after the ICRC
//! was computed; a delayed or reordered one is copied aside and released when its time comes
//! or when `depth` later packets have passed it — from [`Backend::recv`] or [`Backend::send`],
//! whichever the engine calls next, and [`Backend::next_deadline`] wakes the engine for it.
//!
//! Sent packets come in batches whose segment `k` leaves with IPv4 identification `k` where
//! the backend numbers them ([`Backend::gso_numbers_ip_id`]), and the engine computed each
//! ICRC for that identification. A batch the faults leave alone goes to the backend as it is;
//! otherwise the packets that go are regrouped into runs, and a packet that lands at another
//! position of its run than it had gets its ICRC computed again for its new identification
//! (before any corruption, which must survive).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use super::{Backend, Datagram, Outgoing};
use crate::engine::injector::{FaultState, Kind, MAX_HELD, REORDER_MAX_HOLD, event};
use crate::faults::{Tracker, fate};
use crate::wire::roce::{IpRepr, RoceFrameRepr};
use crate::wire::{ICRC_LEN, Opcode};

/// The largest GSO send (UDP payload bytes), as in the engine.
const MAX_GSO_BYTES: usize = 65_507;

/// Where a sent packet goes, and whose it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TxMeta {
    dst: SocketAddr,
    src_ip: IpAddr,
    src_port: u16,
    tos: u8,
    hop_limit: u8,
    flow_label: u32,
    qpn: u32,
}

impl TxMeta {
    fn of(out: &Outgoing<'_>) -> TxMeta {
        TxMeta {
            dst: out.dst,
            src_ip: out.src_ip,
            src_port: out.src_port,
            tos: out.tos,
            hop_limit: out.hop_limit,
            flow_label: out.flow_label,
            qpn: out.qpn,
        }
    }
}

/// A packet held back, and what it needs to go on: for a sent packet where it goes, its
/// position in the batch it came in (its ICRC's IPv4 identification) and the bit to flip; for
/// a received one where it came from.
struct Held<T> {
    bytes: Vec<u8>,
    with: T,
}

struct TxInfo {
    meta: TxMeta,
    index: usize,
    corrupt: Option<usize>,
}

struct RxInfo {
    src: SocketAddr,
    dst: IpAddr,
    dst_port: u16,
    ecn: u8,
    ip_header: Option<Vec<u8>>,
}

/// A delayed packet in the heap, ordered by due time, then by arrival.
struct Delayed<T> {
    due: Instant,
    seq: u64,
    held: Held<T>,
}

impl<T> PartialEq for Delayed<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl<T> Eq for Delayed<T> {}
impl<T> PartialOrd for Delayed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Delayed<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// A reordered packet: it goes on once `emitted` reaches `at` (the packets that were to
/// overtake it have passed) or at `by`, whichever comes first, and is then delayed by `delay`.
struct Reordered<T> {
    at: u64,
    by: Instant,
    delay: std::time::Duration,
    held: Held<T>,
}

/// The packets of one direction that are held back: reordered ones in arrival order (their
/// release counts and time limits grow with it, so the front is always the next), delayed
/// ones in a heap by due time. Every operation is O(log n).
struct HeldQueue<T> {
    reordered: VecDeque<Reordered<T>>,
    delayed: BinaryHeap<Reverse<Delayed<T>>>,
    /// Packets that have left in this direction so far.
    emitted: u64,
    seq: u64,
}

impl<T> HeldQueue<T> {
    fn new() -> HeldQueue<T> {
        HeldQueue { reordered: VecDeque::new(), delayed: BinaryHeap::new(), emitted: 0, seq: 0 }
    }

    fn len(&self) -> usize {
        self.reordered.len() + self.delayed.len()
    }

    /// Holds a packet for `delay`, after `depth` later packets have passed it if reordered.
    fn hold(&mut self, now: Instant, delay: std::time::Duration, reorder: Option<u32>, held: Held<T>) {
        match reorder {
            Some(depth) => self.reordered.push_back(Reordered {
                at: self.emitted + u64::from(depth),
                by: now + REORDER_MAX_HOLD,
                delay,
                held,
            }),
            None => self.delay(now + delay, held),
        }
    }

    fn delay(&mut self, due: Instant, held: Held<T>) {
        self.seq += 1;
        self.delayed.push(Reverse(Delayed { due, seq: self.seq, held }));
    }

    /// One packet left in this direction.
    fn passed(&mut self) {
        self.emitted += 1;
    }

    /// The next held packet to let go at `now`, earliest due first.
    fn pop_ready(&mut self, now: Instant) -> Option<Held<T>> {
        while self.reordered.front().is_some_and(|r| self.emitted >= r.at || r.by <= now) {
            let r = self.reordered.pop_front()?;
            self.delay(now + r.delay, r.held);
        }
        if self.delayed.peek().is_some_and(|Reverse(d)| d.due <= now) {
            return self.delayed.pop().map(|Reverse(d)| d.held);
        }
        None
    }

    fn next_due(&self) -> Option<Instant> {
        let reordered = self.reordered.front().map(|r| r.by);
        let delayed = self.delayed.peek().map(|Reverse(d)| d.due);
        reordered.into_iter().chain(delayed).min()
    }
}

/// What to do with one packet.
enum Action {
    Pass,
    Drop,
    /// Goes now, bit `corrupt` flipped, twice if `duplicate`.
    Now {
        corrupt: Option<usize>,
        duplicate: bool,
    },
    /// Held for `delay`, after `reorder` later packets have passed it if reordered (twice if
    /// `duplicate`).
    Hold {
        delay: std::time::Duration,
        reorder: Option<u32>,
        corrupt: Option<usize>,
        duplicate: bool,
    },
}

/// What the decorator keeps besides the backend it wraps.
struct Side {
    state: Arc<FaultState>,
    tracker: Tracker,
    held_tx: HeldQueue<TxInfo>,
    held_rx: HeldQueue<RxInfo>,
}

impl Side {
    /// Decides the fate of a packet (`pkt`: BTH through ICRC) of local QP `qpn` (for a
    /// received packet: `None`, read from its BTH), counts it and logs it.
    fn decide(&mut self, tx: bool, qpn: Option<u32>, pkt: &[u8], now: Instant) -> Action {
        let dir = if tx { "tx" } else { "rx" };
        let parsed = (pkt.len() >= 12 + ICRC_LEN).then(|| {
            let opcode = Opcode(pkt[0]);
            let dest = u32::from_be_bytes([0, pkt[5], pkt[6], pkt[7]]);
            let psn = u32::from_be_bytes([0, pkt[9], pkt[10], pkt[11]]);
            (opcode, qpn.unwrap_or(dest), psn)
        });
        let spec = &self.state.spec;
        if self.state.blackholed(now) {
            let selected = match parsed {
                Some((op, q, _)) => spec.selects(q, op.0),
                None => spec.qps.is_empty() && spec.opcodes.is_empty(),
            };
            if selected {
                self.state.count(Kind::Dropped);
                if let Some((op, q, psn)) = parsed {
                    event(dir, q, psn, op, 0, "blackhole");
                }
                return Action::Drop;
            }
        }
        let Some((opcode, q, psn)) = parsed else { return Action::Pass };
        if !spec.has_random_faults() || !spec.acts_on(tx) || !spec.selects(q, opcode.0) {
            return Action::Pass;
        }
        let response = opcode.info().is_some_and(|i| i.direction == crate::wire::Direction::Response);
        let key = self.tracker.key(tx, q, opcode.0, psn, response);
        let f = fate(spec, &key);
        if f.is_clean() {
            return Action::Pass;
        }
        let note = |what| event(dir, q, psn, opcode, key.nth, what);
        if f.drop {
            self.state.count(Kind::Dropped);
            note("drop");
            return Action::Drop;
        }
        let corrupt = f.corrupt.and_then(|r| crate::faults::fate::corrupt_bit(r, pkt.len()));
        if corrupt.is_some() {
            self.state.count(Kind::Corrupted);
            note("corrupt");
        }
        if f.duplicate {
            self.state.count(Kind::Duplicated);
            note("duplicate");
        }
        if !f.delay.is_zero() {
            self.state.count(Kind::Delayed);
            note("delay");
        }
        if f.reorder {
            self.state.count(Kind::Reordered);
            note("reorder");
        }
        if f.delay.is_zero() && !f.reorder {
            return Action::Now { corrupt, duplicate: f.duplicate };
        }
        Action::Hold {
            delay: f.delay,
            reorder: f.reorder.then_some(spec.depth),
            corrupt,
            duplicate: f.duplicate,
        }
    }

    /// Whether no packet can meet a fault at `now`: no random faults, no black hole.
    fn untouched(&self, now: Instant) -> bool {
        !self.state.spec.has_random_faults() && !self.state.blackholed(now)
    }

    /// Room for one more held packet of a direction; if there is none, the packet is lost.
    fn room(&self, tx: bool) -> bool {
        let held = if tx { self.held_tx.len() } else { self.held_rx.len() };
        if held >= MAX_HELD {
            self.state.count(Kind::Dropped);
            return false;
        }
        true
    }

    /// A received packet.
    fn on_rx(&mut self, d: Datagram<'_>, now: Instant, f: &mut dyn FnMut(Datagram<'_>)) {
        match self.decide(false, None, d.payload, now) {
            Action::Pass => f(d),
            Action::Drop => return,
            Action::Now { corrupt, duplicate } => {
                let mut copy = d.payload.to_vec();
                flip(&mut copy, corrupt);
                for _ in 0..1 + duplicate as usize {
                    f(Datagram { payload: &copy, ..d });
                }
            }
            Action::Hold { delay, reorder, corrupt, duplicate } => {
                let mut bytes = d.payload.to_vec();
                flip(&mut bytes, corrupt);
                for _ in 0..1 + duplicate as usize {
                    if self.room(false) {
                        let with = RxInfo {
                            src: d.src,
                            dst: d.dst,
                            dst_port: d.dst_port,
                            ecn: d.ecn,
                            ip_header: d.ip_header.map(<[u8]>::to_vec),
                        };
                        self.held_rx.hold(now, delay, reorder, Held { bytes: bytes.clone(), with });
                    }
                }
                return;
            }
        }
        self.held_rx.passed();
        self.release_rx(now, f);
    }

    /// Hands the held received packets that are ready to the engine.
    fn release_rx(&mut self, now: Instant, f: &mut dyn FnMut(Datagram<'_>)) -> usize {
        let mut n = 0;
        while let Some(h) = self.held_rx.pop_ready(now) {
            f(Datagram {
                payload: &h.bytes,
                src: h.with.src,
                dst: h.with.dst,
                dst_port: h.with.dst_port,
                ecn: h.with.ecn,
                ip_header: h.with.ip_header.as_deref(),
            });
            n += 1;
            self.held_rx.passed();
        }
        n
    }
}

/// Flips bit `bit` of `pkt`, if any.
fn flip(pkt: &mut [u8], bit: Option<usize>) {
    if let Some(b) = bit
        && let Some(byte) = pkt.get_mut(b / 8)
    {
        *byte ^= 1 << (b % 8);
    }
}

/// Sent packets regrouped into runs for the backend: equal-sized packets (the last may be
/// shorter) to one destination from one QP.
struct Run {
    buf: Vec<u8>,
    meta: Option<TxMeta>,
    seg: usize,
    count: usize,
    closed: bool,
}

impl Run {
    fn new() -> Run {
        Run { buf: Vec::new(), meta: None, seg: 0, count: 0, closed: false }
    }

    /// Appends a packet that had position `index` in its batch; `numbered`: the backend numbers
    /// the IPv4 identification of a run's packets from 0.
    fn push(
        &mut self,
        inner: &mut dyn Backend,
        meta: TxMeta,
        pkt: &[u8],
        index: usize,
        corrupt: Option<usize>,
        numbered: bool,
    ) -> io::Result<()> {
        let fits = self.meta == Some(meta)
            && !self.closed
            && self.count < inner.max_segments()
            && pkt.len() <= self.seg
            && (self.count + 1) * self.seg <= MAX_GSO_BYTES;
        if !fits {
            self.flush(inner)?;
            self.meta = Some(meta);
            self.seg = pkt.len();
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(pkt);
        let k = self.count;
        if numbered && k != index {
            fix_icrc(&meta, &mut self.buf[start..], k as u16);
        }
        flip(&mut self.buf[start..], corrupt);
        self.count += 1;
        self.closed = pkt.len() < self.seg;
        Ok(())
    }

    fn flush(&mut self, inner: &mut dyn Backend) -> io::Result<()> {
        let r = match self.meta {
            Some(m) if self.count > 0 => inner.send(Outgoing {
                dst: m.dst,
                src_ip: m.src_ip,
                src_port: m.src_port,
                contents: &self.buf,
                segment_size: self.seg,
                tos: m.tos,
                hop_limit: m.hop_limit,
                flow_label: m.flow_label,
                qpn: m.qpn,
            }),
            _ => Ok(()),
        };
        self.buf.clear();
        self.count = 0;
        self.closed = false;
        self.meta = None;
        r
    }
}

/// Computes a sent IPv4 packet's ICRC again for IPv4 identification `id` (IPv6 has none).
fn fix_icrc(meta: &TxMeta, pkt: &mut [u8], id: u16) {
    let Some(mut ip) =
        IpRepr::for_udp_socket(meta.src_ip, meta.dst.ip(), meta.tos, meta.hop_limit, meta.flow_label)
    else {
        return;
    };
    match &mut ip {
        IpRepr::V4 { id: i, .. } => *i = id,
        IpRepr::V6 { .. } => return,
    }
    let frame = RoceFrameRepr { ip, src_port: meta.src_port, dst_port: meta.dst.port(), udp_checksum: false };
    let Some(body) = pkt.len().checked_sub(ICRC_LEN) else { return };
    if let Ok(crc) = frame.icrc(&pkt[..body]) {
        pkt[body..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// A backend with faults (see the module documentation).
pub(crate) struct FaultBackend {
    inner: Box<dyn Backend>,
    side: Side,
    run: Run,
}

impl FaultBackend {
    pub(crate) fn new(inner: Box<dyn Backend>, state: Arc<FaultState>) -> FaultBackend {
        FaultBackend {
            inner,
            side: Side {
                state,
                tracker: Tracker::default(),
                held_tx: HeldQueue::new(),
                held_rx: HeldQueue::new(),
            },
            run: Run::new(),
        }
    }

    fn numbered(&self, meta: &TxMeta) -> bool {
        self.inner.gso_numbers_ip_id() && meta.src_ip.is_ipv4()
    }

    /// Appends the held sent packets that are ready to the run (not flushed).
    fn release_tx(&mut self, now: Instant) -> io::Result<()> {
        while let Some(h) = self.side.held_tx.pop_ready(now) {
            let numbered = self.numbered(&h.with.meta);
            self.run.push(
                self.inner.as_mut(),
                h.with.meta,
                &h.bytes,
                h.with.index,
                h.with.corrupt,
                numbered,
            )?;
            self.side.held_tx.passed();
        }
        Ok(())
    }
}

impl Backend for FaultBackend {
    fn port(&self) -> u16 {
        self.inner.port()
    }

    fn recv(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<usize> {
        let now = Instant::now();
        // Sent packets whose time has come go out whenever the engine calls in.
        self.release_tx(now)?;
        self.run.flush(self.inner.as_mut())?;
        let FaultBackend { inner, side, .. } = self;
        if side.untouched(now) && side.held_rx.len() == 0 {
            // (nothing to do: a SPEC of black holes or `rnr` only, outside its black holes)
            return inner.recv(f);
        }
        let released = side.release_rx(now, f);
        let got = inner.recv(&mut |d| side.on_rx(d, now, f))?;
        Ok(released + got)
    }

    fn send(&mut self, out: Outgoing<'_>) -> io::Result<()> {
        let now = Instant::now();
        self.release_tx(now)?;
        self.run.flush(self.inner.as_mut())?;
        if self.side.untouched(now) && self.side.held_tx.len() == 0 {
            return self.inner.send(out);
        }
        let meta = TxMeta::of(&out);
        let seg = out.segment_size.max(1);
        let mut actions = smallvec::SmallVec::<[Action; 64]>::new();
        for pkt in out.contents.chunks(seg) {
            actions.push(self.side.decide(true, Some(meta.qpn), pkt, now));
        }
        if actions.iter().all(|a| matches!(a, Action::Pass)) {
            // Untouched: the batch goes as the engine built it.
            self.inner.send(out)?;
            for _ in 0..actions.len() {
                self.side.held_tx.passed();
            }
            self.release_tx(now)?;
            return self.run.flush(self.inner.as_mut());
        }
        let numbered = self.numbered(&meta);
        for (index, (pkt, action)) in out.contents.chunks(seg).zip(actions).enumerate() {
            match action {
                Action::Drop => continue,
                Action::Pass => self.run.push(self.inner.as_mut(), meta, pkt, index, None, numbered)?,
                Action::Now { corrupt, duplicate } => {
                    for _ in 0..1 + duplicate as usize {
                        self.run.push(self.inner.as_mut(), meta, pkt, index, corrupt, numbered)?;
                    }
                }
                Action::Hold { delay, reorder, corrupt, duplicate } => {
                    for _ in 0..1 + duplicate as usize {
                        if self.side.room(true) {
                            let with = TxInfo { meta, index, corrupt };
                            self.side.held_tx.hold(now, delay, reorder, Held { bytes: pkt.to_vec(), with });
                        }
                    }
                    continue;
                }
            }
            self.side.held_tx.passed();
            self.release_tx(now)?;
        }
        self.run.flush(self.inner.as_mut())
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        self.inner.register(registry, token)
    }

    fn listen(&mut self, registry: &mio::Registry, token: mio::Token, on: bool) -> io::Result<()> {
        self.inner.listen(registry, token, on)
    }

    fn next_deadline(&self) -> Option<Instant> {
        [self.inner.next_deadline(), self.side.held_tx.next_due(), self.side.held_rx.next_due()]
            .into_iter()
            .flatten()
            .min()
    }

    fn max_segments(&self) -> usize {
        self.inner.max_segments()
    }

    fn gso_numbers_ip_id(&self) -> bool {
        self.inner.gso_numbers_ip_id()
    }

    fn set_waker(&mut self, waker: Arc<mio::Waker>) {
        self.inner.set_waker(waker)
    }

    fn recv_buffer_size(&self) -> Option<usize> {
        self.inner.recv_buffer_size()
    }

    fn refresh_counters(&mut self) {
        self.inner.refresh_counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn held(n: u8) -> Held<()> {
        Held { bytes: vec![n], with: () }
    }

    fn drain(q: &mut HeldQueue<()>, now: Instant) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(h) = q.pop_ready(now) {
            out.push(h.bytes[0]);
            q.passed();
        }
        out
    }

    #[test]
    fn delayed_packets_leave_by_due_time_then_arrival() {
        let t = Instant::now();
        let mut q = HeldQueue::new();
        q.hold(t, Duration::from_millis(3), None, held(1));
        q.hold(t, Duration::from_millis(1), None, held(2));
        q.hold(t, Duration::from_millis(1), None, held(3));
        assert_eq!(q.next_due(), Some(t + Duration::from_millis(1)));
        assert_eq!(drain(&mut q, t), Vec::<u8>::new());
        assert_eq!(drain(&mut q, t + Duration::from_millis(2)), [2, 3]);
        assert_eq!(drain(&mut q, t + Duration::from_millis(3)), [1]);
        assert_eq!((q.len(), q.next_due()), (0, None));
    }

    #[test]
    fn a_reordered_packet_waits_for_depth_packets_or_its_time_limit() {
        let t = Instant::now();
        let mut q = HeldQueue::new();
        q.hold(t, Duration::ZERO, Some(2), held(9));
        q.passed();
        assert_eq!(drain(&mut q, t), Vec::<u8>::new(), "one packet has overtaken it");
        q.passed();
        assert_eq!(drain(&mut q, t), [9], "two have");
        // With nothing behind it, it goes at the time limit; then its delay.
        q.hold(t, Duration::from_millis(5), Some(3), held(8));
        assert_eq!(q.next_due(), Some(t + REORDER_MAX_HOLD));
        assert_eq!(drain(&mut q, t + REORDER_MAX_HOLD), Vec::<u8>::new());
        assert_eq!(drain(&mut q, t + REORDER_MAX_HOLD + Duration::from_millis(5)), [8]);
    }

    /// Records what is sent.
    struct Sink {
        sent: Vec<(Vec<u8>, usize)>,
        numbered: bool,
    }

    impl Backend for Sink {
        fn port(&self) -> u16 {
            4791
        }
        fn recv(&mut self, _: &mut dyn FnMut(Datagram<'_>)) -> io::Result<usize> {
            Ok(0)
        }
        fn send(&mut self, out: Outgoing<'_>) -> io::Result<()> {
            self.sent.push((out.contents.to_vec(), out.segment_size));
            Ok(())
        }
        fn register(&mut self, _: &mio::Registry, _: mio::Token) -> io::Result<()> {
            Ok(())
        }
        fn max_segments(&self) -> usize {
            64
        }
        fn gso_numbers_ip_id(&self) -> bool {
            self.numbered
        }
    }

    fn meta() -> TxMeta {
        TxMeta {
            dst: "10.0.0.2:4791".parse().unwrap(),
            src_ip: "10.0.0.1".parse().unwrap(),
            src_port: 0xc000,
            tos: 0,
            hop_limit: 64,
            flow_label: 0,
            qpn: 0x11,
        }
    }

    /// A packet of 64 bytes with PSN `psn` and its ICRC for IPv4 identification `id`.
    fn packet(psn: u8, id: u16) -> Vec<u8> {
        let mut p = vec![0x07u8, 0, 0xff, 0xff, 0, 0, 0, 0x12, 0, 0, 0, psn];
        p.extend((0..48u8).map(|i| i ^ psn));
        p.extend_from_slice(&[0; 4]);
        fix_icrc(&meta(), &mut p, id);
        p
    }

    #[test]
    fn a_regrouped_run_gets_icrcs_for_its_new_identifications() {
        // Segment k of the engine's batch carries an ICRC for identification k; the second
        // packet is lost, so the third and fourth move up one place.
        let batch: Vec<u8> = (0..4u8).flat_map(|k| packet(k, u16::from(k))).collect();
        let numbered = true;
        let want: Vec<u8> =
            [0u8, 2, 3].iter().enumerate().flat_map(|(k, psn)| packet(*psn, k as u16)).collect();
        let mut sink = Sink { sent: vec![], numbered: true };
        let mut run = Run::new();
        for index in [0usize, 2, 3] {
            run.push(&mut sink, meta(), &batch[index * 64..index * 64 + 64], index, None, numbered).unwrap();
        }
        run.flush(&mut sink).unwrap();
        assert_eq!(sink.sent.len(), 1, "one run");
        assert_eq!(sink.sent[0].1, 64);
        assert!(sink.sent[0].0 == want, "ICRCs computed again for identifications 0, 1, 2");
        // A backend that does not number its segments keeps every ICRC as it is.
        let mut plain = Sink { sent: vec![], numbered: false };
        let mut run = Run::new();
        for index in [0usize, 2, 3] {
            run.push(&mut plain, meta(), &batch[index * 64..index * 64 + 64], index, None, false).unwrap();
        }
        run.flush(&mut plain).unwrap();
        let kept: Vec<u8> = [0usize, 2, 3].iter().flat_map(|i| batch[i * 64..i * 64 + 64].to_vec()).collect();
        assert!(plain.sent[0].0 == kept);
    }

    #[test]
    fn a_corrupted_packet_keeps_its_flip_after_the_icrc_is_recomputed() {
        let mut sink = Sink { sent: vec![], numbered: true };
        let mut run = Run::new();
        let p = packet(5, 3);
        run.push(&mut sink, meta(), &p, 3, Some(200), true).unwrap();
        run.flush(&mut sink).unwrap();
        let mut good = packet(5, 0);
        assert_ne!(sink.sent[0].0, good);
        good[25] ^= 1 << 0;
        assert_eq!(sink.sent[0].0, good, "bit 200 flipped in the packet with identification 0's ICRC");
    }

    #[test]
    fn runs_split_at_a_shorter_packet_and_at_another_destination() {
        let mut sink = Sink { sent: vec![], numbered: false };
        let mut run = Run::new();
        let (a, b) = (packet(1, 0), packet(2, 0));
        run.push(&mut sink, meta(), &a, 0, None, false).unwrap();
        run.push(&mut sink, meta(), &b[..40], 1, None, false).unwrap();
        run.push(&mut sink, meta(), &a, 2, None, false).unwrap();
        let other = TxMeta { qpn: 0x12, ..meta() };
        run.push(&mut sink, other, &a, 3, None, false).unwrap();
        run.flush(&mut sink).unwrap();
        let sizes: Vec<(usize, usize)> = sink.sent.iter().map(|(c, s)| (c.len(), *s)).collect();
        assert_eq!(sizes, [(104, 64), (64, 64), (64, 64)]);
    }
}
