//! The verbs API: typed errors for misuse, CQ overflow, error and flush, many QPs, every
//! size up to 16 MiB at every PMTU, multi-SGE, unsignaled sends, and the full path over the
//! in-memory network with loss.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::verbs::*;
use softroce::transport::sim::LinkConfig;
use softroce::verbs::*;

fn dev() -> Device {
    Device::open(DeviceConfig::new(loopback_ip())).unwrap()
}

#[test]
fn misuse_is_a_typed_error() {
    let d = dev();
    assert!(
        matches!(d.gid(GidIndex::new(9)), Err(Error::GidIndex { index, len: 2 }) if index == GidIndex::new(9))
    );
    assert!(matches!(Device::open(DeviceConfig::new("192.0.2.77")), Err(Error::NoSuchAddress(_))));
    assert!(matches!(Device::open(DeviceConfig::new("nosuchif0")), Err(Error::NoSuchInterface(_))));
    let pd = d.alloc_pd().unwrap();
    let pd2 = d.alloc_pd().unwrap();
    let cq = d.create_cq(16).unwrap();
    assert!(matches!(d.create_cq(0), Err(Error::Limit { .. })));
    let mut init = QpInitAttr::rc(&cq, &cq);
    init.cap.max_send_sge = 1000;
    assert!(matches!(pd.create_qp(&init), Err(Error::Limit { what: "max_sge", .. })));
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let other = pd2.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let ro = pd.alloc_mr(4096, Access::NONE).unwrap();
    // Wrong state.
    let e = qp.post_send(SendWr::new(1, SendOp::Send, &[mr.sge(0, 8)])).unwrap_err();
    assert!(matches!(e, Error::Post(softroce::transport::PostError::InvalidState(QpState::Reset))), "{e}");
    assert!(qp.post_recv(RecvWr::new(1, &[mr.sge(0, 8)])).is_err());
    assert!(matches!(
        qp.modify(&QpAttrs { state: Some(QpState::Rts), ..Default::default() }),
        Err(Error::Modify(_))
    ));
    qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
    // Bad SGEs.
    let bad = Sge { addr: mr.addr(), length: 8, lkey: Lkey::new(0xdead_beef) };
    assert!(
        matches!(qp.post_recv(RecvWr::new(1, &[bad])), Err(Error::BadLkey(k)) if k == Lkey::new(0xdead_beef))
    );
    assert!(matches!(qp.post_recv(RecvWr::new(1, &[other.sge(0, 8)])), Err(Error::PdMismatch(_))));
    assert!(matches!(qp.post_recv(RecvWr::new(1, &[mr.sge(4000, 200)])), Err(Error::SgeOutOfRegion { .. })));
    assert!(matches!(qp.post_recv(RecvWr::new(1, &[ro.sge(0, 8)])), Err(Error::NotLocalWrite(_))));
    // Queue full.
    for i in 0..128 {
        qp.post_recv(RecvWr::new(i, &[mr.sge(0, 8)])).unwrap();
    }
    assert!(matches!(
        qp.post_recv(RecvWr::new(1, &[mr.sge(0, 8)])),
        Err(Error::Post(softroce::transport::PostError::QueueFull))
    ));
    // Address vectors.
    let av = AddressVector::new(Gid::from_ip("::1".parse().unwrap()), GidIndex::new(1));
    assert!(matches!(
        qp.modify(&QpAttrs::rtr(av, Mtu::Mtu1024, Qpn::new(0x12), Psn::new(0))),
        Err(Error::Unreachable(_))
    ));
    let av = AddressVector::new(Gid::from_ip("127.0.0.1".parse().unwrap()), GidIndex::new(7));
    assert!(matches!(
        qp.modify(&QpAttrs::rtr(av, Mtu::Mtu1024, Qpn::new(0x12), Psn::new(0))),
        Err(Error::GidIndex { .. })
    ));
    // Region access through the handle.
    assert!(mr.write(4090, &[0; 10]).is_err());
    assert!(mr.atomic_u64(3).is_err());
}

#[test]
fn cq_overflow_is_a_cq_error_and_stops_the_qp() {
    let d1 = dev();
    let d2 = dev();
    let caps = QpCaps { max_send_wr: 64, max_recv_wr: 64, ..QpCaps::default() };
    let a = Side::new(d1, 4096, caps);
    let b = Side::new(d2.clone(), 4096, caps);
    // B's receive CQ holds 4 completions.
    let small = d2.create_cq(4).unwrap();
    let mut init = QpInitAttr::rc(&small, &small);
    init.cap = caps;
    let bq = b.pd.create_qp(&init).unwrap();
    let b = Side { qp: bq, ..b };
    connect(&a, &b, Mtu::Mtu1024);
    for i in 0..10 {
        b.qp.post_recv(RecvWr::new(i, &[b.mr.sge(0, 64)])).unwrap();
    }
    for i in 0..10 {
        a.qp.post_send(SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut wcs = [WorkCompletion::default(); 16];
    assert_eq!(small.poll(&mut wcs).unwrap(), 4);
    assert!(matches!(small.poll(&mut wcs), Err(Error::CqOverflow)));
    assert_eq!(b.qp.state(), QpState::Err);
    let ev: Vec<AsyncEvent> = std::iter::from_fn(|| d2.poll_async_event()).collect();
    assert!(ev.iter().any(|e| matches!(e, AsyncEvent::CqError { .. })), "{ev:?}");
}

#[test]
fn modify_to_error_flushes_and_later_posts_flush() {
    let (a, b) = udp_pair(4096, Mtu::Mtu1024);
    for i in 0..3 {
        b.qp.post_recv(RecvWr::new(i, &[b.mr.sge(0, 64)])).unwrap();
    }
    b.qp.modify(&QpAttrs::error()).unwrap();
    for i in 0..3 {
        let wc = b.wait();
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::WrFlushErr));
    }
    b.qp.post_recv(RecvWr::new(9, &[b.mr.sge(0, 64)])).unwrap();
    assert_eq!(b.wait().status, WcStatus::WrFlushErr);
    // A's SEND now meets a responder in error: it is never acknowledged and retries run out.
    a.qp.post_send(SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    let wc = a.wait();
    assert_eq!(wc.status, WcStatus::RetryExcErr);
    assert_eq!(a.qp.state(), QpState::Err);
    let info = a.qp.query().unwrap();
    assert_eq!(info.state, QpState::Err);
    assert!(info.counters.retry_exceeded_err == 1);
}

#[test]
fn many_qps_at_once() {
    let (d1, d2) = (dev(), dev());
    let caps =
        QpCaps { max_send_wr: 32, max_recv_wr: 32, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 };
    let mut pairs = Vec::new();
    for _ in 0..16 {
        let a = Side::new(d1.clone(), 1 << 16, caps);
        let b = Side::new(d2.clone(), 1 << 16, caps);
        connect(&a, &b, Mtu::Mtu2048);
        pairs.push((a, b));
    }
    for (k, (a, b)) in pairs.iter().enumerate() {
        a.mr.fill(0, 1 << 16, k as u8).unwrap();
        for i in 0..8u64 {
            b.qp.post_recv(RecvWr::new(i, &[b.mr.sge(i as usize * 8192, 8192)])).unwrap();
            a.qp.post_send(SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 5000)])).unwrap();
        }
    }
    for (k, (a, b)) in pairs.iter().enumerate() {
        for i in 0..8u64 {
            let wc = a.wait();
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
            let wc = b.wait();
            assert_eq!((wc.wr_id, wc.byte_len), (i, 5000));
        }
        assert!(b.mr.to_vec()[..5000].iter().all(|&x| x == k as u8));
    }
}

#[test]
fn sizes_to_16mib_every_pmtu_multi_sge_unsignaled() {
    for mtu in [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096] {
        let (a, b) = udp_pair(33 << 20, mtu);
        let mut data = vec![0u8; 16 << 20];
        for (i, x) in data.iter_mut().enumerate() {
            *x = (i % 251) as u8 ^ (i >> 12) as u8;
        }
        a.mr.write(0, &data).unwrap();
        let sizes: Vec<usize> = if mtu == Mtu::Mtu4096 {
            vec![0, 1, 4095, 4096, 4097, 65536, 1 << 20, 16 << 20]
        } else {
            vec![0, 1, mtu.bytes() as usize + 1, 100_000, 1 << 20]
        };
        for &n in &sizes {
            let remote = RemoteAddr { addr: b.mr.addr() + (16 << 20), rkey: b.mr.rkey() };
            // A WRITE from three SGEs, unsignaled, then a signaled READ back into A.
            let third = (n / 3) as u32;
            let sg = [
                a.mr.sge(0, third),
                a.mr.sge(third as usize, third),
                a.mr.sge(2 * third as usize, (n - 2 * third as usize) as u32),
            ];
            let mut w = SendWr::new(1, SendOp::RdmaWrite(remote), &sg);
            w.signaled = false;
            a.qp.post_send(w).unwrap();
            a.qp.post_send(SendWr::new(2, SendOp::RdmaRead(remote), &[a.mr.sge(16 << 20, n as u32)]))
                .unwrap();
            let wc = a.wait();
            assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success), "{mtu:?} {n}");
            let mut back = vec![0u8; n];
            a.mr.read(16 << 20, &mut back).unwrap();
            assert!(back == data[..n], "{mtu:?} size {n}: data differs");
        }
        let c = b.dev.counters().unwrap();
        assert_eq!(c.rcvd_icrc_err, 0);
    }
}

#[test]
fn in_memory_network_with_loss() {
    let net = MemoryNetwork::new(
        LinkConfig { drop: 0.02, duplicate: 0.01, reorder: 0.02, corrupt: 0.01, ..LinkConfig::default() },
        7,
    );
    let caps =
        QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 };
    let a = Side::new(Device::open(DeviceConfig::in_memory(&net, "10.0.0.1")).unwrap(), 4 << 20, caps);
    let b = Side::new(Device::open(DeviceConfig::in_memory(&net, "10.0.0.2")).unwrap(), 4 << 20, caps);
    connect(&a, &b, Mtu::Mtu1024);
    let data: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i * 7 + (i >> 10)) as u8).collect();
    a.mr.write(0, &data).unwrap();
    for round in 0..5u64 {
        b.qp.post_recv(RecvWr::new(round, &[b.mr.sge(0, 1 << 20)])).unwrap();
        a.qp.post_send(SendWr::new(round, SendOp::Send, &[a.mr.sge(0, 1 << 20)])).unwrap();
        let remote = RemoteAddr { addr: b.mr.addr() + (2 << 20), rkey: b.mr.rkey() };
        a.qp.post_send(SendWr::new(100 + round, SendOp::RdmaWrite(remote), &[a.mr.sge(0, 1 << 20)])).unwrap();
        a.qp.post_send(SendWr::new(
            200 + round,
            SendOp::FetchAdd {
                remote: RemoteAddr { addr: b.mr.addr() + (3 << 20), rkey: b.mr.rkey() },
                add: 1,
            },
            &[a.mr.sge(2 << 20, 8)],
        ))
        .unwrap();
        for want in [round, 100 + round, 200 + round] {
            let wc = a.wait();
            assert_eq!((wc.wr_id, wc.status), (want, WcStatus::Success));
        }
        let wc = b.wait();
        assert_eq!((wc.wr_id, wc.byte_len), (round, 1 << 20));
        assert!(b.mr.to_vec()[..1 << 20] == data[..]);
        assert!(b.mr.to_vec()[2 << 20..3 << 20] == data[..]);
    }
    assert_eq!(b.mr.atomic_u64(3 << 20).unwrap().load(Ordering::Relaxed), 5, "each atomic executed once");
    let s = net.stats();
    assert!(s.dropped > 0 && s.corrupted > 0 && s.duplicated > 0, "{s:?}");
    let c = b.dev.counters().unwrap();
    assert!(c.rcvd_icrc_err > 0, "corrupted packets are caught by the ICRC: {c:?}");
    assert!(a.dev.counters().unwrap().qp.completer_retry_err > 0);
}

#[test]
fn wait_quiet_waits_for_the_peer_to_stop_talking() {
    let (a, b) = udp_pair(1 << 20, Mtu::Mtu1024);
    // Nothing arrives: quiet after `quiet`.
    let t = std::time::Instant::now();
    assert!(a.dev.wait_quiet(Duration::from_millis(50), Duration::from_secs(5)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(50));
    // b writes into a for 600 ms: meanwhile a never goes quiet for 100 ms.
    let (addr, rkey) = (a.mr.addr(), a.mr.rkey());
    let writer = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(600) {
            let wr = SendWr::new(1, SendOp::RdmaWrite(RemoteAddr { addr, rkey }), &[b.mr.sge(0, 4096)]);
            b.qp.post_send(wr).unwrap();
            assert_eq!(b.wait().status, WcStatus::Success);
        }
        b
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!a.dev.wait_quiet(Duration::from_millis(100), Duration::from_millis(300)).unwrap());
    let _b = writer.join().unwrap();
    let t = std::time::Instant::now();
    assert!(a.dev.wait_quiet(Duration::from_millis(80), Duration::from_secs(5)).unwrap());
    assert!(t.elapsed() < Duration::from_secs(1));
}

/// The typed API: endpoints and `connect`, newtypes, builders, GID lookups, the prelude.
#[test]
fn typed_connection_setup_and_builders() {
    use softroce::prelude::*;
    let (a, b) = (dev(), dev());
    let own = a.default_gid_index();
    assert_eq!(a.gid_index_for(a.ip()), Some(own));
    assert_eq!(a.gid(own).unwrap(), a.own_gid());
    assert_eq!(a.gid_index_for("192.0.2.1".parse().unwrap()), None);
    // Loopback has no link-local address: GID 0 is the device's own address too (and works:
    // `gid_index_zero_works_on_loopback`); the lookup gives the index it has without the copy.
    assert_eq!(a.gid(GidIndex::LINK_LOCAL).unwrap(), a.own_gid());
    assert_eq!(own, GidIndex::new(1));

    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let init = QpInitAttr::rc(&ca, &ca).max_send_wr(8).max_recv_wr(4).max_send_sge(2).max_inline_data(64);
    assert_eq!((init.cap.max_send_wr, init.cap.max_recv_wr, init.cap.max_send_sge), (8, 4, 2));
    let qa = pa.create_qp(&init).unwrap();
    let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb).signal_all()).unwrap();
    let (ea, eb) = (qa.endpoint(Psn::new(0xff_fff0)), qb.endpoint(random_psn()));
    assert_eq!((ea.gid, ea.qpn), (a.own_gid(), qa.qp_num()));
    // Another QP's endpoint as "local" is refused; UD QPs have nothing to connect to.
    assert!(matches!(qa.connect(&eb, &ea, &ConnectOptions::default()), Err(VerbsError::InvalidArgument(_))));
    qa.connect(&ea, &eb, &ConnectOptions::default()).unwrap();
    qb.connect(&eb, &ea, &ConnectOptions::default()).unwrap();
    let info = qa.query().unwrap();
    assert_eq!(
        (info.state, info.attr.dest_qpn, info.sq_psn),
        (QpState::Rts, qb.qp_num(), Psn::new(0xff_fff0))
    );
    assert_eq!((info.attr.timeout, info.attr.max_rd_atomic), (14, 16));

    let src = pa.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    src.write(0, b"abcdefgh").unwrap();
    // SEND with immediate (inline), WRITE with immediate, READ back, unsignaled WRITE.
    qb.post_recv(RecvWr::new(10, &[dst.sge(0, 64)])).unwrap();
    qb.post_recv(RecvWr::new(11, &[dst.sge(64, 64)])).unwrap();
    qa.post_send(SendWr::send_with_imm(1, &[], 0x0102_0304).inline(b"inline!")).unwrap();
    qa.post_send(SendWr::write_with_imm(2, &[src.sge(0, 8)], dst.remote(1000), 7)).unwrap();
    qa.post_send(SendWr::write(3, &[src.sge(0, 4)], dst.remote(2000)).unsignaled()).unwrap();
    qa.post_send(SendWr::read(4, &[src.sge(100, 8)], dst.remote(1000)).fenced()).unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(ca.poll_one_wait(std::time::Duration::from_secs(10)).unwrap().expect("a completion"));
    }
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success), (4, WcStatus::Success)]
    );
    let mut back = [0u8; 8];
    src.read(100, &mut back).unwrap();
    assert_eq!(&back, b"abcdefgh");
    let r1 = cb.poll_one_wait(std::time::Duration::from_secs(5)).unwrap().unwrap();
    let r2 = cb.poll_one_wait(std::time::Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!((r1.wr_id, r1.imm_data, r1.byte_len, r1.qp_num), (10, Some(0x0102_0304), 7, qb.qp_num()));
    assert_eq!((r2.wr_id, r2.opcode, r2.imm_data), (11, WcOpcode::RecvRdmaWithImm, Some(7)));
    assert_eq!(&dst.to_vec()[2000..2004], b"abcd");
    // A remote address names the region's rkey, a SGE its lkey: two different types.
    assert_eq!(dst.remote(5), RemoteAddr { addr: dst.addr() + 5, rkey: dst.rkey() });
    assert_eq!(src.sge(3, 4).lkey, src.lkey());
}

/// `use softroce::prelude::*` leaves std's `Result` and `Error` alone: with std::error's glob
/// beside it, a prelude `Error` would make the name ambiguous, a prelude `Result` would not
/// take two parameters; neither compiles.
mod prelude_does_not_shadow_std {
    #[allow(unused_imports)]
    use softroce::prelude::*;
    use std::error::*;

    #[derive(Debug)]
    struct Oops;
    impl std::fmt::Display for Oops {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("oops")
        }
    }
    impl Error for Oops {}

    #[test]
    fn result_and_error_are_std_s() {
        let r: Result<u8, String> = Err("two type parameters: std's Result".into());
        assert!(r.is_err());
        let e: Box<dyn Error> = Box::new(Oops);
        assert_eq!(e.to_string(), "oops");
    }
}

#[test]
fn post_send_all_posts_the_whole_batch_or_nothing() {
    let caps =
        QpCaps { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let a = Side::new(Device::open(DeviceConfig::new(loopback_ip())).unwrap(), 4096, caps);
    let b = Side::new(Device::open(DeviceConfig::new(loopback_ip())).unwrap(), 4096, caps);
    connect(&a, &b, Mtu::Mtu1024);
    let w = |id| SendWr::write(id, &[a.mr.sge(0, 8)], b.mr.remote(0));
    // Five do not fit a queue of four: none is posted.
    assert!(matches!(
        a.qp.post_send_all((0..5).map(w).collect()),
        Err((0, Error::Post(softroce::transport::PostError::QueueFull)))
    ));
    // One bad request (a READ into a region without local write is fine; a key that does
    // not exist is not): none is posted, and the index names it.
    let mut bad = w(12);
    bad.payload =
        Payload::Sges([Sge { addr: 0, length: 8, lkey: Lkey::new(0xdead_beef) }].into_iter().collect());
    let r = a.qp.post_send_all(vec![w(10), w(11), bad]);
    assert!(matches!(r, Err((2, _))), "{r:?}");
    let mut wc = [WorkCompletion::default(); 8];
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(a.cq.poll(&mut wc).unwrap(), 0, "nothing of a refused batch was posted");
    // Four fit.
    a.qp.post_send_all((20..24).map(w).collect()).unwrap();
    let ids: Vec<u64> = (0..4).map(|_| a.wait()).map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![20, 21, 22, 23]);
}

/// Every GID a device lists works: on loopback (no link-local address) index 0 is the
/// device's own address, as index 1 is; RC and UD traffic with source GID index 0 and the
/// peer's GID 0 as destination (what rdma-core's tests and libfabric use when told nothing)
/// arrives. It used to be a made-up `fe80::7f00:x` nobody served: RTR failed with EINVAL and
/// UD sends vanished.
#[test]
fn gid_index_zero_works_on_loopback() {
    let zero = GidIndex::new(0);
    let caps =
        QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
    let (a, b) = (Side::new(dev(), 4096, caps), Side::new(dev(), 4096, caps));
    for d in [&a.dev, &b.dev] {
        assert_eq!(d.gid(zero).unwrap(), d.own_gid());
        assert_eq!(d.gid_table().len(), 2);
    }
    for (x, y, rq, sq) in [(&a, &b, 2, 1), (&b, &a, 1, 2)] {
        x.qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
        let av = AddressVector::new(y.dev.gid(zero).unwrap(), zero);
        x.qp.modify(&QpAttrs::rtr(av, Mtu::Mtu1024, y.qp.qp_num(), Psn::new(rq))).unwrap();
        x.qp.modify(&QpAttrs::rts(Psn::new(sq))).unwrap();
    }
    a.mr.write(0, b"rc over gid 0").unwrap();
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 64)])).unwrap();
    a.qp.post_send(SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 13)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(
        (b.wait().status, b.mr.to_vec()[..13].to_vec()),
        (WcStatus::Success, b"rc over gid 0".to_vec())
    );

    // UD, through an address handle on GID 0.
    let ud = |s: &Side| {
        let qp = s.pd.create_qp(&QpInitAttr::ud(&s.cq, &s.cq)).unwrap();
        qp.modify(&QpAttrs::init_ud(Qkey::new(0x11))).unwrap();
        qp.modify(&QpAttrs::rtr_ud()).unwrap();
        qp.modify(&QpAttrs::rts_unreliable(Psn::new(0))).unwrap();
        qp
    };
    let (ua, ub) = (ud(&a), ud(&b));
    ub.post_recv(RecvWr::new(3, &[b.mr.sge(0, 40 + 64)])).unwrap();
    let ah = a.pd.create_ah(&AddressVector::new(b.dev.gid(zero).unwrap(), zero)).unwrap();
    let mut wr = SendWr::new(4, SendOp::Send, &[a.mr.sge(0, 13)]);
    wr.ud = Some(ah.dest(ub.qp_num(), Qkey::new(0x11)));
    ua.post_send(wr).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.src_qp), (3, WcStatus::Success, ua.qp_num()));
}

#[test]
fn sge_checks_follow_the_region_after_a_post_passed() {
    // A post whose SGEs pass leaves this thread a memo of the region (later posts skip the
    // table while nothing changed); the checks must still see an SGE leave the region, the
    // region lose local write, move to another PD, come back, and go.
    let d = dev();
    let pd = d.alloc_pd().unwrap();
    let pd2 = d.alloc_pd().unwrap();
    let cq = d.create_cq(64).unwrap();
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
    qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
    let mut mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let sge = mr.sge(0, 64);
    qp.post_recv(RecvWr::new(1, &[sge])).unwrap();
    assert!(matches!(qp.post_recv(RecvWr::new(2, &[mr.sge(4064, 64)])), Err(Error::SgeOutOfRegion { .. })));
    let mut wrapped = sge;
    wrapped.addr = u64::MAX - 8;
    assert!(matches!(qp.post_recv(RecvWr::new(2, &[wrapped])), Err(Error::SgeOutOfRegion { .. })));
    qp.post_recv(RecvWr::new(3, &[sge])).unwrap();
    mr.rereg(None, Some(Access::NONE)).unwrap();
    assert!(matches!(qp.post_recv(RecvWr::new(4, &[sge])), Err(Error::NotLocalWrite(_))));
    mr.rereg(Some(&pd2), Some(Access::LOCAL_WRITE)).unwrap();
    assert!(matches!(qp.post_recv(RecvWr::new(5, &[sge])), Err(Error::PdMismatch(_))));
    mr.rereg(Some(&pd), None).unwrap();
    qp.post_recv(RecvWr::new(6, &[sge])).unwrap();
    qp.post_recv(RecvWr::new(7, &[sge])).unwrap();
    drop(mr);
    assert!(matches!(qp.post_recv(RecvWr::new(8, &[sge])), Err(Error::BadLkey(_))));
}
