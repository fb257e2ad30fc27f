//! Devices with several engine threads (`DeviceConfig::engine_threads`): QPs spread over the
//! engines by QP number, the kernel steering each packet to the socket of its QP's engine.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::verbs::loopback_ip;
use softroce::verbs::cm::{CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use softroce::verbs::*;

const T: Duration = Duration::from_secs(20);

fn open(engines: usize) -> Device {
    let d = Device::open(DeviceConfig::new(loopback_ip()).with_engine_threads(engines)).unwrap();
    assert_eq!(d.engine_threads(), engines);
    d
}

fn caps() -> QpCaps {
    QpCaps { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 }
}

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0))];
    assert_eq!(cq.poll_wait(&mut wc, T).unwrap(), 1, "no completion within {T:?}");
    wc[0]
}

/// Moves `qa` (on `da`) and `qb` (on `db`) to RTS, connected to each other.
fn connect(da: &Device, qa: &QueuePair, db: &Device, qb: &QueuePair) {
    for (dx, qx, dy, qy, rq, sq) in [(da, qa, db, qb, 200, 100), (db, qb, da, qa, 100, 200)] {
        qx.modify(&QpAttrs::init(Access::ALL)).unwrap();
        let av = AddressVector::new(dy.gid(dy.default_gid_index()).unwrap(), dx.default_gid_index());
        let mut rtr = QpAttrs::rtr(av, Mtu::Mtu1024, qy.qp_num(), Psn::new(rq));
        rtr.max_dest_rd_atomic = Some(16);
        qx.modify(&rtr).unwrap();
        qx.modify(&QpAttrs::rts(Psn::new(sq))).unwrap();
    }
}

/// Eight RC QP pairs between a 2-engine and a 4-engine device, all sharing one CQ per side
/// (completions pushed by several engines): SEND, WRITE, READ and both atomics on each, data
/// checked; every engine received packets on its own socket and none had to be passed on.
#[test]
fn many_qps_over_several_engines_do_every_operation() {
    let (da, db) = (open(2), open(4));
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (ca, cb) = (da.create_cq(4096).unwrap(), db.create_cq(4096).unwrap());
    const N: usize = 8;
    const LEN: usize = 20_000;
    const SLOT: usize = 4 * LEN;
    let (ma, mb) = (pa.alloc_mr(N * SLOT, Access::ALL).unwrap(), pb.alloc_mr(N * SLOT, Access::ALL).unwrap());
    let mut pairs = Vec::new();
    for _ in 0..N {
        let qa = pa.create_qp(&QpInitAttr { cap: caps(), ..QpInitAttr::rc(&ca, &ca) }).unwrap();
        let qb = pb.create_qp(&QpInitAttr { cap: caps(), ..QpInitAttr::rc(&cb, &cb) }).unwrap();
        connect(&da, &qa, &db, &qb);
        pairs.push((qa, qb));
    }
    // The QPs spread over every engine of both devices.
    for (d, n) in [(&da, 2u32), (&db, 4)] {
        let q = |p: &(QueuePair, QueuePair)| if d.same(&da) { p.0.qp_num() } else { p.1.qp_num() };
        let mut used: Vec<u32> = pairs.iter().map(|p| q(p).value() % n).collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), n as usize, "QPs on every engine");
    }
    for (i, _) in pairs.iter().enumerate() {
        let data: Vec<u8> = (0..LEN).map(|k| (k * 7 + i * 31) as u8).collect();
        ma.write(i * SLOT, &data).unwrap();
    }
    // SEND on every pair at once.
    for (i, (qa, qb)) in pairs.iter().enumerate() {
        let base = i * SLOT;
        qb.post_recv(RecvWr::new(i as u64, &[mb.sge(base, LEN as u32)])).unwrap();
        qa.post_send(SendWr::new(i as u64, SendOp::Send, &[ma.sge(base, LEN as u32)])).unwrap();
    }
    let mut seen = [0u8; N];
    for _ in 0..N {
        let w = wait(&ca);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Send));
        seen[w.wr_id as usize] += 1;
        let w = wait(&cb);
        assert_eq!((w.status, w.byte_len as usize), (WcStatus::Success, LEN));
    }
    assert_eq!(seen, [1; N]);
    // WRITE the same data further on, then READ it back: all pairs at once.
    for (i, (qa, _)) in pairs.iter().enumerate() {
        let base = i * SLOT;
        let remote = RemoteAddr { addr: mb.addr() + (base + LEN) as u64, rkey: mb.rkey() };
        qa.post_send(SendWr::new(100 + i as u64, SendOp::RdmaWrite(remote), &[ma.sge(base, LEN as u32)]))
            .unwrap();
        qa.post_send(SendWr::new(
            200 + i as u64,
            SendOp::RdmaRead(remote),
            &[ma.sge(base + 2 * LEN, LEN as u32)],
        ))
        .unwrap();
    }
    for _ in 0..2 * N {
        let w = wait(&ca);
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
    }
    // Atomics on a counter per pair.
    for (i, (qa, _)) in pairs.iter().enumerate() {
        let at = i * SLOT + 3 * LEN;
        mb.atomic_u64(at).unwrap().store(40 + i as u64, Ordering::Relaxed);
        let target = RemoteAddr { addr: mb.addr() + at as u64, rkey: mb.rkey() };
        qa.post_send(SendWr::new(300, SendOp::FetchAdd { remote: target, add: 2 }, &[ma.sge(at, 8)]))
            .unwrap();
        assert_eq!(wait(&ca).status, WcStatus::Success);
        let swap = SendOp::CompareSwap { remote: target, compare: 42 + i as u64, swap: 1000 + i as u64 };
        qa.post_send(SendWr::new(301, swap, &[ma.sge(at + 8, 8)])).unwrap();
        assert_eq!(wait(&ca).status, WcStatus::Success);
    }
    for i in 0..N {
        let base = i * SLOT;
        let data: Vec<u8> = (0..LEN).map(|k| (k * 7 + i * 31) as u8).collect();
        let mut got = vec![0u8; LEN];
        mb.read(base, &mut got).unwrap();
        assert_eq!(got, data, "SEND of pair {i}");
        mb.read(base + LEN, &mut got).unwrap();
        assert_eq!(got, data, "WRITE of pair {i}");
        ma.read(base + 2 * LEN, &mut got).unwrap();
        assert_eq!(got, data, "READ of pair {i}");
        let at = base + 3 * LEN;
        assert_eq!(ma.atomic_u64(at).unwrap().load(Ordering::Relaxed), 40 + i as u64);
        assert_eq!(ma.atomic_u64(at + 8).unwrap().load(Ordering::Relaxed), 42 + i as u64);
        assert_eq!(mb.atomic_u64(at).unwrap().load(Ordering::Relaxed), 1000 + i as u64);
    }
    // Every engine got its packets from its own socket: the kernel steered them by QP.
    for d in [&da, &db] {
        let per_engine = d.engine_received();
        assert!(per_engine.iter().all(|&n| n > 0), "{per_engine:?}");
        let c = d.counters().unwrap();
        assert_eq!((c.rcvd_forwarded, c.rcvd_forward_dropped, c.rcvd_unknown_qp), (0, 0, 0));
        assert_eq!(c.rcvd_icrc_err, 0);
        // The device's counters add up its engines': every packet read was handed to a QP.
        assert_eq!(c.qp.rcvd_pkts, per_engine.iter().sum::<u64>(), "{c:?}");
    }
    // Counters survive the QPs (folded in on the engine that destroyed them).
    let before = db.counters().unwrap().qp.rcvd_pkts;
    drop(pairs);
    assert_eq!(db.counters().unwrap().qp.rcvd_pkts, before);
}

/// QPs attached to an SRQ on a device with 3 engines get numbers on the SRQ's engine, and
/// messages to all of them land in the SRQ's buffers.
#[test]
fn srq_qps_live_on_the_srq_engine() {
    let (da, db) = (open(2), open(3));
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (ca, cb) = (da.create_cq(256).unwrap(), db.create_cq(256).unwrap());
    let srq = pb.create_srq(&SrqInitAttr { max_wr: 64, max_sge: 1, srq_limit: 0 }).unwrap();
    let (ma, mb) = (pa.alloc_mr(1 << 16, Access::ALL).unwrap(), pb.alloc_mr(1 << 16, Access::ALL).unwrap());
    for k in 0..32usize {
        srq.post_recv(RecvWr::new(k as u64, &[mb.sge(k * 1024, 1024)])).unwrap();
    }
    let mut pairs = Vec::new();
    for _ in 0..5 {
        let qa = pa.create_qp(&QpInitAttr { cap: caps(), ..QpInitAttr::rc(&ca, &ca) }).unwrap();
        let qb =
            pb.create_qp(&QpInitAttr { cap: caps(), srq: Some(&srq), ..QpInitAttr::rc(&cb, &cb) }).unwrap();
        assert_eq!(qb.qp_num().value() % 3, srq.srq_num() % 3, "on the SRQ's engine");
        connect(&da, &qa, &db, &qb);
        pairs.push((qa, qb));
    }
    for (i, (qa, _)) in pairs.iter().enumerate() {
        ma.fill(i * 1024, 100, i as u8 + 1).unwrap();
        qa.post_send(SendWr::new(i as u64, SendOp::Send, &[ma.sge(i * 1024, 100)])).unwrap();
    }
    let mut from = Vec::new();
    for _ in 0..pairs.len() {
        assert_eq!(wait(&ca).status, WcStatus::Success);
        let w = wait(&cb);
        assert_eq!((w.status, w.byte_len), (WcStatus::Success, 100));
        let mut got = [0u8; 100];
        mb.read(w.wr_id as usize * 1024, &mut got).unwrap();
        let qp = pairs.iter().position(|p| p.1.qp_num() == w.qp_num).expect("one of ours");
        assert_eq!(got, [qp as u8 + 1; 100], "the SEND of pair {qp}");
        from.push(qp);
    }
    from.sort_unstable();
    assert_eq!(from, (0..pairs.len()).collect::<Vec<_>>());
    assert_eq!(db.counters().unwrap().rcvd_forwarded, 0);
}

/// rdma_cm over devices with several engines: the IB CM's MADs reach the engine that owns
/// QP1, the connected QPs live on others, and a SEND goes each way.
#[test]
fn rdma_cm_connects_over_multi_engine_devices() {
    let (ds, dc) = (open(2), open(4));
    let sip: IpAddr = ds.ip();
    let sch = EventChannel::new().unwrap();
    let mut l = CmId::new(Some(&sch), PortSpace::Tcp).unwrap();
    let addr = SocketAddr::new(sip, 7411);
    l.bind_addr(addr).unwrap();
    l.listen(8).unwrap();
    let cch = EventChannel::new().unwrap();
    let mut c = CmId::new(Some(&cch), PortSpace::Tcp).unwrap();
    c.resolve_addr(Some(SocketAddr::new(dc.ip(), 0)), addr, T).unwrap();
    assert_eq!(cch.get_event_timeout(T).unwrap().event_type(), CmEventType::AddrResolved);
    c.resolve_route(T).unwrap();
    assert_eq!(cch.get_event_timeout(T).unwrap().event_type(), CmEventType::RouteResolved);
    let side = |id: &mut CmId| {
        let dev = id.device().unwrap().clone();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64).unwrap();
        let mr = pd.alloc_mr(4096, Access::ALL).unwrap();
        id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq)).unwrap();
        (pd, cq, mr)
    };
    let (_cpd, ccq, cmr) = side(&mut c);
    let param =
        ConnParam { responder_resources: 1, initiator_depth: 1, rnr_retry_count: 7, ..Default::default() };
    c.connect(Some(&param)).unwrap();
    let mut req = sch.get_event_timeout(T).unwrap();
    assert_eq!(req.event_type(), CmEventType::ConnectRequest);
    let mut s = req.take_id().unwrap();
    drop(req);
    let (_spd, scq, smr) = side(&mut s);
    s.accept(Some(&param)).unwrap();
    assert_eq!(cch.get_event_timeout(T).unwrap().event_type(), CmEventType::Established);
    assert_eq!(sch.get_event_timeout(T).unwrap().event_type(), CmEventType::Established);
    for (a, am, acq, b, bm, bcq) in [(&c, &cmr, &ccq, &s, &smr, &scq), (&s, &smr, &scq, &c, &cmr, &ccq)] {
        bm.fill(0, 64, 0).unwrap();
        b.qp().unwrap().post_recv(RecvWr::new(1, &[bm.sge(0, 64)])).unwrap();
        am.write(0, b"over several engines").unwrap();
        a.qp().unwrap().post_send(SendWr::new(2, SendOp::Send, &[am.sge(0, 20)])).unwrap();
        assert_eq!(wait(acq).status, WcStatus::Success);
        assert_eq!(wait(bcq).byte_len, 20);
        let mut got = [0u8; 20];
        bm.read(0, &mut got).unwrap();
        assert_eq!(&got, b"over several engines");
    }
    c.disconnect().unwrap();
    assert_eq!(sch.get_event_timeout(T).unwrap().event_type(), CmEventType::Disconnected);
    for d in [&ds, &dc] {
        let cnt = d.counters().unwrap();
        assert_eq!(cnt.cm.established, 1);
        assert_eq!(cnt.rcvd_forwarded, 0);
    }
}

/// The raw and in-memory backends do not steer packets: they run one engine whatever is asked.
#[test]
fn the_memory_backend_runs_one_engine() {
    let net = MemoryNetwork::new(Default::default(), 1);
    let d = Device::open(DeviceConfig::in_memory(&net, "10.9.0.1").with_engine_threads(4)).unwrap();
    assert_eq!(d.engine_threads(), 1);
}

/// Unshared multi-engine devices cannot share an address (the second would join the first's
/// `SO_REUSEPORT` group and take its packets); sharing ones do, each with its own QPs
/// (tests/shared_address.rs).
#[test]
fn an_unshared_multi_engine_address_is_not_shared() {
    let ip = loopback_ip();
    let unshared = |n| DeviceConfig::new(ip.clone()).with_engine_threads(n).with_share(false);
    let _a = Device::open(unshared(2)).unwrap();
    assert!(matches!(Device::open(unshared(2)), Err(Error::Bind { .. })));
    assert!(matches!(Device::open(unshared(1)), Err(Error::Bind { .. })));
    assert!(matches!(Device::open(DeviceConfig::new(ip.clone()).with_share(true)), Err(Error::Bind { .. })));
}

/// Two QPs of one device on different engines, connected to each other (packets leave one
/// engine's socket and come back to the other's), as the C ABI's objects test does: 2000
/// SENDs with immediate, one in 16 signaled, the receiver reposting as it goes; every
/// message arrives once, in order.
#[test]
fn two_qps_of_one_device_on_two_engines() {
    let d = open(2);
    let pd = d.alloc_pd().unwrap();
    let (scq, rcq) = (d.create_cq(256).unwrap(), d.create_cq(4096).unwrap());
    let c =
        QpCaps { max_send_wr: 64, max_recv_wr: 512, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qa = pd.create_qp(&QpInitAttr { cap: c, ..QpInitAttr::rc(&scq, &rcq) }).unwrap();
    let qb = pd.create_qp(&QpInitAttr { cap: c, ..QpInitAttr::rc(&scq, &rcq) }).unwrap();
    assert_ne!(qa.qp_num().value() % 2, qb.qp_num().value() % 2);
    connect(&d, &qa, &d, &qb);
    let (ma, mb) = (pd.alloc_mr(16 * 64, Access::ALL).unwrap(), pd.alloc_mr(16 * 64, Access::ALL).unwrap());
    for i in 0..512usize {
        qb.post_recv(RecvWr::new(i as u64, &[mb.sge((i % 16) * 64, 64)])).unwrap();
    }
    const N: u32 = 2000;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..N {
                let mut wr =
                    SendWr::new(i as u64, SendOp::SendWithImm(i), &[ma.sge((i as usize % 16) * 64, 64)]);
                wr.signaled = i % 16 == 15;
                loop {
                    match qa.post_send(wr.clone()) {
                        Ok(()) => break,
                        Err(Error::Post(_)) => std::thread::yield_now(),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
        let (mut recvd, mut sent) = (0u32, 0u32);
        let mut wcs = vec![WorkCompletion::default(); 16];
        let start = std::time::Instant::now();
        while recvd < N || sent < N / 16 {
            assert!(start.elapsed() < T, "recvd {recvd} sent {sent}");
            let n = rcq.poll(&mut wcs).unwrap();
            for w in &wcs[..n] {
                assert_eq!(
                    (w.status, w.opcode, w.imm_data),
                    (WcStatus::Success, WcOpcode::Recv, Some(recvd))
                );
                recvd += 1;
                qb.post_recv(RecvWr::new(w.wr_id, &[mb.sge((w.wr_id as usize % 16) * 64, 64)])).unwrap();
            }
            let n = scq.poll(&mut wcs).unwrap();
            for w in &wcs[..n] {
                assert_eq!(
                    w.status,
                    WcStatus::Success,
                    "{w:?} {:?} {:?}",
                    d.counters().unwrap(),
                    d.engine_received()
                );
                sent += 1;
            }
        }
    });
}
