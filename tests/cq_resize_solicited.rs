//! `CompletionQueue::resize` (`ibv_resize_cq`): grows and shrinks, keeps the completions it
//! holds in order, refuses to shrink below them (as rxe) and outside 1..=max_cqe. Solicited-only notification (`ibv_req_notify_cq(cq, 1)`), and what fires a notification.

mod common;

use std::time::Duration;

use common::verbs::*;
use softroce::verbs::*;

#[test]
fn resize_keeps_completions_and_refuses_to_drop_any() {
    let (a, b) = udp_pair(4096, Mtu::Mtu1024);
    let cq = a.dev.create_cq(3).unwrap();
    cq.resize(1).unwrap();
    assert_eq!(cq.cqe(), 1);
    cq.resize(7).unwrap();
    assert_eq!(cq.cqe(), 7);
    assert!(matches!(cq.resize(0), Err(Error::Limit { what: "max_cqe", .. })));
    let max = a.dev.query_device().max_cqe as usize;
    assert!(matches!(cq.resize(max + 1), Err(Error::Limit { what: "max_cqe", .. })));
    assert_eq!(cq.cqe(), 7, "a refused resize changes nothing");

    // Six receive completions waiting in b's CQ.
    for i in 0..6 {
        b.qp.post_recv(RecvWr::new(100 + i, &[b.mr.sge(64 * i as usize, 64)])).unwrap();
    }
    for i in 0..6 {
        a.qp.post_send(SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 16)])).unwrap();
    }
    for _ in 0..6 {
        assert_eq!(a.wait().status, WcStatus::Success);
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(matches!(b.cq.resize(5), Err(Error::InvalidArgument(_))));
    assert_eq!(b.cq.cqe(), 4096);
    b.cq.resize(6).unwrap();
    assert_eq!(b.cq.cqe(), 6);
    for i in 0..6 {
        let wc = b.wait();
        assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 100 + i));
    }
    // Full again after growing: traffic goes on.
    b.cq.resize(64).unwrap();
    b.qp.post_recv(RecvWr::new(7, &[b.mr.sge(0, 64)])).unwrap();
    a.qp.post_send(SendWr::new(7, SendOp::Send, &[a.mr.sge(0, 16)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(b.wait().wr_id, 7);
}

/// Polls `cq` (without arming it) until one completion is there.
fn poll_one(cq: &CompletionQueue) -> WorkCompletion {
    let t = std::time::Instant::now();
    loop {
        if let Some(wc) = cq.poll_one().unwrap() {
            return wc;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no completion");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `ibv_req_notify_cq(cq, 1)`: only a solicited receive fires the event; a plain arm fires
/// for anything, and a solicited arm does not narrow it.
#[test]
fn solicited_only_notification() {
    let (a, b) = udp_pair(4096, Mtu::Mtu1024);
    for i in 0..4 {
        b.qp.post_recv(RecvWr::new(i, &[b.mr.sge(0, 64)])).unwrap();
    }
    b.cq.req_notify_solicited();
    a.qp.post_send(SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    assert!(!poll_one(&b.cq).solicited);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.cq.ack_notify(), 0, "an unsolicited receive does not fire a solicited-only arm");
    a.qp.post_send(SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]).solicited()).unwrap();
    assert!(poll_one(&b.cq).solicited);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.cq.ack_notify(), 1, "the solicited receive fires it, once");
    // Armed for any completion, then solicited-only: still fires for a plain receive.
    b.cq.req_notify();
    b.cq.req_notify_solicited();
    a.qp.post_send(SendWr::new(3, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    poll_one(&b.cq);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.cq.ack_notify(), 1);
    for _ in 0..3 {
        assert_eq!(poll_one(&a.cq).status, WcStatus::Success);
    }
}

/// An armed CQ's notification fires when a completion is added to it, not for the packets of
/// a QP that completed nothing: RDMA WRITEs the responder executes, the ACKs of unsignaled
/// sends. (Every such packet woke a thread asleep on the CQ: 37,000 wake-ups a second of a
/// WRITE target's application waiting for its next SEND.)
#[test]
fn notification_waits_for_a_completion() {
    let (a, b) = udp_pair(4096, Mtu::Mtu1024);
    let target = b.mr.remote(0);
    b.qp.post_recv(RecvWr::new(9, &[b.mr.sge(0, 64)])).unwrap();
    b.cq.req_notify();
    a.cq.req_notify();
    // Unsignaled WRITEs: nothing completes at either side while they are executed and ACKed.
    for i in 0..20 {
        let mut wr = SendWr::write(i, &[a.mr.sge(0, 3000)], target);
        wr.signaled = false;
        a.qp.post_send(wr).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(a.cq.ack_notify(), 0, "the ACKs of unsignaled WRITEs complete nothing");
    assert_eq!(b.cq.ack_notify(), 0, "WRITEs executed at the responder complete nothing there");
    // A signaled WRITE: its completion fires the requester's arm, once.
    a.qp.post_send(SendWr::write(20, &[a.mr.sge(0, 3000)], target)).unwrap();
    assert_eq!(poll_one(&a.cq).wr_id, 20);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(a.cq.ack_notify(), 1);
    assert_eq!(b.cq.ack_notify(), 0);
    // A SEND: the receive completion fires the responder's.
    a.qp.post_send(SendWr::new(21, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    assert_eq!(poll_one(&b.cq).wr_id, 9);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.cq.ack_notify(), 1);
    assert_eq!(poll_one(&a.cq).wr_id, 21);
}
