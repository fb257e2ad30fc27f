//! The requester's loss recovery, packet by packet in virtual time: one go-back-N per
//! sequence NAK however often the NAK arrives, a READ re-requested at the first gap in its
//! response stream, the probe that recovers a lost retransmission (or a lost NAK) long before
//! the local ACK timeout without taking a retry, a dead peer still failing after `retry_cnt`
//! timeouts, and the in-flight window that halves after a loss and grows back.

mod common;

use common::duo::*;
use softroce::transport::sim::PairConfig;
use softroce::transport::*;
use softroce::wire::aeth::{NakCode, Syndrome};
use softroce::wire::{Opcode, Packet};
use std::time::Duration;

/// Local ACK timeout code 14: 67 ms, the library's default.
const TIMEOUT_14: Duration = Duration::from_nanos(4096 << 14);

fn duo(timeout: u8) -> Duo {
    Duo::new(PairConfig { mtu: Mtu::Mtu1024, timeout, ..PairConfig::default() })
}

/// As [`duo`], with A's tail probe off: the tests of the go-back-N probe alone.
fn duo_no_tail(timeout: u8) -> Duo {
    let mut d = duo(timeout);
    d.a.set_tuning(QpTuning { tail_probe_min: None, ..d.a.tuning() });
    d
}

fn write(d: &mut Duo, id: u64, len: u32) {
    d.a.post_send(SendWr::new(id, SendOp::RdmaWrite(Duo::remote(0)), &[Duo::sge(0, len)])).unwrap();
}

/// One WRITE answered `rtt` after it left: gives A a round-trip estimate.
/// A 6 KiB WRITE (six packets) whose third packet is lost, then, after the responder's NAK,
/// the first packet of the go-back-N retransmission too; the rest is delivered and the
/// responder, which NAKs a gap once, stays silent. Returns the NAK, the lost retransmission
/// and what was delivered of it.
fn lose_a_packet_and_its_retransmission(d: &mut Duo) -> (Vec<Vec<u8>>, Vec<u8>, Vec<Vec<u8>>) {
    write(d, 1, 6 * 1024);
    let mut req = d.tx_a();
    assert_eq!(req.len(), 6);
    req.remove(2);
    d.deliver_b(&req);
    let nak = d.tx_b();
    d.deliver_a(&nak);
    let mut again = d.tx_a();
    assert_eq!(again.len(), 4);
    let lost = again.remove(0);
    d.deliver_b(&again);
    assert!(d.tx_b().is_empty());
    (nak, lost, again)
}

fn measure_rtt(d: &mut Duo, rtt: Duration) {
    write(d, 100, 64);
    let req = d.tx_a();
    d.advance(rtt);
    d.deliver_b(&req);
    let ack = d.tx_b();
    d.deliver_a(&ack);
    assert_eq!(d.a_send.pop().map(|w| w.status), Some(WcStatus::Success));
    assert_eq!(d.a.srtt(), Some(rtt));
}

#[test]
fn duplicate_naks_start_one_retransmission() {
    let mut d = duo(14);
    write(&mut d, 1, 6 * 1024);
    let mut req = d.tx_a();
    assert_eq!(req.len(), 6);
    let lost = req.remove(1);
    d.deliver_b(&req);
    let nak = d.tx_b();
    assert_eq!(nak.len(), 1, "one NAK per gap");
    assert_eq!(syndrome(&nak[0]), Some(Syndrome::Nak(NakCode::PsnSequenceError)));
    // The NAK arrives three times (duplicated by the network): one go-back-N.
    d.deliver_a(&[nak[0].clone(), nak[0].clone(), nak[0].clone()]);
    let again = d.tx_a();
    assert_eq!(again.len(), 5, "go-back-N from the NAKed PSN, once");
    assert_eq!(again[0], lost);
    assert_eq!(d.a.counters().completer_retry_err, 1);
    // A fourth copy after the retransmission went out starts nothing either.
    d.deliver_a(&nak);
    assert!(d.tx_a().is_empty(), "a duplicate NAK retransmitted again");
    d.deliver_b(&again);
    d.settle();
    assert_eq!(d.a_send.iter().map(|w| w.status).collect::<Vec<_>>(), [WcStatus::Success]);
    assert_eq!(d.a.counters().completer_retry_err, 1);
}

#[test]
fn read_gap_is_rerequested_at_once_and_once() {
    let mut d = duo(14);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    d.mb.set(TGT, TGT_ADDR, &data);
    d.a.post_send(SendWr::new(1, SendOp::RdmaRead(Duo::remote(0)), &[Duo::sge(0, 5000)])).unwrap();
    let req = d.tx_a();
    let first = psn(&req[0]);
    d.deliver_b(&req);
    let mut resp = d.tx_b();
    assert_eq!(resp.len(), 5);
    resp.remove(1); // the second response is lost
    // The third arrives beyond the gap: A asks again for the rest at once, no timer.
    d.deliver_a(&resp[..2]);
    let again = d.tx_a();
    assert_eq!(again.len(), 1, "one re-request");
    let p = Packet::new_checked(&again[0]).unwrap();
    assert_eq!(op(&again[0]), Opcode::RC_READ_REQ);
    assert_eq!(p.bth().psn(), first.add(1), "at the first missing PSN");
    let reth = p.reth().unwrap();
    assert_eq!((reth.va(), reth.dma_len()), (TGT_ADDR + 1024, 5000 - 1024), "only what is missing");
    // The rest of the old stream (beyond the gap) starts no second re-request.
    d.deliver_a(&resp[2..]);
    assert!(d.tx_a().is_empty(), "stale responses of the old stream asked again");
    assert_eq!(d.a.counters().rcvd_read_gap, 1);
    assert_eq!(d.a.counters().completer_retry_err, 1);
    assert_eq!(d.a.counters().local_ack_timeout_err, 0);
    d.deliver_b(&again);
    d.settle();
    assert_eq!(d.a_send.iter().map(|w| w.status).collect::<Vec<_>>(), [WcStatus::Success]);
    assert_eq!(d.ma.get(BUF, BUF_ADDR, 5000), data);
}

#[test]
fn probe_recovers_a_lost_retransmission_long_before_the_ack_timeout() {
    let mut d = duo_no_tail(14);
    let rtt = Duration::from_micros(300);
    measure_rtt(&mut d, rtt);
    let (nak, _, _) = lose_a_packet_and_its_retransmission(&mut d);
    // The probe: srtt + 4 rttvar is below its 2 ms floor, so 2 ms of silence.
    let at = d.a.poll_timeout().expect("a timer runs");
    assert_eq!(at - Time::ZERO, rtt + PROBE_MIN, "the probe, armed by the NAK's progress");
    d.advance(PROBE_MIN - Duration::from_nanos(1));
    assert!(d.tx_a().is_empty(), "nothing before the probe");
    d.advance(Duration::from_nanos(1));
    let probe = d.tx_a();
    assert_eq!(probe.len(), 4, "go-back-N from the oldest unacknowledged PSN");
    assert_eq!(psn(&probe[0]), psn(&nak[0]));
    assert!(d.now - Time::ZERO < TIMEOUT_14 / 10);
    d.deliver_b(&probe);
    d.settle();
    assert_eq!(d.a_send.iter().map(|w| w.status).collect::<Vec<_>>(), [WcStatus::Success]);
    let c = d.a.counters();
    assert_eq!(c.probe_retransmit, 1);
    assert_eq!(c.local_ack_timeout_err, 0);
    assert_eq!(c.completer_retry_err, 1, "the probe is not a retry");
    assert_eq!(d.b.counters().out_of_seq_request, 1, "the responder NAKed the gap once");
}

#[test]
fn probe_recovers_a_lost_nak() {
    let mut d = duo_no_tail(14);
    measure_rtt(&mut d, Duration::from_micros(100));
    write(&mut d, 1, 4 * 1024);
    let mut req = d.tx_a();
    req.remove(0);
    d.deliver_b(&req);
    let _lost_nak = d.tx_b();
    d.advance(PROBE_MIN);
    let probe = d.tx_a();
    assert_eq!(probe.len(), 4, "the whole message again");
    d.deliver_b(&probe);
    d.settle();
    assert_eq!(d.a_send[0].status, WcStatus::Success);
    assert_eq!(d.a.counters().probe_retransmit, 1);
    assert_eq!(d.a.counters().local_ack_timeout_err, 0);
}

#[test]
fn probes_back_off_and_a_dead_peer_still_fails_after_retry_cnt_timeouts() {
    let mut d =
        Duo::new(PairConfig { mtu: Mtu::Mtu1024, timeout: 14, retry_cnt: 2, ..PairConfig::default() });
    d.a.set_tuning(QpTuning { tail_probe_min: None, ..d.a.tuning() });
    measure_rtt(&mut d, Duration::from_micros(100));
    write(&mut d, 1, 2048);
    let start = d.now;
    let mut sent = 0;
    // The peer is gone: everything is lost.
    while d.a.state() != QpState::Err {
        sent += d.tx_a().len();
        let next = d.a.poll_timeout().expect("a timer runs until the QP fails");
        d.advance(next - d.now);
        assert!(d.now - start <= TIMEOUT_14 * 3 * LOCAL_ACK_STRETCH, "not failed in time");
    }
    assert_eq!(d.a_send[0].status, WcStatus::RetryExcErr);
    let c = d.a.counters();
    assert_eq!(c.local_ack_timeout_err, 3, "retry_cnt 2: the third timeout fails the request");
    // The local ACK timer is not re-armed by probes: the QP fails at 3 T.
    assert_eq!(d.now - start, TIMEOUT_14 * 3);
    // Probes double their interval while unanswered: 2, 4, 8, 16, 32 ms ... then the
    // timeouts, each followed by probes again at the longest interval.
    assert!(c.probe_retransmit >= 5 && c.probe_retransmit <= 12, "probes: {}", c.probe_retransmit);
    assert_eq!(sent as u64, 2 * (1 + c.probe_retransmit + 2), "each probe and retry resent both packets");
}

#[test]
fn no_probe_without_a_round_trip_estimate_or_within_it() {
    // No estimate yet: only the local ACK timer.
    let mut d = duo(14);
    write(&mut d, 1, 1024);
    d.tx_a();
    assert_eq!(d.a.poll_timeout(), Some(Time::ZERO + TIMEOUT_14));
    // A slow path: the probe waits srtt + 4 rttvar (here 3 × 5 ms), not its floor.
    let mut d = duo_no_tail(14);
    let rtt = Duration::from_millis(5);
    measure_rtt(&mut d, rtt);
    write(&mut d, 1, 1024);
    d.tx_a();
    assert_eq!(d.a.poll_timeout(), Some(d.now + rtt * 3));
}

#[test]
fn window_halves_after_a_loss_and_grows_back() {
    let mut d = duo(14);
    let max = d.a.tuning().max_unacked_psns;
    assert_eq!(d.a.send_window(), max);
    // 1 MiB at PMTU 1024: 1024 packets, at most a window at a time.
    write(&mut d, 1, 1 << 20);
    let mut req = d.tx_a();
    assert_eq!(req.len(), max as usize, "a full window");
    req.remove(10);
    d.deliver_b(&req);
    let nak = d.tx_b();
    d.deliver_a(&nak);
    assert_eq!(d.a.send_window(), max / 2, "halved by the loss");
    let again = d.tx_a();
    assert_eq!(again.len(), (max / 2) as usize, "the retransmission keeps to the halved window");
    // Loss-free rounds: one window out, its ACKs back; the window grows each round.
    let mut last = d.a.send_window();
    let mut rounds = 0;
    let mut pkts = again;
    while !d.a_send.iter().any(|w| w.wr_id == 1) {
        d.deliver_b(&pkts);
        let acks = d.tx_b();
        d.deliver_a(&acks);
        let w = d.a.send_window();
        assert!(w >= last, "the window shrank without loss");
        last = w;
        pkts = d.tx_a();
        rounds += 1;
        assert!(rounds < 100);
    }
    assert!(last > max / 2 + 16, "grew back: {last}");
    assert_eq!(d.a_send[0].status, WcStatus::Success);
}

#[test]
fn repeated_losses_stop_at_the_floor_and_a_timeout_leaves_the_window() {
    let mut d = duo(8);
    // Each round: the first packet of an 8 KiB WRITE lost; the NAK for it halves the window
    // (down to 16 PSNs); the retransmission arrives and the ACKs grow it a little.
    let mut floor_reached = false;
    for round in 0..20 {
        write(&mut d, round, 8 * 1024);
        let mut req = d.tx_a();
        req.remove(0);
        d.deliver_b(&req);
        let nak = d.tx_b();
        let before = d.a.send_window();
        d.deliver_a(&nak);
        assert_eq!(d.a.send_window(), (before / 2).max(16), "round {round}");
        floor_reached |= d.a.send_window() == 16;
        d.settle();
        assert_eq!(d.a_send.last().map(|w| (w.wr_id, w.status)), Some((round, WcStatus::Success)));
    }
    assert!(floor_reached);
    // A local ACK timeout does not shrink it (here it mostly means a peer without a CPU).
    let before = d.a.send_window();
    write(&mut d, 99, 64 * 1024);
    let sent = d.tx_a();
    assert_eq!(sent.len(), before.min(64) as usize);
    d.advance(d.a.local_ack_timeout().unwrap());
    assert_eq!(d.a.counters().local_ack_timeout_err, 1);
    assert_eq!(d.a.send_window(), before);
    let again = d.tx_a();
    assert_eq!(again.len(), sent.len());
    d.deliver_b(&again);
    d.settle();
    assert_eq!(d.a_send.last().map(|w| (w.wr_id, w.status)), Some((99, WcStatus::Success)));
}

/// Whether packet `p` asks for an acknowledgement.
fn ack_req(p: &[u8]) -> bool {
    Packet::new_checked(p).unwrap().bth().ack_req()
}

#[test]
fn tail_probe_answers_a_lost_ack_with_one_packet() {
    let mut d = duo(14);
    // (off by default: turned on here)
    d.a.set_tuning(QpTuning { tail_probe_min: Some(TAIL_PROBE_MIN), ..d.a.tuning() });
    let rtt = Duration::from_micros(100);
    measure_rtt(&mut d, rtt);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
    d.ma.set(BUF, BUF_ADDR, &data);
    write(&mut d, 1, 4096);
    let req = d.tx_a();
    assert_eq!(req.len(), 4);
    d.deliver_b(&req);
    let _lost_ack = d.tx_b();
    // Two round trips (200 µs) are below the tail probe's floor: 250 µs of silence, long
    // before the go-back-N probe (2 ms).
    let at = d.a.poll_timeout().expect("a timer runs");
    assert_eq!(at - d.now, TAIL_PROBE_MIN);
    d.advance(TAIL_PROBE_MIN - Duration::from_nanos(1));
    assert!(d.tx_a().is_empty(), "nothing before the tail probe");
    d.advance(Duration::from_nanos(1));
    let probe = d.tx_a();
    assert_eq!(probe.len(), 1, "the oldest unacknowledged packet alone");
    assert_eq!(probe[0], {
        // The same packet, with AckReq set.
        let mut p = req[0].clone();
        p[8] |= 0x80;
        p
    });
    assert!(ack_req(&probe[0]));
    // The responder has it already: a duplicate, answered with the last PSN it executed.
    d.deliver_b(&probe);
    let ack = d.tx_b();
    assert_eq!(ack.len(), 1);
    assert_eq!(psn(&ack[0]), psn(&req[3]));
    d.deliver_a(&ack);
    assert_eq!(d.a_send.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(1, WcStatus::Success)]);
    assert!(d.tx_a().is_empty(), "nothing resent");
    let c = d.a.counters();
    assert_eq!((c.tail_probe, c.tail_probe_retransmit, c.probe_retransmit), (1, 0, 0));
    assert_eq!(d.a.send_window(), d.a.tuning().max_unacked_psns, "no loss: the window stays");
    assert_eq!(d.b.counters().duplicate_request, 1);
    assert_eq!(d.mb.get(TGT, TGT_ADDR, 4096), data);
}

#[test]
fn tail_probe_answered_with_its_own_psn_goes_back_n_from_the_next() {
    let mut d = duo(14);
    // (off by default: turned on here)
    d.a.set_tuning(QpTuning { tail_probe_min: Some(TAIL_PROBE_MIN), ..d.a.tuning() });
    measure_rtt(&mut d, Duration::from_micros(100));
    let data: Vec<u8> = (0..6144u32).map(|i| (i * 5 + 1) as u8).collect();
    d.ma.set(BUF, BUF_ADDR, &data);
    let (_, lost, again) = lose_a_packet_and_its_retransmission(&mut d);
    d.advance(TAIL_PROBE_MIN);
    let probe = d.tx_a();
    assert_eq!(probe.len(), 1);
    assert_eq!(psn(&probe[0]), psn(&lost));
    assert!(ack_req(&probe[0]));
    // The responder executes it and acknowledges exactly it: the packets after it are
    // missing, and the requester goes back N from the next PSN at once.
    d.deliver_b(&probe);
    let ack = d.tx_b();
    assert_eq!(ack.len(), 1);
    assert_eq!(psn(&ack[0]), psn(&lost));
    d.deliver_a(&ack);
    let rest = d.tx_a();
    assert_eq!(
        rest.iter().map(|p| psn(p)).collect::<Vec<_>>(),
        again.iter().map(|p| psn(p)).collect::<Vec<_>>()
    );
    d.deliver_b(&rest);
    d.settle();
    assert_eq!(d.a_send.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), [(1, WcStatus::Success)]);
    let c = d.a.counters();
    assert_eq!((c.tail_probe, c.tail_probe_retransmit, c.probe_retransmit), (1, 1, 0));
    assert_eq!(c.local_ack_timeout_err, 0);
    assert_eq!(d.mb.get(TGT, TGT_ADDR, 6144), data);
    assert!(d.now - Time::ZERO < PROBE_MIN, "recovered before the go-back-N probe");
}

#[test]
fn tail_probe_leaves_a_read_to_the_probe() {
    let mut d = duo(14);
    // (off by default: turned on here)
    d.a.set_tuning(QpTuning { tail_probe_min: Some(TAIL_PROBE_MIN), ..d.a.tuning() });
    measure_rtt(&mut d, Duration::from_micros(100));
    d.a.post_send(SendWr::new(1, SendOp::RdmaRead(Duo::remote(0)), &[Duo::sge(0, 4096)])).unwrap();
    let req = d.tx_a();
    assert_eq!(req.len(), 1);
    // Request lost: no tail probe (a duplicate READ is answered in full), the go-back-N
    // probe asks again.
    d.advance(TAIL_PROBE_MIN);
    assert!(d.tx_a().is_empty());
    d.advance(PROBE_MIN);
    let again = d.tx_a();
    assert_eq!(again.len(), 1);
    d.deliver_b(&again);
    d.settle();
    assert_eq!(d.a_send[0].status, WcStatus::Success);
    assert_eq!(d.a.counters().tail_probe, 0);
    assert_eq!(d.a.counters().probe_retransmit, 1);
}
