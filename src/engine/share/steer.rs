//! The kernel-side steering program of a shared address: a classic BPF program attached to
//! the `SO_REUSEPORT` group of `<address>:<port>` (`SO_ATTACH_REUSEPORT_CBPF`) that returns,
//! for each arriving datagram, the index of the socket that must receive it.
//!
//! For a UDP socket the kernel runs the program with the UDP header pulled
//! (`reuseport_select_sock` → `run_bpf_filter` with `hdr_len = sizeof(struct udphdr)`), so
//! offset 0 is the BTH. The program reads the destination QP (BTH bytes 5..8) and returns:
//! - for a probe QPN (`PROBE_BASE + i`): `i` (see [`super::probe`]: how a process learns which
//!   index the kernel gave each socket);
//! - for QP1 (the GSI QP, the CM's MADs): the socket of the member that takes the address's
//!   MADs ([`SocketMap::cm_index`]);
//! - otherwise the socket of the engine that owns the QP: the QPN's slot (bits 23..18, one
//!   slot per process on the address) picks the process, the QPN modulo that process's number
//!   of engines picks the engine, as [`crate::engine::shared::device::DeviceShared::engine_of`] does;
//! - for a slot with no member: an index past the group, on which the kernel falls back to
//!   its hash (the receiver drops the packet: no such QP).
//!
//! A datagram too short for the load aborts the program, which then returns 0 (socket 0).

use super::{PROBE_BASE, SLOT_SHIFT};

/// Who owns each socket of a group, by the index the kernel gave it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SocketMap {
    /// `(slot, engine)` of socket `i`.
    pub owners: Vec<(u8, u16)>,
}

impl SocketMap {
    /// The engines of `slot` (one past its highest engine index seen), 0 if it has none.
    pub fn engines_of(&self, slot: u8) -> u16 {
        self.owners.iter().filter(|(s, _)| *s == slot).map(|(_, e)| e + 1).max().unwrap_or(0)
    }

    /// The index of `(slot, engine)`.
    pub fn index_of(&self, slot: u8, engine: u16) -> Option<usize> {
        self.owners.iter().position(|o| *o == (slot, engine))
    }

    /// The socket that takes QP1's packets: the lowest slot's engine that runs its IB CM
    /// (engine `1 % engines`).
    pub fn cm_index(&self) -> Option<usize> {
        let slot = self.owners.iter().map(|(s, _)| *s).min()?;
        let n = self.engines_of(slot).max(1);
        self.index_of(slot, 1 % n)
    }

    /// Whether every slot's engines are `0..n` with none missing or twice.
    pub fn is_complete(&self) -> bool {
        let mut slots: Vec<u8> = self.owners.iter().map(|(s, _)| *s).collect();
        slots.sort_unstable();
        slots.dedup();
        let total: usize = slots.iter().map(|s| usize::from(self.engines_of(*s))).sum();
        total == self.owners.len()
            && slots.iter().all(|s| (0..self.engines_of(*s)).all(|e| self.index_of(*s, e).is_some()))
    }
}

/// The index returned for a slot with no member: past any group (the kernel then hashes).
pub(crate) const NO_SOCKET: u32 = u32::MAX;

/// The most instructions a classic BPF program may have (`BPF_MAXINSNS`).
const MAX_INSNS: usize = 4096;

fn op(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// The program for `map` (see the module docs). If per-engine steering would not fit in a
/// program, every slot's packets go to its engine 0 (the process passes them on to the
/// owning engine itself).
pub(crate) fn program(map: &SocketMap) -> Vec<libc::sock_filter> {
    let full = build(map, true);
    if full.len() <= MAX_INSNS { full } else { build(map, false) }
}

fn build(map: &SocketMap, per_engine: bool) -> Vec<libc::sock_filter> {
    use libc::{
        BPF_A, BPF_ABS, BPF_ALU, BPF_AND, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_MISC,
        BPF_MOD, BPF_RET, BPF_RSH, BPF_SUB, BPF_TAX, BPF_TXA, BPF_W,
    };
    let mut slots: Vec<u8> = map.owners.iter().map(|(s, _)| *s).collect();
    slots.sort_unstable();
    slots.dedup();
    let cm = map.cm_index().map_or(0, |i| i as u32);
    let mut p = vec![
        // A = DestQP (BTH bytes 5..8; byte 4 is reserved).
        op(BPF_LD | BPF_W | BPF_ABS, 4),
        op(BPF_ALU | BPF_AND | BPF_K, 0x00ff_ffff),
        // Probe QPNs: index = QPN - PROBE_BASE.
        jump(BPF_JMP | BPF_JGE | BPF_K, PROBE_BASE, 0, 2),
        op(BPF_ALU | BPF_SUB | BPF_K, PROBE_BASE),
        op(BPF_RET | BPF_A, 0),
        // QP1: the CM's socket.
        jump(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1),
        op(BPF_RET | BPF_K, cm),
        // X = QPN, A = slot.
        op(BPF_MISC | BPF_TAX, 0),
        op(BPF_ALU | BPF_RSH | BPF_K, SLOT_SHIFT),
    ];
    // A chain of (jeq slot → ja to its block), then the blocks. Conditional jumps reach only
    // 255 instructions, so each test skips over one unconditional jump (32-bit offset).
    let chain_start = p.len();
    let chain_len = 2 * slots.len() + 1;
    let mut blocks: Vec<Vec<libc::sock_filter>> = Vec::new();
    for &s in &slots {
        let n = map.engines_of(s);
        let mut b = Vec::new();
        if n <= 1 || !per_engine {
            let idx = map.index_of(s, 0).map_or(NO_SOCKET, |i| i as u32);
            b.push(op(BPF_RET | BPF_K, idx));
        } else {
            b.push(op(BPF_MISC | BPF_TXA, 0));
            b.push(op(BPF_ALU | BPF_MOD | BPF_K, u32::from(n)));
            for e in 0..n {
                let idx = map.index_of(s, e).map_or(NO_SOCKET, |i| i as u32);
                b.push(jump(BPF_JMP | BPF_JEQ | BPF_K, u32::from(e), 0, 1));
                b.push(op(BPF_RET | BPF_K, idx));
            }
            b.push(op(BPF_RET | BPF_K, NO_SOCKET));
        }
        blocks.push(b);
    }
    let mut block_at = chain_start + chain_len;
    for (i, &s) in slots.iter().enumerate() {
        let ja_at = chain_start + 2 * i + 1;
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, u32::from(s), 0, 1));
        // `ja k` jumps to (its own position + 1 + k).
        p.push(op(BPF_JMP | BPF_JA, (block_at - (ja_at + 1)) as u32));
        block_at += blocks[i].len();
    }
    p.push(op(BPF_RET | BPF_K, NO_SOCKET));
    for b in blocks {
        p.extend(b);
    }
    p
}

/// Runs `prog` over `pkt` as the kernel's classic BPF interpreter would for the subset of
/// instructions [`program`] uses (tests: the program's answers without a kernel). `None`
/// when a load falls outside the packet (the kernel returns 0 then).
#[cfg(test)]
pub(crate) fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> Option<u32> {
    use libc::*;
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    loop {
        let i = prog.get(pc)?;
        let code = u32::from(i.code);
        pc += 1;
        match code {
            c if c == BPF_LD | BPF_W | BPF_ABS => {
                let k = i.k as usize;
                let b = pkt.get(k..k + 4)?;
                a = u32::from_be_bytes(b.try_into().ok()?);
            }
            c if c == BPF_ALU | BPF_AND | BPF_K => a &= i.k,
            c if c == BPF_ALU | BPF_SUB | BPF_K => a = a.wrapping_sub(i.k),
            c if c == BPF_ALU | BPF_RSH | BPF_K => a >>= i.k,
            c if c == BPF_ALU | BPF_MOD | BPF_K => a %= i.k,
            c if c == BPF_MISC | BPF_TAX => x = a,
            c if c == BPF_MISC | BPF_TXA => a = x,
            c if c == BPF_RET | BPF_A => return Some(a),
            c if c == BPF_RET | BPF_K => return Some(i.k),
            c if c == BPF_JMP | BPF_JA => pc += i.k as usize,
            c if c == BPF_JMP | BPF_JEQ | BPF_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
            c if c == BPF_JMP | BPF_JGE | BPF_K => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
            _ => panic!("instruction {code:#x} not modelled"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bth(qpn: u32) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = 0x04;
        b[4] = 0xee; // reserved: must not count
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    fn qpn(slot: u8, n: u32) -> u32 {
        (u32::from(slot) << SLOT_SHIFT) | n
    }

    #[test]
    fn each_qpn_goes_to_its_slots_engine() {
        // Sockets in the order a kernel might hold them after joins and leaves.
        let map = SocketMap { owners: vec![(3, 0), (0, 1), (0, 0), (3, 2), (7, 0), (3, 1)] };
        assert!(map.is_complete());
        let p = program(&map);
        for n in [0x11u32, 0x12, 0x13, 0x3ffff, 0x100] {
            assert_eq!(run(&p, &bth(qpn(0, n))), map.index_of(0, (n % 2) as u16).map(|i| i as u32));
            assert_eq!(run(&p, &bth(qpn(3, n))), map.index_of(3, (qpn(3, n) % 3) as u16).map(|i| i as u32));
            assert_eq!(run(&p, &bth(qpn(7, n))), Some(4));
            // No member in slot 5: past the group.
            assert_eq!(run(&p, &bth(qpn(5, n))), Some(NO_SOCKET));
        }
        // QP1 goes to the lowest slot's CM engine (1 % 2 = engine 1 of slot 0: index 1).
        assert_eq!(run(&p, &bth(1)), Some(1));
        // Probes name their index.
        for i in [0u32, 1, 5, 200, 255] {
            assert_eq!(run(&p, &bth(PROBE_BASE + i)), Some(i));
        }
        // Too short to read the QPN: the kernel aborts the program (0).
        assert_eq!(run(&p, &[1, 2, 3]), None);
    }

    #[test]
    fn an_empty_map_sends_everything_past_the_group_but_probes() {
        let p = program(&SocketMap::default());
        assert_eq!(run(&p, &bth(0x11)), Some(NO_SOCKET));
        assert_eq!(run(&p, &bth(1)), Some(0));
        assert_eq!(run(&p, &bth(PROBE_BASE + 3)), Some(3));
    }

    #[test]
    fn many_slots_with_many_engines_fit_or_fall_back_to_engine_zero() {
        // 63 processes of 8 engines each: per-engine steering fits in 4096 instructions.
        let owners: Vec<(u8, u16)> = (0..63u8).flat_map(|s| (0..8u16).map(move |e| (s, e))).collect();
        let map = SocketMap { owners };
        let p = program(&map);
        assert!(p.len() <= MAX_INSNS, "{}", p.len());
        let q = qpn(62, 0x1235);
        assert_eq!(run(&p, &bth(q)), map.index_of(62, (q % 8) as u16).map(|i| i as u32));
        // 63 × 64 engines does not: each slot's packets go to its engine 0.
        let owners: Vec<(u8, u16)> = (0..63u8).flat_map(|s| (0..64u16).map(move |e| (s, e))).collect();
        let map = SocketMap { owners };
        let p = program(&map);
        assert!(p.len() <= MAX_INSNS, "{}", p.len());
        assert_eq!(run(&p, &bth(qpn(40, 0x77))), map.index_of(40, 0).map(|i| i as u32));
    }

    #[test]
    fn incomplete_maps_are_recognised() {
        assert!(!SocketMap { owners: vec![(0, 0), (0, 2)] }.is_complete());
        assert!(!SocketMap { owners: vec![(0, 0), (0, 0)] }.is_complete());
        assert!(SocketMap { owners: vec![(1, 0), (0, 0)] }.is_complete());
    }
}
