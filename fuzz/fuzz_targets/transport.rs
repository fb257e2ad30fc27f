//! Drives an RC responder (B) and requester (A) with arbitrary packet sequences, timer jumps
//! and work requests.
//!
//! Invariants: nothing panics; memory that no key grants remote access to (a guard region
//! right after the target, and the requesters' own buffers) never changes from a remote
//! request; every work request completes at most once; one round of transmission always ends
//! (no loop without progress).
#![no_main]

mod layout;

use layout::*;
use libfuzzer_sys::fuzz_target;
use softroce::transport::sim::{Pair, PairConfig};
use softroce::transport::*;
use softroce::wire::aeth::Syndrome;
use softroce::wire::*;
use std::collections::BTreeSet;
use std::time::Duration;

const REQUESTS: [Opcode; 17] = [
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_LAST_IMM,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_SEND_ONLY_IMM,
    Opcode::RC_WRITE_FIRST,
    Opcode::RC_WRITE_MIDDLE,
    Opcode::RC_WRITE_LAST,
    Opcode::RC_WRITE_LAST_IMM,
    Opcode::RC_WRITE_ONLY,
    Opcode::RC_WRITE_ONLY_IMM,
    Opcode::RC_READ_REQ,
    Opcode::RC_CMP_SWAP,
    Opcode::RC_FETCH_ADD,
    Opcode::RC_SEND_ONLY_INV,
    Opcode::RC_FLUSH,
];
const RESPONSES: [Opcode; 6] = [
    Opcode::RC_READ_RESP_FIRST,
    Opcode::RC_READ_RESP_MIDDLE,
    Opcode::RC_READ_RESP_LAST,
    Opcode::RC_READ_RESP_ONLY,
    Opcode::RC_ACK,
    Opcode::RC_ATOMIC_ACK,
];

/// A structured packet: the input picks the opcode, a PSN near `base`, keys, addresses and
/// lengths from interesting sets.
fn packet(r: &mut R, list: &[Opcode], dest: u32, base: Psn) -> Option<Vec<u8>> {
    let op = list[r.u8()? as usize % list.len()];
    let info = op.info()?;
    let mut bth = BthRepr::new(op, dest, base.add((r.u8()? as i8) as i32 as u32));
    let flags = r.u8()?;
    bth.ack_req = flags & 1 != 0;
    bth.solicited = flags & 2 != 0;
    let mut p = PacketRepr::new(bth);
    let key = match r.u8()? % 4 {
        0 => TGT,
        1 => GUARD,
        2 => BUF,
        _ => r.u32()?,
    };
    let va = match r.u8()? % 4 {
        0 => TGT_ADDR,
        1 => TGT_ADDR + r.u16()? as u64,
        2 => GUARD_ADDR - r.u8()? as u64,
        _ => r.u32()? as u64,
    };
    let len = match r.u8()? % 4 {
        0 => 0,
        1 => r.u8()? as u32,
        2 => r.u16()? as u32,
        _ => r.u32()?,
    };
    let h = info.headers;
    if h.contains(Headers::RETH) {
        p.reth = Some(RethRepr { va, rkey: key, dma_len: len });
    }
    if h.contains(Headers::ATOMIC_ETH) {
        p.atomic_eth = Some(AtomicEthRepr { va, rkey: key, swap_add: r.u32()? as u64, compare: 0 });
    }
    if h.contains(Headers::FETH) {
        p.feth = Some(FethRepr::new(0, 1));
    }
    if h.contains(Headers::AETH) {
        p.aeth = Some(AethRepr::new(Syndrome::from_u8(r.u8()?), r.u8()? as u32));
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        p.atomic_ack_eth = Some(AtomicAckEthRepr { orig: r.u32()? as u64 });
    }
    if h.contains(Headers::IMMDT) {
        p.immdt = Some(ImmDtRepr { imm: 7 });
    }
    if h.contains(Headers::IETH) {
        p.ieth = Some(IethRepr { rkey: key });
    }
    let plen = if info.payload {
        match r.u8()? % 4 {
            0 => 0,
            1 => 1024,
            2 => r.u8()? as usize,
            _ => r.u16()? as usize % 4097,
        }
    } else {
        0
    };
    let payload = vec![0xee; plen];
    let mut buf = vec![0u8; p.buffer_len(plen)];
    p.emit(&mut buf, &payload).ok()?;
    Some(buf)
}

fn feed(qp: &mut Qp, now: Time, mem: &VecMemory, bytes: &[u8]) {
    if let Ok(p) = Packet::new_checked(bytes)
        && p.bth().dest_qp() == qp.qpn()
    {
        qp.handle_packet(now, &p, mem);
    }
}

/// Every packet a QP has now; panics if one round never ends.
fn drain(qp: &mut Qp, now: Time, mem: &VecMemory) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    while let Some(t) = qp.poll_transmit(now, mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
        assert!(out.len() < 200_000, "transmission without end");
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let mut r = R(data);
    let Some(mtu_pick) = r.u8() else { return };
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][mtu_pick as usize % 3];
    let p = Pair::new(PairConfig { mtu, rd_atomic: 4, retry_cnt: 3, rnr_retry: 2, ..PairConfig::default() });
    let Pair { a, b, .. } = p;
    let (mut qa, mut qb) = (a.qps.into_iter().next().unwrap(), b.qps.into_iter().next().unwrap());
    let (ma, mb) = (a.mem, b.mem);
    for m in [&ma, &mb] {
        add_regions(m);
        m.set(BUF, BUF_ADDR, &[0x33; 65536]);
    }
    let mut now = Time::ZERO;
    let mut posted = 0u64;
    let mut done = BTreeSet::new();
    while let Some(action) = r.u8() {
        match action % 8 {
            0 => {
                let base = qb.expected_psn();
                if let Some(pkt) = packet(&mut r, &REQUESTS, qb.qpn(), base) {
                    feed(&mut qb, now, &mb, &pkt);
                }
            }
            1 => {
                let base = qa.next_send_psn().sub(4);
                if let Some(pkt) = packet(&mut r, &RESPONSES, qa.qpn(), base) {
                    feed(&mut qa, now, &ma, &pkt);
                }
            }
            2 => {
                let n = r.u8().unwrap_or(0) as usize;
                let raw = r.bytes(n).to_vec();
                feed(&mut qb, now, &mb, &raw);
                feed(&mut qa, now, &ma, &raw);
            }
            3 => {
                now = now + Duration::from_micros(r.u16().unwrap_or(0) as u64 * 10);
                qa.handle_timeout(now, &ma);
                qb.handle_timeout(now, &mb);
            }
            4 => {
                // One round of honest exchange, possibly dropping what the input says.
                let drop = r.u8().unwrap_or(0);
                for (i, pkt) in drain(&mut qa, now, &ma).iter().enumerate() {
                    if (drop >> (i % 8)) & 1 == 0 {
                        feed(&mut qb, now, &mb, pkt);
                    }
                }
                for pkt in drain(&mut qb, now, &mb) {
                    feed(&mut qa, now, &ma, &pkt);
                }
            }
            5 => {
                let kind = r.u8().unwrap_or(0);
                let len = r.u16().unwrap_or(0) as u32 % 20000;
                let off = r.u16().unwrap_or(0) as u64 % (TGT_LEN + 64);
                let remote = RemoteAddr {
                    addr: TGT_ADDR + (off & !7),
                    rkey: if kind & 0x80 != 0 { Rkey::new(GUARD) } else { Rkey::new(TGT) },
                };
                let sge = [Sge { addr: BUF_ADDR, length: len, lkey: Lkey::new(BUF) }];
                let op = match kind % 7 {
                    0 => SendOp::Send,
                    1 => SendOp::SendWithImm(1),
                    2 => SendOp::RdmaWrite(remote),
                    3 => SendOp::RdmaRead(remote),
                    4 => SendOp::FetchAdd { remote, add: 1 },
                    // A local operation in the send queue (this memory has no windows: it
                    // fails and takes the QP to the error state, in order).
                    5 => SendOp::LocalInv(remote.rkey),
                    _ => SendOp::RdmaWriteWithImm(remote, 2),
                };
                let sge = if op.is_atomic() { [Sge { addr: BUF_ADDR, length: 8, lkey: Lkey::new(BUF) }] } else { sge };
                if qa.post_send(SendWr::new(posted, op, &sge)).is_ok() {
                    posted += 1;
                }
            }
            6 => {
                let _ = qb.post_recv(RecvWr::new(
                    1000 + posted,
                    &[Sge { addr: BUF_ADDR, length: 32768, lkey: Lkey::new(BUF) }],
                ));
            }
            _ => {
                let target = [QpState::Err, QpState::Sqd, QpState::Rts][r.u8().unwrap_or(0) as usize % 3];
                let _ = qa.modify(&QpAttrUpdate { state: Some(target), ..Default::default() });
            }
        }
        while let Some(wc) = qa.poll_send_completion() {
            assert!(done.insert(wc.wr_id), "work request {} completed twice", wc.wr_id);
        }
        while qb.poll_recv_completion().is_some() {}
    }
    // No remote request may touch memory without remote rights.
    assert_eq!(mb.get(GUARD, GUARD_ADDR, 4096), vec![GUARD_BYTE; 4096], "guard region written");
    assert_eq!(ma.get(GUARD, GUARD_ADDR, 4096), vec![GUARD_BYTE; 4096], "guard region written");
});
