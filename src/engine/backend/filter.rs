//! The receive filter: what cannot be a RoCEv2 packet for this device is dropped in the
//! kernel, before it takes a place in the receive queue (issue 30: a flood of junk must not
//! starve real traffic).
//!
//! # Where it runs
//!
//! A classic BPF socket filter (`SO_ATTACH_FILTER`: unprivileged). For a UDP socket the kernel
//! runs it in `udp_queue_rcv_one_skb` (`sk_filter_trim_cap(sk, skb, sizeof(struct udphdr))`)
//! with the packet starting at the **UDP header** (the IP header is pulled, the UDP header is
//! not yet), so the BTH is at offset 8 and `len` is 8 + the payload; a datagram it rejects is
//! freed there and counted in the socket's `drops` (`sk_drops`, `/proc/net/udp`) and the UDP
//! `InErrors`. It runs after the `SO_REUSEPORT` group has picked the socket (the group's
//! steering program sees the packet with the UDP header pulled: offset 0 is the BTH there),
//! on each socket of the group with that socket's own filter. With UDP GRO a GSO super-packet
//! or a GRO train reaches the filter whole: the filter sees the first segment's headers and
//! the length of all of them, so it checks only what holds for a train of valid packets
//! (lengths at least, never exactly); the engine re-checks every segment. The raw backend puts
//! the same checks behind its frame filter ([`roce_checks`] with the UDP header found
//! through the IP header's length).
//!
//! # What it rejects
//!
//! In this order (the [`Junk`] reasons): fewer bytes than a BTH and an ICRC; a BTH transport
//! version other than 0; a P_Key that does not match the default partition (rxe's
//! `pkey_match(pkey, 0xffff)`: the low 15 bits all ones; softroce has no other); a reserved
//! opcode; fewer bytes than the opcode's headers and an ICRC; a pad that cannot fit, or any
//! pad on an opcode without payload; a length that is not a multiple of 4; and, when the
//! device gives it the set of its QP numbers ([`QpnSet`], always with QP1), a destination QP
//! outside it. [`verdict`] is the same decision in Rust, which the engine applies to what
//! arrives (for the backends without a kernel filter, and for the sample below); a test runs
//! both on crafted datagrams through the real kernel.
//!
//! # Seeing the junk
//!
//! The kernel counts what a filter drops only in total (with the buffer-full drops). So that
//! the device can still say which kinds of junk arrive and from where, the filter lets a
//! random 1 in [`SAMPLE`] of what it rejects through (`SKF_AD_RANDOM`): the engine classifies
//! those with [`verdict`], counts them by reason, and names the sources of a flood
//! ([`crate::engine::core`]'s flood watch). A flood of 400 000 datagrams/s then costs the
//! engine some 6 000 datagrams/s.

use std::ops::Range;

use super::bpf::{self, Insn};
use crate::wire::opcode::Opcode;

/// One in this many rejected datagrams is let through to be counted by reason (a power of
/// two).
pub(crate) const SAMPLE: u32 = 64;

/// Why a datagram cannot be a RoCEv2 packet for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Junk {
    /// Fewer than 16 bytes (a BTH and an ICRC).
    Short,
    /// BTH transport header version not 0.
    Tver,
    /// A P_Key outside the default partition.
    Pkey,
    /// A reserved opcode (not in softroce's opcode table).
    Opcode,
    /// Shorter than the opcode's headers and the ICRC.
    Truncated,
    /// A pad count that does not fit, or a pad on an opcode without payload.
    Pad,
    /// A length that is not a multiple of 4.
    Unaligned,
    /// A destination QP the device does not have.
    UnknownQp,
}

impl Junk {
    /// Every reason, in the order the checks run.
    #[cfg(test)]
    pub(crate) const ALL: [Junk; 8] = [
        Junk::Short,
        Junk::Tver,
        Junk::Pkey,
        Junk::Opcode,
        Junk::Truncated,
        Junk::Pad,
        Junk::Unaligned,
        Junk::UnknownQp,
    ];

    /// The reason's name in counters and logs.
    #[cfg(test)]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Junk::Short => "short",
            Junk::Tver => "tver",
            Junk::Pkey => "pkey",
            Junk::Opcode => "opcode",
            Junk::Truncated => "truncated",
            Junk::Pad => "pad",
            Junk::Unaligned => "unaligned",
            Junk::UnknownQp => "unknown_qp",
        }
    }
}

/// The QP numbers a device serves, as sorted, disjoint, non-adjacent half-open ranges. A
/// superset is safe (the engine drops what the filter lets through); a filter never rejects
/// a QP in the set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct QpnSet(Vec<Range<u32>>);

impl QpnSet {
    /// Most ranges a filter tests (3 instructions each); beyond it the closest ranges merge.
    pub(crate) const MAX_RANGES: usize = 256;

    /// The set of `qpns` (any order, duplicates allowed), QP1 included.
    #[cfg(test)]
    pub(crate) fn new(qpns: impl IntoIterator<Item = u32>) -> QpnSet {
        let mut v: Vec<u32> = qpns.into_iter().map(|q| q & 0xff_ffff).chain([1]).collect();
        v.sort_unstable();
        v.dedup();
        let mut ranges: Vec<Range<u32>> = Vec::new();
        for q in v {
            match ranges.last_mut() {
                Some(r) if r.end == q => r.end = q + 1,
                _ => ranges.push(q..q + 1),
            }
        }
        QpnSet::from_ranges(ranges)
    }

    /// The union of `ranges` (sorted or not), merged down to [`QpnSet::MAX_RANGES`] by
    /// filling the smallest gaps.
    pub(crate) fn from_ranges(mut ranges: Vec<Range<u32>>) -> QpnSet {
        ranges.retain(|r| r.start < r.end);
        ranges.sort_unstable_by_key(|r| r.start);
        let mut out: Vec<Range<u32>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match out.last_mut() {
                Some(l) if r.start <= l.end => l.end = l.end.max(r.end),
                _ => out.push(r),
            }
        }
        while out.len() > Self::MAX_RANGES {
            let i = (1..out.len()).min_by_key(|&i| out[i].start - out[i - 1].end).unwrap_or(1);
            let r = out.remove(i);
            out[i - 1].end = r.end;
        }
        QpnSet(out)
    }

    /// The ranges.
    pub(crate) fn ranges(&self) -> &[Range<u32>] {
        &self.0
    }

    /// Whether `qpn` is in the set.
    pub(crate) fn contains(&self, qpn: u32) -> bool {
        self.0.iter().any(|r| r.contains(&qpn))
    }
}

/// Whether the UDP backend's filter also tests destination QPs (`SOFTROCE_QPN_FILTER=1`; off
/// by default). With it, the 1 GiB veth loss test (`tests/netns_loss.rs`) ended in
/// `RETRY_EXC_ERR` on both sides in 7 of 32 runs of a debug build on a loaded machine, with no
/// drop counted anywhere, against 0 of 27 without it (with the rest of the filter, and
/// before it); the cause is not found yet. See docs/design/flood.md.
pub(crate) fn qpn_filter_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SOFTROCE_QPN_FILTER").is_ok_and(|v| v.trim() == "1"))
}

/// Bytes of a BTH and an ICRC.
const MIN: u32 = 12 + 4;

/// The verdict of the filter on a UDP payload (BTH first), in Rust: `Ok` for what it lets
/// through whole, else the first check that failed. See the module documentation.
pub(crate) fn verdict(p: &[u8], qpns: Option<&QpnSet>) -> Result<(), Junk> {
    let len = p.len();
    if len < MIN as usize {
        return Err(Junk::Short);
    }
    if p[1] & 0x0f != 0 {
        return Err(Junk::Tver);
    }
    if u16::from_be_bytes([p[2], p[3]]) & 0x7fff != 0x7fff {
        return Err(Junk::Pkey);
    }
    let info = Opcode(p[0]).info().ok_or(Junk::Opcode)?;
    let fixed = info.header_len() + 4;
    if len < fixed {
        return Err(Junk::Truncated);
    }
    let pad = usize::from(p[1] >> 4 & 3);
    if (!info.payload && pad != 0) || len < fixed + pad {
        return Err(Junk::Pad);
    }
    if !len.is_multiple_of(4) {
        return Err(Junk::Unaligned);
    }
    if let Some(set) = qpns
        && !set.contains(u32::from_be_bytes([0, p[5], p[6], p[7]]))
    {
        return Err(Junk::UnknownQp);
    }
    Ok(())
}

/// A group of 32 opcodes as the program tests them: the group (opcode >> 5), the bitmaps of
/// the known opcodes and of those with payload, and for each length of headers + ICRC the
/// bitmap of the opcodes with it.
type OpcodeGroup = (u32, u32, u32, Vec<(u32, u32)>);

/// Scratch words of the program.
const M_BASE: u32 = 0;
const M_OPCODE: u32 = 1;
const M_FIXED: u32 = 2;
const M_PAYLOAD: u32 = 3;
const M_LEN: u32 = 4;
const M_PAD: u32 = 5;

/// Where the filter reads the UDP datagram's length (UDP header and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UdpLen {
    /// What the filter sees, from the UDP header on (a UDP socket's filter: the kernel has
    /// checked the UDP length and trimmed the packet to it).
    Packet,
    /// The UDP header's length field (a frame filter: an Ethernet frame may carry padding;
    /// a field that claims more than the frame holds makes the later loads fail, which drops
    /// the frame).
    Header,
}

/// The checks of [`verdict`] as classic BPF, for a packet whose UDP header starts at `X +
/// udp_at` (X as the caller left it: 0 for a UDP socket, the IP header's length behind an
/// Ethernet header for the raw backend): jumps to label `accept` or `reject`. Internal labels
/// are `labels..labels + 256 +` the number of QP ranges.
pub(crate) fn roce_checks(
    udp_at: u32,
    len: UdpLen,
    qpns: Option<&QpnSet>,
    accept: u32,
    reject: u32,
    labels: u32,
) -> Vec<Insn> {
    use Target::{Label as L, Next};
    use bpf::*;
    let bth = udp_at + 8;
    let (l_len, l_nopay, l_pay, l_padok) = (labels, labels + 1, labels + 2, labels + 3);
    // A conditional jump reaches at most 255 instructions ahead: each part's failed checks
    // jump to a `goto reject` of their own close by.
    let (t_head, t_len, l_qpn) = (labels + 4, labels + 5, labels + 6);
    let group_label = |g: u32| labels + 8 + g;
    let group_reject = |g: u32| labels + 16 + g;
    let dispatch = |g: u32| labels + 24 + g;
    let hdr_label = |g: u32, fixed: u32| labels + 32 + g * 16 + fixed / 4;
    let rej = L(t_head);
    // A = the UDP length (header and payload).
    let udp_len = match len {
        UdpLen::Packet => vec![op(LD_LEN, 0), op(SUB_X, 0), op(SUB_K, udp_at)],
        UdpLen::Header => vec![op(LD_H_IND, udp_at + 4)],
    };
    let mut p = vec![op(TXA, 0), op(ST, M_BASE)];
    p.extend(udp_len.iter().copied());
    p.extend([
        // Short: the payload holds a BTH and an ICRC.
        jump(JGE, 8 + MIN, Next, rej),
        // Tver: BTH byte 1, low nibble.
        op(LD_B_IND, bth + 1),
        jump(JSET, 0x0f, rej, Next),
        // P_Key: the low 15 bits all ones.
        op(LD_H_IND, bth + 2),
        op(AND_K, 0x7fff),
        jeq(0x7fff, Next, rej),
        // Opcode: dispatched on its top three bits to the group's bitmaps, tested at bit
        // (opcode & 31) with X as the shift.
        op(LD_B_IND, bth),
        op(ST, M_OPCODE),
        op(RSH_K, 5),
    ]);
    // Per group of 32 opcodes: which are known, which carry payload, and, for each header
    // length, which have it.
    let mut groups: Vec<OpcodeGroup> = Vec::new();
    for g in 0..8u32 {
        let (mut valid, mut payload, mut by_len) = (0u32, 0u32, Vec::<(u32, u32)>::new());
        for b in 0..32u32 {
            let Some(info) = Opcode((g * 32 + b) as u8).info() else { continue };
            valid |= 1 << b;
            if info.payload {
                payload |= 1 << b;
            }
            let fixed = info.header_len() as u32 + 4;
            match by_len.iter_mut().find(|(f, _)| *f == fixed) {
                Some((_, m)) => *m |= 1 << b,
                None => by_len.push((fixed, 1 << b)),
            }
        }
        if valid != 0 {
            groups.push((g, valid, payload, by_len));
        }
    }
    for (g, ..) in &groups {
        p.extend([jeq(*g, Next, L(dispatch(*g))), goto(group_label(*g)), label(dispatch(*g))]);
    }
    p.extend([label(t_head), goto(reject)]);
    for (g, valid, payload, by_len) in &groups {
        p.extend([
            label(group_label(*g)),
            op(LD_MEM, M_OPCODE),
            op(AND_K, 31),
            op(TAX, 0),
            op(LD_IMM, *valid),
            op(RSH_X, 0),
            jump(JSET, 1, Next, L(group_reject(*g))),
            // Payload or not.
            op(LD_IMM, *payload),
            op(RSH_X, 0),
            op(AND_K, 1),
            op(ST, M_PAYLOAD),
        ]);
        for (fixed, mask) in by_len {
            p.extend([op(LD_IMM, *mask), op(RSH_X, 0), jump(JSET, 1, L(hdr_label(*g, *fixed)), Next)]);
        }
        p.extend([label(group_reject(*g)), goto(reject)]);
        for (fixed, _) in by_len {
            p.extend([label(hdr_label(*g, *fixed)), op(LD_IMM, *fixed), op(ST, M_FIXED), goto(l_len)]);
        }
    }
    let rej = L(t_len);
    p.extend([
        label(l_len),
        // M_LEN = the UDP payload's length.
        op(LDX_MEM, M_BASE),
    ]);
    p.extend(udp_len);
    p.extend([
        op(SUB_K, 8),
        op(ST, M_LEN),
        // Truncated: len >= fixed.
        op(LDX_MEM, M_FIXED),
        jump(JGE_X, 0, Next, rej),
        // Pad: none without payload; else len >= fixed + pad.
        op(LDX_MEM, M_BASE),
        op(LD_B_IND, bth + 1),
        op(RSH_K, 4),
        op(AND_K, 3),
        op(ST, M_PAD),
        op(LD_MEM, M_PAYLOAD),
        jeq(0, L(l_nopay), L(l_pay)),
        label(l_nopay),
        op(LD_MEM, M_PAD),
        jeq(0, L(l_padok), rej),
        label(l_pay),
        op(LD_MEM, M_PAD),
        op(TAX, 0),
        op(LD_MEM, M_FIXED),
        op(ADD_X, 0),
        op(TAX, 0),
        op(LD_MEM, M_LEN),
        jump(JGE_X, 0, L(l_padok), rej),
        label(l_padok),
        // Unaligned.
        op(LD_MEM, M_LEN),
        jump(JSET, 3, rej, Next),
        goto(l_qpn),
        label(t_len),
        goto(reject),
        label(l_qpn),
    ]);
    match qpns {
        None => p.push(goto(accept)),
        Some(set) => {
            // DestQP: BTH bytes 5..8; each range is `lo <= A < hi`.
            p.extend([op(LDX_MEM, M_BASE), op(LD_W_IND, bth + 4), op(AND_K, 0xff_ffff)]);
            for (i, r) in set.ranges().iter().enumerate() {
                let skip = labels + 256 + i as u32;
                p.extend([
                    jump(JGE, r.start, Next, L(skip)),
                    jump(JGE, r.end, L(skip), Next),
                    goto(accept),
                    label(skip),
                ]);
            }
            p.push(goto(reject));
        }
    }
    p
}

/// Labels of [`roce_checks`] start here in the programs of this module and `raw`'s (whose own
/// labels are small numbers).
pub(crate) const ROCE_LABELS: u32 = 1 << 20;

/// Where a rejected datagram goes: to `accept` for a random 1 in `sample` (0: never), else
/// dropped.
pub(crate) fn sample_or_drop(sample: u32, accept: u32) -> Vec<Insn> {
    use bpf::*;
    if sample == 0 {
        return vec![op(RET, 0)];
    }
    vec![
        op(LD_W_ABS, AD_RANDOM),
        op(AND_K, sample - 1),
        jeq(0, Target::Label(accept), Target::Next),
        op(RET, 0),
    ]
}

/// The filter of a UDP receive socket: [`roce_checks`] with the UDP header at 0, whole
/// datagrams (and GRO trains) accepted, rejected ones dropped but for a 1 in `sample`.
pub(crate) fn udp_socket_filter(qpns: Option<&QpnSet>, sample: u32) -> Option<Vec<libc::sock_filter>> {
    use bpf::*;
    const ACCEPT: u32 = 0;
    const REJECT: u32 = 1;
    let mut p = vec![op(LDX_IMM, 0)];
    p.extend(roce_checks(0, UdpLen::Packet, qpns, ACCEPT, REJECT, ROCE_LABELS));
    p.push(label(REJECT));
    p.extend(sample_or_drop(sample, ACCEPT));
    // Accepted whole: the kernel trims a datagram to what the filter returns.
    p.extend([label(ACCEPT), op(RET, u32::MAX)]);
    assemble(&p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::sim::Rng;
    use crate::wire::{BthRepr, Packet, PacketRepr, Psn, RethRepr};
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// Valid packets of every opcode (payload 0 and 8 bytes where allowed), to QPN `qpn`.
    fn every_opcode(qpn: u32) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for o in 0..=255u8 {
            let Some(info) = Opcode(o).info() else { continue };
            for n in [0usize, 3, 8] {
                if n > 0 && !info.payload {
                    continue;
                }
                let mut pkt = vec![0u8; info.header_len() + n + ((4 - n % 4) % 4) + 4];
                pkt[0] = o;
                pkt[1] = (((4 - n % 4) % 4) as u8) << 4;
                pkt[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
                pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
                out.push(pkt);
            }
        }
        out
    }

    /// Junk and near misses: every valid packet with each byte of its BTH changed, cut at
    /// every length, grown by 1..3 bytes, plus random bytes.
    fn corpus(qpns: &[u32]) -> Vec<Vec<u8>> {
        let mut rng = Rng::new(30);
        let mut out = Vec::new();
        for &q in qpns {
            for p in every_opcode(q) {
                for i in 0..12 {
                    let mut m = p.clone();
                    m[i] ^= 1 << rng.below(8);
                    out.push(m);
                }
                for n in 0..p.len() {
                    out.push(p[..n].to_vec());
                }
                for g in 1..4 {
                    let mut m = p.clone();
                    m.extend(std::iter::repeat_n(0, g));
                    out.push(m);
                }
                out.push(p);
            }
        }
        for _ in 0..3000 {
            let n = rng.below(80) as usize;
            let mut m: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
            if n > 4 && rng.chance(0.5) {
                m[1] &= 0x30;
                m[2] |= 0x7f;
                m[3] = 0xff;
            }
            out.push(m);
        }
        out
    }

    #[test]
    fn the_verdict_accepts_every_packet_the_parser_takes_and_names_what_it_rejects() {
        let set = QpnSet::new([0x11, 0x12, 0x40]);
        let mut reasons = std::collections::HashSet::new();
        for p in corpus(&[0x11, 0x13, 0x40, 1]) {
            let v = verdict(&p, Some(&set));
            if let Err(j) = v {
                reasons.insert(j);
            }
            // Never rejects what the engine would take (its parse, P_Key, version, QPN).
            if let Ok(pkt) = Packet::new_checked(&p) {
                let bth = pkt.bth();
                if bth.pkey() & 0x7fff == 0x7fff && p[1] & 0x0f == 0 && set.contains(bth.dest_qp()) {
                    assert_eq!(v, Ok(()), "{p:02x?}");
                }
            } else {
                // What the filter lets through and the parser refuses: only a payload on an
                // opcode without one (a GRO train of such packets looks like that).
                if v.is_ok() {
                    let info = Opcode(p[0]).info().unwrap();
                    assert!(!info.payload && p.len() > info.header_len() + 4, "{p:02x?}");
                }
            }
        }
        assert_eq!(reasons.len(), Junk::ALL.len(), "every reason occurs: {reasons:?}");
    }

    #[test]
    fn qpn_sets_are_ranges_and_stay_bounded() {
        assert_eq!(QpnSet::new([0x13, 0x11, 0x12, 0x20]).ranges(), &[1..2, 0x11..0x14, 0x20..0x21]);
        let big = QpnSet::new((0..2000).map(|i| 0x11 + 3 * i));
        assert!(big.ranges().len() <= QpnSet::MAX_RANGES);
        assert!((0..2000).all(|i| big.contains(0x11 + 3 * i)) && big.contains(1));
        let merged = QpnSet::from_ranges(vec![5..9, 1..3, 2..6]);
        assert_eq!(merged.ranges().len(), 1);
        assert_eq!(merged.ranges()[0], 1..9);
    }

    #[test]
    fn the_programs_assemble_within_bounds() {
        let many = QpnSet::new((0..5000).map(|i| 0x11 + 2 * i));
        for (set, sample) in [(None, SAMPLE), (Some(QpnSet::new([])), 0), (Some(many), SAMPLE)] {
            let p = udp_socket_filter(set.as_ref(), sample).expect("assembles");
            assert!(p.len() < 1024, "{} instructions", p.len());
        }
    }

    /// Sends every datagram of `corpus` to a socket with the filter and returns which
    /// arrived (by index: each datagram carries none, so the test sends them one at a time
    /// and reads after each).
    fn through_the_kernel(prog: &[libc::sock_filter], corpus: &[Vec<u8>]) -> Vec<bool> {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        bpf::attach_filter(rx.as_raw_fd(), prog).unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        // A marker that always passes follows each datagram: whether the datagram arrived is
        // whether it comes before its marker.
        let marker = every_opcode(1).remove(0);
        let mut buf = vec![0u8; 2048];
        corpus
            .iter()
            .map(|p| {
                tx.send_to(p, to).unwrap();
                tx.send_to(&marker, to).unwrap();
                let n = rx.recv(&mut buf).unwrap();
                if buf[..n] == marker[..] && *p != marker {
                    false
                } else {
                    let n = rx.recv(&mut buf).unwrap();
                    assert_eq!(buf[..n], marker[..]);
                    true
                }
            })
            .collect()
    }

    #[test]
    fn the_kernel_runs_the_filter_as_the_verdict_says() {
        // The real kernel, with and without the QPN set: a datagram arrives exactly when
        // `verdict` accepts it (sampling off).
        let set = QpnSet::new([0x11, 0x12, 0x40]);
        let corpus = corpus(&[0x11, 0x13, 1]);
        for qpns in [None, Some(&set)] {
            let prog = udp_socket_filter(qpns, 0).unwrap();
            let got = through_the_kernel(&prog, &corpus);
            let mut rejected = 0;
            for (p, arrived) in corpus.iter().zip(got) {
                let want = verdict(p, qpns);
                assert_eq!(arrived, want.is_ok(), "{p:02x?}: verdict {want:?}, kernel {arrived}");
                rejected += usize::from(!arrived);
            }
            println!("{} datagrams, {rejected} rejected (QP numbers: {})", corpus.len(), qpns.is_some());
            assert!(rejected > corpus.len() / 2, "{rejected} of {}", corpus.len());
        }
    }

    #[test]
    fn the_kernel_lets_a_sample_of_the_rejected_through() {
        let prog = udp_socket_filter(None, 4).unwrap();
        let junk = vec![vec![0xffu8; 40]; 2000];
        let got = through_the_kernel(&prog, &junk).into_iter().filter(|a| *a).count();
        // 1 in 4 of 2000: 500 ± a few standard deviations (~19).
        assert!((380..620).contains(&got), "{got} of 2000");
    }

    #[test]
    fn a_gro_train_of_valid_packets_passes() {
        // What a GRO'd train looks like to the filter: the first packet's headers, the total
        // length (here four ACKs: 4 × 20 bytes; an ACK alone has no payload).
        let mut ack = PacketRepr::new(BthRepr::new(Opcode::RC_ACK, 0x11, Psn::new(5)));
        ack.aeth = Some(crate::wire::AethRepr::ack(1));
        let mut one = vec![0u8; ack.buffer_len(0)];
        let n = ack.emit(&mut one, &[]).unwrap();
        one.truncate(n);
        let train = one.repeat(4);
        assert_eq!(verdict(&train, Some(&QpnSet::new([0x11]))), Ok(()));
        let mut w = PacketRepr::new(BthRepr::new(Opcode::RC_WRITE_FIRST, 0x11, Psn::new(5)));
        w.reth = Some(RethRepr { va: 0, rkey: 1, dma_len: 4096 });
        let mut first = vec![0u8; w.buffer_len(1024)];
        let n = w.emit(&mut first, &[7; 1024]).unwrap();
        first.truncate(n);
        assert_eq!(verdict(&first.repeat(3), None), Ok(()));
    }
}
