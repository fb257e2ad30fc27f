//! UC and UD queue pairs, address handles and shared receive queues through the public verbs
//! API: over UDP on loopback, and over the in-memory network with loss, duplication,
//! reordering and corruption (messages may be lost on UC/UD, never corrupted or duplicated).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::verbs::*;
use softroce::transport::PostError;
use softroce::transport::sim::LinkConfig;
use softroce::verbs::*;

const QKEY: u32 = 0x1111_1111;

fn caps() -> QpCaps {
    QpCaps { max_send_wr: 512, max_recv_wr: 512, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 }
}

struct Node {
    dev: Device,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

impl Node {
    fn new(dev: Device, qp_type: QpType, buf: usize) -> Node {
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4096).unwrap();
        let mut init = QpInitAttr::new(qp_type, &cq, &cq);
        init.cap = caps();
        let qp = pd.create_qp(&init).unwrap();
        let mr = pd.alloc_mr(buf, Access::ALL).unwrap();
        Node { dev, pd, cq, qp, mr }
    }
    fn gid(&self) -> Gid {
        self.dev.gid(self.dev.default_gid_index()).unwrap()
    }
    fn wait(&self) -> WorkCompletion {
        self.try_wait(Duration::from_secs(20)).expect("no completion within 20 s")
    }
    fn try_wait(&self, t: Duration) -> Option<WorkCompletion> {
        self.cq.poll_one_wait(t).unwrap()
    }
}

fn uc_pair(a: Device, b: Device, buf: usize, mtu: Mtu) -> (Node, Node) {
    let a = Node::new(a, QpType::Uc, buf);
    let b = Node::new(b, QpType::Uc, buf);
    for (x, y, rq, sq) in [(&a, &b, 200, 100), (&b, &a, 100, 200)] {
        x.qp.modify(&QpAttrs::init(Access::REMOTE_WRITE)).unwrap();
        let av = AddressVector::new(y.gid(), x.dev.default_gid_index());
        x.qp.modify(&QpAttrs::rtr_uc(av, mtu, y.qp.qp_num(), Psn::new(rq))).unwrap();
        x.qp.modify(&QpAttrs::rts_unreliable(Psn::new(sq))).unwrap();
    }
    (a, b)
}

fn ud_node(dev: Device, buf: usize) -> Node {
    let n = Node::new(dev, QpType::Ud, buf);
    n.qp.modify(&QpAttrs::init_ud(Qkey::new(QKEY))).unwrap();
    n.qp.modify(&QpAttrs::rtr_ud()).unwrap();
    n.qp.modify(&QpAttrs::rts_unreliable(Psn::new(0x42))).unwrap();
    n
}

fn udp_dev() -> Device {
    Device::open(DeviceConfig::new(loopback_ip())).unwrap()
}

#[test]
fn uc_send_and_write_with_and_without_immediate() {
    let (a, b) = uc_pair(udp_dev(), udp_dev(), 1 << 20, Mtu::Mtu1024);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 13 + (i >> 8)) as u8).collect();
    a.mr.write(0, &data).unwrap();
    // SEND, 98 packets.
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 100_000)])).unwrap();
    b.qp.post_recv(RecvWr::new(2, &[b.mr.sge(200_000, 10)])).unwrap();
    b.qp.post_recv(RecvWr::new(3, &[b.mr.sge(300_000, 10)])).unwrap();
    a.qp.post_send(SendWr::new(10, SendOp::Send, &[a.mr.sge(0, 100_000)])).unwrap();
    let wc = a.wait();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (10, WcStatus::Success, WcOpcode::Send));
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (1, WcStatus::Success, 100_000));
    assert!(b.mr.to_vec()[..100_000] == data[..]);
    // SEND with immediate, two SGEs.
    let mut wr = SendWr::new(11, SendOp::SendWithImm(0xfeed_f00d), &[a.mr.sge(0, 4), a.mr.sge(8, 4)]);
    wr.solicited = true;
    a.qp.post_send(wr).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.byte_len, wc.imm_data, wc.solicited), (2, 8, Some(0xfeed_f00d), true));
    assert_eq!(b.mr.to_vec()[200_000..200_008], [&data[0..4], &data[8..12]].concat()[..]);
    // RDMA WRITE (no receive consumed), then WRITE with immediate (consumes one).
    let remote = RemoteAddr { addr: b.mr.addr() + 400_000, rkey: b.mr.rkey() };
    a.qp.post_send(SendWr::new(12, SendOp::RdmaWrite(remote), &[a.mr.sge(0, 50_000)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let remote = RemoteAddr { addr: b.mr.addr() + 500_000, rkey: b.mr.rkey() };
    a.qp.post_send(SendWr::new(13, SendOp::RdmaWriteWithImm(remote, 7), &[a.mr.sge(0, 3000)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len, wc.imm_data),
        (3, WcOpcode::RecvRdmaWithImm, 3000, Some(7))
    );
    let got = b.mr.to_vec();
    assert!(got[400_000..450_000] == data[..50_000]);
    assert!(got[500_000..503_000] == data[..3000]);
    // READ and atomics do not exist on UC.
    let e = a.qp.post_send(SendWr::new(14, SendOp::RdmaRead(remote), &[a.mr.sge(0, 8)])).unwrap_err();
    assert!(matches!(e, Error::Post(PostError::OpNotSupported)), "{e}");
    // A bad R_Key: the message is dropped silently (no NAK on UC), the QPs go on.
    let bad = RemoteAddr { addr: b.mr.addr(), rkey: Rkey::new(b.mr.rkey().value() ^ 0x55) };
    a.qp.post_send(SendWr::new(15, SendOp::RdmaWrite(bad), &[a.mr.sge(0, 100)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success, "UC completes at the sender when sent");
    b.qp.post_recv(RecvWr::new(4, &[b.mr.sge(0, 100)])).unwrap();
    a.qp.post_send(SendWr::new(16, SendOp::Send, &[a.mr.sge(0, 100)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(b.wait().wr_id, 4);
    assert!(b.dev.counters().unwrap().qp.uc_msg_dropped >= 1);
    // No receive posted: the message is dropped and counted (no RNR on UC).
    a.qp.post_send(SendWr::new(17, SendOp::Send, &[a.mr.sge(0, 100)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(b.dev.counters().unwrap().qp.rcvd_no_wqe_drop, 1);
    assert_eq!(b.qp.state(), QpState::Rts);
}

#[test]
fn uc_message_longer_than_the_receive_completes_with_loc_len_err() {
    let (a, b) = uc_pair(udp_dev(), udp_dev(), 1 << 16, Mtu::Mtu1024);
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 2000)])).unwrap();
    b.qp.post_recv(RecvWr::new(2, &[b.mr.sge(0, 5000)])).unwrap();
    a.qp.post_send(SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 5000)])).unwrap();
    a.qp.post_send(SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 5000)])).unwrap();
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocLenErr));
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (2, WcStatus::Success, 5000));
}

/// Messages carry their number in every 4-byte word; a receiver checks each message whole.
fn numbered(n: u32, len: usize) -> Vec<u8> {
    (0..len / 4).flat_map(|i| (n.wrapping_mul(0x9e37_79b9) ^ i as u32).to_le_bytes()).collect()
}

fn lossy() -> MemoryNetwork {
    MemoryNetwork::new(
        LinkConfig { drop: 0.03, duplicate: 0.03, reorder: 0.03, corrupt: 0.01, ..LinkConfig::default() },
        11,
    )
}

#[test]
fn uc_under_loss_loses_whole_messages_never_corrupts_or_duplicates() {
    let net = lossy();
    let a = Device::open(DeviceConfig::in_memory(&net, "10.0.1.1")).unwrap();
    let b = Device::open(DeviceConfig::in_memory(&net, "10.0.1.2")).unwrap();
    let (a, b) = uc_pair(a, b, 4 << 20, Mtu::Mtu1024);
    const LEN: usize = 3000; // First, Middle, Last
    const N: u32 = 400;
    for i in 0..N {
        a.mr.write(i as usize * LEN, &numbered(i, LEN)).unwrap();
    }
    let slot = |k: u64| (k as usize % 500) * 4096;
    for k in 0..500u64 {
        b.qp.post_recv(RecvWr::new(k, &[b.mr.sge(slot(k), 4096)])).unwrap();
    }
    for i in 0..N {
        a.qp.post_send(SendWr::new(i as u64, SendOp::Send, &[a.mr.sge(i as usize * LEN, LEN as u32)]))
            .unwrap();
        assert_eq!(a.wait().status, WcStatus::Success);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::new();
    while let Some(wc) = b.try_wait(Duration::from_millis(200)) {
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN as u32), "{wc:?}");
        let mut buf = vec![0u8; LEN];
        b.mr.read(slot(wc.wr_id), &mut buf).unwrap();
        let n = (0..N)
            .find(|&n| numbered(n, LEN) == buf)
            .expect("a received message is one that was sent, intact");
        got.push(n);
    }
    let distinct: HashSet<_> = got.iter().collect();
    assert_eq!(distinct.len(), got.len(), "no message delivered twice");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
    assert!(got.len() > N as usize / 2 && got.len() < N as usize, "some lost, most delivered: {}", got.len());
    let c = b.dev.counters().unwrap();
    assert!(c.qp.uc_msg_dropped > 0 && c.rcvd_icrc_err > 0, "{c:?}");
}

#[test]
fn ud_send_fills_the_grh_and_reports_the_source() {
    let a = ud_node(udp_dev(), 1 << 16);
    let b = ud_node(udp_dev(), 1 << 16);
    let ah = a.pd.create_ah(&AddressVector::new(b.gid(), a.dev.default_gid_index())).unwrap();
    a.mr.write(0, &numbered(5, 1000)).unwrap();
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 40 + 1024)])).unwrap();
    let mut wr = SendWr::new(9, SendOp::SendWithImm(0x1234), &[a.mr.sge(0, 1000)]);
    wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(QKEY)));
    a.qp.post_send(wr).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!(
        (wc.status, wc.byte_len, wc.src_qp, wc.grh, wc.imm_data),
        (WcStatus::Success, 1040, a.qp.qp_num(), true, Some(0x1234))
    );
    assert_eq!(wc.network_hdr, Some(NetworkHdr::Ipv4), "the completion names the GRH area's layout");
    let got = b.mr.to_vec();
    assert_eq!(got[..20], [0u8; 20], "RoCEv2 over IPv4: the first 20 bytes of the GRH area are zero");
    let ip = &got[20..40];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, 20 + 8 + 12 + 8 + 4 + 1000 + 4, "total length");
    let src: std::net::IpAddr = a.dev.ip();
    assert_eq!(
        Gid::from_ip(std::net::IpAddr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap())),
        Gid::from_ip(src)
    );
    assert_eq!(std::net::IpAddr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap()), b.dev.ip());
    let sum: u32 = ip.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff, "a valid IPv4 header checksum");
    assert_eq!(got[40..1040], numbered(5, 1000)[..]);

    // A privileged Q_Key in the work request means "the QP's own": it matches.
    b.qp.post_recv(RecvWr::new(2, &[b.mr.sge(0, 40 + 1024)])).unwrap();
    let mut wr = SendWr::new(10, SendOp::Send, &[a.mr.sge(0, 8)]);
    wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(0x8000_0000)));
    a.qp.post_send(wr).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(b.wait().wr_id, 2);
    // A wrong Q_Key is dropped silently and counted.
    let mut wr = SendWr::new(11, SendOp::Send, &[a.mr.sge(0, 8)]);
    wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(0x2222)));
    a.qp.post_send(wr).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    std::thread::sleep(Duration::from_millis(100));
    assert!(b.try_wait(Duration::from_millis(50)).is_none());
    assert_eq!(b.dev.counters().unwrap().qp.rcvd_qkey_err, 1);
    // The next datagram with the right Q_Key is received as usual.
    b.qp.post_recv(RecvWr::new(4, &[b.mr.sge(0, 40 + 1024)])).unwrap();
    let mut wr = SendWr::new(12, SendOp::Send, &[a.mr.sge(0, 1000)]);
    wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(QKEY)));
    a.qp.post_send(wr).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (4, WcStatus::Success, 1040));
    // Misuse: larger than the path MTU, no destination, an unknown address handle.
    let mut wr = SendWr::new(13, SendOp::Send, &[a.mr.sge(0, 5000)]);
    wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(QKEY)));
    assert!(matches!(a.qp.post_send(wr), Err(Error::Post(PostError::MessageTooLong(5000)))));
    let wr = SendWr::new(14, SendOp::Send, &[a.mr.sge(0, 8)]);
    assert!(matches!(a.qp.post_send(wr), Err(Error::Post(PostError::NoDestination))));
    let mut wr = SendWr::new(15, SendOp::Send, &[a.mr.sge(0, 8)]);
    wr.ud = Some(UdDest { ah: 0xffff_fff0, remote_qpn: Qpn::new(1), remote_qkey: Qkey::new(QKEY) });
    assert!(matches!(a.qp.post_send(wr), Err(Error::InvalidArgument(_))));
    let wr =
        SendWr::new(16, SendOp::RdmaWrite(RemoteAddr { addr: 0, rkey: Rkey::new(0) }), &[a.mr.sge(0, 8)]);
    assert!(matches!(a.qp.post_send(wr), Err(Error::Post(PostError::OpNotSupported))));
}

/// A UD send whose address handle is destroyed before the send leaves cannot be made: it
/// completes with `LOC_QP_OP_ERR` and the QP goes to the error state, as on rxe (it used to
/// complete as sent, with nothing sent: a caller waiting for an answer waited forever).
#[test]
fn a_ud_send_whose_address_handle_is_gone_completes_in_error() {
    let a = ud_node(udp_dev(), 1 << 16);
    let b = ud_node(udp_dev(), 1 << 16);
    let ah = a.pd.create_ah(&AddressVector::new(b.gid(), a.dev.default_gid_index())).unwrap();
    // Drained (SQD), the QP holds what is posted: the handle goes while the send waits.
    a.qp.modify(&QpAttrs { state: Some(QpState::Sqd), ..Default::default() }).unwrap();
    let mut wr = SendWr::new(7, SendOp::Send, &[a.mr.sge(0, 64)]);
    wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(QKEY)));
    a.qp.post_send(wr).unwrap();
    drop(ah);
    a.qp.modify(&QpAttrs { state: Some(QpState::Rts), ..Default::default() }).unwrap();
    let wc = a.wait();
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::LocQpOpErr));
    assert_eq!(a.qp.query().unwrap().state, QpState::Err);
    assert_eq!(a.dev.counters().unwrap().qp.send_err, 1);
}

#[test]
fn ud_receive_too_small_for_grh_and_payload_is_loc_len_err() {
    let a = ud_node(udp_dev(), 1 << 16);
    let b = ud_node(udp_dev(), 1 << 16);
    let ah = a.pd.create_ah(&AddressVector::new(b.gid(), a.dev.default_gid_index())).unwrap();
    b.qp.post_recv(RecvWr::new(1, &[b.mr.sge(0, 1000)])).unwrap(); // 40 + 1000 does not fit
    b.qp.post_recv(RecvWr::new(2, &[b.mr.sge(0, 1040)])).unwrap();
    for i in 0..2 {
        let mut wr = SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 1000)]);
        wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(QKEY)));
        a.qp.post_send(wr).unwrap();
        assert_eq!(a.wait().status, WcStatus::Success);
    }
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocLenErr));
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (2, WcStatus::Success, 1040));
    assert_eq!(b.qp.state(), QpState::Rts);
}

#[test]
fn ud_under_loss_loses_datagrams_never_corrupts_or_duplicates() {
    let net = lossy();
    let a = ud_node(Device::open(DeviceConfig::in_memory(&net, "10.0.2.1")).unwrap(), 4 << 20);
    let b = ud_node(Device::open(DeviceConfig::in_memory(&net, "10.0.2.2")).unwrap(), 4 << 20);
    // One sender QP talks to the receiver through an address handle; a second receiver QP on
    // the same device must see nothing.
    let ah = a.pd.create_ah(&AddressVector::new(b.gid(), a.dev.default_gid_index())).unwrap();
    const LEN: usize = 1024;
    const N: u32 = 400;
    for i in 0..N {
        a.mr.write(i as usize * LEN, &numbered(i, LEN)).unwrap();
    }
    for k in 0..500u64 {
        b.qp.post_recv(RecvWr::new(k, &[b.mr.sge(k as usize * 2048, 2048)])).unwrap();
    }
    for i in 0..N {
        let mut wr = SendWr::new(i as u64, SendOp::Send, &[a.mr.sge(i as usize * LEN, LEN as u32)]);
        wr.ud = Some(ah.dest(b.qp.qp_num(), Qkey::new(QKEY)));
        a.qp.post_send(wr).unwrap();
        assert_eq!(a.wait().status, WcStatus::Success);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::new();
    while let Some(wc) = b.try_wait(Duration::from_millis(200)) {
        assert_eq!((wc.status, wc.byte_len, wc.src_qp), (WcStatus::Success, 40 + LEN as u32, a.qp.qp_num()));
        let mut buf = vec![0u8; LEN];
        b.mr.read(wc.wr_id as usize * 2048 + 40, &mut buf).unwrap();
        let n = (0..N).find(|&n| numbered(n, LEN) == buf).expect("intact");
        got.push(n);
    }
    // UD may deliver a duplicated datagram twice (the service has no sequence check), but
    // every datagram is one that was sent, intact.
    let distinct: HashSet<_> = got.iter().collect();
    assert!(distinct.len() > N as usize / 2 && distinct.len() < N as usize, "{}", distinct.len());
    assert!(b.dev.counters().unwrap().rcvd_icrc_err > 0);
}

#[test]
fn srq_shared_by_many_qps_with_its_limit_event() {
    let d1 = udp_dev();
    let d2 = udp_dev();
    const QPS: usize = 8;
    const MSGS: u64 = 60;
    let pd1 = d1.alloc_pd().unwrap();
    let pd2 = d2.alloc_pd().unwrap();
    let cq1 = d1.create_cq(4096).unwrap();
    let cq2 = d2.create_cq(4096).unwrap();
    let srq = pd2.create_srq(&SrqInitAttr { max_wr: 64, max_sge: 2, srq_limit: 0 }).unwrap();
    let mr1 = pd1.alloc_mr(4 << 20, Access::ALL).unwrap();
    let mr2 = pd2.alloc_mr(1 << 20, Access::ALL).unwrap();
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..QPS {
        let mut i1 = QpInitAttr::rc(&cq1, &cq1);
        i1.cap = caps();
        let mut i2 = QpInitAttr::rc(&cq2, &cq2);
        i2.cap = caps();
        i2.srq = Some(&srq);
        senders.push(pd1.create_qp(&i1).unwrap());
        receivers.push(pd2.create_qp(&i2).unwrap());
    }
    for (s, r) in senders.iter().zip(&receivers) {
        for (x, y, dx, dy) in [(s, r, &d1, &d2), (r, s, &d2, &d1)] {
            x.modify(&QpAttrs::init(Access::ALL)).unwrap();
            let av = AddressVector::new(dy.gid(dy.default_gid_index()).unwrap(), dx.default_gid_index());
            x.modify(&QpAttrs::rtr(av, Mtu::Mtu1024, y.qp_num(), Psn::new(7))).unwrap();
            x.modify(&QpAttrs::rts(Psn::new(7))).unwrap();
        }
    }
    // Receives go to the SRQ, not the QP.
    let e = receivers[0].post_recv(RecvWr::new(0, &[mr2.sge(0, 8)])).unwrap_err();
    assert!(matches!(e, Error::Post(PostError::UsesSrq)), "{e}");
    // A receive's wr_id is its buffer's slot. A slot is reused only after its receive has
    // completed: an SRQ's receives complete in the order the QPs' messages finish, and a QP
    // held back by a retransmission or an RNR wait keeps the WQE it took meanwhile.
    let slot = |k: u64| k as usize * 4096;
    let mut free: std::collections::VecDeque<u64> = (64..200).collect();
    let mut posted = 0u64;
    while posted < 64 {
        srq.post_recv(RecvWr::new(
            posted,
            &[mr2.sge(slot(posted), 2048), mr2.sge(slot(posted) + 2048, 2048)],
        ))
        .unwrap();
        posted += 1;
    }
    assert!(matches!(
        srq.post_recv(RecvWr::new(99, &[mr2.sge(0, 8)])),
        Err(Error::Post(PostError::QueueFull))
    ));
    srq.arm_limit(60).unwrap();
    assert_eq!(srq.query().unwrap(), SrqAttr { max_wr: 64, max_sge: 2, srq_limit: 60 });
    // Every sender QP sends MSGS messages of 3000 bytes tagged with (qp, seq).
    for q in 0..QPS {
        for m in 0..MSGS {
            let n = (q as u64 * 1000 + m) as u32;
            let off = (q * MSGS as usize + m as usize) * 3000;
            mr1.write(off, &numbered(n, 3000)).unwrap();
        }
    }
    let total = QPS as u64 * MSGS;
    // Post everything; RNR NAKs hold senders back while the SRQ is empty.
    for m in 0..MSGS {
        for (q, s) in senders.iter().enumerate() {
            let off = (q * MSGS as usize + m as usize) * 3000;
            let wr = SendWr::new(q as u64 * 1000 + m, SendOp::Send, &[mr1.sge(off, 3000)]);
            loop {
                match s.post_send(wr.clone()) {
                    Ok(()) => break,
                    Err(Error::Post(PostError::QueueFull)) => std::thread::sleep(Duration::from_millis(1)),
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
    let mut next = [0u64; QPS];
    let mut received = 0u64;
    let mut sent = 0u64;
    let mut wcs = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0)); 64];
    let t = std::time::Instant::now();
    while received < total || sent < total {
        assert!(t.elapsed() < Duration::from_secs(60), "stalled: received {received}, sent {sent}");
        let n = cq2.poll_wait(&mut wcs, Duration::from_millis(5)).unwrap();
        for wc in &wcs[..n] {
            assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 3000), "{wc:?}");
            let q = receivers.iter().position(|r| r.qp_num() == wc.qp_num).unwrap();
            let mut buf = vec![0u8; 3000];
            mr2.read(slot(wc.wr_id), &mut buf).unwrap();
            assert!(buf == numbered((q as u64 * 1000 + next[q]) as u32, 3000), "QP {q} message {}", next[q]);
            next[q] += 1;
            received += 1;
            free.push_back(wc.wr_id);
            // The first five receives are not replaced at once: the SRQ falls below its limit
            // of 60 whatever the timing.
            while received > 5 && posted < received + 64 {
                let k = free.pop_front().expect("a free slot");
                let sges = [mr2.sge(slot(k), 2048), mr2.sge(slot(k) + 2048, 2048)];
                srq.post_recv(RecvWr::new(k, &sges)).unwrap();
                posted += 1;
            }
        }
        let n = cq1.poll(&mut wcs).unwrap();
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            sent += 1;
        }
    }
    assert!(next.iter().all(|&n| n == MSGS));
    let mut events = Vec::new();
    while let Some(e) = d2.poll_async_event() {
        events.push(e);
    }
    assert_eq!(events, vec![AsyncEvent::SrqLimitReached { srqn: srq.srq_num() }], "once, then disarmed");
    assert_eq!(srq.query().unwrap().srq_limit, 0);
    // A QP on the SRQ that goes to the error state reports its last WQE.
    receivers[0].modify(&QpAttrs::error()).unwrap();
    let t = std::time::Instant::now();
    let ev = loop {
        if let Some(e) = d2.poll_async_event() {
            break e;
        }
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(ev, AsyncEvent::Qp { qpn: receivers[0].qp_num(), event: QpEvent::LastWqeReached });
}

#[test]
fn srq_misuse_is_a_typed_error() {
    let d = udp_dev();
    let pd = d.alloc_pd().unwrap();
    let pd2 = d.alloc_pd().unwrap();
    let cq = d.create_cq(16).unwrap();
    assert!(pd.create_srq(&SrqInitAttr { max_wr: 0, max_sge: 1, srq_limit: 0 }).is_err());
    assert!(pd.create_srq(&SrqInitAttr { max_wr: 8, max_sge: 1000, srq_limit: 0 }).is_err());
    assert!(pd.create_srq(&SrqInitAttr { max_wr: 8, max_sge: 1, srq_limit: 9 }).is_err());
    let srq = pd.create_srq(&SrqInitAttr { max_wr: 8, max_sge: 1, srq_limit: 0 }).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let other = pd2.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    assert!(matches!(srq.post_recv(RecvWr::new(1, &[mr.sge(0, 8), mr.sge(8, 8)])), Err(Error::Post(_))));
    assert!(matches!(srq.post_recv(RecvWr::new(1, &[other.sge(0, 8)])), Err(Error::PdMismatch(_))));
    assert!(matches!(srq.arm_limit(9), Err(Error::Srq(_))));
    for i in 0..5 {
        srq.post_recv(RecvWr::new(i, &[mr.sge(0, 8)])).unwrap();
    }
    assert!(matches!(srq.resize(4), Err(Error::Srq(_))), "cannot shrink below what it holds");
    srq.resize(16).unwrap();
    assert_eq!(srq.query().unwrap().max_wr, 16);
    // Arming a limit above what is queued fires at once.
    srq.arm_limit(6).unwrap();
    assert_eq!(d.poll_async_event(), Some(AsyncEvent::SrqLimitReached { srqn: srq.srq_num() }));
    let mut init = QpInitAttr::rc(&cq, &cq);
    init.srq = Some(&srq);
    let pd2_qp = pd2.create_qp(&init);
    assert!(matches!(pd2_qp, Err(Error::InvalidArgument(_))), "an SRQ of another PD");
    // An address handle to another address family.
    let av = AddressVector::new(Gid::from_ip("::1".parse().unwrap()), GidIndex::new(1));
    assert!(matches!(pd.create_ah(&av), Err(Error::Unreachable(_))));
}

#[test]
fn ud_qps_can_share_a_receive_queue() {
    let a = ud_node(udp_dev(), 1 << 16);
    let d = udp_dev();
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(256).unwrap();
    let srq = pd.create_srq(&SrqInitAttr { max_wr: 64, max_sge: 1, srq_limit: 0 }).unwrap();
    let mr = pd.alloc_mr(1 << 20, Access::LOCAL_WRITE).unwrap();
    let qps: Vec<QueuePair> = (0..3)
        .map(|_| {
            let mut init = QpInitAttr::ud(&cq, &cq);
            init.srq = Some(&srq);
            let qp = pd.create_qp(&init).unwrap();
            qp.modify(&QpAttrs::init_ud(Qkey::new(QKEY))).unwrap();
            qp.modify(&QpAttrs::rtr_ud()).unwrap();
            qp.modify(&QpAttrs::rts_unreliable(Psn::new(1))).unwrap();
            qp
        })
        .collect();
    for k in 0..64u64 {
        srq.post_recv(RecvWr::new(k, &[mr.sge(k as usize * 2048, 2048)])).unwrap();
    }
    let ah =
        a.pd.create_ah(&AddressVector::new(d.gid(d.default_gid_index()).unwrap(), a.dev.default_gid_index()))
            .unwrap();
    for i in 0..30u32 {
        a.mr.write(0, &numbered(i, 512)).unwrap();
        let mut wr = SendWr::new(i as u64, SendOp::Send, &[a.mr.sge(0, 512)]);
        wr.ud = Some(ah.dest(qps[i as usize % 3].qp_num(), Qkey::new(QKEY)));
        a.qp.post_send(wr).unwrap();
        assert_eq!(a.wait().status, WcStatus::Success);
        let wc = cq.poll_one_wait(Duration::from_secs(10)).unwrap().expect("a receive");
        assert_eq!(
            (wc.status, wc.wr_id, wc.qp_num),
            (WcStatus::Success, i as u64, qps[i as usize % 3].qp_num())
        );
        let mut buf = vec![0u8; 512];
        mr.read(i as usize * 2048 + 40, &mut buf).unwrap();
        assert!(buf == numbered(i, 512));
    }
}
