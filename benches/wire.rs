//! Per-packet costs of the wire layer: parse, emit, ICRC, and the IPv4-ID recovery the UDP
//! backend does on every received packet.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use softroce::wire::icrc;
use softroce::wire::roce::{IpRepr, RoceFrameRepr};
use softroce::wire::*;
use std::hint::black_box;
use std::net::Ipv4Addr;

fn frame(payload: usize) -> (Vec<u8>, RoceFrameRepr) {
    let f = RoceFrameRepr {
        ip: IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            tos: 0,
            ttl: 64,
            id: 7,
            df: true,
        },
        src_port: 0xc132,
        dst_port: ROCEV2_UDP_PORT,
        udp_checksum: false,
    };
    let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_WRITE_MIDDLE, 0x11, Psn::new(5)));
    r.bth.ack_req = false;
    let data = vec![0xabu8; payload];
    let mut buf = vec![0u8; f.header_len() + r.buffer_len(payload)];
    let n = f.emit(&mut buf, &r, &data).unwrap();
    buf.truncate(n);
    (buf, f)
}

fn bench(c: &mut Criterion) {
    for payload in [64usize, 4096] {
        let (buf, f) = frame(payload);
        let ib = &buf[28..];
        let mut g = c.benchmark_group(format!("{payload}B"));
        g.throughput(Throughput::Bytes(ib.len() as u64));
        g.bench_function("parse", |b| {
            b.iter(|| PacketRepr::parse(&Packet::new_checked(black_box(ib)).unwrap()))
        });
        let repr = PacketRepr::parse(&Packet::new_checked(ib).unwrap());
        let data = vec![0u8; payload];
        let mut out = vec![0u8; ib.len()];
        g.bench_function("emit", |b| b.iter(|| repr.emit(black_box(&mut out), black_box(&data)).unwrap()));
        g.bench_function("icrc", |b| b.iter(|| f.icrc(black_box(&ib[..ib.len() - 4])).unwrap()));
        let hdr: [u8; 20] = buf[..20].try_into().unwrap();
        let p = Packet::new_checked(ib).unwrap();
        g.bench_function("recover_ipv4_id", |b| {
            b.iter(|| {
                icrc::recover_ipv4_id(black_box(&hdr), &buf[20..28], p.without_icrc(), p.icrc()).unwrap()
            })
        });
        let mut solver = icrc::Ipv4IdSolver::new();
        g.bench_function("recover_ipv4_id_cached", |b| {
            b.iter(|| solver.recover(black_box(&hdr), &buf[20..28], p.without_icrc(), p.icrc()).unwrap())
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
