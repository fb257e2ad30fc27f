//! Issue 15 item 3: queues and resources exhausted through the real engine (UDP loopback),
//! each with the spec's behaviour and no hang — CQ overrun, an empty receive queue (RNR NAK,
//! RNR retries, `RNR_RETRY_EXC_ERR`, infinite RNR retry 7), an empty SRQ, `max_rd_atomic`
//! reached, a full send queue, and 10 000 READs requested at once (by a requester that keeps
//! to `max_rd_atomic`, and by a hostile peer that does not). The responder's side of
//! `max_dest_rd_atomic` (a peer that ignores it) is in `tests/rc_scenarios.rs`, packet by
//! packet.

mod common;

use std::time::{Duration, Instant};

use common::verbs::*;
use softroce::transport::{Counters, PostError, QpEvent};
use softroce::verbs::*;
use softroce::wire::aeth::{AethRepr, NakCode, Syndrome};
use softroce::wire::roce::{IpRepr, ROCEV2_UDP_PORT, RoceFrameRepr};
use softroce::wire::{BthRepr, Opcode, Packet, PacketRepr, RethRepr};

fn dev() -> Device {
    Device::open(DeviceConfig::new(loopback_ip())).unwrap()
}

/// A device with a PD, a buffer, and a QP on the given CQs (and SRQ).
struct Node {
    dev: Device,
    pd: ProtectionDomain,
    mr: MemoryRegion,
}

impl Node {
    fn new(buf: usize) -> Node {
        let dev = dev();
        let pd = dev.alloc_pd().unwrap();
        let mr = pd.alloc_mr(buf, Access::ALL).unwrap();
        Node { dev, pd, mr }
    }

    fn qp(
        &self,
        scq: &CompletionQueue,
        rcq: &CompletionQueue,
        caps: QpCaps,
        srq: Option<&SharedReceiveQueue>,
    ) -> QueuePair {
        let mut init = QpInitAttr::rc(scq, rcq);
        init.cap = caps;
        init.srq = srq;
        self.pd.create_qp(&init).unwrap()
    }
}

fn caps(send: u32, recv: u32) -> QpCaps {
    QpCaps { max_send_wr: send, max_recv_wr: recv, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 }
}

/// Connects `qa` on `a` with `qb` on `b`; `tweak(is_a, rtr, rts)` adjusts the attributes.
fn connect_with(
    a: &Node,
    qa: &QueuePair,
    b: &Node,
    qb: &QueuePair,
    tweak: impl Fn(bool, &mut QpAttrs, &mut QpAttrs),
) {
    for (is_a, x, qx, y, qy) in [(true, a, qa, b, qb), (false, b, qb, a, qa)] {
        qx.modify(&QpAttrs::init(Access::ALL)).unwrap();
        let av = AddressVector::new(y.dev.gid(y.dev.default_gid_index()).unwrap(), x.dev.default_gid_index());
        let mut rtr = QpAttrs::rtr(av, Mtu::Mtu1024, qy.qp_num(), Psn::new(0x1000));
        let mut rts = QpAttrs::rts(Psn::new(0x1000));
        rts.timeout = Some(10); // 4 ms
        tweak(is_a, &mut rtr, &mut rts);
        qx.modify(&rtr).unwrap();
        qx.modify(&rts).unwrap();
    }
}

/// Polls `cq` until `n` completions arrived (or `limit` passed).
fn collect(cq: &CompletionQueue, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wcs = [WorkCompletion::default(); 64];
    let t = Instant::now();
    while out.len() < n && t.elapsed() < limit {
        match cq.poll_wait(&mut wcs, Duration::from_millis(10)) {
            Ok(k) => out.extend_from_slice(&wcs[..k]),
            Err(e) => panic!("{e}"),
        }
    }
    out
}

fn qp_counters(qp: &QueuePair) -> Counters {
    qp.query().unwrap().counters
}

/// Waits until `f` holds (or 10 s).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "not within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn events(d: &Device) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| d.poll_async_event()).collect()
}

/// A receive CQ of 4 entries gets 10 completions: the CQ overruns, which is a CQ error — an
/// asynchronous `CQ_ERR` naming that CQ (not the QP's send CQ) — and the QP feeding it goes to
/// the error state; polling the CQ then fails. The sender's requests all complete (none hangs).
#[test]
fn receive_cq_overrun_is_a_cq_error_and_the_qp_goes_to_error() {
    let (a, b) = (Node::new(4096), Node::new(4096));
    let a_cq = a.dev.create_cq(64).unwrap();
    let b_scq = b.dev.create_cq(64).unwrap();
    let b_rcq = b.dev.create_cq(4).unwrap();
    let qa = a.qp(&a_cq, &a_cq, caps(64, 64), None);
    let qb = b.qp(&b_scq, &b_rcq, caps(64, 64), None);
    connect_with(&a, &qa, &b, &qb, |_, _, _| {});
    for i in 0..10 {
        qb.post_recv(RecvWr::new(i, &[b.mr.sge(0, 64)])).unwrap();
    }
    for i in 0..10 {
        qa.post_send(SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    }
    eventually("B's QP in the error state", || qb.state() == QpState::Err);
    let ev = events(&b.dev);
    assert!(ev.contains(&AsyncEvent::CqError { cq: b_rcq.cq_num() }), "{ev:?}");
    assert!(!ev.contains(&AsyncEvent::CqError { cq: b_scq.cq_num() }), "{ev:?}");
    let mut wcs = [WorkCompletion::default(); 16];
    assert_eq!(b_rcq.poll(&mut wcs).unwrap(), 4);
    assert!(matches!(b_rcq.poll(&mut wcs), Err(Error::CqOverflow)));
    // The sender: every request completes, acknowledged or (once B stopped answering) with
    // RETRY_EXC_ERR and flushes; nothing hangs.
    let done = collect(&a_cq, 10, Duration::from_secs(10));
    assert_eq!(done.len(), 10, "{done:?}");
}

/// The send CQ overruns: the same CQ error, naming the send CQ, and the QP to error.
#[test]
fn send_cq_overrun_is_a_cq_error_and_the_qp_goes_to_error() {
    let (a, b) = (Node::new(4096), Node::new(4096));
    let a_scq = a.dev.create_cq(4).unwrap();
    let a_rcq = a.dev.create_cq(64).unwrap();
    let b_cq = b.dev.create_cq(64).unwrap();
    let qa = a.qp(&a_scq, &a_rcq, caps(64, 64), None);
    let qb = b.qp(&b_cq, &b_cq, caps(64, 64), None);
    connect_with(&a, &qa, &b, &qb, |_, _, _| {});
    for i in 0..10 {
        qb.post_recv(RecvWr::new(i, &[b.mr.sge(0, 64)])).unwrap();
    }
    for i in 0..10 {
        qa.post_send(SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    }
    eventually("A's QP in the error state", || qa.state() == QpState::Err);
    let ev = events(&a.dev);
    assert!(ev.contains(&AsyncEvent::CqError { cq: a_scq.cq_num() }), "{ev:?}");
    assert!(!ev.contains(&AsyncEvent::CqError { cq: a_rcq.cq_num() }), "{ev:?}");
    let mut wcs = [WorkCompletion::default(); 16];
    assert_eq!(a_scq.poll(&mut wcs).unwrap(), 4);
    assert!(matches!(a_scq.poll(&mut wcs), Err(Error::CqOverflow)));
}

/// No receive posted: the responder answers with RNR NAKs naming its `min_rnr_timer`, the
/// requester waits that long and retries, `rnr_retry` times, then completes the SEND with
/// `RNR_RETRY_EXC_ERR`; the responder is not hurt by it.
#[test]
fn empty_receive_queue_rnr_retries_then_rnr_retry_exc_err() {
    let (a, b) = (Node::new(4096), Node::new(4096));
    let (a_cq, b_cq) = (a.dev.create_cq(64).unwrap(), b.dev.create_cq(64).unwrap());
    let qa = a.qp(&a_cq, &a_cq, caps(16, 16), None);
    let qb = b.qp(&b_cq, &b_cq, caps(16, 16), None);
    connect_with(&a, &qa, &b, &qb, |is_a, rtr, rts| {
        if is_a {
            rts.rnr_retry = Some(3);
        } else {
            rtr.min_rnr_timer = Some(1); // 0.01 ms
        }
    });
    qa.post_send(SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    let wc = collect(&a_cq, 1, Duration::from_secs(10));
    assert_eq!(wc[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(qa.state(), QpState::Err);
    let (ca, cb) = (qp_counters(&qa), qp_counters(&qb));
    assert_eq!((ca.rcvd_rnr_err, ca.retry_rnr_exceeded_err), (4, 1), "the first NAK and three retries");
    assert_eq!(cb.send_rnr_err, 4);
    assert_eq!(qb.state(), QpState::Rts);
}

/// `rnr_retry` 7 is infinite (IBTA and rxe): the SEND waits through hundreds of RNR NAKs and
/// completes once a receive is posted.
#[test]
fn rnr_retry_seven_waits_for_a_receive() {
    let (a, b) = (Node::new(4096), Node::new(4096));
    let (a_cq, b_cq) = (a.dev.create_cq(64).unwrap(), b.dev.create_cq(64).unwrap());
    let qa = a.qp(&a_cq, &a_cq, caps(16, 16), None);
    let qb = b.qp(&b_cq, &b_cq, caps(16, 16), None);
    connect_with(&a, &qa, &b, &qb, |is_a, rtr, rts| {
        if is_a {
            rts.rnr_retry = Some(7);
        } else {
            rtr.min_rnr_timer = Some(1);
        }
    });
    a.mr.write(0, b"patience").unwrap();
    qa.post_send(SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    eventually("100 RNR NAKs", || qp_counters(&qa).rcvd_rnr_err >= 100);
    assert!(collect(&a_cq, 1, Duration::from_millis(50)).is_empty(), "no completion while no receive");
    qb.post_recv(RecvWr::new(7, &[b.mr.sge(100, 64)])).unwrap();
    let wc = collect(&a_cq, 1, Duration::from_secs(10));
    assert_eq!(wc[0].status, WcStatus::Success);
    let r = collect(&b_cq, 1, Duration::from_secs(10));
    assert_eq!((r[0].wr_id, r[0].status, r[0].byte_len), (7, WcStatus::Success, 8));
    let mut got = [0u8; 8];
    b.mr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"patience");
}

/// An RC QP on an empty shared receive queue: RNR NAKs until receives are posted to the SRQ,
/// then every message arrives, in order; with `rnr_retry` 0 the first RNR NAK is final.
#[test]
fn empty_srq_rnr_naks_until_receives_are_posted() {
    let (a, b) = (Node::new(1 << 16), Node::new(1 << 16));
    let (a_cq, b_cq) = (a.dev.create_cq(64).unwrap(), b.dev.create_cq(64).unwrap());
    let srq = b.pd.create_srq(&SrqInitAttr { max_wr: 16, max_sge: 1, srq_limit: 0 }).unwrap();
    let qa = a.qp(&a_cq, &a_cq, caps(16, 16), None);
    let qb = b.qp(&b_cq, &b_cq, caps(16, 16), Some(&srq));
    connect_with(&a, &qa, &b, &qb, |_, rtr, _| rtr.min_rnr_timer = Some(1));
    for i in 0..4u64 {
        a.mr.write(i as usize * 1000, &[i as u8 + 1; 1000]).unwrap();
        qa.post_send(SendWr::new(i, SendOp::Send, &[a.mr.sge(i as usize * 1000, 1000)])).unwrap();
    }
    eventually("RNR NAKs from the empty SRQ", || qp_counters(&qb).send_rnr_err >= 20);
    assert!(collect(&b_cq, 1, Duration::from_millis(20)).is_empty());
    for i in 0..4u64 {
        srq.post_recv(RecvWr::new(10 + i, &[b.mr.sge(i as usize * 4096, 4096)])).unwrap();
    }
    let r = collect(&b_cq, 4, Duration::from_secs(10));
    assert_eq!(
        r.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        [
            (10, WcStatus::Success, 1000),
            (11, WcStatus::Success, 1000),
            (12, WcStatus::Success, 1000),
            (13, WcStatus::Success, 1000)
        ]
    );
    for i in 0..4usize {
        let mut got = vec![0u8; 1000];
        b.mr.read(i * 4096, &mut got).unwrap();
        assert!(got.iter().all(|&x| x == i as u8 + 1), "message {i}");
    }
    assert!(collect(&a_cq, 4, Duration::from_secs(10)).iter().all(|w| w.status == WcStatus::Success));

    // rnr_retry 0: no retry at all.
    let qa2 = a.qp(&a_cq, &a_cq, caps(16, 16), None);
    let qb2 = b.qp(&b_cq, &b_cq, caps(16, 16), Some(&srq));
    connect_with(&a, &qa2, &b, &qb2, |is_a, _, rts| {
        if is_a {
            rts.rnr_retry = Some(0);
        }
    });
    qa2.post_send(SendWr::new(50, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    let wc = collect(&a_cq, 1, Duration::from_secs(10));
    assert_eq!((wc[0].wr_id, wc[0].status), (50, WcStatus::RnrRetryExcErr));
    assert_eq!(qp_counters(&qa2).rcvd_rnr_err, 1);
}

/// `max_rd_atomic` 2: the requester keeps at most two READs/atomics outstanding and queues
/// the rest in its send queue; 300 of them complete, every byte right, the responder
/// (`max_dest_rd_atomic` 2) never refusing one.
#[test]
fn max_rd_atomic_reached_queues_the_rest() {
    let (a, b) = (Node::new(1 << 20), Node::new(1 << 20));
    let (a_cq, b_cq) = (a.dev.create_cq(1024).unwrap(), b.dev.create_cq(64).unwrap());
    let qa = a.qp(&a_cq, &a_cq, caps(512, 16), None);
    let qb = b.qp(&b_cq, &b_cq, caps(16, 16), None);
    connect_with(&a, &qa, &b, &qb, |_, rtr, rts| {
        rtr.max_dest_rd_atomic = Some(2);
        rts.max_rd_atomic = Some(2);
    });
    let pattern: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    b.mr.write(0, &pattern).unwrap();
    for i in 0..300u64 {
        let off = (i as usize * 3000) % ((1 << 20) - 3000);
        let remote = RemoteAddr { addr: b.mr.addr() + off as u64, rkey: b.mr.rkey() };
        let op = if i % 10 == 9 {
            SendOp::FetchAdd {
                remote: RemoteAddr { addr: b.mr.addr() + 8 * (i / 10), rkey: b.mr.rkey() },
                add: 0,
            }
        } else {
            SendOp::RdmaRead(remote)
        };
        let len = if i % 10 == 9 { 8 } else { 3000 };
        qa.post_send(SendWr::new(i, op, &[a.mr.sge(off, len)])).unwrap();
    }
    let wcs = collect(&a_cq, 300, Duration::from_secs(20));
    assert_eq!(wcs.len(), 300);
    assert!(
        wcs.iter().all(|w| w.status == WcStatus::Success),
        "{:?}",
        wcs.iter().find(|w| w.status != WcStatus::Success)
    );
    let mut got = vec![0u8; 1 << 20];
    a.mr.read(0, &mut got).unwrap();
    for i in (0..300usize).filter(|i| i % 10 != 9) {
        let off = (i * 3000) % ((1 << 20) - 3000);
        assert!(got[off..off + 3000] == pattern[off..off + 3000], "READ {i}");
    }
    assert_eq!(qp_counters(&qb).send_nak_err, 0, "the responder refused nothing");
    assert_eq!(qb.state(), QpState::Rts);
}

/// A full send queue: `post_send` fails at once with `QueueFull` (it does not block), and
/// posting works again once completions free slots.
#[test]
fn send_queue_full_is_an_error_not_a_block() {
    let (a, b) = (Node::new(4096), Node::new(4096));
    let (a_cq, b_cq) = (a.dev.create_cq(64).unwrap(), b.dev.create_cq(64).unwrap());
    let qa = a.qp(&a_cq, &a_cq, caps(16, 16), None);
    let qb = b.qp(&b_cq, &b_cq, caps(16, 32), None);
    connect_with(&a, &qa, &b, &qb, |_, _, _| {});
    // No receive posted at B: the SENDs wait on RNR NAKs (rnr_retry 7), holding their slots.
    for i in 0..16 {
        qa.post_send(SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    }
    let t = Instant::now();
    for _ in 0..1000 {
        let e = qa.post_send(SendWr::new(99, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap_err();
        assert!(matches!(e, Error::Post(PostError::QueueFull)), "{e}");
    }
    assert!(t.elapsed() < Duration::from_secs(1), "1000 refused posts took {:?}", t.elapsed());
    for i in 0..32 {
        qb.post_recv(RecvWr::new(i, &[b.mr.sge(0, 64)])).unwrap();
    }
    let done = collect(&a_cq, 16, Duration::from_secs(10));
    assert!(done.len() == 16 && done.iter().all(|w| w.status == WcStatus::Success), "{done:?}");
    for i in 0..16 {
        qa.post_send(SendWr::new(100 + i, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    }
    assert_eq!(collect(&a_cq, 16, Duration::from_secs(10)).len(), 16);
}

/// 10 000 READs requested at once by a requester with `max_rd_atomic` 16: the send queue
/// holds them, 16 are outstanding at a time, all complete with the right bytes.
#[test]
fn ten_thousand_reads_requested_at_once() {
    const N: usize = 10_000;
    const LEN: usize = 1000;
    let (a, b) = (Node::new(N * LEN), Node::new(N * LEN));
    let (a_cq, b_cq) = (a.dev.create_cq(N + 16).unwrap(), b.dev.create_cq(64).unwrap());
    let qa = a.qp(&a_cq, &a_cq, caps(N as u32, 16), None);
    let qb = b.qp(&b_cq, &b_cq, caps(16, 16), None);
    connect_with(&a, &qa, &b, &qb, |_, _, _| {});
    let pattern: Vec<u8> =
        (0..N * LEN).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2]).collect();
    b.mr.write(0, &pattern).unwrap();
    let t = Instant::now();
    for i in 0..N {
        let remote = RemoteAddr { addr: b.mr.addr() + (i * LEN) as u64, rkey: b.mr.rkey() };
        qa.post_send(SendWr::new(i as u64, SendOp::RdmaRead(remote), &[a.mr.sge(i * LEN, LEN as u32)]))
            .unwrap();
    }
    let wcs = collect(&a_cq, N, Duration::from_secs(60));
    println!("{N} READs of {LEN} bytes in {:?}", t.elapsed());
    assert_eq!(wcs.len(), N);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert!(wcs.iter().enumerate().all(|(i, w)| w.wr_id == i as u64), "in order");
    let mut got = vec![0u8; N * LEN];
    a.mr.read(0, &mut got).unwrap();
    assert!(got == pattern);
    assert_eq!(qp_counters(&qb).send_nak_err, 0);
}

/// What a hostile peer got back: response packets and NAKs (PSN and code).
#[derive(Debug, Default)]
struct PeerSaw {
    responses: usize,
    naks: Vec<(Psn, NakCode)>,
}

/// 10 000 READ requests of 4 KiB each sent at once by a peer that ignores
/// `max_dest_rd_atomic` (16) and never acknowledges a response — through the real engine over
/// UDP, the requests built by hand. The responder keeps at most 16 READs in progress: the
/// first request beyond them gets an Invalid Request NAK and the QP goes to the error state
/// with a request-error event (IBTA: a responder out of RDMA READ/atomic resources answers
/// Invalid Request); all later requests are dropped and counted; nothing is queued without
/// bound (the transport-level test in `tests/rc_scenarios.rs` watches the queue packet by
/// packet). The device stays responsive: a second QP on it is created and queried at once.
#[test]
fn ten_thousand_read_requests_from_a_peer_that_ignores_max_dest_rd_atomic() {
    const N: u32 = 10_000;
    const LEN: u32 = 4096;
    let b = Node::new(LEN as usize);
    let b_ip: std::net::Ipv4Addr = b.dev.ip().to_string().parse().unwrap();
    let cq = b.dev.create_cq(64).unwrap();
    let qb = b.qp(&cq, &cq, caps(16, 16), None);
    let peer_ip: std::net::Ipv4Addr = loopback_ip().parse().unwrap();
    let peer = std::net::UdpSocket::bind((peer_ip, ROCEV2_UDP_PORT)).unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let peer_qpn = Qpn::new(0x77);
    let first = Psn::new(0x1000);
    qb.modify(&QpAttrs::init(Access::ALL)).unwrap();
    let av = AddressVector::new(Gid::from_ip(peer_ip.into()), b.dev.default_gid_index());
    let mut rtr = QpAttrs::rtr(av, Mtu::Mtu1024, peer_qpn, first);
    rtr.max_dest_rd_atomic = Some(16);
    qb.modify(&rtr).unwrap();
    qb.modify(&QpAttrs::rts(Psn::new(0x9000))).unwrap();

    let frame = RoceFrameRepr {
        ip: IpRepr::V4 { src: peer_ip, dst: b_ip, tos: 0, ttl: 64, id: 0, df: true },
        src_port: ROCEV2_UDP_PORT,
        dst_port: ROCEV2_UDP_PORT,
        udp_checksum: false,
    };
    let pkts_per_read = LEN / 1024;
    let start = Instant::now();
    for i in 0..N {
        let psn = first.add(i * pkts_per_read);
        let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_READ_REQ, qb.qp_num().value(), psn));
        r.bth.ack_req = true;
        r.reth = Some(RethRepr { va: b.mr.addr(), rkey: b.mr.rkey().value(), dma_len: LEN });
        let mut buf = vec![0u8; frame.header_len() + r.buffer_len(0)];
        let n = frame.emit(&mut buf, &r, &[]).unwrap();
        // The kernel adds the IP and UDP headers; the engine recovers the IP ID it chose.
        while let Err(e) = peer.send_to(&buf[frame.header_len()..n], (b_ip, ROCEV2_UDP_PORT)) {
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        }
    }
    let mut saw = PeerSaw::default();
    let mut rx = [0u8; 2048];
    while let Ok((n, _)) = peer.recv_from(&mut rx) {
        let p = Packet::new_checked(&rx[..n]).unwrap();
        match p.aeth().map(|a| AethRepr::parse(&a).syndrome()) {
            Some(Syndrome::Nak(code)) => saw.naks.push((p.bth().psn(), code)),
            _ => saw.responses += 1,
        }
    }
    println!("{N} READ requests answered in {:?}: {saw:?}", start.elapsed());
    eventually("the responder's QP in the error state", || qb.state() == QpState::Err);
    let ev = events(&b.dev);
    assert!(ev.contains(&AsyncEvent::Qp { qpn: qb.qp_num(), event: QpEvent::RequestError }), "{ev:?}");
    assert_eq!(saw.naks.len(), 1, "one NAK: {saw:?}");
    let (nak_psn, code) = saw.naks[0];
    assert_eq!(code, NakCode::InvalidRequest);
    // The NAK names a READ beyond the first 16 (requests lost in a full socket buffer shift
    // which one; a gap would be a sequence-error NAK instead, and is not what this tests).
    let refused = (nak_psn.value().wrapping_sub(first.value()) & 0xff_ffff) / pkts_per_read;
    assert!((16..N).contains(&refused), "NAK for READ {refused}");
    assert!(
        saw.responses <= (refused * pkts_per_read) as usize,
        "{} response packets for {refused} READs accepted",
        saw.responses
    );
    let c = qp_counters(&qb);
    assert_eq!(c.send_nak_err, 1);
    assert!(c.rcvd_dropped > 0, "the requests after the error are dropped and counted: {c:?}");
    // The device still serves: a new QP at once.
    let t = Instant::now();
    let q2 = b.qp(&cq, &cq, caps(16, 16), None);
    assert_eq!(q2.state(), QpState::Reset);
    assert!(t.elapsed() < Duration::from_secs(1));
}
