//! Drives a UC or UD responder (B, half the time taking receives from a shared receive queue)
//! with arbitrary packet sequences, interleaved with honest traffic from a requester (A).
//!
//! Invariants: nothing panics; memory that no key grants remote write access to (a guard
//! region) never changes; a receive work request completes at most once, with a byte count
//! that fits its buffer (for SENDs); the SRQ never holds more than its size.
#![no_main]

mod layout;

use layout::*;
use libfuzzer_sys::fuzz_target;
use softroce::transport::sim::{PD, Pair, PairConfig};
use softroce::transport::*;
use softroce::wire::*;
use std::collections::BTreeSet;

const QKEY: u32 = 0x1111_1111;
const RECV_LEN: u32 = 6000;

const UC: [Opcode; 12] = [
    Opcode::UC_SEND_FIRST,
    Opcode::UC_SEND_MIDDLE,
    Opcode::UC_SEND_LAST,
    Opcode::UC_SEND_LAST_IMM,
    Opcode::UC_SEND_ONLY,
    Opcode::UC_SEND_ONLY_IMM,
    Opcode::UC_WRITE_FIRST,
    Opcode::UC_WRITE_MIDDLE,
    Opcode::UC_WRITE_LAST,
    Opcode::UC_WRITE_LAST_IMM,
    Opcode::UC_WRITE_ONLY,
    Opcode::UC_WRITE_ONLY_IMM,
];
const UD: [Opcode; 3] = [Opcode::UD_SEND_ONLY, Opcode::UD_SEND_ONLY_IMM, Opcode::RC_SEND_ONLY];

fn packet(r: &mut R, ud: bool, dest: u32, base: Psn) -> Option<Vec<u8>> {
    let list: &[Opcode] = if ud { &UD } else { &UC };
    let op = list[r.u8()? as usize % list.len()];
    let info = op.info()?;
    let bth = BthRepr::new(op, dest, base.add((r.u8()? as i8) as i32 as u32));
    let mut p = PacketRepr::new(bth);
    let key = match r.u8()? % 4 {
        0 => TGT,
        1 => GUARD,
        2 => BUF,
        _ => r.u32()?,
    };
    let va = match r.u8()? % 3 {
        0 => TGT_ADDR + r.u16()? as u64,
        1 => GUARD_ADDR - r.u8()? as u64,
        _ => r.u32()? as u64,
    };
    let len = match r.u8()? % 3 {
        0 => r.u8()? as u32,
        1 => r.u16()? as u32,
        _ => r.u32()?,
    };
    let h = info.headers;
    if h.contains(Headers::RETH) {
        p.reth = Some(RethRepr { va, rkey: key, dma_len: len });
    }
    if h.contains(Headers::DETH) {
        let qkey = if r.u8()? % 4 == 0 { r.u32()? } else { QKEY };
        p.deth = Some(DethRepr { qkey, resv8: 0, src_qp: r.u32()? & 0xff_ffff });
    }
    if h.contains(Headers::IMMDT) {
        p.immdt = Some(ImmDtRepr { imm: 7 });
    }
    let plen = match r.u8()? % 4 {
        0 => 0,
        1 => 1024,
        2 => r.u8()? as usize,
        _ => r.u16()? as usize % 4097,
    };
    let payload = vec![0xee; plen];
    let mut buf = vec![0u8; p.buffer_len(plen)];
    p.emit(&mut buf, &payload).ok()?;
    Some(buf)
}

fuzz_target!(|data: &[u8]| {
    let mut r = R(data);
    let Some(mode) = r.u8() else { return };
    let ud = mode & 1 != 0;
    let with_srq = mode & 2 != 0;
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][(mode >> 2) as usize % 3];
    let qp_type = if ud { QpType::Ud } else { QpType::Uc };
    let p = Pair::new(PairConfig { mtu, qp_type, ..PairConfig::default() });
    let Pair { a, b, .. } = p;
    let (mut qa, mut qb) = (a.qps.into_iter().next().unwrap(), b.qps.into_iter().next().unwrap());
    let (ma, mb) = (a.mem, b.mem);
    for m in [&ma, &mb] {
        add_regions(m);
    }
    let mut srq = Srq::new(7, PD, 16, 2, 4).unwrap();
    let now = Time::ZERO;
    let mut posted = 0u64;
    let mut done = BTreeSet::new();
    let mut txbuf = vec![0u8; 8192];
    let feed = |qb: &mut Qp, srq: &mut Srq, bytes: &[u8]| {
        if let Ok(p) = Packet::new_checked(bytes)
            && p.bth().dest_qp() == qb.qpn()
        {
            let grh = [0x45u8; GRH_LEN];
            if with_srq {
                qb.handle_packet_srq(now, &p, Some(&grh), &mb, srq);
            } else {
                qb.handle_packet_grh(now, &p, Some(&grh), &mb);
            }
        }
    };
    while let Some(action) = r.u8() {
        match action % 6 {
            0 => {
                let base = qb.expected_psn();
                if let Some(pkt) = packet(&mut r, ud, qb.qpn(), base) {
                    feed(&mut qb, &mut srq, &pkt);
                }
            }
            1 => {
                let n = r.u8().unwrap_or(0) as usize;
                let raw = r.bytes(n).to_vec();
                feed(&mut qb, &mut srq, &raw);
            }
            2 => {
                let kind = r.u8().unwrap_or(0);
                let len = r.u16().unwrap_or(0) as u32 % 12000;
                let remote =
                    RemoteAddr { addr: TGT_ADDR + (r.u16().unwrap_or(0) as u64 % TGT_LEN), rkey: Rkey::new(TGT) };
                let op = match kind % 4 {
                    0 => SendOp::Send,
                    1 => SendOp::SendWithImm(1),
                    2 => SendOp::RdmaWrite(remote),
                    _ => SendOp::RdmaWriteWithImm(remote, 2),
                };
                let mut wr = SendWr::new(posted, op, &[Sge { addr: BUF_ADDR, length: len, lkey: Lkey::new(BUF) }]);
                if ud {
                    wr.ud = Some(UdDest { ah: 1, remote_qpn: Qpn::new(qb.qpn()), remote_qkey: Qkey::new(QKEY) });
                }
                if qa.post_send(wr).is_ok() {
                    posted += 1;
                }
            }
            3 => {
                // One round of honest traffic, dropping what the input says.
                let drop = r.u8().unwrap_or(0);
                let mut i = 0;
                while let Some(t) = qa.poll_transmit(now, &ma, &mut txbuf) {
                    if (drop >> (i % 8)) & 1 == 0 {
                        let pkt = txbuf[..t.len].to_vec();
                        feed(&mut qb, &mut srq, &pkt);
                    }
                    i += 1;
                    assert!(i < 100_000, "transmission without end");
                }
            }
            4 => {
                let id = 1000 + posted;
                posted += 1;
                let wr = RecvWr::new(id, &[Sge { addr: BUF_ADDR, length: RECV_LEN, lkey: Lkey::new(BUF) }]);
                if with_srq {
                    let _ = srq.post_recv(wr);
                } else {
                    let _ = qb.post_recv(wr);
                }
            }
            _ => {
                let target = [QpState::Err, QpState::Rts][r.u8().unwrap_or(0) as usize % 2];
                let _ = qb.modify(&QpAttrUpdate { state: Some(target), ..Default::default() });
            }
        }
        assert!(srq.len() <= srq.max_wr() as usize);
        let _ = srq.poll_limit_event();
        while let Some(wc) = qb.poll_recv_completion() {
            assert!(done.insert(wc.wr_id), "receive {} completed twice", wc.wr_id);
            // (a WRITE with immediate reports the RDMA length, which no receive buffer bounds)
            assert!(wc.opcode != WcOpcode::Recv || wc.byte_len <= RECV_LEN, "{wc:?}");
        }
        while qa.poll_send_completion().is_some() {}
    }
    assert_eq!(mb.get(GUARD, GUARD_ADDR, 4096), vec![GUARD_BYTE; 4096], "guard region written");
});
