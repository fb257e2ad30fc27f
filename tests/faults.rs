//! Fault injection (`DeviceConfig::faults`, `SOFTROCE_FAULTS`): every fault kind acts on the
//! real packets between two devices, the transports recover (or fail) as on a bad network, the
//! peer's own counters see it, and the same seed gives the same faults.
//!
//! Two devices on loopback UDP in one process (fresh addresses per test); each test a few
//! hundred ms.

mod common;

use std::time::{Duration, Instant};

use common::verbs::*;
use softroce::verbs::*;

fn caps() -> QpCaps {
    QpCaps { max_send_wr: 512, max_recv_wr: 512, max_send_sge: 8, max_recv_sge: 8, max_inline_data: 256 }
}

/// Two connected sides with fault SPECs `fa` and `fb` (ACK timeout 4 ms).
fn pair(fa: &str, fb: &str, mtu: Mtu) -> (Side, Side) {
    pair_with_timeout(fa, fb, mtu, 10)
}

/// [`pair`] with local ACK timeout code `timeout`.
fn pair_with_timeout(fa: &str, fb: &str, mtu: Mtu, timeout: u8) -> (Side, Side) {
    let open = |spec: &str| Device::open(DeviceConfig::new(loopback_ip()).with_faults(spec)).unwrap();
    let a = Side::new(open(fa), 1 << 20, caps());
    let b = Side::new(open(fb), 1 << 20, caps());
    connect_with_timeout(&a, &b, mtu, timeout);
    (a, b)
}

/// `n` SENDs of `len` bytes from `a` to `b`, one at a time, each checked.
fn sends(a: &Side, b: &Side, n: u32, len: usize) {
    for i in 0..n {
        let data: Vec<u8> = (0..len).map(|k| (k as u32 * 7 + i) as u8).collect();
        a.mr.write(0, &data).unwrap();
        b.qp.post_recv(RecvWr::new(u64::from(i), &[b.mr.sge(0, len as u32)])).unwrap();
        a.qp.post_send(SendWr::send(u64::from(i), &[a.mr.sge(0, len as u32)])).unwrap();
        let wc = a.wait();
        assert_eq!((wc.wr_id, wc.status), (u64::from(i), WcStatus::Success), "send {i}");
        let wc = b.wait();
        assert_eq!((wc.wr_id, wc.status, wc.byte_len as usize), (u64::from(i), WcStatus::Success, len));
        let mut got = vec![0; len];
        b.mr.read(0, &mut got).unwrap();
        assert!(got == data, "send {i}: data differs");
    }
}

/// `n` WRITEs of `len` bytes from `a` into `b`, `depth` in flight, then the last READ back.
fn writes(a: &Side, b: &Side, n: u32, len: usize, depth: u32) {
    let data: Vec<u8> = (0..len).map(|k| (k * 13 + 5) as u8).collect();
    a.mr.write(0, &data).unwrap();
    let remote = RemoteAddr { addr: b.mr.addr() + 4096, rkey: b.mr.rkey() };
    let mut done = 0;
    for i in 0..n {
        if i >= depth {
            assert_eq!(a.wait().status, WcStatus::Success);
            done += 1;
        }
        a.qp.post_send(SendWr::new(u64::from(i), SendOp::RdmaWrite(remote), &[a.mr.sge(0, len as u32)]))
            .unwrap();
    }
    while done < n {
        assert_eq!(a.wait().status, WcStatus::Success);
        done += 1;
    }
    a.qp.post_send(SendWr::new(99, SendOp::RdmaRead(remote), &[a.mr.sge(512 << 10, len as u32)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let mut got = vec![0; len];
    a.mr.read(512 << 10, &mut got).unwrap();
    assert!(got == data, "READ back differs");
    b.mr.read(4096, &mut got).unwrap();
    assert!(got == data, "WRITE target differs");
}

fn counters(s: &Side) -> DeviceCounters {
    s.dev.counters().unwrap()
}

#[test]
fn loss_duplication_and_reordering_are_recovered_from() {
    let spec = "seed=1,loss=3%,dup=2%,reorder=2%,depth=2";
    let (a, b) = pair(spec, spec, Mtu::Mtu1024);
    sends(&a, &b, 60, 20_000);
    writes(&a, &b, 60, 30_000, 8);
    let (ca, cb) = (counters(&a), counters(&b));
    for c in [&ca.faults, &cb.faults] {
        assert!(c.dropped > 0 && c.duplicated > 0 && c.reordered > 0, "{c:?}");
        assert_eq!((c.corrupted, c.delayed, c.rnr), (0, 0, 0), "{c:?}");
    }
    // The transports saw it: retransmissions on the requester, duplicates at the responder.
    let retransmitted = ca.qp.completer_retry_err + ca.qp.probe_retransmit + ca.qp.tail_probe;
    assert!(retransmitted > 0, "{:?}", ca.qp);
    assert!(cb.qp.duplicate_request > 0 && cb.qp.out_of_seq_request > 0, "{:?}", cb.qp);
    // The counters list them under their names.
    let names: Vec<_> = ca.iter().filter(|(k, _)| k.starts_with("fault_")).map(|(k, _)| k).collect();
    assert_eq!(
        names,
        [
            "fault_dropped",
            "fault_duplicated",
            "fault_reordered",
            "fault_delayed",
            "fault_corrupted",
            "fault_rnr"
        ]
    );
}

#[test]
fn corrupted_packets_are_dropped_by_the_receivers_icrc_check() {
    let (a, b) = pair("seed=5,corrupt=5%,dir=tx", "", Mtu::Mtu1024);
    sends(&a, &b, 40, 8000);
    let (ca, cb) = (counters(&a), counters(&b));
    assert!(ca.faults.corrupted > 0, "{:?}", ca.faults);
    // Every corrupted packet, and only those, failed the peer's ICRC check.
    assert_eq!(cb.rcvd_icrc_err, ca.faults.corrupted);
    assert_eq!(cb.faults, FaultCounters::default(), "the peer has no faults");
}

#[test]
fn delay_holds_packets_and_jitter_reorders_them() {
    let (a, b) = pair("delay=30ms,dir=tx", "", Mtu::Mtu1024);
    let t = Instant::now();
    sends(&a, &b, 1, 100);
    assert!(t.elapsed() >= Duration::from_millis(30), "{:?}", t.elapsed());
    assert!(counters(&a).faults.delayed >= 1);

    // Jitter: packets of a burst overtake each other; the responder NAKs the gaps and the
    // message still arrives whole.
    let (a, b) = pair("seed=2,delay=1ms,jitter=2ms,dir=tx", "", Mtu::Mtu1024);
    sends(&a, &b, 5, 64_000);
    let (ca, cb) = (counters(&a), counters(&b));
    assert!(ca.faults.delayed >= 5 * 63, "{:?}", ca.faults);
    assert!(cb.qp.out_of_seq_request > 0, "{:?}", cb.qp);
}

#[test]
fn a_black_hole_ends_in_retry_exceeded_within_seconds() {
    let (a, b) = pair("blackhole=300ms+60s", "", Mtu::Mtu1024);
    sends(&a, &b, 3, 1000);
    std::thread::sleep(Duration::from_millis(400));
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 100)])).unwrap();
    a.qp.post_send(SendWr::send(7, &[a.mr.sge(0, 100)])).unwrap();
    let t = Instant::now();
    let wc = a.wait();
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::RetryExcErr));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let ca = counters(&a);
    assert!(ca.faults.dropped >= 8, "the SEND and its 7 retries: {:?}", ca.faults);
    assert_eq!(counters(&b).qp.rcvd_pkts, 3, "nothing got through the black hole");
}

#[test]
fn rnr_naks_are_forced_with_a_receive_posted() {
    // Three forced RNR NAKs, then the SEND goes through (rnr_retry 7).
    let (a, b) = pair("", "rnr=3", Mtu::Mtu1024);
    sends(&a, &b, 2, 100);
    let (ca, cb) = (counters(&a), counters(&b));
    assert_eq!(cb.faults.rnr, 3);
    assert_eq!((cb.qp.send_rnr_err, ca.qp.rcvd_rnr_err), (3, 3));
    // More than rnr_retry (2 here; 7 would retry forever): the requester gives up with
    // IBV_WC_RNR_RETRY_EXC_ERR after the first NAK and two retries.
    let open = |spec: &str| Device::open(DeviceConfig::new(loopback_ip()).with_faults(spec)).unwrap();
    let a = Side::new(open(""), 1 << 16, caps());
    let b = Side::new(open("rnr=5"), 1 << 16, caps());
    for (x, y, psn) in [(&a, &b, 100), (&b, &a, 200)] {
        x.qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
        let av = AddressVector::new(y.dev.own_gid(), x.dev.default_gid_index());
        let mut rtr = QpAttrs::rtr(av, Mtu::Mtu1024, y.qp.qp_num(), Psn::new(300 - psn));
        rtr.min_rnr_timer = Some(1);
        x.qp.modify(&rtr).unwrap();
        let mut rts = QpAttrs::rts(Psn::new(psn));
        rts.rnr_retry = Some(2);
        x.qp.modify(&rts).unwrap();
    }
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 100)])).unwrap();
    a.qp.post_send(SendWr::send(2, &[a.mr.sge(0, 100)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::RnrRetryExcErr);
    assert_eq!(counters(&b).faults.rnr, 3);
    assert_eq!(counters(&a).qp.retry_rnr_exceeded_err, 1);
}

#[test]
fn the_same_seed_gives_the_same_faults() {
    // One message in flight at a time: the packets, and so their fates, are the same each run.
    let run = |spec: &str| {
        // (the usual 67 ms ACK timeout: a loaded machine rarely fires it early)
        let (a, b) = pair_with_timeout(spec, spec, Mtu::Mtu1024, 14);
        for _ in 0..3 {
            sends(&a, &b, 60, 100);
            sends(&b, &a, 60, 100);
        }
        (counters(&a).faults, counters(&b).faults)
    };
    let same = common::two_agree(|_| run("seed=3,loss=5%,dup=3%,corrupt=2%"));
    assert!(same.0.dropped > 0 && same.1.dropped > 0 && same.0.duplicated > 0, "{same:?}");
    // Another seed, other faults.
    assert_ne!(common::two_agree(|_| run("seed=4,loss=5%,dup=3%,corrupt=2%")), same);
}

#[test]
fn a_malformed_spec_is_refused_at_open() {
    let e = Device::open(DeviceConfig::new(loopback_ip()).with_faults("seed=1,loss=2")).unwrap_err();
    match &e {
        Error::Faults(f) => assert_eq!(f.item, "loss=2"),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("\"loss=2\"") && e.to_string().contains('%'), "{e}");
}

#[test]
fn the_in_memory_backend_takes_faults_too() {
    let net = MemoryNetwork::new(Default::default(), 1);
    let open =
        |ip: &str, spec: &str| Device::open(DeviceConfig::in_memory(&net, ip).with_faults(spec)).unwrap();
    let a = Side::new(open("10.27.0.1", "seed=4,loss=5%,reorder=5%"), 1 << 20, caps());
    let b = Side::new(open("10.27.0.2", ""), 1 << 20, caps());
    connect(&a, &b, Mtu::Mtu1024);
    writes(&a, &b, 30, 20_000, 4);
    let c = counters(&a).faults;
    assert!(c.dropped > 0 && c.reordered > 0, "{c:?}");
    assert_eq!(net.stats().dropped, 0, "the link itself is lossless");
}

#[test]
fn several_engines_share_one_set_of_counters() {
    let open = || {
        Device::open(
            DeviceConfig::new(loopback_ip()).with_engine_threads(2).with_faults("seed=6,loss=5%,rnr=2"),
        )
        .unwrap()
    };
    let (da, db) = (open(), open());
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let a = Side::new(da.clone(), 1 << 16, caps());
        let b = Side::new(db.clone(), 1 << 16, caps());
        connect(&a, &b, Mtu::Mtu1024);
        pairs.push((a, b));
    }
    for (a, b) in &pairs {
        sends(a, b, 20, 3000);
    }
    let (ca, cb) = (da.counters().unwrap(), db.counters().unwrap());
    assert!(ca.faults.dropped + cb.faults.dropped > 0);
    // The RNR budget is the device's, whichever engine the SENDs arrive at.
    assert_eq!(cb.faults.rnr, 2);
}
