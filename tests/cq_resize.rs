//! `CompletionQueue::resize` (`ibv_resize_cq`): grows and shrinks, keeps the completions it
//! holds in order, refuses to shrink below them (as rxe) and outside 1..=max_cqe.

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
