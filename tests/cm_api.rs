//! The rdma_cm-shaped API between two softroce devices on loopback: connect, accept, a SEND
//! each way, disconnect from either side; synchronous ids; reject; nobody listening.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softroce::verbs::cm::{
    CmEventType, CmId, CmIdState, ConnParam, Error as CmError, EventChannel, EventParam, PortSpace,
};
use softroce::verbs::*;

fn dev() -> (Device, IpAddr) {
    let ip = common::verbs::loopback_ip();
    let d = Device::open(DeviceConfig::new(ip.clone())).unwrap();
    (d, ip.parse().unwrap())
}

const T: Duration = Duration::from_secs(10);

/// The verbs objects of one side of a connection.
struct Res {
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn make_qp(id: &mut CmId) -> Res {
    let dev = id.device().unwrap().clone();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let mr = pd.alloc_mr(4096, Access::ALL).unwrap();
    id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq)).unwrap();
    assert_eq!(id.qp().unwrap().state(), QpState::Init);
    Res { _pd: pd, cq, mr }
}

fn wait_wc(cq: &CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0))];
    assert_eq!(cq.poll_wait(&mut wc, T).unwrap(), 1, "no completion");
    wc[0]
}

/// One SEND from `a` into a receive posted on `b`.
fn exchange(a: &CmId, ra: &Res, b: &CmId, rb: &Res, msg: &[u8]) {
    rb.mr.fill(0, 64, 0).unwrap();
    b.qp().unwrap().post_recv(RecvWr::new(7, &[rb.mr.sge(0, 64)])).unwrap();
    ra.mr.write(0, msg).unwrap();
    a.qp().unwrap().post_send(SendWr::new(8, SendOp::Send, &[ra.mr.sge(0, msg.len() as u32)])).unwrap();
    let w = wait_wc(&ra.cq);
    assert_eq!(w.status, WcStatus::Success);
    let w = wait_wc(&rb.cq);
    assert_eq!((w.status, w.byte_len as usize), (WcStatus::Success, msg.len()));
    let mut got = vec![0u8; msg.len()];
    rb.mr.read(0, &mut got).unwrap();
    assert_eq!(got, msg);
}

fn next(ch: &EventChannel, want: CmEventType) -> softroce::verbs::cm::CmEvent {
    let ev = ch.get_event_timeout(T).unwrap();
    assert_eq!(ev.event_type(), want, "{ev:?}");
    ev
}

/// A client id from `cip` with its address and route to `to` resolved (on `ch`, the
/// ADDR_RESOLVED and ROUTE_RESOLVED events taken; without one, a synchronous id).
fn resolved(ch: Option<&EventChannel>, ps: PortSpace, cip: IpAddr, to: SocketAddr) -> CmId {
    let mut c = CmId::new(ch, ps).unwrap();
    c.resolve_addr(Some(SocketAddr::new(cip, 0)), to, T).unwrap();
    if let Some(ch) = ch {
        next(ch, CmEventType::AddrResolved);
    }
    c.resolve_route(T).unwrap();
    if let Some(ch) = ch {
        next(ch, CmEventType::RouteResolved);
    }
    c
}

/// A listener on a fresh device; returns it, its channel and the address to connect to.
fn listener(ch: Option<&EventChannel>, port: u16) -> (CmId, SocketAddr, Device) {
    let (d, ip) = dev();
    let mut l = CmId::new(ch, PortSpace::Tcp).unwrap();
    let addr = SocketAddr::new(ip, port);
    l.bind_addr(addr).unwrap();
    l.listen(8).unwrap();
    assert_eq!(l.state(), CmIdState::Listen);
    (l, addr, d)
}

#[test]
fn connect_accept_exchange_and_disconnect_with_channels() {
    let sch = EventChannel::new().unwrap();
    let (_l, addr, _ds) = listener(Some(&sch), 7001);
    let (_dc, cip) = dev();
    let cch = EventChannel::new().unwrap();
    let mut c = resolved(Some(&cch), PortSpace::Tcp, cip, addr);
    let rc = make_qp(&mut c);
    let param = ConnParam {
        private_data: b"hello server".to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    };
    c.connect(Some(&param)).unwrap();

    let mut req = next(&sch, CmEventType::ConnectRequest);
    assert_eq!(&req.private_data()[..12], b"hello server");
    assert_eq!(req.private_data().len(), 56, "Linux reports the REQ's whole user area");
    let mut s = req.take_id().unwrap();
    drop(req);
    assert_eq!(s.dst_addr().unwrap().ip(), cip);
    assert_eq!(s.dst_addr().unwrap().port(), c.src_addr().unwrap().port());
    let rs = make_qp(&mut s);
    s.accept(Some(&ConnParam {
        private_data: b"welcome".to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..Default::default()
    }))
    .unwrap();

    let ev = next(&cch, CmEventType::Established);
    assert_eq!(&ev.private_data()[..7], b"welcome");
    drop(ev);
    next(&sch, CmEventType::Established);
    assert_eq!(c.qp().unwrap().state(), QpState::Rts);
    assert_eq!(s.qp().unwrap().state(), QpState::Rts);

    exchange(&c, &rc, &s, &rs, b"ping from the client");
    exchange(&s, &rs, &c, &rc, b"pong from the server");

    c.disconnect().unwrap();
    next(&sch, CmEventType::Disconnected);
    s.disconnect().unwrap();
    next(&cch, CmEventType::Disconnected);
    assert_eq!(c.qp().unwrap().state(), QpState::Err);
    // Each side reports DISCONNECTED once, then TIMEWAIT_EXIT.
    next(&cch, CmEventType::TimewaitExit);
    assert!(cch.try_get_event().unwrap().is_none());
    let dc = c.device().unwrap().counters().unwrap();
    assert_eq!(dc.cm.established, 1);
}

#[test]
fn the_passive_side_may_disconnect_first() {
    let sch = EventChannel::new().unwrap();
    let (_l, addr, _ds) = listener(Some(&sch), 7002);
    let (_dc, cip) = dev();
    // A synchronous client against an asynchronous server.
    let mut c = resolved(None, PortSpace::Tcp, cip, addr);
    let rc = make_qp(&mut c);
    let server = std::thread::spawn(move || {
        let mut req = next(&sch, CmEventType::ConnectRequest);
        let mut s = req.take_id().unwrap();
        drop(req);
        let rs = make_qp(&mut s);
        s.accept(None).unwrap();
        next(&sch, CmEventType::Established);
        (s, rs, sch)
    });
    c.connect(None).unwrap();
    assert_eq!(c.state(), CmIdState::Established);
    let (mut s, rs, sch) = server.join().unwrap();
    exchange(&c, &rc, &s, &rs, b"sync client");
    s.disconnect().unwrap();
    // The client answers the DREQ (or crosses it with its own): the server's DISCONNECTED.
    c.disconnect().unwrap();
    next(&sch, CmEventType::Disconnected);
    assert_eq!(c.state(), CmIdState::Disconnect);
}

#[test]
fn synchronous_listener_and_client() {
    let (l, addr, _ds) = listener(None, 7003);
    let (_dc, cip) = dev();
    let server = std::thread::spawn(move || {
        let mut s = l.get_request().unwrap();
        let rs = make_qp(&mut s);
        s.accept(None).unwrap();
        assert_eq!(s.state(), CmIdState::Established);
        (s, rs, l)
    });
    let mut c = resolved(None, PortSpace::Tcp, cip, addr);
    let rc = make_qp(&mut c);
    c.connect(None).unwrap();
    let (s, rs, _l) = server.join().unwrap();
    exchange(&s, &rs, &c, &rc, b"from a synchronous server");
}

#[test]
fn reject_reaches_the_client_as_connection_refused() {
    let sch = EventChannel::new().unwrap();
    let (_l, addr, _ds) = listener(Some(&sch), 7004);
    let (_dc, cip) = dev();
    let server = std::thread::spawn(move || {
        let mut req = next(&sch, CmEventType::ConnectRequest);
        let mut s = req.take_id().unwrap();
        s.reject(b"go away").unwrap();
        drop(req);
        s
    });
    let mut c = resolved(None, PortSpace::Tcp, cip, addr);
    let _rc = make_qp(&mut c);
    match c.connect(None) {
        Err(CmError::ConnectionRefused { reason, private_data }) => {
            assert_eq!(reason, 28);
            assert_eq!(&private_data[..7], b"go away");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(CmError::ConnectionRefused { reason: 28, private_data: vec![] }.errno(), libc::ECONNREFUSED);
    server.join().unwrap();
}

#[test]
fn nobody_listening_is_rejected_at_once_with_reason_8() {
    let (_ds, sip) = dev();
    let (_dc, cip) = dev();
    let ch = EventChannel::new().unwrap();
    let mut c = resolved(Some(&ch), PortSpace::Tcp, cip, SocketAddr::new(sip, 7005));
    let _rc = make_qp(&mut c);
    let t0 = std::time::Instant::now();
    c.connect(None).unwrap();
    let ev = next(&ch, CmEventType::Rejected);
    assert_eq!(ev.status(), 8);
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_request_whose_event_is_dropped_is_rejected() {
    let sch = EventChannel::new().unwrap();
    let (_l, addr, _ds) = listener(Some(&sch), 7006);
    let (_dc, cip) = dev();
    let server = std::thread::spawn(move || {
        // The application never takes the new id: destroying it rejects the request.
        next(&sch, CmEventType::ConnectRequest);
        sch
    });
    let mut c = resolved(None, PortSpace::Tcp, cip, addr);
    let _rc = make_qp(&mut c);
    assert!(matches!(c.connect(None), Err(CmError::ConnectionRefused { reason: 28, .. })));
    server.join().unwrap();
}

#[test]
fn bad_calls_are_typed_errors() {
    let mut c = CmId::new(None, PortSpace::Tcp).unwrap();
    assert!(matches!(c.connect(None), Err(CmError::InvalidState { .. })));
    // Every port space the kernel has makes an id (IPoIB ones resolve nothing on RoCE).
    assert!(CmId::new(None, PortSpace::Ib).is_ok() && CmId::new(None, PortSpace::Ipoib).is_ok());
    let (_d, ip) = dev();
    c.bind_addr(SocketAddr::new(ip, 7007)).unwrap();
    // The kernel's errors for a port another id holds: EADDRINUSE for the same address,
    // EADDRNOTAVAIL when either bind is on the wildcard.
    let mut c2 = CmId::new(None, PortSpace::Tcp).unwrap();
    let e = c2.bind_addr(SocketAddr::new(ip, 7007)).unwrap_err();
    assert!(matches!(e, CmError::AddrInUse(_)) && e.errno() == libc::EADDRINUSE, "{e:?}");
    let e = c2.bind_addr(SocketAddr::new([0, 0, 0, 0].into(), 7007)).unwrap_err();
    assert!(matches!(e, CmError::PortTaken(_)) && e.errno() == libc::EADDRNOTAVAIL, "{e:?}");
}

/// A UD id's verbs objects: its QP (RTS at once), and a region for the GRH plus a message.
fn make_ud_qp(id: &mut CmId) -> Res {
    let dev = id.device().unwrap().clone();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    id.create_qp(Some(&pd), &QpInitAttr::ud(&cq, &cq)).unwrap();
    let qp = id.qp().unwrap();
    assert_eq!(qp.state(), QpState::Rts, "rdma_create_qp takes a UD QP to RTS");
    assert_eq!(qp.query().unwrap().attr.qkey, Qkey::new(0x0123_4567));
    Res { _pd: pd, cq, mr }
}

/// One UD SEND with immediate from `a` (to `to`: address handle, QPN, Q_Key) into a receive
/// on `b`; returns the receive's completion.
fn ud_exchange(a: &CmId, ra: &Res, to: UdDest, b: &CmId, rb: &Res, msg: &[u8]) -> WorkCompletion {
    b.qp().unwrap().post_recv(RecvWr::new(7, &[rb.mr.sge(0, 40 + 256)])).unwrap();
    ra.mr.write(1024, msg).unwrap();
    let imm = a.qp().unwrap().qp_num().value();
    let wr = SendWr::send_with_imm(8, &[ra.mr.sge(1024, msg.len() as u32)], imm).to(to);
    a.qp().unwrap().post_send(wr).unwrap();
    assert_eq!(wait_wc(&ra.cq).status, WcStatus::Success);
    let w = wait_wc(&rb.cq);
    assert_eq!((w.status, w.byte_len as usize, w.imm_data), (WcStatus::Success, msg.len() + 40, Some(imm)));
    let mut got = vec![0u8; msg.len()];
    rb.mr.read(40, &mut got).unwrap();
    assert_eq!(got, msg);
    w
}

/// Two softroce UD ids on loopback: resolve, SIDR (connect → CONNECT_REQUEST → accept →
/// ESTABLISHED with the peer's QPN, Q_Key and address), then UD SENDs both ways.
#[test]
fn ud_ids_resolve_each_other_with_sidr_and_exchange_datagrams() {
    let sch = EventChannel::new().unwrap();
    let (_d, ip) = dev();
    let mut l = CmId::new(Some(&sch), PortSpace::Udp).unwrap();
    let addr = SocketAddr::new(ip, 7174);
    l.bind_addr(addr).unwrap();
    l.listen(0).unwrap();
    let (_dc, cip) = dev();
    let cch = EventChannel::new().unwrap();
    let mut c = resolved(Some(&cch), PortSpace::Udp, cip, addr);
    let rc = make_ud_qp(&mut c);
    c.connect(Some(&ConnParam { private_data: b"udp hello".to_vec(), ..Default::default() })).unwrap();

    let mut req = next(&sch, CmEventType::ConnectRequest);
    assert_eq!(req.private_data().len(), 180, "Linux reports the SIDR_REQ's whole user area");
    assert_eq!(&req.private_data()[..9], b"udp hello");
    let EventParam::Ud(u) = req.param().clone() else { panic!("{req:?}") };
    assert_eq!(u.ah_attr.dgid, Gid::from_ip(cip), "CONNECT_REQUEST names the requester");
    let mut s = req.take_id().unwrap();
    drop(req);
    assert_eq!(s.dst_addr().unwrap(), c.src_addr().unwrap());
    let rs = make_ud_qp(&mut s);
    s.accept(Some(&ConnParam { private_data: b"udp welcome".to_vec(), ..Default::default() })).unwrap();
    assert_eq!(s.state(), CmIdState::Established);

    let ev = next(&cch, CmEventType::Established);
    let EventParam::Ud(peer) = ev.param().clone() else { panic!("{ev:?}") };
    drop(ev);
    assert_eq!(peer.qp_num, s.qp().unwrap().qp_num().value());
    assert_eq!(peer.qkey, Qkey::new(0x0123_4567));
    assert_eq!(&peer.private_data[..11], b"udp welcome");
    assert_eq!(peer.private_data.len(), 136);
    assert_eq!(peer.ah_attr.dgid, Gid::from_ip(ip));
    assert_eq!(c.ud_peer(), Some(peer.clone()));
    assert_eq!(c.state(), CmIdState::Established);
    // The passive side sees no ESTABLISHED for a UD id (Linux sends none).
    assert!(sch.get_event_timeout(Duration::from_millis(200)).is_err());

    // Client → server through the AH from ESTABLISHED, server → client through the AH of
    // CONNECT_REQUEST and the QPN the datagram came from.
    let ah = rc._pd.create_ah(&peer.ah_attr).unwrap();
    let w = ud_exchange(&c, &rc, ah.dest(Qpn::new(peer.qp_num), peer.qkey), &s, &rs, b"ud ping");
    assert_eq!(w.src_qp, c.qp().unwrap().qp_num());
    let back = rs._pd.create_ah(&u.ah_attr).unwrap();
    ud_exchange(&s, &rs, back.dest(w.src_qp, Qkey::new(0x0123_4567)), &c, &rc, b"ud pong");

    // rdma_disconnect on a UD id: the QP to ERR, no event.
    c.disconnect().unwrap();
    assert_eq!(c.qp().unwrap().state(), QpState::Err);
    assert!(cch.try_get_event().unwrap().is_none());
    let dc = c.device().unwrap().counters().unwrap();
    assert_eq!((dc.cm.tx_msgs[7], dc.cm.rx_msgs[8]), (1, 1), "one SIDR_REQ, one SIDR_REP");
}

/// A UD connect nobody listens on ends UNREACHABLE with SIDR status 1 (at once); one the
/// application rejects, UNREACHABLE with status 2 and the reject's private data; a synchronous
/// UD id gets the same as [`CmError::Event`].
#[test]
fn ud_connect_refused_and_rejected_are_unreachable_with_the_sidr_status() {
    let (_ds, sip) = dev();
    let (_dc, cip) = dev();
    let ch = EventChannel::new().unwrap();
    let mut c = resolved(Some(&ch), PortSpace::Udp, cip, SocketAddr::new(sip, 7175));
    let _rc = make_ud_qp(&mut c);
    let t0 = std::time::Instant::now();
    c.connect(None).unwrap();
    let ev = next(&ch, CmEventType::Unreachable);
    assert_eq!(ev.status(), 1, "SIDR status 1: no listener");
    assert!(t0.elapsed() < Duration::from_secs(2));
    drop(ev);
    assert_eq!(c.state(), CmIdState::Disconnect);

    let sch = EventChannel::new().unwrap();
    let mut l = CmId::new(Some(&sch), PortSpace::Udp).unwrap();
    let addr = SocketAddr::new(sip, 7176);
    l.bind_addr(addr).unwrap();
    l.listen(0).unwrap();
    let server = std::thread::spawn(move || {
        let mut req = next(&sch, CmEventType::ConnectRequest);
        let mut s = req.take_id().unwrap();
        s.reject(b"no datagrams today").unwrap();
        (l, sch)
    });
    let mut c = resolved(None, PortSpace::Udp, cip, addr);
    let _rc = make_ud_qp(&mut c);
    match c.connect(None) {
        Err(e @ CmError::Event { event: CmEventType::Unreachable, status: 2 }) => assert_eq!(e.errno(), 2),
        other => panic!("{other:?}"),
    }
    server.join().unwrap();
    // An RC listener on the port does not take SIDR: the IB CM has no listener on the UDP
    // service ID, status 1.
    let (_l2, addr2, _d2) = listener(None, 7177);
    let mut c = resolved(None, PortSpace::Udp, cip, addr2);
    let _rc = make_ud_qp(&mut c);
    assert!(matches!(c.connect(None), Err(CmError::Event { event: CmEventType::Unreachable, status: 1 })));
    // The wrong QP type for the port space is a typed error.
    let mut u = CmId::new(None, PortSpace::Udp).unwrap();
    u.resolve_addr(Some(SocketAddr::new(cip, 0)), addr2, T).unwrap();
    let dev = u.device().unwrap().clone();
    let cq = dev.create_cq(4).unwrap();
    assert!(matches!(u.create_qp(None, &QpInitAttr::rc(&cq, &cq)), Err(CmError::InvalidArgument(_))));
}

/// Connects a client id (on the client device's address `cip`) to `addr`, the server taking
/// the request on `sch`; returns both ids with their verbs objects, established.
fn connect_pair(sch: &EventChannel, cip: IpAddr, addr: SocketAddr) -> ((CmId, Res), (CmId, Res)) {
    let cch = EventChannel::new().unwrap();
    let mut c = resolved(Some(&cch), PortSpace::Tcp, cip, addr);
    let rc = make_qp(&mut c);
    c.connect(None).unwrap();
    let mut req = next(sch, CmEventType::ConnectRequest);
    let mut s = req.take_id().unwrap();
    drop(req);
    let rs = make_qp(&mut s);
    s.accept(None).unwrap();
    next(&cch, CmEventType::Established);
    next(sch, CmEventType::Established);
    ((c, rc), (s, rs))
}

/// 50 connections one after the other from one process: each connects, carries a SEND each
/// way, and is disconnected (alternately from either side); nothing is left over.
#[test]
fn fifty_sequential_connections_from_one_process() {
    let sch = EventChannel::new().unwrap();
    let (_l, addr, ds) = listener(Some(&sch), 7010);
    let (dc, cip) = dev();
    for k in 0..50 {
        let ((mut c, rc), (mut s, rs)) = connect_pair(&sch, cip, addr);
        exchange(&c, &rc, &s, &rs, format!("ping {k}").as_bytes());
        exchange(&s, &rs, &c, &rc, format!("pong {k}").as_bytes());
        if k % 2 == 0 {
            c.disconnect().unwrap();
            next(&sch, CmEventType::Disconnected);
            s.disconnect().unwrap();
        } else {
            s.disconnect().unwrap();
            c.disconnect().unwrap();
            next(&sch, CmEventType::Disconnected);
        }
        drop((c, s));
    }
    assert_eq!(dc.counters().unwrap().cm.established, 50);
    assert_eq!(ds.counters().unwrap().cm.established, 50);
    assert!(sch.try_get_event().unwrap().is_none_or(|e| e.event_type() == CmEventType::TimewaitExit));
}

/// 8 connections at once from one process (8 threads, one listener): every one established
/// and carrying its own messages, then all disconnected at once.
#[test]
fn eight_concurrent_connections_from_one_process() {
    let sch = EventChannel::new().unwrap();
    let (_l, addr, _ds) = listener(Some(&sch), 7011);
    let (_dc, cip) = dev();
    let clients: Vec<_> = (0..8)
        .map(|k| {
            std::thread::spawn(move || {
                let cch = EventChannel::new().unwrap();
                let mut c = resolved(Some(&cch), PortSpace::Tcp, cip, addr);
                let rc = make_qp(&mut c);
                c.connect(Some(&ConnParam { private_data: vec![k], ..Default::default() })).unwrap();
                next(&cch, CmEventType::Established);
                (k, c, rc, cch)
            })
        })
        .collect();
    // The server accepts the 8 requests as they come (each names its client in private data).
    let mut servers = Vec::new();
    while servers.len() < 8 {
        let mut ev = sch.get_event_timeout(T).unwrap();
        match ev.event_type() {
            CmEventType::ConnectRequest => {
                let k = ev.private_data()[0];
                let mut s = ev.take_id().unwrap();
                drop(ev);
                let rs = make_qp(&mut s);
                s.accept(None).unwrap();
                servers.push((k, s, rs));
            }
            CmEventType::Established => {}
            t => panic!("{t:?}"),
        }
    }
    let mut clients: Vec<_> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    clients.sort_by_key(|c| c.0);
    servers.sort_by_key(|s| s.0);
    assert_eq!(servers.iter().map(|s| s.0).collect::<Vec<_>>(), (0..8).collect::<Vec<u8>>());
    for ((k, c, rc, _), (_, s, rs)) in clients.iter().zip(&servers) {
        exchange(c, rc, s, rs, format!("from client {k}").as_bytes());
        exchange(s, rs, c, rc, format!("to client {k}").as_bytes());
    }
    for (_, c, _, _) in &mut clients {
        c.disconnect().unwrap();
    }
    // Each server id answers its DISCONNECTED with rdma_disconnect (the DREP), as rping does.
    let mut disconnected = 0;
    while disconnected < 8 {
        let ev = sch.get_event_timeout(T).unwrap();
        match ev.event_type() {
            CmEventType::Disconnected => {
                let s = servers.iter_mut().find(|s| ev.id().is(&s.1)).unwrap();
                drop(ev);
                s.1.disconnect().unwrap();
                disconnected += 1;
            }
            CmEventType::Established | CmEventType::TimewaitExit => {}
            t => panic!("{t:?}"),
        }
    }
    for (_, _, _, cch) in &clients {
        next(cch, CmEventType::Disconnected);
    }
}

/// `rdma_migrate_id`: a listener moved to another channel takes its pending request along;
/// an accepted id moved before its ESTABLISHED gets it on the new channel; a client moved
/// while its ESTABLISHED waits takes that event along, in order; an id moved to no channel is
/// synchronous from then on.
#[test]
fn migrate_moves_an_id_and_its_queued_events_to_another_channel() {
    let a = EventChannel::new().unwrap();
    let b = EventChannel::new().unwrap();
    let (l, addr, _ds) = listener(Some(&a), 7012);
    let (_dc, cip) = dev();
    let cch = EventChannel::new().unwrap();
    let mut c = resolved(Some(&cch), PortSpace::Tcp, cip, addr);
    let rc = make_qp(&mut c);
    c.connect(None).unwrap();
    // The request waits on `a`; the listener (and with it the request) moves to `b`.
    let deadline = std::time::Instant::now() + T;
    while a.pending() == 0 {
        assert!(std::time::Instant::now() < deadline, "no request");
        std::thread::sleep(Duration::from_millis(5));
    }
    l.migrate(Some(&b)).unwrap();
    assert_eq!(a.pending(), 0);
    let mut req = next(&b, CmEventType::ConnectRequest);
    let mut s = req.take_id().unwrap();
    drop(req);
    // The new id is on `b` (its listener's channel then); move it back to `a` and accept.
    s.migrate(Some(&a)).unwrap();
    let rs = make_qp(&mut s);
    s.accept(None).unwrap();
    // The client's answer (ESTABLISHED once taken: it sends the RTU) waits on `cch`: it moves
    // to `b` with the client.
    while cch.pending() == 0 {
        assert!(std::time::Instant::now() < deadline, "no ESTABLISHED");
        std::thread::sleep(Duration::from_millis(5));
    }
    c.migrate(Some(&b)).unwrap();
    assert!(cch.try_get_event().unwrap().is_none());
    next(&b, CmEventType::Established);
    next(&a, CmEventType::Established);
    assert!(b.try_get_event().unwrap().is_none());
    exchange(&c, &rc, &s, &rs, b"after the move");
    // Moving to the same channel is nothing; to none makes the id synchronous.
    c.migrate(Some(&b)).unwrap();
    assert!(!c.is_sync());
    s.migrate(None).unwrap();
    assert!(s.is_sync());
    // (the server's DISCONNECTED goes to its own channel now, not to `a`; the client's comes
    // with the DREP its disconnect sends)
    c.disconnect().unwrap();
    s.disconnect().unwrap();
    next(&b, CmEventType::Disconnected);
    assert!(a.try_get_event().unwrap().is_none());
}
