//! The public verbs API end to end: two devices in one process on loopback UDP.

mod common;

use common::verbs::*;
use softroce::verbs::*;

#[test]
fn every_rc_operation() {
    let (a, b) = udp_pair(1 << 20, Mtu::Mtu1024);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 13) as u8).collect();
    a.mr.write(0, &data).unwrap();

    // SEND.
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 200_000)])).unwrap();
    a.qp.post_send(SendWr::new(10, SendOp::Send, &[a.mr.sge(0, 100_000)])).unwrap();
    let wc = a.wait();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (10, WcStatus::Success, WcOpcode::Send, 100_000)
    );
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (1, WcStatus::Success, 100_000));
    let mut got = vec![0; 100_000];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);

    // SEND with immediate.
    b.qp.post_recv(RecvWr::new(2, &[b.mr.sge(0, 64)])).unwrap();
    a.qp.post_send(SendWr::new(11, SendOp::SendWithImm(0x1234_5678), &[a.mr.sge(0, 10)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!((wc.imm_data, wc.byte_len), (Some(0x1234_5678), 10));

    // WRITE, then READ it back.
    let remote = RemoteAddr { addr: b.mr.addr() + 300_000, rkey: b.mr.rkey() };
    a.qp.post_send(SendWr::new(12, SendOp::RdmaWrite(remote), &[a.mr.sge(0, 50_000)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let mut got = vec![0; 50_000];
    b.mr.read(300_000, &mut got).unwrap();
    assert_eq!(got, data[..50_000]);
    a.qp.post_send(SendWr::new(13, SendOp::RdmaRead(remote), &[a.mr.sge(500_000, 50_000)])).unwrap();
    let wc = a.wait();
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::RdmaRead));
    let mut got = vec![0; 50_000];
    a.mr.read(500_000, &mut got).unwrap();
    assert_eq!(got, data[..50_000]);

    // WRITE with immediate.
    b.qp.post_recv(RecvWr::new(3, &[])).unwrap();
    a.qp.post_send(SendWr::new(14, SendOp::RdmaWriteWithImm(remote, 7), &[a.mr.sge(0, 5000)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!((wc.opcode, wc.imm_data, wc.byte_len), (WcOpcode::RecvRdmaWithImm, Some(7), 5000));

    // Atomics.
    b.mr.atomic_u64(800_000).unwrap().store(40, std::sync::atomic::Ordering::Relaxed);
    let target = RemoteAddr { addr: b.mr.addr() + 800_000, rkey: b.mr.rkey() };
    a.qp.post_send(SendWr::new(15, SendOp::FetchAdd { remote: target, add: 2 }, &[a.mr.sge(900_000, 8)]))
        .unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(a.mr.atomic_u64(900_000).unwrap().load(std::sync::atomic::Ordering::Relaxed), 40);
    a.qp.post_send(SendWr::new(
        16,
        SendOp::CompareSwap { remote: target, compare: 42, swap: 99 },
        &[a.mr.sge(900_008, 8)],
    ))
    .unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(a.mr.atomic_u64(900_008).unwrap().load(std::sync::atomic::Ordering::Relaxed), 42);
    assert_eq!(b.mr.atomic_u64(800_000).unwrap().load(std::sync::atomic::Ordering::Relaxed), 99);

    let c = a.dev.counters().unwrap();
    assert_eq!(c.rcvd_icrc_err, 0);
    assert_eq!(c.qp.completer_retry_err, 0);
}

#[test]
fn a_qp_whose_udp_source_port_is_taken_still_talks() {
    // rxe's source port for an RC QP is a hash of the two QP numbers; another socket may hold
    // it on our address. The packets then leave from 4791, and their ICRC must cover 4791
    // (it covered the wanted port, and the peer dropped every packet as an ICRC error).
    let caps =
        QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let (ip_a, ip_b) = (loopback_ip(), loopback_ip());
    let a = Side::new(Device::open(DeviceConfig::new(ip_a.as_str())).unwrap(), 4096, caps);
    let b = Side::new(Device::open(DeviceConfig::new(ip_b.as_str())).unwrap(), 4096, caps);
    let (qa, qb) = (a.qp.qp_num().value(), b.qp.qp_num().value());
    let _held = [
        std::net::UdpSocket::bind((ip_a.as_str(), gid::rc_udp_sport(0, qa, qb))).unwrap(),
        std::net::UdpSocket::bind((ip_b.as_str(), gid::rc_udp_sport(0, qb, qa))).unwrap(),
    ];
    connect(&a, &b, Mtu::Mtu1024);
    for (x, y) in [(&a, &b), (&b, &a)] {
        y.mr.write(0, &[0; 100]).unwrap();
        x.mr.write(0, &[7; 100]).unwrap();
        y.qp.post_recv(RecvWr::new(1, &[y.mr.sge(0, 4096)])).unwrap();
        x.qp.post_send(SendWr::send(2, &[x.mr.sge(0, 100)])).unwrap();
        assert_eq!(x.wait().status, WcStatus::Success);
        let wc = y.wait();
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 100));
        let mut got = [0; 100];
        y.mr.read(0, &mut got).unwrap();
        assert_eq!(got, [7; 100]);
    }
    let (ca, cb) = (a.dev.counters().unwrap(), b.dev.counters().unwrap());
    assert_eq!(ca.rcvd_icrc_err + cb.rcvd_icrc_err, 0);
    assert!(ca.send_port_fallback > 0 && cb.send_port_fallback > 0, "{ca:?} {cb:?}");
}
