//! The GSI QP in the engine: MADs between two devices on loopback, and the drops of QP1.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::transport::cm::{CmEndpoint, CmEvent, CmState, RepParams, ReqParams, rdma};
use crate::verbs::{Device, DeviceConfig};
use crate::wire::cm::CmTransport;
use crate::wire::cma::PortSpace;

fn loopback() -> Ipv4Addr {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed) + (std::process::id() % 40_000) * 256;
    Ipv4Addr::new(127, 210 + ((n / (254 * 256)) % 40) as u8, ((n / 254) % 256) as u8, (n % 254 + 1) as u8)
}

fn open() -> (Device, Ipv4Addr) {
    let ip = loopback();
    (Device::open(DeviceConfig::new(ip.to_string())).unwrap(), ip)
}

type Log = Arc<Mutex<Vec<CmEvent>>>;

/// Installs a sink that records events and answers them with `answer`.
fn sink(
    dev: &Device,
    answer: impl FnMut(&mut CmEndpoint, crate::transport::Time, &CmEvent) + Send + 'static,
) -> Log {
    let log: Log = Arc::default();
    let l = log.clone();
    let mut answer = answer;
    *dev.shared.cm_sink.lock() = Some(Box::new(move |cm, now, ev| {
        answer(cm, now, &ev);
        l.lock().push(ev);
    }));
    log
}

fn wait_for(log: &Log, what: impl Fn(&CmEvent) -> bool) -> CmEvent {
    for _ in 0..400 {
        if let Some(e) = log.lock().iter().find(|e| what(e)) {
            return e.clone();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no such event within 2 s: {:?}", log.lock());
}

fn req_to(src: Ipv4Addr, dst: Ipv4Addr, port: u16) -> ReqParams {
    let route = rdma::RdmaRoute {
        src: (IpAddr::V4(src), 40000).into(),
        dst: (IpAddr::V4(dst), port).into(),
        mtu: 3,
        hop_limit: 64,
        tos: 0,
        ack_timeout: None,
        ipv6_flow_label: None,
    };
    let neg = rdma::connect_values(None, rdma::DeviceCaps { max_qp_rd_atom: 16, max_qp_init_rd_atom: 16 });
    rdma::req_params(&route, PortSpace::Tcp, 0x11, rdma::RdmaQpType::Rc, 0x1234, &neg, false).unwrap()
}

#[test]
fn req_to_a_port_nobody_listens_on_gets_rej_8() {
    let (a, ip_a) = open();
    let (b, ip_b) = open();
    let log = sink(&b, |_, _, _| {});
    let req = req_to(ip_b, ip_a, 7174);
    b.shared.cm_call(move |cm, now| cm.connect(now, &req)).unwrap().unwrap();
    let ev = wait_for(&log, |e| matches!(e, CmEvent::RejReceived { .. }));
    let CmEvent::RejReceived { reason, .. } = ev else { unreachable!() };
    assert_eq!(reason, 8);
    let (ca, cb) = (a.counters().unwrap(), b.counters().unwrap());
    assert_eq!(ca.cm.req_no_listener, 1);
    assert_eq!(cb.cm.tx_msgs[0], 1, "one REQ sent");
    assert_eq!(cb.cm.rx_msgs[2], 1, "one REJ received");
}

#[test]
fn connect_accept_rtu_and_disconnect_over_qp1() {
    let (a, ip_a) = open();
    let (b, ip_b) = open();
    let sid = PortSpace::Tcp.service_id(7175);
    a.shared.cm_call(move |cm, _| cm.listen(sid, 16)).unwrap().unwrap();
    let la = sink(&a, |cm, now, ev| {
        if let CmEvent::ReqReceived { id, req, .. } = ev {
            assert_eq!(req.transport, CmTransport::Rc);
            let rep = RepParams {
                qpn: 0x22,
                starting_psn: 0x777,
                responder_resources: 1,
                initiator_depth: 1,
                failover_accepted: 0,
                flow_control: false,
                rnr_retry_count: 7,
                srq: false,
                private_data: vec![],
                ece: Default::default(),
            };
            cm.accept(now, *id, &rep).unwrap();
        }
    });
    let lb = sink(&b, |cm, now, ev| {
        if let CmEvent::RepReceived { id, rep } = ev {
            assert_eq!((rep.remote_qpn, rep.starting_psn), (0x22, 0x777));
            cm.ready_to_use(now, *id, &[]).unwrap();
        }
    });
    let req = req_to(ip_b, ip_a, 7175);
    let idb = b.shared.cm_call(move |cm, now| cm.connect(now, &req)).unwrap().unwrap();
    wait_for(&lb, |e| matches!(e, CmEvent::RepReceived { .. }));
    let ev = wait_for(&la, |e| matches!(e, CmEvent::RtuReceived { .. }));
    let ida = ev.id();
    assert_eq!(a.shared.cm_call(move |cm, _| cm.state(ida)).unwrap(), Some(CmState::Established));
    assert_eq!(b.shared.cm_call(move |cm, _| cm.state(idb)).unwrap(), Some(CmState::Established));
    // The passive side's QP attributes come from the REQ: our PSN direction.
    let attrs = a.shared.cm_call(move |cm, _| cm.qp_attrs(ida)).unwrap().unwrap();
    assert_eq!((attrs.dest_qpn, attrs.sq_psn, attrs.rq_psn), (0x11, 0x1234, 0x777));
    b.shared.cm_call(move |cm, now| cm.disconnect(now, idb)).unwrap().unwrap();
    wait_for(&la, |e| matches!(e, CmEvent::DreqReceived { .. }));
    let la2 = la.clone();
    // The passive side answers the DREQ; the active side gets the DREP.
    a.shared.cm_call(move |cm, now| cm.disconnect(now, ida)).unwrap().unwrap();
    wait_for(&lb, |e| matches!(e, CmEvent::DrepReceived { .. }));
    drop(la2);
}

/// A UD SEND Only to QP1 from a plain UDP socket, with a correct ICRC.
fn send_to_qp1(from: Ipv4Addr, to: Ipv4Addr, pkey: u16, qkey: u32, payload: &[u8]) {
    use crate::wire::roce::{IpRepr, RoceFrameRepr};
    use crate::wire::{BthRepr, DethRepr, ICRC_LEN, Opcode, PacketRepr, Psn};
    let sock = UdpSocket::bind((from, 0)).unwrap();
    let sport = sock.local_addr().unwrap().port();
    let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, 1, Psn::new(0));
    bth.pkey = pkey;
    let mut r = PacketRepr::new(bth);
    r.deth = Some(DethRepr { qkey, resv8: 0, src_qp: 1 });
    let mut buf = vec![0u8; 12 + 8 + payload.len() + 8];
    let len = r.emit(&mut buf, payload).unwrap();
    let frame = RoceFrameRepr {
        ip: IpRepr::V4 { src: from, dst: to, tos: 0, ttl: 64, id: 0, df: true },
        src_port: sport,
        dst_port: 4791,
        udp_checksum: false,
    };
    let crc = frame.icrc(&buf[..len - ICRC_LEN]).unwrap();
    buf[len - ICRC_LEN..len].copy_from_slice(&crc.to_le_bytes());
    sock.send_to(&buf[..len], (to, 4791)).unwrap();
}

#[test]
fn qp1_drops_bad_keys_and_bad_mads_and_counts_them() {
    let (a, ip_a) = open();
    let from = loopback();
    let mad = [0u8; 256];
    send_to_qp1(from, ip_a, 0xffff, 0x1111_1111, &mad);
    send_to_qp1(from, ip_a, 0x8001, 0x8001_0000, &mad);
    send_to_qp1(from, ip_a, 0xffff, 0x8001_0000, &mad[..100]);
    // A REQ-shaped MAD of the right size but base version 0: dropped by the MAD layer.
    send_to_qp1(from, ip_a, 0x7fff, 0x8001_0000, &mad);
    for _ in 0..400 {
        let c = a.counters().unwrap();
        // The bad P_Key never reaches QP1: the receive filter drops it in the kernel (or
        // lets it through as a sample, counted by reason).
        if c.rcvd_mad_bad_qkey == 1
            && c.rcvd_junk.pkey + c.rcvd_socket_drops == 1
            && c.cm.rx_bad_length == 1
            && c.cm.rx_bad_base_version == 1
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = a.counters().unwrap();
    panic!(
        "counters: qkey {} pkey {}+{} length {} version {}",
        c.rcvd_mad_bad_qkey,
        c.rcvd_junk.pkey,
        c.rcvd_socket_drops,
        c.cm.rx_bad_length,
        c.cm.rx_bad_base_version
    );
}

/// Hostile SIDR_REQs at an rdma_cm UDP listener: no `cma_hdr` (garbage private data), a
/// `cma_version` other than 0, a destination address that is not the device's, a SIDR_REQ
/// naming the service ID of an RC listener (the IB CM finds it; rdma_cm refuses the QP type,
/// `cma_ib_check_req_qp_type`), and one for a port nobody listens on: each answered with a
/// SIDR_REP of status 2 (rdma_cm's refusal) or 1 (no IB CM listener), none reaching the
/// application.
#[test]
fn hostile_sidr_requests_are_refused_and_never_reach_the_listener() {
    use crate::verbs::cm::{CmId as RdmaId, EventChannel};
    use crate::wire::cma::CmaHdrRepr;
    let (a, ip_a) = open();
    let (b, ip_b) = open();
    let ch = EventChannel::new().unwrap();
    let mut l = RdmaId::new(Some(&ch), PortSpace::Udp).unwrap();
    l.bind_addr((IpAddr::V4(ip_a), 7300).into()).unwrap();
    l.listen(0).unwrap();
    let mut rc = RdmaId::new(Some(&ch), PortSpace::Tcp).unwrap();
    rc.bind_addr((IpAddr::V4(ip_a), 7301).into()).unwrap();
    rc.listen(0).unwrap();
    let log = sink(&b, |_, _, _| {});
    let route = |port: u16| rdma::RdmaRoute {
        src: (IpAddr::V4(ip_b), 40000).into(),
        dst: (IpAddr::V4(ip_a), port).into(),
        mtu: 3,
        hop_limit: 64,
        tos: 0,
        ack_timeout: None,
        ipv6_flow_label: None,
    };
    let good = rdma::sidr_params(&route(7300), PortSpace::Udp, b"hi").unwrap();
    let mut garbage = good.clone();
    garbage.private_data = vec![0xa5; 216];
    let mut version = good.clone();
    version.private_data[0] = 1;
    let mut elsewhere = good.clone();
    let hdr = CmaHdrRepr::new(IpAddr::V4(ip_b), 40000, IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9))).unwrap();
    elsewhere.private_data = rdma::request_private_data(&hdr, &[], true).unwrap();
    let tcp = rdma::sidr_params(&route(7301), PortSpace::Tcp, &[]).unwrap();
    let nobody = rdma::sidr_params(&route(7302), PortSpace::Udp, &[]).unwrap();
    for (p, want) in [(garbage, 2u8), (version, 2), (elsewhere, 2), (tcp, 2), (nobody, 1)] {
        let id = b.shared.cm_call(move |cm, now| cm.sidr_request(now, &p)).unwrap().unwrap();
        let ev = wait_for(&log, |e| matches!(e, CmEvent::SidrRepReceived { id: i, .. } if *i == id));
        let CmEvent::SidrRepReceived { status, qpn, .. } = ev else { unreachable!() };
        assert_eq!((status, qpn), (want, 0));
    }
    assert!(ch.get_event_timeout(Duration::from_millis(200)).is_err(), "nothing reached the application");
    // A well-formed request still does.
    b.shared.cm_call(move |cm, now| cm.sidr_request(now, &good)).unwrap().unwrap();
    let ev = ch.get_event_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(ev.event_type(), crate::verbs::cm::CmEventType::ConnectRequest);
    assert_eq!(&ev.private_data()[..2], b"hi");
    let c = a.counters().unwrap();
    assert_eq!(c.cm.rx_msgs[7], 6, "six SIDR_REQs received");
    assert_eq!(c.cm.tx_msgs[8], 5, "five refused at once");
    assert_eq!(c.cm.sidr_no_listener, 1);
}
