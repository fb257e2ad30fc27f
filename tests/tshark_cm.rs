//! Wireshark agrees with our CM MADs: every MAD type our CM sends — produced by running the CM,
//! not built by hand — is written to a pcap as rxe would send it (UD SEND Only to QP1, Q_Key
//! 0x80010000, UDP source port 55410), decoded by `tshark`, and each field tshark shows is the
//! value we put there. Needs `tshark` (Debian's 4.0); `.ci/deps` installs it.
//!
//! Two fields are known to be misread by Wireshark 4.0's dissector, which the test pins down
//! rather than skips: the REQ's primary flow label (it reads three bytes from D+88 under a
//! 32-bit mask, showing `byte88 << 4 | byte89 >> 4`) and primary packet rate (it reads D+88 &
//! 0x3f instead of D+91 & 0x3f). The kernel's rping capture shows the same misreadings.
//! Wireshark 4.0 decodes MRA and SIDR_REQ/SIDR_REP by name only (no fields; SIDR earns a
//! "dissector not implemented" note), and the DREQ without its Remote QPN field: for those the
//! common MAD header and the DREQ's private data (which it places correctly, at D+12) are
//! compared.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use softroce::transport::Time;
use softroce::transport::cm::rdma::{self, ConnParam, DeviceCaps, RdmaRoute};
use softroce::transport::cm::{CmConfig, CmEndpoint, CmEvent, MadAddr, SidrRepParams};
use softroce::wire::cm::{GSI_QPN, QP1_QKEY, RejReason, SidrStatus};
use softroce::wire::cma::{self, PortSpace};
use softroce::wire::mad::{MAD_LEN, Mad, MadBody, MadRepr};
use softroce::wire::roce::{IpRepr, RoceFrameRepr};
use softroce::wire::*;

const CAPS: DeviceCaps = DeviceCaps { max_qp_rd_atom: 128, max_qp_init_rd_atom: 128 };

fn addr_of(src: IpAddr, dst: IpAddr) -> MadAddr {
    MadAddr {
        remote_gid: cma::ip_to_gid(src),
        local_gid: cma::ip_to_gid(dst),
        traffic_class: 0,
        pkey: 0xffff,
        qpn: 1,
    }
}

/// Runs two CMs through every exchange and returns every MAD they sent, with its source IP.
fn our_mads(v6: bool) -> Vec<(IpAddr, IpAddr, [u8; MAD_LEN])> {
    let (ca, cb): (IpAddr, IpAddr) = if v6 {
        (Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 3).into(), Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2).into())
    } else {
        (Ipv4Addr::new(10, 77, 0, 3).into(), Ipv4Addr::new(10, 77, 0, 2).into())
    };
    let mut a = CmEndpoint::new(CmConfig { node_guid: 0x5054_00ff_fe77_0003, ..CmConfig::default() }, 1);
    let mut b = CmEndpoint::new(CmConfig { node_guid: 0x5054_00ff_fe77_0002, ..CmConfig::default() }, 2);
    let mut out = Vec::new();
    let mut now = Time::ZERO;
    // Moves MADs between the two until quiet, recording each.
    let pump = |a: &mut CmEndpoint, b: &mut CmEndpoint, out: &mut Vec<_>, now: Time| {
        loop {
            let mut moved = false;
            while let Some(t) = a.poll_transmit() {
                out.push((ca, cb, t.mad));
                b.handle_mad(now, &addr_of(ca, cb), &t.mad);
                moved = true;
            }
            while let Some(t) = b.poll_transmit() {
                out.push((cb, ca, t.mad));
                a.handle_mad(now, &addr_of(cb, ca), &t.mad);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    };
    let route = |port: u16, sport: u16| RdmaRoute {
        src: SocketAddr::new(ca, sport),
        dst: SocketAddr::new(cb, port),
        mtu: rdma::iboe_get_mtu(1500),
        hop_limit: 64,
        tos: 0,
        ack_timeout: None,
        ipv6_flow_label: None,
    };
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        private_data: b"hello from softroce".to_vec(),
        ..ConnParam::default()
    };
    let neg = rdma::connect_values(Some(&param), CAPS);
    b.listen(PortSpace::Tcp.service_id(7174), 8).unwrap();
    b.listen(PortSpace::Udp.service_id(7174), 8).unwrap();

    // 1. REQ, (delayed MRA answered to a duplicate REQ: MRA), REP, RTU, DREQ, DREP.
    let req = rdma::req_params(
        &route(7174, 38787),
        PortSpace::Tcp,
        0x18,
        rdma::RdmaQpType::Rc,
        0x9c_c876,
        &neg,
        false,
    )
    .unwrap();
    let ida = a.connect(now, &req).unwrap();
    pump(&mut a, &mut b, &mut out, now);
    let Some(CmEvent::ReqReceived { id: idb, req: info, .. }) = b.poll_event() else { panic!() };
    b.mra(now, idb, rdma::CMA_CM_MRA_SERVICE_TIMEOUT, true, &[]).unwrap();
    now = now + Duration::from_millis(6144);
    a.handle_timeout(now); // the REQ again: answered by the MRA
    pump(&mut a, &mut b, &mut out, now);
    let acc = rdma::accept_values(None, &info, CAPS);
    let mut rep = rdma::rep_params(0x19, 0x12_a96d, &acc, false).unwrap();
    rep.private_data = b"welcome".to_vec();
    b.accept(now, idb, &rep).unwrap();
    pump(&mut a, &mut b, &mut out, now);
    a.ready_to_use(now, ida, b"rtu").unwrap();
    pump(&mut a, &mut b, &mut out, now);
    a.send_dreq(now, ida, b"bye").unwrap();
    pump(&mut a, &mut b, &mut out, now);
    b.send_drep(now, idb, b"bye too").unwrap();
    pump(&mut a, &mut b, &mut out, now);

    // 2. No listener: REJ 8. Consumer reject: REJ 28 with private data. Destroyed connect: REJ 4
    //    with the GUID as ARI.
    let req =
        rdma::req_params(&route(7999, 40000), PortSpace::Tcp, 0x20, rdma::RdmaQpType::Rc, 1, &neg, false)
            .unwrap();
    a.connect(now, &req).unwrap();
    pump(&mut a, &mut b, &mut out, now);
    let req =
        rdma::req_params(&route(7174, 40001), PortSpace::Tcp, 0x21, rdma::RdmaQpType::Rc, 2, &neg, false)
            .unwrap();
    a.connect(now, &req).unwrap();
    pump(&mut a, &mut b, &mut out, now);
    let Some(CmEvent::ReqReceived { id, .. }) =
        std::iter::from_fn(|| b.poll_event()).find(|e| matches!(e, CmEvent::ReqReceived { .. }))
    else {
        panic!()
    };
    b.reject(now, id, RejReason::ConsumerDefined, &[], b"go away").unwrap();
    pump(&mut a, &mut b, &mut out, now);
    let req =
        rdma::req_params(&route(7174, 40002), PortSpace::Tcp, 0x22, rdma::RdmaQpType::Rc, 3, &neg, false)
            .unwrap();
    let id = a.connect(now, &req).unwrap();
    pump(&mut a, &mut b, &mut out, now);
    a.destroy(now, id).unwrap();
    pump(&mut a, &mut b, &mut out, now);

    // 3. SIDR: request, reply.
    a.sidr_request(now, &rdma::sidr_params(&route(7174, 56886), PortSpace::Udp, b"ud?").unwrap()).unwrap();
    pump(&mut a, &mut b, &mut out, now);
    let Some(CmEvent::SidrReqReceived { id, .. }) =
        std::iter::from_fn(|| b.poll_event()).find(|e| matches!(e, CmEvent::SidrReqReceived { .. }))
    else {
        panic!()
    };
    let p = SidrRepParams {
        status: SidrStatus::Success,
        qpn: 0x1d,
        qkey: cma::RDMA_UDP_QKEY,
        info: Vec::new(),
        private_data: b"ud!".to_vec(),
        ece: Default::default(),
    };
    b.sidr_reply(now, id, &p).unwrap();
    pump(&mut a, &mut b, &mut out, now);

    // 4. The MAD layer's answer to a ClassPortInfo Get.
    let mut get = [0u8; MAD_LEN];
    get[..4].copy_from_slice(&[1, 7, 2, 1]);
    get[8..16].copy_from_slice(&0x1234u64.to_be_bytes());
    get[16..18].copy_from_slice(&1u16.to_be_bytes());
    b.handle_mad(now, &addr_of(ca, cb), &get);
    while let Some(t) = b.poll_transmit() {
        out.push((cb, ca, t.mad));
    }
    out
}

fn frame(src: IpAddr, dst: IpAddr, psn: u32, mad: &[u8; MAD_LEN]) -> Vec<u8> {
    let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, GSI_QPN, Psn::new(psn));
    bth.ack_req = true;
    let mut r = PacketRepr::new(bth);
    r.deth = Some(DethRepr { qkey: QP1_QKEY, resv8: 0, src_qp: GSI_QPN });
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4 { src: s, dst: d, tos: 0, ttl: 64, id: 0, df: true },
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            IpRepr::V6 { src: s, dst: d, traffic_class: 0, flow_label: 0, hop_limit: 64 }
        }
        _ => unreachable!(),
    };
    let f = RoceFrameRepr { ip, src_port: 55410, dst_port: ROCEV2_UDP_PORT, udp_checksum: false };
    let mut buf = vec![0u8; 14 + f.header_len() + r.buffer_len(MAD_LEN)];
    buf[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    buf[12..14].copy_from_slice(if src.is_ipv6() { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    let n = f.emit(&mut buf[14..], &r, mad).unwrap();
    buf.truncate(14 + n);
    buf
}

/// Field name -> the value tshark should show for our MAD (or None to only require presence).
fn expected(m: &MadRepr) -> Vec<(&'static str, String)> {
    let h = |v: u64, w: usize| format!("{v:#0w$x}", w = w + 2);
    let bytes = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut e = vec![
        ("infiniband.mad.mgmtclass", h(m.header.mgmt_class.into(), 2)),
        ("infiniband.mad.classversion", h(m.header.class_version.into(), 2)),
        ("infiniband.mad.method", h(m.header.method.into(), 2)),
        ("infiniband.mad.status", h(m.header.status.into(), 4)),
        ("infiniband.mad.transactionid", h(m.header.transaction_id, 16)),
        ("infiniband.mad.attributeid", h(m.header.attribute_id.into(), 4)),
    ];
    match &m.body {
        MadBody::Req(r) => {
            e.extend([
                ("infiniband.cm.req", h(r.local_comm_id.into(), 8)),
                ("infiniband.cm.req.serviceid", h(r.service_id, 16)),
                ("infiniband.cm.req.localcaguid", h(r.local_ca_guid, 16)),
                ("infiniband.cm.req.localqkey", h(r.local_qkey.into(), 8)),
                ("infiniband.cm.req.localqpn", h(r.local_qpn.into(), 6)),
                ("infiniband.cm.req.responderres", h(r.responder_resources.into(), 2)),
                ("infiniband.cm.req.initdepth", h(r.initiator_depth.into(), 2)),
                ("infiniband.cm.req.remoteresptout", h(r.remote_cm_response_timeout.into(), 2)),
                ("infiniband.cm.req.transpsvctype", h(r.transport_service_type.into(), 2)),
                ("infiniband.cm.req.e2eflowctrl", h(r.end_to_end_flow_control.into(), 2)),
                ("infiniband.cm.req.startpsn", h(r.starting_psn.into(), 6)),
                ("infiniband.cm.req.localresptout", h(r.local_cm_response_timeout.into(), 2)),
                ("infiniband.cm.req.retrcount", h(r.retry_count.into(), 2)),
                ("infiniband.cm.req.pkey", h(r.partition_key.into(), 4)),
                ("infiniband.cm.req.pppmtu", h(r.path_mtu.into(), 2)),
                ("infiniband.cm.req.rnrretrcount", h(r.rnr_retry_count.into(), 2)),
                ("infiniband.cm.req.maxcmretr", h(r.max_cm_retries.into(), 2)),
                ("infiniband.cm.req.srq", h(r.srq.into(), 2)),
                ("infiniband.cm.req.prim_locallid", r.primary_local_lid.to_string()),
                ("infiniband.cm.req.prim_remotelid", r.primary_remote_lid.to_string()),
                ("infiniband.cm.req.prim_tfcclass", h(r.primary_traffic_class.into(), 2)),
                ("infiniband.cm.req.prim_hoplim", h(r.primary_hop_limit.into(), 2)),
                ("infiniband.cm.req.prim_sl", h(r.primary_sl.into(), 2)),
                ("infiniband.cm.req.prim_subnetlocal", h(r.primary_subnet_local.into(), 2)),
                ("infiniband.cm.req.prim_localacktout", h(r.primary_local_ack_timeout.into(), 2)),
                // Wireshark 4.0's misreadings (see the module documentation).
                (
                    "infiniband.cm.req.prim_flowlabel",
                    h(
                        u64::from(
                            (r.primary_flow_label >> 12 & 0xff) << 4 | (r.primary_flow_label >> 8 & 0xf),
                        ),
                        8,
                    ),
                ),
                ("infiniband.cm.req.prim_pktrate", h(u64::from(r.primary_flow_label >> 12 & 0x3f), 8)),
            ]);
            let hdr = rdma::split_private_data(&r.private_data).unwrap().0;
            e.push(("infiniband.cm.req.ip_cm.sport", h(hdr.port.into(), 4)));
            e.push(("infiniband.cm.req.ip_cm.private", bytes(&r.private_data[36..])));
            if let (Some(IpAddr::V4(s)), Some(IpAddr::V4(d))) = (hdr.src_ip(), hdr.dst_ip()) {
                e.push(("infiniband.cm.req.ip_cm.sip4", s.to_string()));
                e.push(("infiniband.cm.req.ip_cm.dip4", d.to_string()));
                e.push(("infiniband.cm.req.ip_cm.ipv", "0x04".into()));
                e.push((
                    "infiniband.cm.req.prim_localgid_ipv4",
                    cma::gid_to_ip(&r.primary_local_gid).to_string(),
                ));
                e.push((
                    "infiniband.cm.req.prim_remotegid_ipv4",
                    cma::gid_to_ip(&r.primary_remote_gid).to_string(),
                ));
            }
        }
        MadBody::Rep(r) => e.extend([
            ("infiniband.cm.rep", h(r.local_comm_id.into(), 8)),
            ("infiniband.cm.rep.remotecommid", h(r.remote_comm_id.into(), 8)),
            ("infiniband.cm.rep.localqkey", h(r.local_qkey.into(), 8)),
            ("infiniband.cm.rep.localqpn", h(r.local_qpn.into(), 6)),
            ("infiniband.cm.rep.startpsn", h(r.starting_psn.into(), 6)),
            ("infiniband.cm.rep.respres", h(r.responder_resources.into(), 2)),
            ("infiniband.cm.rep.initdepth", h(r.initiator_depth.into(), 2)),
            ("infiniband.cm.rep.tgtackdelay", h(r.target_ack_delay.into(), 2)),
            ("infiniband.cm.rep.failoveracc", h(r.failover_accepted.into(), 2)),
            ("infiniband.cm.rep.e2eflowctrl", h(r.end_to_end_flow_control.into(), 2)),
            ("infiniband.cm.rep.rnrretrcount", h(r.rnr_retry_count.into(), 2)),
            ("infiniband.cm.rep.srq", h(r.srq.into(), 2)),
            ("infiniband.cm.rep.localcaguid", h(r.local_ca_guid, 16)),
            ("infiniband.cm.rep.private", bytes(&r.private_data)),
        ]),
        MadBody::Rtu(r) => e.extend([
            ("infiniband.cm.rtu.localcommid", h(r.local_comm_id.into(), 8)),
            ("infiniband.cm.rtu.remotecommid", h(r.remote_comm_id.into(), 8)),
            ("infiniband.cm.rtu.private", bytes(&r.private_data)),
        ]),
        MadBody::Rej(r) => e.extend([
            ("infiniband.cm.rej.localcommid", h(r.local_comm_id.into(), 8)),
            ("infiniband.cm.rej.remotecommid", h(r.remote_comm_id.into(), 8)),
            ("infiniband.cm.rej.msgrej", h(r.message_rejected.into(), 2)),
            ("infiniband.cm.rej.rejinfolen", h(r.rejected_info_length.into(), 2)),
            ("infiniband.cm.rej.reason", h(r.reason.into(), 4)),
            ("infiniband.cm.rej.ari", bytes(&r.ari)),
            ("infiniband.cm.rej.private", bytes(&r.private_data)),
        ]),
        MadBody::Dreq(r) => e.extend([
            ("infiniband.cm.dreq.localcommid", h(r.local_comm_id.into(), 8)),
            ("infiniband.cm.dreq.remotecommid", h(r.remote_comm_id.into(), 8)),
            // Wireshark 4.0 shows no Remote QPN field; its private data starts after it (D+12).
            ("infiniband.cm.dreq.private", bytes(&r.private_data)),
        ]),
        MadBody::Drep(r) => e.extend([
            ("infiniband.cm.drsp.localcommid", h(r.local_comm_id.into(), 8)),
            ("infiniband.cm.drsp.remotecommid", h(r.remote_comm_id.into(), 8)),
            ("infiniband.cm.drsp.private", bytes(&r.private_data)),
        ]),
        _ => {}
    }
    e
}

#[test]
fn tshark_decodes_every_cm_mad_we_send() {
    let mut mads = our_mads(false);
    mads.extend(our_mads(true));
    let kinds: std::collections::BTreeSet<&str> = mads
        .iter()
        .map(|(_, _, m)| {
            let r = MadRepr::parse(&Mad::new_checked(&m[..]).unwrap());
            r.body.cm_attr().map_or("?", |a| a.name())
        })
        .collect();
    for k in ["REQ", "MRA", "REP", "RTU", "DREQ", "DREP", "REJ", "SIDR_REQ", "SIDR_REP", "ClassPortInfo"] {
        assert!(kinds.contains(k), "{k} not produced: {kinds:?}");
    }
    let dir = std::env::temp_dir().join(format!("softroce-tshark-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cm.pcap");
    {
        let f = std::fs::File::create(&path).unwrap();
        let hdr =
            pcap_file::pcap::PcapHeader { datalink: pcap_file::DataLink::ETHERNET, ..Default::default() };
        let mut w = pcap_file::pcap::PcapWriter::with_header(f, hdr).unwrap();
        for (i, (s, d, m)) in mads.iter().enumerate() {
            let data = frame(*s, *d, i as u32, m);
            let p =
                pcap_file::pcap::PcapPacket::new(Duration::from_millis(i as u64), data.len() as u32, &data);
            w.write_packet(&p).unwrap();
        }
    }
    let mut fields: Vec<&str> = vec!["frame.number", "_ws.malformed", "_ws.expert.severity", "_ws.col.Info"];
    let wants: Vec<Vec<(&str, String)>> =
        mads.iter().map(|(_, _, m)| expected(&MadRepr::parse(&Mad::new_checked(&m[..]).unwrap()))).collect();
    for w in &wants {
        for (f, _) in w {
            if !fields.contains(f) {
                fields.push(f);
            }
        }
    }
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(&path).args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]);
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark must be installed (apt-get install tshark)");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<HashMap<&str, &str>> =
        text.lines().map(|l| fields.iter().copied().zip(l.split('|')).collect()).collect();
    assert_eq!(rows.len(), mads.len());
    let mut compared = 0;
    for (i, (row, want)) in rows.iter().zip(&wants).enumerate() {
        let m = MadRepr::parse(&Mad::new_checked(&mads[i].2[..]).unwrap());
        let kind = m.body.cm_attr().map_or("?", |a| a.name());
        let ctx = format!("frame {} ({kind}): {row:?}", i + 1);
        assert_eq!(row["_ws.malformed"], "", "{ctx}");
        // Wireshark 4.0 has no SIDR dissector: it flags those with a note, nothing worse.
        if !kind.starts_with("SIDR") {
            assert_eq!(row["_ws.expert.severity"], "", "{ctx}");
        }
        for (f, v) in want {
            assert_eq!(row[f], v.as_str(), "{f} in {ctx}");
            compared += 1;
        }
    }
    assert!(compared > 300, "{compared}");
    if std::env::var_os("SOFTROCE_KEEP_PCAP").is_some() {
        println!("kept {}", path.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
