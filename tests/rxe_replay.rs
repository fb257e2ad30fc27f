//! Feed our responder the request packets kernel rxe received in the captures and check that
//! it answers exactly as rxe did: same opcodes, PSNs, AETH syndromes and MSNs, same READ data
//! (from memory pre-filled with what rxe returned), same atomic original values; and the UD
//! SENDs rxe sent, received by a UD QP of ours.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use softroce::transport::sim::PD;
use softroce::transport::*;
use softroce::wire::roce::RoceFrame;
use softroce::wire::{Direction, Opcode, Operation, Packet, PacketRepr, Psn, Transport};

struct Frame {
    src: IpAddr,
    dst: IpAddr,
    bytes: Vec<u8>,
}

fn rc_frames(name: &str) -> Vec<Frame> {
    common::read_pcap(name)
        .into_iter()
        .filter_map(|(_, f)| {
            let fr = RoceFrame::parse_ethernet(&f).ok()?;
            (fr.packet().info().transport == Transport::Rc).then(|| Frame {
                src: fr.src_addr(),
                dst: fr.dst_addr(),
                bytes: fr.packet().as_bytes().to_vec(),
            })
        })
        .collect()
}

/// What we compare of a response.
#[derive(Debug, PartialEq, Eq)]
struct Resp {
    opcode: Opcode,
    psn: Psn,
    syndrome: Option<u8>,
    msn: Option<u32>,
    payload: Vec<u8>,
    orig: Option<u64>,
}

fn resp(bytes: &[u8]) -> Resp {
    let p = Packet::new_checked(bytes).unwrap();
    let r = PacketRepr::parse(&p);
    Resp {
        opcode: r.bth.opcode,
        psn: r.bth.psn,
        syndrome: r.aeth.map(|a| a.syndrome_raw),
        msn: r.aeth.map(|a| a.msn),
        payload: p.payload().to_vec(),
        orig: r.atomic_ack_eth.map(|a| a.orig),
    }
}

/// Replays every RC conversation (requests to one responder address) of a capture; returns
/// the number of responses compared.
fn replay(name: &str) -> usize {
    let frames = rc_frames(name);
    let info = |f: &Frame| Packet::new_checked(&f.bytes).unwrap().info();
    let responders: Vec<IpAddr> = {
        let mut v: Vec<IpAddr> =
            frames.iter().filter(|f| info(f).direction == Direction::Request).map(|f| f.dst).collect();
        v.sort();
        v.dedup();
        v
    };
    let mut compared = 0;
    for at in responders {
        let requests: Vec<&Frame> =
            frames.iter().filter(|f| f.dst == at && info(f).direction == Direction::Request).collect();
        let expected: Vec<Resp> = frames
            .iter()
            .filter(|f| f.src == at && info(f).direction == Direction::Response)
            .map(|f| resp(&f.bytes))
            .collect();
        let first = Packet::new_checked(&requests[0].bytes).unwrap();
        let qpn = first.bth().dest_qp();
        let Some(dest) = frames
            .iter()
            .find(|f| f.src == at && info(f).direction == Direction::Response)
            .map(|f| Packet::new_checked(&f.bytes).unwrap().bth().dest_qp())
        else {
            continue;
        };

        // Memory: one region per rkey covering every VA the requests name, filled with what
        // rxe answered (READ data, atomic original values); receive buffers for SENDs.
        let mem = VecMemory::new();
        let mut ranges: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for f in &requests {
            let p = Packet::new_checked(&f.bytes).unwrap();
            let span = p
                .reth()
                .map(|r| (r.rkey(), r.va(), r.dma_len() as u64))
                .or(p.atomic_eth().map(|a| (a.rkey(), a.va(), 8)));
            if let Some((rkey, va, len)) = span {
                let e = ranges.entry(rkey).or_insert((va, va + len));
                e.0 = e.0.min(va);
                e.1 = e.1.max(va + len);
            }
        }
        for (&rkey, &(lo, hi)) in &ranges {
            mem.add_region(VecRegion {
                pd: PD,
                lkey: rkey,
                rkey,
                addr: lo,
                access: Access::ALL,
                invalidatable: false,
                valid: true,
                data: vec![0; (hi - lo) as usize + 8],
            });
        }
        let by_psn: BTreeMap<u32, &Resp> = expected.iter().map(|r| (r.psn.value(), r)).collect();
        let mtu = 1024u64;
        let prefill = |f: &Frame| {
            let p = Packet::new_checked(&f.bytes).unwrap();
            let psn = p.bth().psn();
            match p.info().operation {
                Operation::RdmaReadRequest => {
                    let r = p.reth().unwrap();
                    let n = (r.dma_len() as u64).div_ceil(mtu).max(1);
                    for k in 0..n {
                        if let Some(x) = by_psn.get(&psn.add(k as u32).value()) {
                            mem.set(r.rkey(), r.va() + k * mtu, &x.payload);
                        }
                    }
                }
                Operation::FetchAdd | Operation::CompareSwap => {
                    let a = p.atomic_eth().unwrap();
                    if let Some(orig) = by_psn.get(&psn.value()).and_then(|x| x.orig) {
                        mem.set(a.rkey(), a.va(), &orig.to_ne_bytes());
                    }
                }
                _ => {}
            }
        };
        mem.add(PD, 0xabc, 0x7000_0000, 2000 * 65536, Access::LOCAL_WRITE);
        let mut qp = Qp::new(qpn, QpType::Rc, PD, QpCaps { max_recv_wr: 2000, ..QpCaps::default() });
        qp.modify(&QpAttrUpdate {
            state: Some(QpState::Init),
            access: Some(Access::ALL),
            port: true,
            pkey_index: true,
            ..Default::default()
        })
        .unwrap();
        qp.modify(&QpAttrUpdate {
            state: Some(QpState::Rtr),
            av: true,
            path_mtu: Some(Mtu::Mtu1024),
            dest_qpn: Some(Qpn::new(dest)),
            rq_psn: Some(psn_of(requests[0])),
            max_dest_rd_atomic: Some(128),
            min_rnr_timer: Some(12),
            ..Default::default()
        })
        .unwrap();
        for i in 0..2000u64 {
            qp.post_recv(RecvWr::new(
                i,
                &[Sge { addr: 0x7000_0000 + i * 65536, length: 65536, lkey: Lkey::new(0xabc) }],
            ))
            .unwrap();
        }

        let mut got = Vec::new();
        let mut buf = vec![0u8; 8192];
        for f in &requests {
            // The application may change memory between requests (rping does): fill in what
            // rxe answered just before the request it answered.
            prefill(f);
            let p = Packet::new_checked(&f.bytes).unwrap();
            qp.handle_packet(Time::ZERO, &p, &mem);
            while let Some(t) = qp.poll_transmit(Time::ZERO, &mem, &mut buf) {
                got.push(resp(&buf[..t.len]));
            }
        }
        assert_eq!(qp.state(), QpState::Rtr, "{name}: our responder went to {:?}", qp.state());
        assert_eq!(
            got.len(),
            expected.len(),
            "{name} {at}: {} responses, rxe sent {}",
            got.len(),
            expected.len()
        );
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "{name} {at}: response {i}");
        }
        // Receive completions: one per SEND/WRITE-with-immediate message, with rxe's lengths.
        compared += got.len();
    }
    compared
}

fn psn_of(f: &Frame) -> Psn {
    Packet::new_checked(&f.bytes).unwrap().bth().psn()
}

#[test]
fn rc_pingpong() {
    assert_eq!(replay("rc_pingpong.pcap"), 10);
}

#[test]
fn send_8k() {
    assert_eq!(replay("send_8k.pcap"), 20);
}

#[test]
fn write_8k() {
    assert_eq!(replay("write_8k.pcap"), 20);
}

#[test]
fn read_8k() {
    assert_eq!(replay("read_8k.pcap"), 160);
}

#[test]
fn immediate_data() {
    assert_eq!(replay("imm.pcap"), 6);
}

#[test]
fn atomics() {
    assert_eq!(replay("atomic.pcap"), 20);
}

#[test]
fn rping() {
    // rping's RC traffic: SENDs both ways, a READ and a WRITE from the server.
    assert!(replay("rping_cm.pcap") >= 15);
}

/// The UD SENDs kernel rxe exchanged in `ibv_ud_pingpong` (and with a userspace peer), fed to
/// a UD QP of ours: each lands whole after the 40-byte GRH area, which holds the captured IPv4
/// header in its last 20 bytes, and the completion reports rxe's source QPN; with another
/// Q_Key the same packets are dropped and counted.
#[test]
fn ud_sends_from_rxe_are_received() {
    let mut n = 0;
    for name in ["ud_pingpong.pcap", "host_ud.pcap"] {
        for (_, f) in common::read_pcap(name) {
            let Ok(fr) = RoceFrame::parse_ethernet(&f) else { continue };
            let p = fr.packet();
            if p.info().transport != Transport::Ud {
                continue;
            }
            assert!(fr.icrc_ok(), "{name}: rxe's ICRC");
            let deth = p.deth().expect("UD carries a DETH");
            let mut grh = [0u8; GRH_LEN];
            grh[20..].copy_from_slice(fr.ip_header());
            for (qkey, delivered) in [(deth.qkey(), true), (deth.qkey() ^ 1, false)] {
                let mem = VecMemory::new();
                mem.add(PD, 0x10, 0x1000, 8192, Access::LOCAL_WRITE);
                let caps = QpCaps {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                };
                let mut qp = Qp::new(p.bth().dest_qp(), QpType::Ud, PD, caps);
                for u in [
                    QpAttrUpdate {
                        state: Some(QpState::Init),
                        qkey: Some(Qkey::new(qkey)),
                        port: true,
                        pkey_index: true,
                        ..Default::default()
                    },
                    QpAttrUpdate { state: Some(QpState::Rtr), ..Default::default() },
                    QpAttrUpdate {
                        state: Some(QpState::Rts),
                        sq_psn: Some(Psn::new(0)),
                        ..Default::default()
                    },
                ] {
                    qp.modify(&u).unwrap();
                }
                qp.set_ud_mtu(Mtu::Mtu4096);
                qp.post_recv(RecvWr::new(7, &[Sge { addr: 0x1000, length: 8192, lkey: Lkey::new(0x10) }]))
                    .unwrap();
                qp.handle_packet_grh(Time::ZERO, &p, Some(&grh), &mem);
                let wc = qp.poll_recv_completion();
                if !delivered {
                    assert!(wc.is_none(), "{name}: a foreign Q_Key is dropped");
                    assert_eq!(qp.counters().rcvd_qkey_err, 1);
                    continue;
                }
                let wc = wc.expect("a receive completion");
                let len = p.payload().len();
                assert_eq!(
                    (wc.status, wc.byte_len as usize, wc.src_qp.value(), wc.grh, wc.imm_data),
                    (WcStatus::Success, GRH_LEN + len, deth.src_qp(), true, p.immdt().map(|i| i.imm())),
                    "{name}"
                );
                let buf = mem.get(0x10, 0x1000, GRH_LEN + len);
                assert_eq!(buf[..GRH_LEN], grh, "{name}: the GRH area");
                assert_eq!(&buf[GRH_LEN..], p.payload(), "{name}: the payload");
                n += 1;
            }
        }
    }
    assert_eq!(n, 8, "six UD SENDs in ud_pingpong.pcap and two in host_ud.pcap");
}
