//! The IB CM over a lossy link, in virtual time: loss, duplication, reordering and delay never
//! give two connections, a half-open one, or a hang; every connect ends established or with a
//! clear error within the retry budget. After quinn's and the RC simulator's seeded grids.

use std::time::Duration;

use softroce::transport::Time;
use softroce::transport::cm::sim::{AutoApp, CmPair};
use softroce::transport::cm::{CmEvent, CmId, CmPathRecord, CmState, Ece, ReqParams, SendError};
use softroce::transport::sim::LinkConfig;
use softroce::wire::cm::CmTransport;

const SVC: u64 = 0x0106_1c06;

fn secs(s: f64) -> Time {
    Time::from_nanos((s * 1e9) as u64)
}

fn req(p: &CmPair, from_a: bool, qpn: u32) -> ReqParams {
    let (l, r) = if from_a { (p.a.gid, p.b.gid) } else { (p.b.gid, p.a.gid) };
    ReqParams {
        path: CmPathRecord {
            local_gid: l,
            remote_gid: r,
            flow_label: 0x1234,
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
        transport: CmTransport::Rc,
        starting_psn: qpn * 7,
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

fn link(drop: f64, seed: u64) -> LinkConfig {
    LinkConfig {
        drop,
        duplicate: drop / 2.0 + 0.02 * (seed % 3) as f64,
        reorder: drop / 2.0,
        corrupt: drop / 4.0,
        delay: Duration::from_micros(200),
        jitter: Duration::from_millis(3),
        ns_per_byte: 0.1,
    }
}

fn auto() -> AutoApp {
    AutoApp {
        accept_qpn_base: None,
        complete_connects: true,
        answer_dreq: true,
        think: Duration::from_millis(1),
        sidr_accept: None,
    }
}

/// How a connect ended on the active side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Established,
    Rejected(u16),
    TimedOut,
    Pending,
}

fn outcome(p: &CmPair, a: CmId) -> Outcome {
    for (_, e) in &p.a.events {
        match e {
            CmEvent::RejReceived { id, reason, .. } if *id == a => return Outcome::Rejected(*reason),
            CmEvent::SendError { id, what: SendError::Req, .. } if *id == a => return Outcome::TimedOut,
            _ => {}
        }
    }
    if p.a.state(a) == Some(CmState::Established) { Outcome::Established } else { Outcome::Pending }
}

/// Every established connection on either side has an established peer that names it back,
/// and no passive connection exists twice for one active one.
fn check_consistent(p: &CmPair) {
    for (side, me, peer) in [("A", &p.a, &p.b), ("B", &p.b, &p.a)] {
        let mut seen = std::collections::BTreeSet::new();
        for (id, st) in me.cm.connections() {
            if st != CmState::Established {
                continue;
            }
            let remote = me.cm.remote_id(id).unwrap();
            assert!(seen.insert(remote), "{side}: two connections to peer {remote:#x}");
            let pid = CmId(remote);
            assert_eq!(
                peer.state(pid),
                Some(CmState::Established),
                "{side} {id} established, peer {pid} is not"
            );
            assert_eq!(peer.cm.remote_id(pid), Some(id.0), "{side} {id}: peer names another");
        }
    }
    assert_eq!(p.a.misaddressed + p.b.misaddressed, 0);
}

/// The retry budget of a connect: 16 REQs 6144 ms apart, then 16 REPs 4096 ms apart, plus
/// margin (an MRA can stretch a wait to 67 s).
const BUDGET: f64 = 16.0 * 6.144 + 16.0 * 4.096 + 70.0;

#[test]
fn single_connect_over_lossy_links_never_half_opens_or_hangs() {
    let mut outcomes = std::collections::BTreeMap::new();
    let mut stress = std::collections::BTreeMap::new();
    for drop in [0.0, 0.05, 0.2, 0.4] {
        for seed in 0..60u64 {
            let mut p = CmPair::new(link(drop, seed), seed * 1000 + (drop * 100.0) as u64);
            p.b.cm.listen(SVC, 64).unwrap();
            p.a.auto = auto();
            p.b.auto = AutoApp { accept_qpn_base: Some(0x100), ..auto() };
            let a = p.a.cm.connect(p.now, &req(&p, true, 0x20)).unwrap();
            p.run_until(secs(BUDGET), |p| outcome(p, a) != Outcome::Pending);
            let o = outcome(&p, a);
            assert_ne!(o, Outcome::Pending, "drop {drop} seed {seed}: hang, a is {:?}", p.a.state(a));
            // Let the passive side's REP retries run out, then nothing may be half-open.
            p.run_idle(p.now + Duration::from_secs(200));
            check_consistent(&p);
            let passive_est = p.b.cm.connections().filter(|(_, s)| *s == CmState::Established).count();
            match o {
                Outcome::Established => assert_eq!(passive_est, 1, "drop {drop} seed {seed}"),
                _ => assert_eq!(passive_est, 0, "drop {drop} seed {seed}"),
            }
            let reqs = p.b.events.iter().filter(|(_, e)| matches!(e, CmEvent::ReqReceived { .. })).count();
            assert!(reqs <= 1, "drop {drop} seed {seed}: {reqs} connections for one connect");
            *outcomes.entry(((drop * 100.0) as u32, format!("{o:?}"))).or_insert(0u32) += 1;
            let e = stress.entry((drop * 100.0) as u32).or_insert([0u64; 4]);
            e[0] += p.a.cm.counters().tx_retries.iter().sum::<u64>()
                + p.b.cm.counters().tx_retries.iter().sum::<u64>();
            e[1] += p.a.cm.counters().rx_duplicates.iter().sum::<u64>()
                + p.b.cm.counters().rx_duplicates.iter().sum::<u64>();
            e[2] += p.ab.stats.dropped + p.ba.stats.dropped;
            e[3] += p.a.corrupt_dropped + p.b.corrupt_dropped;
        }
    }
    println!("{outcomes:?}");
    println!("[retransmissions, duplicates received, dropped, corrupted] per loss rate: {stress:?}");
    // The lossy runs really exercised retransmission, duplicates and corruption.
    let s40 = stress[&40];
    assert!(s40[0] > 30 && s40[1] > 10 && s40[2] > 30 && s40[3] > 3, "{stress:?}");
    assert_eq!((stress[&0][0], stress[&0][2]), (0, 0), "no loss, no retransmission");
    // Retransmission makes 40 % loss a nuisance, not a failure.
    for drop in [0u32, 5, 20, 40] {
        assert!(
            outcomes.get(&(drop, "Established".into())).copied().unwrap_or(0) >= 58,
            "{drop}: {outcomes:?}"
        );
    }
}

/// Connect, then disconnect from a random side, over a lossy link: both sides end idle (after
/// timewait), or the DREQ timed out; neither stays established.
#[test]
fn disconnect_from_either_side_over_lossy_links() {
    for seed in 0..80u64 {
        let drop = [0.0, 0.1, 0.3][(seed % 3) as usize];
        let mut p = CmPair::new(link(drop, seed), 7_000 + seed);
        p.b.cm.listen(SVC, 64).unwrap();
        p.a.auto = auto();
        p.b.auto = AutoApp { accept_qpn_base: Some(0x100), ..auto() };
        let a = p.a.cm.connect(p.now, &req(&p, true, 0x20)).unwrap();
        p.run_until(secs(BUDGET), |p| outcome(p, a) != Outcome::Pending);
        if outcome(&p, a) != Outcome::Established {
            continue;
        }
        // Wait for the passive side too (the RTU may need a REP retransmission).
        let b = CmId(p.a.cm.remote_id(a).unwrap());
        p.run_until(p.now + Duration::from_secs(100), |p| p.b.state(b) == Some(CmState::Established));
        assert_eq!(p.b.state(b), Some(CmState::Established), "seed {seed}");
        if seed % 2 == 0 {
            p.a.cm.disconnect(p.now, a).unwrap();
        } else {
            p.b.cm.disconnect(p.now, b).unwrap();
        }
        p.run_idle(p.now + Duration::from_secs(300));
        for (side, n, id) in [("A", &p.a, a), ("B", &p.b, b)] {
            assert_eq!(n.state(id), Some(CmState::Idle), "seed {seed} {side}: {:?}", n.events);
            let discs = n
                .events
                .iter()
                .filter(|(_, e)| {
                    matches!(e, CmEvent::DreqReceived { .. } | CmEvent::DrepReceived { .. })
                        || matches!(e, CmEvent::SendError { what: SendError::Dreq, .. })
                })
                .count();
            assert!(discs >= 1, "seed {seed} {side}: no disconnect event");
        }
    }
}

#[test]
fn reject_and_no_listener_over_lossy_links_never_establish() {
    for seed in 0..60u64 {
        let mut p = CmPair::new(link(0.2, seed), 9_000 + seed);
        let listening = seed % 2 == 0;
        if listening {
            p.b.cm.listen(SVC, 64).unwrap();
        }
        p.a.auto = auto();
        let a = p.a.cm.connect(p.now, &req(&p, true, 0x20)).unwrap();
        p.run_until(secs(BUDGET), |p| {
            if let Some(CmEvent::ReqReceived { id, .. }) = p.b.pending.front() {
                let _ = id;
                return true;
            }
            outcome(p, a) != Outcome::Pending
        });
        if let Some(CmEvent::ReqReceived { id, .. }) = p.b.pending.pop_front() {
            p.b.cm.mra(p.now, id, 24, true, &[]).unwrap();
            p.b.cm.reject(p.now, id, softroce::wire::cm::RejReason::ConsumerDefined, &[], &[]).unwrap();
        }
        p.run_until(secs(BUDGET * 2.0), |p| outcome(p, a) != Outcome::Pending);
        let o = outcome(&p, a);
        let want = if listening { 28 } else { 8 };
        assert!(o == Outcome::Rejected(want) || o == Outcome::TimedOut, "seed {seed}: {o:?}");
        p.run_idle(p.now + Duration::from_secs(300));
        check_consistent(&p);
        assert_eq!(p.b.cm.connections().filter(|(_, s)| *s == CmState::Established).count(), 0);
    }
}

/// Both sides connect to each other at once: two independent connections, both established.
#[test]
fn simultaneous_connects_give_two_connections() {
    for seed in 0..20u64 {
        let mut p = CmPair::new(link(0.1, seed), 11_000 + seed);
        p.a.cm.listen(SVC, 64).unwrap();
        p.b.cm.listen(SVC, 64).unwrap();
        p.a.auto = AutoApp { accept_qpn_base: Some(0x200), ..auto() };
        p.b.auto = AutoApp { accept_qpn_base: Some(0x300), ..auto() };
        let a = p.a.cm.connect(p.now, &req(&p, true, 0x20)).unwrap();
        let b = p.b.cm.connect(p.now, &req(&p, false, 0x21)).unwrap();
        p.run_until(secs(BUDGET), |p| {
            p.a.state(a) == Some(CmState::Established) && p.b.state(b) == Some(CmState::Established)
        });
        p.run_idle(p.now + Duration::from_secs(200));
        check_consistent(&p);
        assert_eq!(p.a.state(a), Some(CmState::Established), "seed {seed}");
        assert_eq!(p.b.state(b), Some(CmState::Established), "seed {seed}");
        assert_eq!(p.a.cm.connections().filter(|(_, s)| *s == CmState::Established).count(), 2);
    }
}

fn connect_many(p: &mut CmPair, qpns: std::ops::Range<u32>) -> Vec<CmId> {
    let ids: Vec<CmId> = qpns.map(|q| p.a.cm.connect(p.now, &req(p, true, q)).unwrap()).collect();
    let ok = p.run_until(p.now + Duration::from_secs_f64(BUDGET), |p| {
        ids.iter().all(|&a| outcome(p, a) != Outcome::Pending)
    });
    assert!(ok);
    ids
}

/// 50 connections one after the other, each used then disconnected, over a lossy link.
#[test]
fn fifty_sequential_connections() {
    let mut p = CmPair::new(link(0.1, 3), 13_000);
    p.b.cm.listen(SVC, 64).unwrap();
    p.a.auto = auto();
    p.b.auto = AutoApp { accept_qpn_base: Some(0x1000), ..auto() };
    for k in 0..50u32 {
        let ids = connect_many(&mut p, 0x20 + k..0x21 + k);
        let a = ids[0];
        assert_eq!(outcome(&p, a), Outcome::Established, "connection {k}");
        let b = CmId(p.a.cm.remote_id(a).unwrap());
        p.run_until(p.now + Duration::from_secs(100), |p| p.b.state(b) == Some(CmState::Established));
        check_consistent(&p);
        p.a.cm.disconnect(p.now, a).unwrap();
        p.run_until(p.now + Duration::from_secs(200), |p| {
            p.a.state(a) == Some(CmState::Idle) && p.b.state(b) == Some(CmState::Idle)
        });
        assert_eq!(
            (p.a.state(a), p.b.state(b)),
            (Some(CmState::Idle), Some(CmState::Idle)),
            "connection {k}"
        );
        p.a.cm.destroy(p.now, a).unwrap();
        p.b.cm.destroy(p.now, b).unwrap();
    }
    assert_eq!(p.a.cm.connection_count() + p.b.cm.connection_count(), 0, "nothing leaks");
    let passive = p.b.events.iter().filter(|(_, e)| matches!(e, CmEvent::ReqReceived { .. })).count();
    assert_eq!(passive, 50);
}

/// 8 connections at once, then all disconnected at once from alternating sides.
#[test]
fn eight_concurrent_connections() {
    for seed in 0..10u64 {
        let mut p = CmPair::new(link(0.15, seed), 17_000 + seed);
        p.b.cm.listen(SVC, 64).unwrap();
        p.a.auto = auto();
        p.b.auto = AutoApp { accept_qpn_base: Some(0x1000), ..auto() };
        let ids = connect_many(&mut p, 0x20..0x28);
        p.run_idle(p.now + Duration::from_secs(200));
        check_consistent(&p);
        assert!(ids.iter().all(|&a| outcome(&p, a) == Outcome::Established), "seed {seed}");
        assert_eq!(p.b.cm.connections().filter(|(_, s)| *s == CmState::Established).count(), 8);
        for (k, &a) in ids.iter().enumerate() {
            if k % 2 == 0 {
                p.a.cm.disconnect(p.now, a).unwrap();
            } else {
                let b = CmId(p.a.cm.remote_id(a).unwrap());
                p.b.cm.disconnect(p.now, b).unwrap();
            }
        }
        p.run_idle(p.now + Duration::from_secs(300));
        assert!(p.a.cm.connections().all(|(_, s)| s == CmState::Idle), "seed {seed}");
        assert!(p.b.cm.connections().all(|(_, s)| s == CmState::Idle), "seed {seed}");
    }
}

const UDP_SVC: u64 = 0x0111_1c06;

fn sidr(p: &CmPair) -> softroce::transport::cm::SidrReqParams {
    softroce::transport::cm::SidrReqParams {
        path: req(p, true, 0x20).path,
        service_id: UDP_SVC,
        timeout: Duration::from_millis(4096),
        max_cm_retries: 15,
        private_data: vec![0; 36],
    }
}

/// How a SIDR exchange ended on the requesting side: its answers (success or status) and
/// timeouts, each counted, so that a doubled answer shows.
fn sidr_outcome(p: &CmPair, a: CmId) -> (Vec<(u8, u32, u32)>, usize) {
    let mut reps = Vec::new();
    let mut timeouts = 0;
    for (_, e) in &p.a.events {
        match e {
            CmEvent::SidrRepReceived { id, status, qpn, qkey, .. } if *id == a => {
                reps.push((*status, *qpn, *qkey))
            }
            CmEvent::SendError { id, what: SendError::SidrReq } if *id == a => timeouts += 1,
            _ => {}
        }
    }
    (reps, timeouts)
}

/// SIDR over lossy links: every request ends with exactly one answer (or one timeout after
/// its 16 tries), the listener's application sees each request once — a retransmission after
/// a lost SIDR_REP gets the same SIDR_REP again — and no-listener requests get status 1.
#[test]
fn sidr_over_lossy_links_answers_once_or_times_out() {
    let mut tally = std::collections::BTreeMap::new();
    let mut resent = 0;
    for drop in [0.0, 0.05, 0.2, 0.4] {
        for seed in 0..60u64 {
            let mut p = CmPair::new(link(drop, seed), 21_000 + seed * 7 + (drop * 100.0) as u64);
            let listening = seed % 5 != 0;
            if listening {
                p.b.cm.listen(UDP_SVC, 64).unwrap();
            }
            p.b.auto = AutoApp { sidr_accept: Some((0x77, 0x0123_4567)), ..auto() };
            let a = p.a.cm.sidr_request(p.now, &sidr(&p)).unwrap();
            let ok = p.run_until(secs(16.0 * 4.096 + 10.0), |p| {
                let (r, t) = sidr_outcome(p, a);
                !r.is_empty() || t > 0
            });
            assert!(ok, "drop {drop} seed {seed}: hang, a is {:?}", p.a.state(a));
            // Whatever still travels (duplicates, retransmissions) must not add an answer.
            p.run_idle(p.now + Duration::from_secs(120));
            let (reps, timeouts) = sidr_outcome(&p, a);
            assert_eq!(reps.len() + timeouts, 1, "drop {drop} seed {seed}: {reps:?} {timeouts}");
            let want = if listening { (0, 0x77, 0x0123_4567) } else { (1, 0, 0) };
            if let Some(r) = reps.first() {
                assert_eq!(*r, want, "drop {drop} seed {seed}");
            }
            let seen =
                p.b.events.iter().filter(|(_, e)| matches!(e, CmEvent::SidrReqReceived { .. })).count();
            assert!(seen <= usize::from(listening), "drop {drop} seed {seed}: {seen} requests for one");
            assert_eq!(p.a.state(a), Some(CmState::Idle));
            p.a.cm.destroy(p.now, a).unwrap();
            // The passive exchange is idle, then gone once the application destroys it.
            let ids: Vec<CmId> = p.b.cm.connections().map(|(id, _)| id).collect();
            for id in ids {
                assert_eq!(p.b.state(id), Some(CmState::Idle));
                p.b.cm.destroy(p.now, id).unwrap();
            }
            assert_eq!(p.a.cm.connection_count() + p.b.cm.connection_count(), 0);
            resent += p.b.cm.counters().sidr_rep_resent;
            let k = ((drop * 100.0) as u32, if timeouts > 0 { "timeout" } else { "answered" });
            *tally.entry(k).or_insert(0u32) += 1;
        }
    }
    println!("{tally:?}, SIDR_REPs resent for duplicates: {resent}");
    assert!(resent > 5, "the lossy runs lost SIDR_REPs and answered their retransmissions");
    for drop in [0u32, 5, 20, 40] {
        assert!(tally.get(&(drop, "answered")).copied().unwrap_or(0) >= 58, "{drop}: {tally:?}");
    }
}

/// Hostile SIDR MADs: a SIDR_REP for no request, a second SIDR_REP for an answered one, a
/// SIDR_REP naming a connection that is not a SIDR exchange, and a flood of SIDR_REQs beyond
/// the backlog: dropped or answered with a status, counted, no event, no panic.
#[test]
fn hostile_sidr_mads_are_dropped_and_counted() {
    use softroce::wire::cm::{SidrRepRepr, SidrReqRepr};
    use softroce::wire::mad::{MadBody, MadRepr};
    let mut p = CmPair::new(link(0.0, 0), 5);
    let from_b = CmPair::addr(&p.b, &p.a);
    let rep = |id: u32| {
        MadRepr::cm(9, MadBody::SidrRep(SidrRepRepr { request_id: id, qpn: 5, ..Default::default() }))
            .to_bytes()
    };
    // No request at all.
    let before = p.a.cm.counters().rx_no_connection;
    p.a.cm.handle_mad(p.now, &from_b, &rep(0x1234_5678));
    assert_eq!(p.a.cm.counters().rx_no_connection, before + 1);
    assert!(p.a.cm.poll_event().is_none());
    // A second answer to an answered request.
    p.b.cm.listen(UDP_SVC, 64).unwrap();
    p.b.auto = AutoApp { sidr_accept: Some((0x77, 1)), ..auto() };
    let a = p.a.cm.sidr_request(p.now, &sidr(&p)).unwrap();
    p.run_until(secs(5.0), |p| !sidr_outcome(p, a).0.is_empty());
    let wrong = p.a.cm.counters().rx_wrong_state;
    p.a.cm.handle_mad(p.now, &from_b, &rep(a.0));
    assert_eq!(p.a.cm.counters().rx_wrong_state, wrong + 1);
    p.settle();
    assert_eq!(sidr_outcome(&p, a).0.len(), 1);
    // A SIDR_REP naming an RC connection of ours.
    p.a.cm.listen(SVC, 64).unwrap();
    let rc = p.a.cm.connect(p.now, &req(&p, true, 0x30)).unwrap();
    let n = p.a.events.len();
    p.a.cm.handle_mad(p.now, &from_b, &rep(rc.0));
    p.settle();
    assert!(p.a.events[n..].iter().all(|(_, e)| !matches!(e, CmEvent::SidrRepReceived { .. })));
    // A flood of SIDR_REQs from "many requesters" to a listener with a backlog of 4 that
    // nobody answers: 4 wait, the rest are refused with status 2 (reject) at once.
    let mut q = CmPair::new(link(0.0, 0), 6);
    q.b.cm.listen(UDP_SVC, 4).unwrap();
    let from_a = CmPair::addr(&q.a, &q.b);
    for k in 0..100u32 {
        let r =
            SidrReqRepr { request_id: k, partition_key: 0xffff, service_id: UDP_SVC, ..Default::default() };
        q.b.cm.handle_mad(q.now, &from_a, &MadRepr::cm(k.into(), MadBody::SidrReq(r)).to_bytes());
    }
    let mut rejected = 0;
    while let Some(t) = q.b.cm.poll_transmit() {
        let m = softroce::wire::mad::Mad::new_checked(&t.mad[..]).unwrap();
        if let MadBody::SidrRep(r) = MadRepr::parse(&m).body {
            assert_eq!(r.status, 2);
            rejected += 1;
        }
    }
    assert_eq!(rejected, 96);
    assert_eq!(q.b.cm.counters().req_backlog_full, 96);
    let pending = std::iter::from_fn(|| q.b.cm.poll_event()).count();
    assert_eq!(pending, 4);
    assert_eq!(q.b.cm.connection_count(), 4, "refused requests leave nothing behind");
}
