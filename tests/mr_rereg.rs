//! Memory-region keys as kernel rxe gives them (rkey = lkey, also without remote rights) and
//! `MemoryRegion::rereg` changing access and PD in place with the keys kept, checked by real
//! traffic between two devices over UDP loopback.

mod common;

use common::verbs::*;
use softroce::verbs::*;

fn restate(a: &Side, b: &Side) {
    for s in [a, b] {
        s.qp.modify(&QpAttrs { state: Some(QpState::Reset), ..Default::default() }).unwrap();
    }
    connect(a, b, Mtu::Mtu1024);
}

#[test]
fn rkey_is_the_lkey_whatever_the_access() {
    let (a, _b) = udp_pair(4096, Mtu::Mtu1024);
    for access in [Access::NONE, Access::LOCAL_WRITE, Access::ALL] {
        let mr = a.pd.alloc_mr(64, access).unwrap();
        assert_eq!(mr.rkey().value(), mr.lkey().value(), "{access:?}");
        assert_ne!(mr.lkey().value(), 0);
    }
}

#[test]
fn rereg_access_keeps_the_keys_and_changes_what_peers_may_do() {
    let (a, b) = udp_pair(4096, Mtu::Mtu1024);
    let mut target = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let (lkey, remote) = (target.lkey(), target.remote(0));
    a.mr.write(0, b"before").unwrap();

    // No remote write yet: the rkey exists but the write is refused.
    a.qp.post_send(SendWr::write(1, &[a.mr.sge(0, 6)], remote)).unwrap();
    assert_eq!(a.wait().status, WcStatus::RemAccessErr);
    assert_eq!(target.load_u8(0).unwrap(), 0);

    // Grant it: same keys, and the rkey the peer already holds now works.
    target.rereg(None, Some(Access::LOCAL_WRITE | Access::REMOTE_WRITE)).unwrap();
    assert_eq!((target.lkey(), target.rkey().value()), (lkey, lkey.value()));
    assert_eq!(target.access(), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    restate(&a, &b);
    a.qp.post_send(SendWr::write(2, &[a.mr.sge(0, 6)], remote)).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(target.to_vec()[..6], *b"before");

    // Withdraw it again: refused again.
    target.rereg(None, Some(Access::LOCAL_WRITE)).unwrap();
    a.qp.post_send(SendWr::write(3, &[a.mr.sge(0, 6)], remote)).unwrap();
    assert_eq!(a.wait().status, WcStatus::RemAccessErr);

    // Remote write without local write is refused, and changes nothing.
    assert!(matches!(target.rereg(None, Some(Access::REMOTE_WRITE)), Err(Error::InvalidArgument(_))));
    assert_eq!(target.access(), Access::LOCAL_WRITE);
}

#[test]
fn rereg_pd_fails_receives_at_execution_and_moving_back_heals() {
    let (a, b) = udp_pair(4096, Mtu::Mtu1024);
    let other = b.dev.alloc_pd().unwrap();
    let mut rbuf = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let lkey = rbuf.lkey();
    a.mr.write(0, b"hello").unwrap();

    // Posted while the region is in the QP's PD, executed after it moved: the receive ends in
    // a protection error and the sender gets a remote operational error NAK.
    b.qp.post_recv_checked_on_use(RecvWr::new(10, &[rbuf.sge(0, 64)])).unwrap();
    rbuf.rereg(Some(&other), None).unwrap();
    assert_eq!(rbuf.lkey(), lkey);
    a.qp.post_send(SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 5)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::RemOpErr);
    assert_eq!(b.wait().status, WcStatus::LocProtErr);
    assert_eq!(rbuf.load_u8(0).unwrap(), 0, "nothing written into the moved region");
    // The checking post refuses it at once.
    assert!(matches!(b.qp.post_recv(RecvWr::new(11, &[rbuf.sge(0, 64)])), Err(Error::PdMismatch(_))));

    // Back in the QP's PD, with the same keys: traffic flows.
    restate(&a, &b);
    rbuf.rereg(Some(&b.pd), None).unwrap();
    b.qp.post_recv_checked_on_use(RecvWr::new(12, &[rbuf.sge(0, 64)])).unwrap();
    a.qp.post_send(SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 5)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!((wc.status, wc.wr_id, wc.byte_len), (WcStatus::Success, 12, 5));
    assert_eq!(rbuf.to_vec()[..5], *b"hello");

    // A PD of another device is refused.
    let elsewhere = a.dev.alloc_pd().unwrap();
    assert!(matches!(rbuf.rereg(Some(&elsewhere), None), Err(Error::InvalidArgument(_))));
}

/// What rdma-core's tests do after a failure: RESET and back to RTS, then traffic again.
/// The reset drops the QP's completions still in its CQ (as mlx4/mlx5 do) and frees every
/// queue slot, also those of work requests that were posted and never completed.
#[test]
fn reset_forgets_completions_and_frees_the_queues() {
    let caps =
        QpCaps { max_send_wr: 2, max_recv_wr: 2, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let a = Side::new(Device::open(DeviceConfig::new(loopback_ip())).unwrap(), 4096, caps);
    let b = Side::new(Device::open(DeviceConfig::new(loopback_ip())).unwrap(), 4096, caps);
    connect(&a, &b, Mtu::Mtu1024);
    // A write to a bad rkey fails; a's posted receives are flushed into a's CQ.
    a.qp.post_recv(RecvWr::new(7, &[a.mr.sge(0, 8)])).unwrap();
    a.qp.post_recv(RecvWr::new(8, &[a.mr.sge(0, 8)])).unwrap();
    let bad = RemoteAddr { addr: b.mr.addr(), rkey: Rkey::new(b.mr.rkey().value() ^ 1) };
    a.qp.post_send(SendWr::write(1, &[a.mr.sge(0, 8)], bad)).unwrap();
    let wc = a.wait();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr));
    std::thread::sleep(std::time::Duration::from_millis(50));
    restate(&a, &b);
    let mut wcs = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0)); 4];
    assert_eq!(a.cq.poll(&mut wcs).unwrap(), 0, "the flushed receives went with the reset");
    // Both queues have their full depth again.
    for i in 0..2 {
        a.qp.post_recv(RecvWr::new(20 + i, &[a.mr.sge(0, 8)])).unwrap();
        b.qp.post_recv(RecvWr::new(30 + i, &[b.mr.sge(0, 8)])).unwrap();
    }
    for i in 0..2 {
        a.qp.post_send(SendWr::new(40 + i, SendOp::Send, &[a.mr.sge(0, 8)])).unwrap();
    }
    for _ in 0..2 {
        assert_eq!(a.wait().status, WcStatus::Success);
        assert_eq!(b.wait().status, WcStatus::Success);
    }
}
