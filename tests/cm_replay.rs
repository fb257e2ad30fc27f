//! The kernel's MADs replayed into our CM: we play one side of each captured exchange (kernel
//! rxe, Linux 6.1, rdma-core 44) and every MAD we answer with must be what the kernel sent,
//! field by field, communication IDs (and the transaction IDs formed from them) and PSNs
//! aside. Each side's PSNs are also checked against the first RC packets of the capture: the
//! PSN direction of the Starting PSN fields.

mod common;

use std::net::{IpAddr, SocketAddr};

use softroce::transport::Time;
use softroce::transport::cm::rdma::{self, ConnParam, DeviceCaps, RdmaRoute};
use softroce::transport::cm::{CmConfig, CmEndpoint, CmEvent, CmId, CmState, MadAddr};
use softroce::wire::cm::{GSI_QPN, SidrStatus};
use softroce::wire::cma::{self, PortSpace};
use softroce::wire::mad::{MAD_LEN, Mad, MadBody, MadRepr};
use softroce::wire::roce::RoceFrame;

const SERVER_GUID: u64 = 0x5054_00ff_fe77_0002;
const CLIENT_GUID: u64 = 0x5054_00ff_fe77_0003;
const CAPS: DeviceCaps = DeviceCaps { max_qp_rd_atom: 128, max_qp_init_rd_atom: 128 };

struct Frame {
    index: usize,
    src: IpAddr,
    dst: IpAddr,
    dqp: u32,
    psn: u32,
    request: bool,
    mad: Option<MadRepr>,
}

fn frames(name: &str) -> Vec<Frame> {
    common::read_pcap(name)
        .iter()
        .enumerate()
        .filter_map(|(index, (_, f))| {
            let fr = RoceFrame::parse_ethernet(f).ok()?;
            let p = fr.packet();
            let mad = (p.bth().dest_qp() == GSI_QPN)
                .then(|| MadRepr::parse(&Mad::new_checked(p.payload()).expect("256-byte MAD")));
            Some(Frame {
                index,
                src: fr.src_addr(),
                dst: fr.dst_addr(),
                dqp: p.bth().dest_qp(),
                psn: p.bth().psn().value(),
                request: p.info().direction == softroce::wire::Direction::Request,
                mad,
            })
        })
        .collect()
}

fn addr(from: IpAddr, to: IpAddr) -> MadAddr {
    MadAddr {
        remote_gid: cma::ip_to_gid(from),
        local_gid: cma::ip_to_gid(to),
        traffic_class: 0,
        pkey: 0xffff,
        qpn: GSI_QPN,
    }
}

/// The MAD with its communication IDs, the PSN and the transaction ID's low half (formed from
/// the sender's ID) set to `0`, for comparing our MADs with the kernel's.
fn sans_ids(m: &MadRepr, keep_tid: bool) -> MadRepr {
    let mut m = m.clone();
    if !keep_tid {
        m.header.transaction_id &= !0xffff_ffff;
    }
    match &mut m.body {
        MadBody::Req(r) => {
            r.local_comm_id = 0;
            r.starting_psn = 0;
        }
        MadBody::Rep(r) => {
            r.local_comm_id = 0;
            r.remote_comm_id = 0;
            r.starting_psn = 0;
        }
        MadBody::Rtu(r) => (r.local_comm_id, r.remote_comm_id) = (0, 0),
        MadBody::Rej(r) => (r.local_comm_id, r.remote_comm_id) = (0, 0),
        MadBody::Mra(r) => (r.local_comm_id, r.remote_comm_id) = (0, 0),
        MadBody::Dreq(r) => (r.local_comm_id, r.remote_comm_id) = (0, 0),
        MadBody::Drep(r) => (r.local_comm_id, r.remote_comm_id) = (0, 0),
        MadBody::SidrReq(r) => r.request_id = 0,
        MadBody::SidrRep(r) => r.request_id = 0,
        _ => {}
    }
    m
}

/// Rewrites the comm IDs of a MAD the kernel's peer sent so that it names our connection:
/// `ours` replaces the kernel's ID for the side we play.
fn retarget(m: &MadRepr, kernel_id: u32, ours: u32) -> [u8; MAD_LEN] {
    let mut m = m.clone();
    let fix = |v: &mut u32| {
        if *v == kernel_id {
            *v = ours;
        }
    };
    match &mut m.body {
        MadBody::Rep(r) => fix(&mut r.remote_comm_id),
        MadBody::Rtu(r) => fix(&mut r.remote_comm_id),
        MadBody::Dreq(r) => fix(&mut r.remote_comm_id),
        MadBody::Drep(r) => fix(&mut r.remote_comm_id),
        MadBody::Rej(r) => fix(&mut r.remote_comm_id),
        MadBody::Mra(r) => fix(&mut r.remote_comm_id),
        _ => {}
    }
    m.to_bytes()
}

fn our_mads(cm: &mut CmEndpoint) -> Vec<(MadAddr, MadRepr)> {
    std::iter::from_fn(|| cm.poll_transmit())
        .map(|t| (t.to, MadRepr::parse(&Mad::new_checked(&t.mad[..]).unwrap())))
        .collect()
}

fn events(cm: &mut CmEndpoint) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

/// We are the server of a captured rdma_cm exchange (rping, ucmatose, ib_send_bw -R): the
/// client's REQ, RTU, DREQ and DREP are fed to us, and our REP, DREP (and DREQ) must be the
/// kernel server's.
fn replay_as_server(name: &str, server_ip: IpAddr) {
    let fs = frames(name);
    let mut cm = CmEndpoint::new(CmConfig { node_guid: SERVER_GUID, ..CmConfig::default() }, 1);
    let mut now = Time::ZERO;
    // kernel server comm ID -> ours
    let mut ids: Vec<(u32, CmId, u32)> = Vec::new(); // (kernel id, our id, kernel REP PSN)
    let kernel_mads: Vec<&Frame> = fs.iter().filter(|f| f.mad.is_some()).collect();
    let mut checked = 0;
    for (k, f) in kernel_mads.iter().enumerate() {
        now = Time::from_nanos(now.as_nanos() + 1_000_000);
        let m = f.mad.as_ref().unwrap();
        let kernel_id_of = |local: u32| ids.iter().find(|x| x.0 == local).map(|x| x.1);
        if f.src == server_ip {
            // The kernel server disconnecting on its own (ucmatose, reject.pcap): so do we, and
            // our DREQ is its DREQ. Its other MADs are answers, compared when we make ours.
            if let MadBody::Dreq(d) = &m.body {
                let ours = kernel_id_of(d.local_comm_id).unwrap();
                if cm.state(ours) == Some(CmState::Established) {
                    cm.disconnect(now, ours).unwrap();
                    let out = our_mads(&mut cm);
                    assert_eq!(
                        sans_ids(&out[0].1, false),
                        sans_ids(m, false),
                        "{name} DREQ frame {}",
                        f.index
                    );
                    checked += 1;
                }
            }
            continue;
        }
        let from = addr(f.src, f.dst);
        match &m.body {
            MadBody::Req(r) => {
                let _ = cm.listen(r.service_id, 64);
                cm.handle_mad(now, &from, &m.to_bytes());
                let ev = events(&mut cm);
                let Some(CmEvent::ReqReceived { id, req, .. }) = ev.into_iter().next() else {
                    panic!("{name}: no REQ event")
                };
                // What the kernel answered this REQ with.
                let answer = kernel_mads[k + 1..]
                    .iter()
                    .find(|g| {
                        g.src == server_ip
                            && g.mad
                                .as_ref()
                                .is_some_and(|a| a.header.transaction_id == m.header.transaction_id)
                    })
                    .and_then(|g| g.mad.as_ref())
                    .unwrap();
                // rdma_cm's delayed MRA after CONNECT_REQUEST, as for any user-space id.
                cm.mra(now, id, rdma::CMA_CM_MRA_SERVICE_TIMEOUT, true, &[]).unwrap();
                match &answer.body {
                    MadBody::Rep(kr) => {
                        // The server application accepted with rdma_accept; the kernel server's QPN.
                        let neg = rdma::accept_values(None, &req, CAPS);
                        let rep = rdma::rep_params(kr.local_qpn, 0x55_5555, &neg, false).unwrap();
                        cm.accept(now, id, &rep).unwrap();
                        let out = our_mads(&mut cm);
                        assert_eq!(out.len(), 1);
                        let (to, ours) = &out[0];
                        assert_eq!(to.remote_gid, cma::ip_to_gid(f.src), "{name}: REP goes to the REQ's GID");
                        assert_eq!(
                            sans_ids(ours, true),
                            sans_ids(answer, true),
                            "{name} REP to frame {}",
                            f.index
                        );
                        ids.push((kr.local_comm_id, id, kr.starting_psn));
                        // PSN direction: our QP sends from the REQ's Starting PSN and expects
                        // the REP's. The capture's first RC packet from the server to the
                        // client's QP carries the REQ's PSN.
                        let qa = cm.qp_attrs(id).unwrap();
                        assert_eq!(qa.sq_psn, r.starting_psn);
                        assert_eq!(qa.rq_psn, 0x55_5555);
                        assert_eq!(qa.dest_qpn, r.local_qpn);
                        assert_eq!(qa.timeout, 19);
                        // (Only requests: an ACK carries the PSN of what it acknowledges.)
                        if let Some(first) =
                            fs.iter().find(|g| g.src == server_ip && g.dqp == r.local_qpn && g.request)
                        {
                            assert_eq!(first.psn, r.starting_psn, "{name}: server's first RC PSN");
                        }
                        if let Some(first) =
                            fs.iter().find(|g| g.src == f.src && g.dqp == kr.local_qpn && g.request)
                        {
                            assert_eq!(first.psn, kr.starting_psn, "{name}: client's first RC PSN");
                        }
                        checked += 1;
                    }
                    MadBody::Rej(kj) => {
                        // The application rejected (ucmatose's "failing connection request").
                        cm.reject(now, id, softroce::wire::cm::RejReason::ConsumerDefined, &[], &[]).unwrap();
                        let out = our_mads(&mut cm);
                        let ours = &out[0].1;
                        let MadBody::Rej(or) = &ours.body else { panic!() };
                        assert_eq!(or.local_comm_id, id.0, "REJ from MRA_REQ_SENT names us");
                        assert_eq!(or.remote_comm_id, kj.remote_comm_id);
                        assert_eq!(sans_ids(ours, true), sans_ids(answer, true), "{name} REJ");
                        checked += 1;
                    }
                    other => panic!("{name}: kernel answered REQ with {other:?}"),
                }
            }
            MadBody::Rtu(r) => {
                let ours = kernel_id_of(r.remote_comm_id).unwrap();
                cm.handle_mad(now, &from, &retarget(m, r.remote_comm_id, ours.0));
                assert_eq!(cm.state(ours), Some(CmState::Established), "{name}");
                assert!(our_mads(&mut cm).is_empty());
                assert!(matches!(events(&mut cm)[..], [CmEvent::RtuReceived { .. }]));
            }
            MadBody::Dreq(d) => {
                let ours = kernel_id_of(d.remote_comm_id).unwrap();
                // Did the kernel server send its own DREQ for this connection before answering
                // (send_bw_R's crossing DREQs)? Then we disconnect first too.
                let crossing = kernel_mads[k + 1..].iter().find(|g| {
                    g.src == server_ip
                        && matches!(&g.mad.as_ref().unwrap().body,
                            MadBody::Dreq(x) if x.local_comm_id == d.remote_comm_id)
                });
                if let Some(g) = crossing {
                    cm.disconnect(now, ours).unwrap();
                    let out = our_mads(&mut cm);
                    assert_eq!(
                        sans_ids(&out[0].1, false),
                        sans_ids(g.mad.as_ref().unwrap(), false),
                        "{name} DREQ"
                    );
                    assert_eq!(out[0].1.header.transaction_id >> 32, 2);
                    checked += 1;
                }
                cm.handle_mad(now, &from, &retarget(m, d.remote_comm_id, ours.0));
                assert_eq!(cm.state(ours), Some(CmState::DreqRcvd), "{name}");
                cm.disconnect(now, ours).unwrap();
                let out = our_mads(&mut cm);
                let kernel_drep = kernel_mads[k + 1..]
                    .iter()
                    .find(|g| {
                        g.src == server_ip
                            && g.mad.as_ref().is_some_and(|a| {
                                matches!(a.body, MadBody::Drep(_))
                                    && a.header.transaction_id == m.header.transaction_id
                            })
                    })
                    .unwrap();
                assert_eq!(
                    sans_ids(&out[0].1, true),
                    sans_ids(kernel_drep.mad.as_ref().unwrap(), true),
                    "{name} DREP"
                );
                assert_eq!(cm.state(ours), Some(CmState::Timewait));
                checked += 1;
            }
            MadBody::Drep(d) => {
                let ours = kernel_id_of(d.remote_comm_id).unwrap();
                cm.handle_mad(now, &from, &retarget(m, d.remote_comm_id, ours.0));
                assert!(our_mads(&mut cm).is_empty());
                assert_eq!(cm.state(ours), Some(CmState::Timewait));
            }
            other => panic!("{name}: client sent {other:?}"),
        }
    }
    assert!(checked >= 2, "{name}: {checked}");
    // Timewait ends ms(19) later on every connection.
    cm.handle_timeout(Time::from_nanos(now.as_nanos() + 2_100_000_000));
    for (_, id, _) in &ids {
        assert!(matches!(cm.state(*id), Some(CmState::Idle) | None));
    }
}

const SERVER4: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 77, 0, 2));

#[test]
fn we_answer_as_the_kernel_server_did() {
    replay_as_server("rping_cm.pcap", SERVER4);
    replay_as_server("cm/rping_c3.pcap", SERVER4);
    replay_as_server("cm/rping_ipv6.pcap", "fd77::2".parse().unwrap());
    replay_as_server("cm/ucmatose_c2.pcap", SERVER4);
    replay_as_server("cm/send_bw_R.pcap", SERVER4);
    replay_as_server("cm/reject.pcap", SERVER4);
}

/// No listener: our REJ is the kernel's, bit for bit (it is built from the REQ alone).
#[test]
fn no_listener_rej_is_bit_identical() {
    let fs = frames("cm/rping_refused.pcap");
    let (req, rej) = (&fs[0], &fs[1]);
    let mut cm = CmEndpoint::new(CmConfig { node_guid: SERVER_GUID, ..CmConfig::default() }, 7);
    cm.handle_mad(Time::ZERO, &addr(req.src, req.dst), &req.mad.as_ref().unwrap().to_bytes());
    let t = cm.poll_transmit().unwrap();
    assert_eq!(t.mad, rej.mad.as_ref().unwrap().to_bytes());
    assert_eq!(t.to.remote_gid, cma::ip_to_gid(req.src));
    assert_eq!(cm.connection_count(), 0);
    assert!(cm.poll_event().is_none());
}

/// We are the client: rdma_cm's values for the captured route give the kernel client's REQ,
/// and after the kernel server's REP our RTU and DREQ are the kernel client's.
fn replay_as_client(name: &str, client: SocketAddr, service_port: u16) {
    let fs = frames(name);
    let mads: Vec<&Frame> = fs.iter().filter(|f| f.mad.is_some()).collect();
    let kreq = mads[0].mad.as_ref().unwrap();
    let MadBody::Req(kr) = &kreq.body else { panic!() };
    let server = SocketAddr::new(mads[0].dst, service_port);
    let mut cm = CmEndpoint::new(CmConfig { node_guid: CLIENT_GUID, ..CmConfig::default() }, 3);
    let route = RdmaRoute {
        src: client,
        dst: server,
        mtu: rdma::iboe_get_mtu(1500),
        hop_limit: 64,
        tos: 0,
        ack_timeout: None,
        ipv6_flow_label: None,
    };
    // rping's conn_param: responder resources 1, initiator depth 1, retry 7, RNR retry 7.
    let param = ConnParam {
        responder_resources: kr.responder_resources,
        initiator_depth: kr.initiator_depth,
        retry_count: kr.retry_count,
        rnr_retry_count: kr.rnr_retry_count,
        ..ConnParam::default()
    };
    let neg = rdma::connect_values(Some(&param), CAPS);
    let p =
        rdma::req_params(&route, PortSpace::Tcp, kr.local_qpn, rdma::RdmaQpType::Rc, 0x44_4444, &neg, false)
            .unwrap();
    let mut now = Time::ZERO;
    let id = cm.connect(now, &p).unwrap();
    let out = our_mads(&mut cm);
    assert_eq!(sans_ids(&out[0].1, false), sans_ids(kreq, false), "{name} REQ");
    assert_eq!(out[0].0.remote_gid, cma::ip_to_gid(server.ip()));
    // The kernel server's REP, aimed at us.
    let krep = mads.iter().find(|f| matches!(f.mad.as_ref().unwrap().body, MadBody::Rep(_))).unwrap();
    let MadBody::Rep(kp) = &krep.mad.as_ref().unwrap().body else { panic!() };
    now = Time::from_nanos(20_000_000);
    cm.handle_mad(
        now,
        &addr(krep.src, krep.dst),
        &retarget(krep.mad.as_ref().unwrap(), kr.local_comm_id, id.0),
    );
    let ev = events(&mut cm);
    assert!(matches!(ev[..], [CmEvent::RepReceived { .. }]), "{ev:?}");
    let qa = cm.qp_attrs(id).unwrap();
    assert_eq!(
        (qa.sq_psn, qa.rq_psn, qa.dest_qpn, qa.timeout),
        (kp.starting_psn, 0x44_4444, kp.local_qpn, 19)
    );
    cm.mra(now, id, rdma::CMA_CM_MRA_SERVICE_TIMEOUT, true, &[]).unwrap();
    cm.ready_to_use(now, id, &[]).unwrap();
    let out = our_mads(&mut cm);
    let krtu = mads.iter().find(|f| matches!(f.mad.as_ref().unwrap().body, MadBody::Rtu(_))).unwrap();
    assert_eq!(sans_ids(&out[0].1, false), sans_ids(krtu.mad.as_ref().unwrap(), false), "{name} RTU");
    // The client disconnects (rping, ib_send_bw).
    if let Some(kdreq) = mads.iter().find(|f| {
        f.src == client.ip() && matches!(&f.mad.as_ref().unwrap().body, MadBody::Dreq(d) if d.local_comm_id == kr.local_comm_id)
    }) {
        cm.disconnect(now, id).unwrap();
        let out = our_mads(&mut cm);
        assert_eq!(sans_ids(&out[0].1, false), sans_ids(kdreq.mad.as_ref().unwrap(), false), "{name} DREQ");
        let kdrep = mads
            .iter()
            .find(|f| {
                f.src == server.ip()
                    && matches!(f.mad.as_ref().unwrap().body, MadBody::Drep(_))
                    && f.mad.as_ref().unwrap().header.transaction_id == kdreq.mad.as_ref().unwrap().header.transaction_id
            })
            .unwrap();
        cm.handle_mad(now, &addr(kdrep.src, kdrep.dst), &retarget(kdrep.mad.as_ref().unwrap(), kr.local_comm_id, id.0));
        assert_eq!(cm.state(id), Some(CmState::Timewait));
    }
}

#[test]
fn we_connect_as_the_kernel_client_did() {
    let client4 = |port| SocketAddr::new("10.77.0.3".parse().unwrap(), port);
    let sport = |name: &str| {
        let m = frames(name).into_iter().find_map(|f| f.mad).unwrap();
        let MadBody::Req(r) = m.body else { panic!() };
        u16::from_be_bytes([r.private_data[2], r.private_data[3]])
    };
    replay_as_client("rping_cm.pcap", client4(sport("rping_cm.pcap")), 7174);
    replay_as_client("cm/rping_c3.pcap", client4(sport("cm/rping_c3.pcap")), 7174);
    replay_as_client(
        "cm/rping_ipv6.pcap",
        SocketAddr::new("fd77::3".parse().unwrap(), sport("cm/rping_ipv6.pcap")),
        7174,
    );
    replay_as_client("cm/send_bw_R.pcap", client4(sport("cm/send_bw_R.pcap")), 18515);
}

/// udaddy: our SIDR_REP as server is the kernel's bit for bit; our SIDR_REQ as client is the
/// kernel's, request ID aside.
#[test]
fn sidr_as_udaddy() {
    let fs = frames("cm/udaddy.pcap");
    let (kreq, krep) = (fs[0].mad.as_ref().unwrap(), fs[1].mad.as_ref().unwrap());
    let MadBody::SidrReq(r) = &kreq.body else { panic!() };
    let MadBody::SidrRep(rp) = &krep.body else { panic!() };
    let mut server = CmEndpoint::new(CmConfig { node_guid: SERVER_GUID, ..CmConfig::default() }, 9);
    server.listen(r.service_id, 8).unwrap();
    server.handle_mad(Time::ZERO, &addr(fs[0].src, fs[0].dst), &kreq.to_bytes());
    let Some(CmEvent::SidrReqReceived { id, private_data, .. }) = server.poll_event() else { panic!() };
    let l = rdma::RdmaListen {
        ps: PortSpace::Udp,
        addr: "0.0.0.0".parse().unwrap(),
        port: 7174,
        afonly: true,
        qp_type: rdma::RdmaQpType::Ud,
    };
    let m =
        rdma::match_request(&[l], r.service_id, &private_data, rdma::RequestKind::Sidr, |_| true).unwrap();
    assert_eq!(m.peer, SocketAddr::new(fs[0].src, 0xde36));
    let p = softroce::transport::cm::SidrRepParams {
        status: SidrStatus::Success,
        qpn: rp.qpn,
        qkey: cma::RDMA_UDP_QKEY,
        info: Vec::new(),
        private_data: Vec::new(),
        ece: Default::default(),
    };
    server.sidr_reply(Time::ZERO, id, &p).unwrap();
    let t = server.poll_transmit().unwrap();
    assert_eq!(t.mad, krep.to_bytes());

    let mut client = CmEndpoint::new(CmConfig { node_guid: CLIENT_GUID, ..CmConfig::default() }, 10);
    let route = RdmaRoute {
        src: SocketAddr::new(fs[0].src, 0xde36),
        dst: SocketAddr::new(fs[0].dst, 7174),
        mtu: 3,
        hop_limit: 64,
        tos: 0,
        ack_timeout: None,
        ipv6_flow_label: None,
    };
    let id =
        client.sidr_request(Time::ZERO, &rdma::sidr_params(&route, PortSpace::Udp, &[]).unwrap()).unwrap();
    let t = client.poll_transmit().unwrap();
    let ours = MadRepr::parse(&Mad::new_checked(&t.mad[..]).unwrap());
    assert_eq!(sans_ids(&ours, false), sans_ids(kreq, false));
    let mut rep = krep.clone();
    if let MadBody::SidrRep(x) = &mut rep.body {
        x.request_id = id.0;
    }
    client.handle_mad(Time::ZERO, &addr(fs[1].src, fs[1].dst), &rep.to_bytes());
    let Some(ev) = client.poll_event() else { panic!() };
    assert_eq!(rdma::rdma_event(&ev, true), Some((rdma::RdmaEventType::Established, 0)), "{ev:?}");
    assert_eq!(client.state(id), Some(CmState::Idle));
}
