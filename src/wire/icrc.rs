//! The RoCEv2 invariant CRC (IBTA Annex A17.3.3).
//!
//! The ICRC is the standard CRC-32 (the zlib / Ethernet one, computed here with crc32fast) over:
//!
//! 1. eight bytes of `0xFF`, standing in for the InfiniBand LRH that RoCEv2 does not carry;
//! 2. the IP header with its variant fields set to all ones — IPv4: TOS, TTL and header
//!    checksum; IPv6: traffic class, flow label and hop limit. Everything else is covered:
//!    for IPv4 that includes the identification, flags and total length;
//! 3. the UDP header with its checksum set to `0xFFFF`;
//! 4. the BTH with byte 4 (FECN, BECN, reserved) set to `0xFF`;
//! 5. the remaining headers, the payload and the pad.
//!
//! The result is carried little-endian after the pad. Kernel rxe computes it the same way and
//! silently drops a packet whose ICRC does not match (checked bit-exactly against the rxe
//! captures in `tests/data`).
//!
//! # Receiving without the IP header
//!
//! A plain UDP socket hands us the datagram but not the IPv4 identification or flags, which the
//! ICRC covers, and kernel rxe fills the identification with a per-flow counter.
//! [`recover_ipv4_id`] exploits the linearity of CRC-32 to find the one (identification, DF)
//! pair that makes the ICRC match, if any. See its documentation for what that guarantees.

use super::{Error, Result};

/// The CRC-32 polynomial in the bit-reflected form crc32fast and zlib use.
const POLY: u32 = 0xedb8_8320;

/// Bytes of ones standing in for the LRH.
const LRH_ONES: [u8; 8] = [0xff; 8];

/// Writes the masked IP header into `out` (which has room for the longest, 60 bytes);
/// returns its length.
fn mask_ip(out: &mut [u8], ip: &[u8]) -> Result<usize> {
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let ihl = (ip[0] & 0x0f) as usize * 4;
            if ihl < 20 || ip.len() != ihl {
                return Err(super::Malformed::BadIp.into());
            }
            let t = &mut out[..ihl];
            t.copy_from_slice(ip);
            t[1] = 0xff; // TOS (DSCP + ECN)
            t[8] = 0xff; // TTL
            t[10] = 0xff; // header checksum
            t[11] = 0xff;
            Ok(ihl)
        }
        Some(6) => {
            if ip.len() != 40 {
                return Err(super::Malformed::BadIp.into());
            }
            let t = &mut out[..40];
            t.copy_from_slice(ip);
            t[0] |= 0x0f; // traffic class (high nibble) ...
            t[1] = 0xff; // ... traffic class (low nibble) and flow label
            t[2] = 0xff;
            t[3] = 0xff;
            t[7] = 0xff; // hop limit
            Ok(40)
        }
        _ => Err(super::Malformed::BadIp.into()),
    }
}

/// Computes the ICRC of a RoCEv2 packet from its three parts: the IP header (IPv4 with any
/// options, or the fixed IPv6 header), the 8-byte UDP header, and the transport packet from
/// the BTH through the pad (without the ICRC trailer).
pub fn compute(ip_header: &[u8], udp_header: &[u8], ib: &[u8]) -> Result<u32> {
    // The masked LRH, IP, UDP and BTH go into the CRC as one block (one call into crc32fast
    // instead of four: for small packets the calls cost more than the bytes).
    const BTH: usize = super::bth::HEADER_LEN;
    let mut pre = [0u8; 8 + 60 + 8 + BTH];
    pre[..8].copy_from_slice(&LRH_ONES);
    let mut n = 8 + mask_ip(&mut pre[8..], ip_header)?;
    let udp: &[u8; 8] = udp_header.try_into().map_err(|_| Error::Truncated)?;
    pre[n..n + 8].copy_from_slice(udp);
    pre[n + 6] = 0xff;
    pre[n + 7] = 0xff;
    n += 8;
    if ib.len() < BTH {
        return Err(Error::Truncated);
    }
    pre[n..n + BTH].copy_from_slice(&ib[..BTH]);
    pre[n + 4] = 0xff;
    n += BTH;
    let mut h = crc32fast::Hasher::new();
    h.update(&pre[..n]);
    h.update(&ib[BTH..]);
    Ok(h.finalize())
}

/// Checks the ICRC of a RoCEv2 packet: `ib_with_icrc` runs from the BTH through the ICRC.
pub fn verify(ip_header: &[u8], udp_header: &[u8], ib_with_icrc: &[u8]) -> Result<bool> {
    let n = ib_with_icrc.len();
    if n < super::bth::HEADER_LEN + super::ICRC_LEN {
        return Err(Error::Truncated);
    }
    let (ib, trailer) = ib_with_icrc.split_at(n - super::ICRC_LEN);
    let carried = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    Ok(compute(ip_header, udp_header, ib)? == carried)
}

/// Multiplies two polynomials modulo the CRC-32 polynomial, in the reflected representation
/// (bit 31 is the coefficient of x^0).
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            product ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        m >>= 1;
    }
    product
}

/// x^-1 modulo the CRC-32 polynomial P (reflected): P has a constant term, so x is invertible,
/// and x · (P + 1)/x = P + 1 ≡ 1. (P + 1)/x is x^31 plus P's other terms one degree down.
const X_INV: u32 = ((POLY & 0x7fff_ffff) << 1) | 1;

/// `[x^(-8a) for a in 0..256, x^(-8·256·b) for b in 0..256]`: with them, undoing a shift by
/// any `t < 65536` bytes costs two multiplications ([`x_pow_minus_8n`]).
static X_INV_8N: [[u32; 256]; 2] = {
    let x_inv_8 = {
        let mut p = 1u32 << 31;
        let mut i = 0;
        while i < 8 {
            p = mul_mod(p, X_INV);
            i += 1;
        }
        p
    };
    let mut t = [[1u32 << 31; 256]; 2];
    let mut a = 1;
    while a < 256 {
        t[0][a] = mul_mod(t[0][a - 1], x_inv_8);
        a += 1;
    }
    // x^(-8·256) is one step past the end of the first row.
    let step = mul_mod(t[0][255], x_inv_8);
    let mut b = 1;
    while b < 256 {
        t[1][b] = mul_mod(t[1][b - 1], step);
        b += 1;
    }
    t
};

/// x^(-8n) modulo the CRC-32 polynomial, for `n < 65536`: the operator that takes back a run of
/// n zero bytes through the register.
fn x_pow_minus_8n(n: u16) -> u32 {
    mul_mod(X_INV_8N[0][usize::from(n & 0xff)], X_INV_8N[1][usize::from(n >> 8)])
}

/// x^(8n) modulo the CRC-32 polynomial: the operator "run n zero bytes through the register".
fn x_pow_8n(mut n: u64) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut base = 1u32 << (31 - 8); // x^8
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod(result, base);
        }
        base = mul_mod(base, base);
        n >>= 1;
    }
    result
}

/// The IPv4 fields an ICRC check over a UDP socket could not see, as recovered from the CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredIpv4 {
    /// The IP identification the sender used.
    pub id: u16,
    /// Whether the sender set Don't Fragment.
    pub df: bool,
}

/// Finds the IPv4 identification and DF flag that make `received_icrc` the ICRC of the
/// packet, when those fields are unknown.
///
/// `ip_header` is the 20-byte IPv4 header as far as the receiver knows it (addresses, total
/// length, protocol; identification and flags zero). The CRC is linear over GF(2), so the
/// 17 unknown bits move it inside a 17-dimensional subspace of the 2^32 possible values: we
/// solve for them with a little Gaussian elimination rather than trying 2^17 candidates.
///
/// The guarantee: every corruption of the covered bytes is still detected unless its CRC
/// syndrome happens to fall in that subspace — a chance of 2^17 / 2^32 = 2^-15 for a random
/// error pattern, against 2^-32 with the full header. The identification itself is protected
/// by the IPv4 header checksum, which the kernel verifies before delivering the datagram, and
/// callers that can predict it (rxe increments it per flow) regain the full strength by
/// comparing the recovered value with the expected one.
pub fn recover_ipv4_id(
    ip_header: &[u8; 20],
    udp_header: &[u8],
    ib: &[u8],
    received_icrc: u32,
) -> Result<Option<RecoveredIpv4>> {
    // (One packet: the bit-by-bit elimination, without building the solver's tables.)
    Ok(match syndrome(ip_header, udp_header, ib, received_icrc)? {
        (0, _) => Some(RecoveredIpv4 { id: 0, df: false }),
        (v, trailing) => solved(reduce(&basis(trailing), v)),
    })
}

/// The CRC syndrome of the packet computed with identification and flags zero, and the
/// number of bytes that follow those four in the CRC stream (the rest of the IP header, the
/// UDP header and the transport packet).
fn syndrome(ip_header: &[u8; 20], udp_header: &[u8], ib: &[u8], received_icrc: u32) -> Result<(u32, u64)> {
    let mut base = *ip_header;
    base[4..8].fill(0);
    let syndrome = compute(&base, udp_header, ib)? ^ received_icrc;
    Ok((syndrome, (20 - 8 + udp_header.len() + ib.len()) as u64))
}

/// The identification and DF of a reduction `(residual, tag)`, if the syndrome was in reach.
fn solved((residual, tag): (u32, u32)) -> Option<RecoveredIpv4> {
    (residual == 0).then_some(RecoveredIpv4 { id: tag as u16, df: tag & (1 << 16) != 0 })
}

/// An echelon basis of the CRC changes the 17 unknown bits cause, for one packet length:
/// `pivots[b]` holds a vector whose highest set bit is `b`, with the unknown bits it is made
/// of.
type Basis = [(u32, u32); 32];

fn basis(trailing: u64) -> Basis {
    let shift = x_pow_8n(trailing);
    let zero = crc32fast::hash(&[0u8; 4]);
    let mut pivots: Basis = [(0, 0); 32];
    for i in 0..17 {
        // Bit i < 16 is bit i of the identification; bit 16 is DF.
        let mut window = [0u8; 4];
        if i < 16 {
            window[..2].copy_from_slice(&(1u16 << i).to_be_bytes());
        } else {
            window[2] = 0x40;
        }
        let (mut v, mut tag) = (mul_mod(crc32fast::hash(&window) ^ zero, shift), 1u32 << i);
        while v != 0 {
            let bit = 31 - v.leading_zeros() as usize;
            if pivots[bit].0 == 0 {
                pivots[bit] = (v, tag);
                break;
            }
            v ^= pivots[bit].0;
            tag ^= pivots[bit].1;
        }
    }
    pivots
}

/// Reduces `v` by the echelon basis: `(residual, tag)`, where the residual is zero exactly
/// when `v` lies in the span, and `tag` names the unknown bits that make it up.
fn reduce(pivots: &Basis, mut v: u32) -> (u32, u32) {
    let mut tag = 0u32;
    while v != 0 {
        let bit = 31 - v.leading_zeros() as usize;
        if pivots[bit].0 == 0 {
            break;
        }
        v ^= pivots[bit].0;
        tag ^= pivots[bit].1;
    }
    // The bits left are all at positions without a pivot: reduce what lies below them too,
    // so that the residual is the canonical one (then `reduce` is linear in `v`).
    let mut residual = 0u32;
    while v != 0 {
        let bit = 31 - v.leading_zeros() as usize;
        if pivots[bit].0 == 0 {
            residual |= 1 << bit;
            v &= !(1 << bit);
        } else {
            v ^= pivots[bit].0;
            tag ^= pivots[bit].1;
        }
    }
    (residual, tag)
}

/// [`reduce`] as four byte-indexed tables: a projection onto a fixed complement of the span
/// is linear over GF(2), so the reduction of a syndrome is the XOR of the reductions of its
/// four bytes. Entry `[j][b]` is `reduce(b << 8j)`: (residual, tag).
struct Tables(Box<[[(u32, u32); 256]; 4]>);

impl Tables {
    fn new(pivots: &Basis) -> Tables {
        let mut t = Box::new([[(0u32, 0u32); 256]; 4]);
        for (j, row) in t.iter_mut().enumerate() {
            for (b, e) in row.iter_mut().enumerate() {
                *e = reduce(pivots, (b as u32) << (8 * j));
            }
        }
        Tables(t)
    }

    fn reduce(&self, v: u32) -> (u32, u32) {
        let t = &self.0;
        let (a, b, c, d) = (
            t[0][(v & 0xff) as usize],
            t[1][(v >> 8 & 0xff) as usize],
            t[2][(v >> 16 & 0xff) as usize],
            t[3][(v >> 24) as usize],
        );
        (a.0 ^ b.0 ^ c.0 ^ d.0, a.1 ^ b.1 ^ c.1 ^ d.1)
    }
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tables")
    }
}

impl Clone for Tables {
    fn clone(&self) -> Tables {
        Tables(self.0.clone())
    }
}

/// [`recover_ipv4_id`] for a stream of packets, at a cost that does not depend on what the
/// sender chooses.
///
/// The change the unknown bits make to the CRC of a packet whose ICRC field sits `t` bytes
/// after them is their change for `t = 0` multiplied by x^(8t) (modulo the CRC polynomial,
/// which has x invertible). So one set of tables, for `t = 0`, serves every length: the
/// syndrome is multiplied by x^(-8t) (two multiplications, from two tables) and reduced
/// there. That costs a few hundred nanoseconds more than tables made for the packet's own
/// length, so a receiver, which sees few distinct lengths, also keeps those for the lengths of
/// packets that *verified*: junk (a wrong ICRC, of any length) never builds tables (tens of
/// microseconds each) nor evicts a live flow's, and a sender of right ICRCs of ever new
/// lengths gets at most one built per [`Ipv4IdSolver::BUILD_EVERY`] recoveries.
#[derive(Debug, Clone)]
pub struct Ipv4IdSolver {
    /// The reduction for `t = 0`.
    base: Tables,
    cache: Vec<(u64, Tables)>,
    /// Recoveries since tables were last built.
    since_build: u32,
}

impl Default for Ipv4IdSolver {
    fn default() -> Ipv4IdSolver {
        Ipv4IdSolver::new()
    }
}

impl Ipv4IdSolver {
    /// Most lengths remembered (8 KiB of tables each).
    const SLOTS: usize = 16;
    /// Tables for a new length are built at most once per this many recoveries.
    pub const BUILD_EVERY: u32 = 64;

    /// A solver with the tables for `t = 0` and no length cached.
    pub fn new() -> Ipv4IdSolver {
        Ipv4IdSolver {
            base: Tables::new(&basis(0)),
            cache: Vec::with_capacity(Self::SLOTS),
            since_build: Self::BUILD_EVERY,
        }
    }

    /// See [`recover_ipv4_id`].
    pub fn recover(
        &mut self,
        ip_header: &[u8; 20],
        udp_header: &[u8],
        ib: &[u8],
        received_icrc: u32,
    ) -> Result<Option<RecoveredIpv4>> {
        self.since_build = self.since_build.saturating_add(1);
        let (v, trailing) = match syndrome(ip_header, udp_header, ib, received_icrc)? {
            (0, _) => return Ok(Some(RecoveredIpv4 { id: 0, df: false })),
            s => s,
        };
        if let Some((_, t)) = self.cache.iter().find(|(t, _)| *t == trailing) {
            return Ok(solved(t.reduce(v)));
        }
        let found = match u16::try_from(trailing) {
            Ok(n) => solved(self.base.reduce(mul_mod(v, x_pow_minus_8n(n)))),
            // (longer than a UDP datagram can be: the one-shot elimination)
            Err(_) => solved(reduce(&basis(trailing), v)),
        };
        if found.is_some() && self.since_build >= Self::BUILD_EVERY {
            self.since_build = 0;
            if self.cache.len() == Self::SLOTS {
                self.cache.remove(0);
            }
            self.cache.push((trailing, Tables::new(&basis(trailing))));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_reduce_as_the_elimination_does() {
        // Linearity of the canonical reduction: the four byte tables give what the bit-by-bit
        // elimination gives, for syndromes inside the span (a solution) and outside (none).
        for trailing in [12 + 8 + 12 + 64, 12 + 8 + 4112, 12 + 8 + 28 + 4096] {
            let pivots = basis(trailing);
            let tables = Tables::new(&pivots);
            let mut x = 0x1234_5678u32;
            for i in 0..20_000u32 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                // Half of them in the span: the syndrome of a random (id, DF).
                let v = if i % 2 == 0 {
                    let tag = x & 0x1_ffff;
                    (0..17).filter(|b| tag >> b & 1 != 0).fold(0u32, |acc, b| {
                        let mut window = [0u8; 4];
                        if b < 16 {
                            window[..2].copy_from_slice(&(1u16 << b).to_be_bytes());
                        } else {
                            window[2] = 0x40;
                        }
                        acc ^ mul_mod(
                            crc32fast::hash(&window) ^ crc32fast::hash(&[0u8; 4]),
                            x_pow_8n(trailing),
                        )
                    })
                } else {
                    x
                };
                let slow = reduce(&pivots, v);
                assert_eq!(tables.reduce(v), slow, "trailing {trailing} v {v:#x}");
                if i % 2 == 0 {
                    assert_eq!(slow, (0, x & 0x1_ffff), "in the span: solved exactly");
                }
            }
        }
    }

    #[test]
    fn the_solver_and_the_one_shot_recovery_agree_on_built_packets() {
        // Packets whose ICRC was computed with a known identification and DF: both paths
        // find exactly those; a corrupted payload is found by both or neither, alike.
        let mut solver = Ipv4IdSolver::new();
        for (len, id, df) in [(64usize, 0u16, true), (64, 17, true), (4096, 63, true), (100, 0xbeef, false)] {
            let (ip, udp, mut ib, icrc) = built(len, id, df, 0);
            let want = Some(RecoveredIpv4 { id, df });
            assert_eq!(solver.recover(&ip, &udp, &ib, icrc).unwrap(), want);
            assert_eq!(recover_ipv4_id(&ip, &udp, &ib, icrc).unwrap(), want);
            ib[12] ^= 0x10;
            assert_eq!(
                solver.recover(&ip, &udp, &ib, icrc).unwrap(),
                recover_ipv4_id(&ip, &udp, &ib, icrc).unwrap()
            );
        }
    }

    #[test]
    fn the_inverse_shifts_undo_the_shifts() {
        const ONE: u32 = 1 << 31;
        assert_eq!(mul_mod(1 << 30, X_INV), ONE, "x · x^-1");
        for n in [0u16, 1, 2, 7, 8, 255, 256, 257, 1000, 4116, 65535] {
            assert_eq!(mul_mod(x_pow_8n(u64::from(n)), x_pow_minus_8n(n)), ONE, "n={n}");
        }
    }

    /// A packet whose ICRC was computed with identification `id` and DF `df`: (IP header as a
    /// UDP receiver knows it, UDP header, transport packet without the ICRC, ICRC).
    fn built(len: usize, id: u16, df: bool, seed: usize) -> ([u8; 20], [u8; 8], Vec<u8>, u32) {
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + 8 + 12 + len + 4) as u16).to_be_bytes());
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[127, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[127, 0, 0, 2]);
        let mut udp = [0u8; 8];
        udp[..2].copy_from_slice(&0xc000u16.to_be_bytes());
        udp[2..4].copy_from_slice(&4791u16.to_be_bytes());
        udp[4..6].copy_from_slice(&((8 + 12 + len + 4) as u16).to_be_bytes());
        let ib: Vec<u8> = (0..12 + len).map(|i| (i * 31 + 7 + seed * 13) as u8).collect();
        let mut sent = ip;
        sent[4..6].copy_from_slice(&id.to_be_bytes());
        sent[6] = if df { 0x40 } else { 0 };
        let icrc = compute(&sent, &udp, &ib).unwrap();
        (ip, udp, ib, icrc)
    }

    #[test]
    fn the_solver_agrees_with_the_elimination_at_every_length_cached_or_not() {
        // Lengths from the first packet on (no tables for them yet), again (cached), and more
        // lengths than the cache holds; right ICRCs are solved exactly, wrong ones agree with
        // the one-shot elimination (which finds a solution for 2^-15 of them).
        let mut solver = Ipv4IdSolver::new();
        let mut x = 0x2545_f491u32;
        for round in 0..3 {
            for k in 0..40usize {
                let len = 4 * ((k * 37 + round) % 300);
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let (id, df) = (x as u16, x & 0x10000 != 0);
                let (ip, udp, ib, icrc) = built(len, id, df, k);
                let want = Some(RecoveredIpv4 { id, df });
                assert_eq!(solver.recover(&ip, &udp, &ib, icrc).unwrap(), want, "len {len}");
                for bad in [icrc ^ 1, icrc ^ x, icrc.rotate_left(7)] {
                    assert_eq!(
                        solver.recover(&ip, &udp, &ib, bad).unwrap(),
                        recover_ipv4_id(&ip, &udp, &ib, bad).unwrap(),
                        "len {len} icrc {bad:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn junk_of_any_length_builds_no_tables() {
        // Wrong ICRCs of ever new lengths: answered without building tables for any of them
        // (the cost an attacker could otherwise impose per packet), and a length that then
        // verifies gets its tables.
        let mut solver = Ipv4IdSolver::new();
        for len in 0..2000usize {
            let (ip, udp, ib, icrc) = built(len, 7, true, len);
            let r = solver.recover(&ip, &udp, &ib, !icrc).unwrap();
            assert_eq!(r, recover_ipv4_id(&ip, &udp, &ib, !icrc).unwrap());
        }
        // (a wrong ICRC that happens to solve, 2^-15 each, may have built one)
        assert!(solver.cache.len() <= 1, "{} tables built for junk", solver.cache.len());
        let before = solver.cache.len();
        let (ip, udp, ib, icrc) = built(1024, 3, true, 0);
        assert_eq!(solver.recover(&ip, &udp, &ib, icrc).unwrap(), Some(RecoveredIpv4 { id: 3, df: true }));
        assert_eq!(solver.cache.len(), before + 1);
        // New right lengths in a row: at most one set of tables per BUILD_EVERY recoveries.
        for len in 0..(2 * Ipv4IdSolver::BUILD_EVERY as usize) {
            let (ip, udp, ib, icrc) = built(4 * len, 9, true, len);
            assert!(solver.recover(&ip, &udp, &ib, icrc).unwrap().is_some());
        }
        assert!(solver.cache.len() <= before + 3, "{} tables", solver.cache.len());
    }

    #[test]
    fn x_pow_matches_zero_bytes() {
        // Running n zero bytes through a register r (zero init, no final xor) equals r * x^(8n).
        for n in [0u64, 1, 2, 7, 100, 4096] {
            let a = crc32fast::hash(&[0x12, 0x34]);
            let b = crc32fast::hash(&[0, 0]);
            let mut ma = vec![0x12u8, 0x34];
            ma.extend(std::iter::repeat_n(0, n as usize));
            let mut mb = vec![0u8, 0];
            mb.extend(std::iter::repeat_n(0, n as usize));
            assert_eq!(crc32fast::hash(&ma) ^ crc32fast::hash(&mb), mul_mod(a ^ b, x_pow_8n(n)), "n={n}");
        }
    }
}
