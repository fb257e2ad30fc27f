//! Scenario tests of the IB CM in virtual time: each reads as what Linux does in the same
//! situation (`cm.c`), with the wire values checked.

use std::time::Duration;

use super::sim::CmPair;
use super::*;
use crate::transport::Time;
use crate::transport::sim::LinkConfig;
use crate::wire::cm::{CmAttr, MsgResponse, RejReason, SidrStatus};
use crate::wire::mad::{MAD_LEN, Mad, MadBody, MadRepr};

const SVC: u64 = 0x0106_1c06; // TCP port space, port 7174 (rping)

fn secs(s: f64) -> Time {
    Time::from_nanos((s * 1e9) as u64)
}

fn req_params(pair: &CmPair, qpn: u32, psn: u32) -> ReqParams {
    ReqParams {
        path: CmPathRecord {
            local_gid: pair.a.gid,
            remote_gid: pair.b.gid,
            flow_label: 0x274e3,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            pkey: 0xffff,
            mtu: 3,
            rate: 0,
            packet_life_time: 18,
        },
        service_id: SVC,
        qpn,
        transport: crate::wire::cm::CmTransport::Rc,
        starting_psn: psn,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: false,
        retry_count: 7,
        rnr_retry_count: 7,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 15,
        srq: false,
        private_data: vec![0; 36],
        ece: Ece::default(),
    }
}

fn rep_params(qpn: u32, psn: u32) -> RepParams {
    RepParams {
        qpn,
        starting_psn: psn,
        responder_resources: 1,
        initiator_depth: 1,
        failover_accepted: 0,
        flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        private_data: Vec::new(),
        ece: Ece::default(),
    }
}

fn take_req(pair: &mut CmPair) -> (CmId, Box<ReqInfo>) {
    while let Some(ev) = pair.b.pending.pop_front() {
        if let CmEvent::ReqReceived { id, req, .. } = ev {
            return (id, req);
        }
    }
    panic!("no REQ received: {:?}", pair.b.events);
}

/// The whole rping exchange, with the values of rping_cm.pcap.
#[test]
fn connect_accept_establish_and_psn_direction() {
    let mut p = CmPair::new(LinkConfig::default(), 1);
    p.b.cm.listen(SVC, 16).unwrap();
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x18, 0x9cc876)).unwrap();
    assert_eq!(p.a.state(a), Some(CmState::ReqSent));
    p.run_until(secs(1.0), |p| !p.b.pending.is_empty());
    let (b, req) = take_req(&mut p);
    assert_eq!(req.remote_qpn, 0x18);
    assert_eq!(req.starting_psn, 0x9cc876);
    assert_eq!(req.path.packet_life_time, 18, "REQ ACK timeout 19 - 1");
    assert_eq!(req.path.remote_gid, p.a.gid, "replies go to the GID the REQ names");
    p.b.cm.mra(p.now, b, 24, true, &[]).unwrap();
    assert_eq!(p.b.state(b), Some(CmState::MraReqSent));
    p.b.cm.accept(p.now, b, &rep_params(0x18, 0x12a96d)).unwrap();
    // The passive QP goes to RTS before the REP leaves: attributes are known now.
    let qb = p.b.cm.qp_attrs(b).unwrap();
    assert_eq!((qb.dest_qpn, qb.rq_psn, qb.sq_psn), (0x18, 0x12a96d, 0x9cc876));
    assert_eq!((qb.timeout, qb.retry_cnt, qb.rnr_retry, qb.path_mtu), (19, 7, 7, 3));
    assert_eq!((qb.max_rd_atomic, qb.max_dest_rd_atomic), (1, 1));
    p.run_until(secs(1.0), |p| p.a.pending.iter().any(|e| matches!(e, CmEvent::RepReceived { .. })));
    let qa = p.a.cm.qp_attrs(a).unwrap();
    // Each side's sq_psn is the Starting PSN the *other* side sent.
    assert_eq!((qa.dest_qpn, qa.rq_psn, qa.sq_psn), (0x18, 0x9cc876, 0x12a96d));
    assert_eq!(qa.timeout, 19, "cm_ack_timeout(15, 19 - 1)");
    assert!(qa.remote_read_atomic);
    p.a.cm.mra(p.now, a, 24, true, &[]).unwrap();
    p.a.cm.ready_to_use(p.now, a, &[]).unwrap();
    assert!(p.run_until(secs(1.0), |p| p.b.state(b) == Some(CmState::Established)));
    assert_eq!(p.a.state(a), Some(CmState::Established));
    assert_eq!(p.a.cm.counters().established + p.b.cm.counters().established, 2);
    assert_eq!(p.a.cm.remote_id(a), Some(b.0));
    assert_eq!(p.b.cm.remote_id(b), Some(a.0));
    // Nothing was retransmitted on a clean link.
    assert_eq!(p.a.cm.counters().tx_retries.iter().sum::<u64>(), 0);
    // rping's client disconnects; the server answers with a DREP; both sit in timewait for
    // ms(19) = 2048 ms, then exit.
    p.a.cm.disconnect(p.now, a).unwrap();
    p.run_until(secs(2.0), |p| p.b.state(b) == Some(CmState::DreqRcvd));
    p.b.cm.disconnect(p.now, b).unwrap();
    let t0 = p.now;
    p.run_idle(secs(10.0));
    assert_eq!(p.a.state(a), Some(CmState::Idle));
    assert_eq!(p.b.state(b), Some(CmState::Idle));
    let exit = |n: &super::sim::CmNode| {
        n.events.iter().find(|(_, e)| matches!(e, CmEvent::TimewaitExit { .. })).map(|(t, _)| *t).unwrap()
    };
    // B entered timewait when it sent the DREP at t0.
    assert_eq!(exit(&p.b) - t0, Duration::from_millis(2048));
    // A entered it when the DREP arrived, a link delay later.
    assert!(exit(&p.a) - t0 > Duration::from_millis(2048));
    assert!(exit(&p.a) - t0 < Duration::from_millis(2049));
}

#[test]
fn no_listener_is_rejected_with_reason_8_at_once() {
    let mut p = CmPair::new(LinkConfig::default(), 2);
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x1e, 1)).unwrap();
    p.run_idle(secs(1.0));
    assert_eq!(p.a.state(a), Some(CmState::Idle));
    let rej = p.a.events.iter().find_map(|(_, e)| match e {
        CmEvent::RejReceived { reason, .. } => Some(*reason),
        _ => None,
    });
    assert_eq!(rej, Some(RejReason::InvalidServiceId as u16));
    assert_eq!(p.b.cm.counters().req_no_listener, 1);
    assert_eq!(p.b.cm.connection_count(), 0, "no state kept for a refused REQ");
    assert!(p.now < secs(0.01), "answered at once, not after a timeout");
}

#[test]
fn consumer_reject_before_and_after_mra() {
    for mra_first in [false, true] {
        let mut p = CmPair::new(LinkConfig::default(), 3);
        p.b.cm.listen(SVC, 16).unwrap();
        let a = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
        p.run_until(secs(1.0), |p| !p.b.pending.is_empty());
        let (b, _) = take_req(&mut p);
        if mra_first {
            p.b.cm.mra(p.now, b, 24, true, &[]).unwrap();
        }
        p.b.cm.reject(p.now, b, RejReason::ConsumerDefined, &[], b"nope").unwrap();
        // Look at the REJ on the wire: local comm ID 0 from REQ_RCVD (a kernel ULP rejecting in
        // its handler), the passive ID from MRA_REQ_SENT (a user-space rdma_cm id, as in
        // reject.pcap).
        let t = p.b.cm.poll_transmit().unwrap();
        let m = MadRepr::parse(&Mad::new_checked(&t.mad[..]).unwrap());
        let MadBody::Rej(r) = m.body else { panic!("{m:?}") };
        assert_eq!(r.local_comm_id, if mra_first { b.0 } else { 0 });
        assert_eq!(r.remote_comm_id, a.0);
        assert_eq!(r.message_rejected, MsgResponse::Req as u8);
        assert_eq!(r.reason, 28);
        assert_eq!(&r.private_data[..4], b"nope");
        let addr = CmPair::addr(&p.b, &p.a);
        p.a.cm.handle_mad(p.now, &addr, &t.mad);
        p.settle();
        assert_eq!(p.a.state(a), Some(CmState::Idle));
        assert!(p.a.pending.iter().any(|e| matches!(e, CmEvent::RejReceived { reason: 28, .. })));
        assert_eq!(p.b.state(b), Some(CmState::Idle));
    }
}

/// A REQ into a black hole: 16 transmissions 6144 ms apart (2 * ms(18) + ms(20)), then
/// IB_CM_REQ_ERROR at 16 * 6144 ms.
#[test]
fn req_retries_then_times_out() {
    let mut p = CmPair::new(LinkConfig { drop: 1.0, ..LinkConfig::default() }, 4);
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
    p.run_idle(secs(200.0));
    assert_eq!(p.ab.stats.sent, 16);
    assert_eq!(p.a.cm.counters().tx_retries[0], 15);
    let (t, _) =
        p.a.events
            .iter()
            .find(|(_, e)| matches!(e, CmEvent::SendError { what: SendError::Req, .. }))
            .unwrap();
    assert_eq!(*t, Time::ZERO + Duration::from_millis(16 * 6144));
    assert_eq!(p.a.state(a), Some(CmState::Idle));
}

/// A server slow to accept: the client's second REQ meets the delayed MRA, which answers it
/// and pushes the next retransmission to ms(24) + ms(19) = 67584 ms.
#[test]
fn duplicate_req_gets_the_delayed_mra() {
    let mut p = CmPair::new(LinkConfig::default(), 5);
    p.b.cm.listen(SVC, 16).unwrap();
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
    p.run_until(secs(1.0), |p| !p.b.pending.is_empty());
    let (b, _) = take_req(&mut p);
    p.b.cm.mra(p.now, b, 24, true, &[]).unwrap();
    p.run_until(secs(7.0), |p| p.a.state(a) == Some(CmState::MraReqRcvd));
    assert_eq!(p.a.state(a), Some(CmState::MraReqRcvd));
    assert_eq!(p.b.cm.counters().rx_duplicates[0], 1);
    assert_eq!(p.b.cm.counters().tx_msgs[1], 1, "one MRA");
    let mra_at = p.now;
    let next = p.a.cm.poll_timeout().unwrap();
    assert_eq!(next - mra_at, Duration::from_millis(65536 + 2048));
    // Accepting now still works: the REP cancels the long wait.
    p.b.cm.accept(p.now, b, &rep_params(0x30, 2)).unwrap();
    p.run_until(secs(8.0), |p| p.a.state(a) == Some(CmState::RepRcvd));
    p.a.cm.ready_to_use(p.now, a, &[]).unwrap();
    assert!(p.run_until(secs(9.0), |p| p.b.state(b) == Some(CmState::Established)));
}

/// The RTU is lost: the passive side resends its REP, the established active side answers
/// the duplicate with another RTU (cm_dup_rep_handler).
#[test]
fn lost_rtu_is_recovered_by_the_rep_retransmission() {
    let mut p = CmPair::new(LinkConfig::default(), 6);
    p.b.cm.listen(SVC, 16).unwrap();
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
    p.run_until(secs(1.0), |p| !p.b.pending.is_empty());
    let (b, _) = take_req(&mut p);
    p.b.cm.accept(p.now, b, &rep_params(0x30, 2)).unwrap();
    p.run_until(secs(1.0), |p| p.a.state(a) == Some(CmState::RepRcvd));
    p.a.cm.ready_to_use(p.now, a, &[7]).unwrap();
    p.ab.set_config(LinkConfig { drop: 1.0, ..LinkConfig::default() });
    p.settle();
    p.ab.set_config(LinkConfig::default());
    assert_eq!(p.b.state(b), Some(CmState::RepSent));
    assert!(p.run_until(secs(10.0), |p| p.b.state(b) == Some(CmState::Established)));
    assert_eq!(p.a.cm.counters().rx_duplicates[3], 1, "one duplicate REP");
    assert_eq!(p.a.cm.counters().tx_msgs[4], 2, "the RTU, twice");
    let rtu = p.b.events.iter().find_map(|(_, e)| match e {
        CmEvent::RtuReceived { private_data, .. } => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(rtu.unwrap()[0], 7, "the re-sent RTU keeps its private data");
}

#[test]
fn dreq_for_an_unknown_connection_still_gets_a_drep() {
    let mut p = CmPair::new(LinkConfig::default(), 7);
    let dreq = MadRepr::cm(
        0x1234,
        MadBody::Dreq(crate::wire::cm::DreqRepr {
            local_comm_id: 0xaaaa,
            remote_comm_id: 0xbbbb,
            remote_qpn: 0x11,
            ..Default::default()
        }),
    )
    .to_bytes();
    let from = CmPair::addr(&p.a, &p.b);
    p.b.cm.handle_mad(p.now, &from, &dreq);
    let t = p.b.cm.poll_transmit().unwrap();
    assert_eq!(t.to.remote_gid, p.a.gid);
    let m = MadRepr::parse(&Mad::new_checked(&t.mad[..]).unwrap());
    assert_eq!(m.header.transaction_id, 0x1234);
    let MadBody::Drep(d) = m.body else { panic!() };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (0xbbbb, 0xaaaa));
    assert_eq!(p.b.cm.counters().rx_no_connection, 1);
}

fn established(seed: u64) -> (CmPair, CmId, CmId) {
    let mut p = CmPair::new(LinkConfig::default(), seed);
    p.b.cm.listen(SVC, 16).unwrap();
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
    p.run_until(secs(1.0), |p| !p.b.pending.is_empty());
    let (b, _) = take_req(&mut p);
    p.b.cm.accept(p.now, b, &rep_params(0x30, 2)).unwrap();
    p.run_until(secs(1.0), |p| p.a.state(a) == Some(CmState::RepRcvd));
    p.a.cm.ready_to_use(p.now, a, &[]).unwrap();
    assert!(p.run_until(secs(1.0), |p| p.b.state(b) == Some(CmState::Established)));
    p.a.pending.clear();
    p.b.pending.clear();
    (p, a, b)
}

#[test]
fn dreq_naming_another_qp_is_ignored() {
    let (mut p, a, b) = established(8);
    let dreq = MadRepr::cm(
        9,
        MadBody::Dreq(crate::wire::cm::DreqRepr {
            local_comm_id: a.0,
            remote_comm_id: b.0,
            remote_qpn: 0x31, // b's QP is 0x30
            ..Default::default()
        }),
    )
    .to_bytes();
    let from = CmPair::addr(&p.a, &p.b);
    p.b.cm.handle_mad(p.now, &from, &dreq);
    assert!(p.b.cm.poll_transmit().is_none());
    assert_eq!(p.b.state(b), Some(CmState::Established));
    assert_eq!(p.b.cm.counters().rx_dreq_wrong_qpn, 1);
}

#[test]
fn simultaneous_disconnect_reaches_timewait_on_both_sides() {
    let (mut p, a, b) = established(9);
    p.a.cm.disconnect(p.now, a).unwrap();
    p.b.cm.disconnect(p.now, b).unwrap();
    p.run_until(secs(1.0), |p| {
        p.a.state(a) == Some(CmState::DreqRcvd) && p.b.state(b) == Some(CmState::DreqRcvd)
    });
    // Each got the other's DREQ while in DREQ_SENT; each now answers it (rdma_cm: on destroy
    // or a second rdma_disconnect).
    p.a.cm.disconnect(p.now, a).unwrap();
    p.b.cm.disconnect(p.now, b).unwrap();
    p.run_idle(secs(10.0));
    assert_eq!((p.a.state(a), p.b.state(b)), (Some(CmState::Idle), Some(CmState::Idle)));
    assert_eq!(p.a.cm.counters().send_timeouts + p.b.cm.counters().send_timeouts, 0);
}

#[test]
fn dreq_without_answer_times_out_into_timewait() {
    let (mut p, a, _b) = established(10);
    p.ab.set_config(LinkConfig { drop: 1.0, ..LinkConfig::default() });
    p.a.cm.disconnect(p.now, a).unwrap();
    p.run_idle(secs(200.0));
    assert!(p.a.events.iter().any(|(_, e)| matches!(e, CmEvent::SendError { what: SendError::Dreq, .. })));
    assert!(p.a.events.iter().any(|(_, e)| matches!(e, CmEvent::TimewaitExit { .. })));
    assert_eq!(p.a.state(a), Some(CmState::Idle));
}

/// A peer that rebooted and reuses its QP number while we are still connected to it: the new
/// REQ gets REJ 10 and the old connection a DREQ (cm_match_req).
#[test]
fn stale_connection_is_rejected_and_the_old_one_disconnected() {
    let (mut p, _a, b) = established(11);
    let mut r = req_params(&p, 0x20, 5);
    r.private_data = vec![1; 36];
    let a2 = p.a.cm.connect(p.now, &r).unwrap();
    p.run_until(secs(1.0), |p| p.a.state(a2) == Some(CmState::Idle));
    assert!(
        p.a.events.iter().any(|(_, e)| matches!(e, CmEvent::RejReceived { reason: 10, id, .. } if *id == a2))
    );
    assert_eq!(p.b.cm.counters().stale_conn_rejected, 1);
    assert_eq!(p.b.state(b), Some(CmState::DreqSent));
}

#[test]
fn destroying_an_unanswered_connect_sends_rej_timeout_with_our_guid() {
    let mut p = CmPair::new(LinkConfig::default(), 12);
    p.b.cm.listen(SVC, 16).unwrap();
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
    p.run_until(secs(1.0), |p| !p.b.pending.is_empty());
    let (b, _) = take_req(&mut p);
    p.b.cm.mra(p.now, b, 24, true, &[]).unwrap();
    p.a.cm.destroy(p.now, a).unwrap();
    assert_eq!(p.a.state(a), None);
    let t = p.a.cm.poll_transmit().unwrap();
    let m = MadRepr::parse(&Mad::new_checked(&t.mad[..]).unwrap());
    let MadBody::Rej(r) = m.body else { panic!() };
    assert_eq!(r.reason, 4);
    assert_eq!(r.message_rejected, MsgResponse::Other as u8);
    assert_eq!(r.rejected_info_length, 8);
    assert_eq!(&r.ari[..8], &p.a.cm.config().node_guid.to_be_bytes());
    // The passive side finds its connection by (ARI GUID, REJ local comm ID).
    let from = CmPair::addr(&p.a, &p.b);
    p.b.cm.handle_mad(p.now, &from, &t.mad);
    assert_eq!(p.b.state(b), Some(CmState::Idle));
}

#[test]
fn mad_layer_checks_and_answers() {
    let mut p = CmPair::new(LinkConfig::default(), 13);
    let from = CmPair::addr(&p.a, &p.b);
    let base = {
        let mut m = [0u8; MAD_LEN];
        m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
        m[16..18].copy_from_slice(&0x0010u16.to_be_bytes());
        m
    };
    let cm = &mut p.b.cm;
    cm.handle_mad(Time::ZERO, &from, &base[..100]);
    cm.handle_mad(Time::ZERO, &from, &[0u8; 300]);
    let mut m = base;
    m[0] = 2;
    cm.handle_mad(Time::ZERO, &from, &m);
    let mut m = base;
    m[1] = 0x81;
    cm.handle_mad(Time::ZERO, &from, &m);
    let mut m = base;
    m[3] = 0x01; // Get of a REQ: not a method the CM class takes
    cm.handle_mad(Time::ZERO, &from, &m);
    let mut m = base;
    m[2] = 1; // class version 1 Send: no agent
    cm.handle_mad(Time::ZERO, &from, &m);
    let mut m = base;
    m[16..18].copy_from_slice(&0x0020u16.to_be_bytes()); // no such attribute
    cm.handle_mad(Time::ZERO, &from, &m);
    let mut m = base;
    m[16..18].copy_from_slice(&0x0019u16.to_be_bytes()); // LAP
    cm.handle_mad(Time::ZERO, &from, &m);
    assert!(cm.poll_transmit().is_none());
    // ClassPortInfo Get: GetResp, status 0x000c, data echoed.
    let mut m = base;
    m[3] = 0x01;
    m[16..18].copy_from_slice(&0x0001u16.to_be_bytes());
    m[100] = 0x5a;
    cm.handle_mad(Time::ZERO, &from, &m);
    let t = cm.poll_transmit().unwrap();
    assert_eq!((t.mad[3], t.mad[4], t.mad[5], t.mad[100]), (0x81, 0, 0x0c, 0x5a));
    assert_eq!(t.to.remote_gid, from.remote_gid);
    let c = cm.counters();
    assert_eq!(
        (c.rx_bad_length, c.rx_bad_base_version, c.rx_smp_on_gsi, c.rx_bad_method, c.rx_no_agent),
        (2, 1, 1, 1, 1)
    );
    assert_eq!((c.rx_unknown_attr, c.rx_lap_apr_ignored, c.rx_unsupported_answered), (1, 1, 1));
    assert_eq!(cm.connection_count(), 0);
}

#[test]
fn rep_for_a_connection_never_requested_is_dropped() {
    let mut p = CmPair::new(LinkConfig::default(), 14);
    let rep = MadRepr::cm(
        1,
        MadBody::Rep(crate::wire::cm::RepRepr {
            local_comm_id: 0x1111,
            remote_comm_id: 0x2222,
            local_qpn: 0x40,
            ..Default::default()
        }),
    )
    .to_bytes();
    let from = CmPair::addr(&p.b, &p.a);
    p.a.cm.handle_mad(p.now, &from, &rep);
    assert!(p.a.cm.poll_transmit().is_none());
    assert_eq!(p.a.cm.counters().rx_no_connection, 1);
    assert_eq!(p.a.cm.connection_count(), 0);
}

/// 5000 REQs with distinct comm IDs to one listener: at most `backlog` connections wait, the
/// rest are dropped (the peers retry), and other services are unaffected.
#[test]
fn req_flood_is_bounded_by_the_backlog() {
    let mut p = CmPair::new(LinkConfig::default(), 15);
    p.b.cm.listen(SVC, 32).unwrap();
    p.b.cm.listen(SVC + 1, 4).unwrap();
    let from = CmPair::addr(&p.a, &p.b);
    let mut req = crate::wire::cm::ReqRepr {
        service_id: SVC,
        local_ca_guid: 0x77,
        partition_key: 0xffff,
        ..Default::default()
    };
    for k in 0..5000u32 {
        req.local_comm_id = 0x1000_0000 + k;
        req.local_qpn = 0x100 + k;
        let m = MadRepr::cm(u64::from(k), MadBody::Req(req)).to_bytes();
        p.b.cm.handle_mad(p.now, &from, &m);
    }
    assert_eq!(p.b.cm.connection_count(), 32);
    assert_eq!(p.b.cm.counters().req_backlog_full, 5000 - 32);
    assert!(p.b.cm.poll_transmit().is_none(), "dropped silently, no REJ");
    // Another service still gets its requests through.
    req.service_id = SVC + 1;
    req.local_comm_id = 0x2000_0000;
    req.local_qpn = 0x9999;
    p.b.cm.handle_mad(p.now, &from, &MadRepr::cm(1, MadBody::Req(req)).to_bytes());
    assert_eq!(p.b.cm.connection_count(), 33);
}

#[test]
fn sidr_request_reply_and_no_listener() {
    let mut p = CmPair::new(LinkConfig::default(), 16);
    let usvc = 0x0111_1c06;
    let sp = SidrReqParams {
        path: req_params(&p, 0x20, 0).path,
        service_id: usvc,
        timeout: Duration::from_millis(4096),
        max_cm_retries: 15,
        private_data: vec![0; 36],
    };
    let a = p.a.cm.sidr_request(p.now, &sp).unwrap();
    p.run_idle(secs(1.0));
    let got = p.a.events.iter().find_map(|(_, e)| match e {
        CmEvent::SidrRepReceived { status, .. } => Some(*status),
        _ => None,
    });
    assert_eq!(got, Some(SidrStatus::Unsupported as u8));
    assert_eq!(p.a.state(a), Some(CmState::Idle));
    p.b.cm.listen(usvc, 8).unwrap();
    let a = p.a.cm.sidr_request(p.now, &sp).unwrap();
    p.run_until(secs(2.0), |p| !p.b.pending.is_empty());
    let Some(CmEvent::SidrReqReceived { id: b, service_id, .. }) = p.b.pending.pop_front() else { panic!() };
    assert_eq!(service_id, usvc);
    let rp = SidrRepParams {
        status: SidrStatus::Success,
        qpn: 0x1d,
        qkey: 0x0123_4567,
        info: Vec::new(),
        private_data: Vec::new(),
        ece: Ece::default(),
    };
    p.b.cm.sidr_reply(p.now, b, &rp).unwrap();
    p.run_idle(secs(3.0));
    assert!(p.a.events.iter().any(|(_, e)| matches!(e,
        CmEvent::SidrRepReceived { id, status: 0, qpn: 0x1d, qkey: 0x0123_4567, .. } if *id == a)));
}

#[test]
fn commands_in_the_wrong_state_are_refused() {
    let mut p = CmPair::new(LinkConfig::default(), 17);
    let a = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
    let now = p.now;
    assert!(matches!(p.a.cm.accept(now, a, &rep_params(1, 1)), Err(CmError::InvalidState { .. })));
    assert!(matches!(p.a.cm.ready_to_use(now, a, &[]), Err(CmError::InvalidState { .. })));
    assert!(matches!(p.a.cm.send_dreq(now, a, &[]), Err(CmError::InvalidState { .. })));
    assert!(matches!(p.a.cm.send_drep(now, a, &[]), Err(CmError::InvalidState { .. })));
    assert!(matches!(p.a.cm.qp_attrs(a), Err(CmError::InvalidState { .. })));
    assert!(matches!(p.a.cm.disconnect(now, CmId(5)), Err(CmError::UnknownId(_))));
    let mut r = req_params(&p, 0x21, 1);
    r.private_data = vec![0; 93];
    assert_eq!(p.a.cm.connect(now, &r), Err(CmError::PrivateDataTooLong { len: 93, max: 92 }));
    r.private_data.clear();
    r.qpn = 1;
    assert!(matches!(p.a.cm.connect(now, &r), Err(CmError::InvalidParam(_))));
    p.b.cm.listen(SVC, 1).unwrap();
    assert_eq!(p.b.cm.listen(SVC, 1), Err(CmError::Busy(SVC)));
    assert_eq!(p.b.cm.cancel_listen(SVC + 5), Err(CmError::NotListening(SVC + 5)));
}

/// Local comm IDs are the kernel's: an XOR-scrambled cyclic counter, and the TID's low half
/// is the ID's bytes reversed with the agent number above.
#[test]
fn comm_ids_and_tids_look_like_linux() {
    let mut p = CmPair::new(LinkConfig::default(), 18);
    let a1 = p.a.cm.connect(p.now, &req_params(&p, 0x20, 1)).unwrap();
    let a2 = p.a.cm.connect(p.now, &req_params(&p, 0x21, 1)).unwrap();
    // Consecutive xarray indexes differ in the first byte of the wire ID.
    assert_eq!(a1.0 ^ a2.0, 0x0100_0000);
    let t = p.a.cm.poll_transmit().unwrap();
    let m = MadRepr::parse(&Mad::new_checked(&t.mad[..]).unwrap());
    assert_eq!(m.header.transaction_id, (2u64 << 32) | u64::from(a1.0.swap_bytes()));
    assert_eq!(m.body.cm_attr(), Some(CmAttr::Req));
}

/// Found by the fuzzer: requests pending on a cancelled listener must not count against the
/// backlog of a new listener on the same service.
#[test]
fn a_new_listener_starts_with_an_empty_backlog() {
    let mut p = CmPair::new(LinkConfig::default(), 19);
    p.b.cm.listen(SVC, 4).unwrap();
    for q in 0..3 {
        p.a.cm.connect(p.now, &req_params(&p, 0x20 + q, 1)).unwrap();
    }
    p.run_until(secs(1.0), |p| p.b.pending.len() == 3);
    p.b.cm.cancel_listen(SVC).unwrap();
    p.b.cm.listen(SVC, 1).unwrap();
    p.b.cm.check_invariants().unwrap();
    p.a.cm.connect(p.now, &req_params(&p, 0x30, 1)).unwrap();
    p.run_until(secs(1.0), |p| p.b.pending.len() == 4);
    assert_eq!(p.b.pending.len(), 4, "the new listener takes one request");
    p.a.cm.connect(p.now, &req_params(&p, 0x31, 1)).unwrap();
    p.settle();
    p.advance(Duration::from_millis(10));
    assert_eq!(p.b.pending.len(), 4, "its backlog of 1 is full");
    assert_eq!(p.b.cm.counters().req_backlog_full, 1);
}

/// Linux takes a connection out of its remote-ID and remote-QPN tables when it enters
/// timewait (`cm_enter_timewait`): a new REQ from the same QP during timewait is a new
/// connection, not a stale one.
#[test]
fn qpn_reuse_during_timewait_is_a_new_connection() {
    let (mut p, a, b) = established(20);
    p.a.cm.disconnect(p.now, a).unwrap();
    p.run_until(secs(1.0), |p| p.b.state(b) == Some(CmState::DreqRcvd));
    p.b.cm.disconnect(p.now, b).unwrap();
    p.run_until(secs(1.0), |p| p.a.state(a) == Some(CmState::Timewait));
    assert_eq!(p.b.state(b), Some(CmState::Timewait));
    p.b.pending.clear();
    let a2 = p.a.cm.connect(p.now, &req_params(&p, 0x20, 9)).unwrap();
    p.run_until(secs(2.0), |p| !p.b.pending.is_empty());
    let (b2, req) = take_req(&mut p);
    assert_ne!(b2, b);
    assert_eq!(req.remote_qpn, 0x20);
    assert_eq!(p.b.cm.counters().stale_conn_rejected, 0);
    assert_eq!(p.a.state(a2), Some(CmState::ReqSent));
}
