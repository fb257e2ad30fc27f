//! Memory windows (type 1 and type 2B) as kernel rxe implements them: bind, access through
//! the window's rights and range, rebind changing the rkey, unbind, local and remote
//! invalidation, deallocation, and the bind checks — by real traffic between two devices
//! over UDP loopback.

mod common;

use common::verbs::*;
use softroce::verbs::*;

/// Two connected sides; `b` gets a region `target` with MW bind right but no remote rights.
fn setup() -> (Side, Side, MemoryRegion) {
    let (a, b) = udp_pair(4096, Mtu::Mtu1024);
    let target = b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND).unwrap();
    a.mr.write(0, b"through the window").unwrap();
    (a, b, target)
}

fn write(a: &Side, id: u64, len: u32, remote: RemoteAddr) -> WcStatus {
    a.qp.post_send(SendWr::write(id, &[a.mr.sge(0, len)], remote)).unwrap();
    let wc = a.wait();
    assert_eq!(wc.wr_id, id);
    wc.status
}

/// Both QPs back to RTS after an error (a remote access error takes the requester's QP to
/// the error state).
fn restate(a: &Side, b: &Side) {
    for s in [a, b] {
        s.qp.modify(&QpAttrs { state: Some(QpState::Reset), ..Default::default() }).unwrap();
    }
    connect(a, b, Mtu::Mtu1024);
}

#[test]
fn type1_bind_grants_only_the_window_and_rebind_revokes_the_old_rkey() {
    let (a, b, target) = setup();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    assert_eq!(mw.mw_type(), MwType::Type1);
    let first = mw.rkey();
    // The region itself has no remote right.
    assert_eq!(write(&a, 1, 18, target.remote(100)), WcStatus::RemAccessErr);
    restate(&a, &b);

    let rkey = b.qp.bind_mw(7, &mw, &target, 64, 128, Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (7, WcStatus::Success, WcOpcode::BindMw));
    assert_eq!(mw.rkey(), rkey);
    assert_eq!(rkey.value() >> 8, first.value() >> 8, "the index stays, the 8-bit key changes");
    assert_ne!(rkey, first);
    assert_eq!(target.bound_windows(), 1, "ibv_dereg_mr would fail with EINVAL");

    let base = target.addr() + 64;
    assert_eq!(write(&a, 2, 18, RemoteAddr { addr: base + 10, rkey }), WcStatus::Success);
    assert_eq!(&target.to_vec()[74..92], b"through the window");
    // READ back through the window.
    a.qp.post_send(SendWr::new(
        3,
        SendOp::RdmaRead(RemoteAddr { addr: base + 10, rkey }),
        &[a.mr.sge(1000, 18)],
    ))
    .unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    assert_eq!(&a.mr.to_vec()[1000..1018], b"through the window");
    // One byte past the window's end.
    assert_eq!(write(&a, 4, 18, RemoteAddr { addr: base + 128 - 17, rkey }), WcStatus::RemAccessErr);
    restate(&a, &b);
    // No atomic right.
    a.qp.post_send(SendWr::new(
        5,
        SendOp::FetchAdd { remote: RemoteAddr { addr: base, rkey }, add: 1 },
        &[a.mr.sge(2048, 8)],
    ))
    .unwrap();
    assert_eq!(a.wait().status, WcStatus::RemAccessErr);
    restate(&a, &b);

    // Rebind elsewhere: the old rkey is dead, the new one works.
    let again = b.qp.bind_mw(8, &mw, &target, 0, 16, Access::REMOTE_WRITE).unwrap();
    assert_eq!(b.wait().status, WcStatus::Success);
    assert_ne!(again, rkey);
    assert_eq!(write(&a, 6, 4, RemoteAddr { addr: base + 10, rkey }), WcStatus::RemAccessErr);
    restate(&a, &b);
    assert_eq!(write(&a, 7, 4, RemoteAddr { addr: target.addr(), rkey: again }), WcStatus::Success);

    // A zero-length bind unbinds it.
    let none = b.qp.bind_mw(9, &mw, &target, 0, 0, Access::NONE).unwrap();
    assert_eq!(b.wait().status, WcStatus::Success);
    assert_eq!(target.bound_windows(), 0);
    assert_eq!(write(&a, 8, 4, RemoteAddr { addr: target.addr(), rkey: none }), WcStatus::RemAccessErr);
}

#[test]
fn type2_bind_by_work_request_and_local_invalidate() {
    let (a, b, target) = setup();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    // Type 2 windows are not bound with ibv_bind_mw.
    assert!(matches!(
        b.qp.bind_mw(1, &mw, &target, 0, 64, Access::REMOTE_WRITE),
        Err(Error::InvalidArgument(_))
    ));
    let (op, rkey) = mw.bind_op(&target, 0, 4096, Access::REMOTE_WRITE);
    b.qp.post_send(SendWr { signaled: true, ..SendWr::new(2, op, &[]) }).unwrap();
    let wc = b.wait();
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::BindMw));
    assert_eq!(write(&a, 1, 18, RemoteAddr { addr: target.addr() + 8, rkey }), WcStatus::Success);
    assert_eq!(&target.to_vec()[8..26], b"through the window");
    assert_eq!(target.bound_windows(), 1);

    // A bound type 2 window cannot be bound again before it is invalidated.
    let (op, _) = mw.bind_op(&target, 0, 64, Access::REMOTE_WRITE);
    b.qp.post_send(SendWr { signaled: true, ..SendWr::new(3, op, &[]) }).unwrap();
    assert_eq!(b.wait().status, WcStatus::MwBindErr);
    restate(&a, &b);

    b.qp.post_send(SendWr { signaled: true, ..SendWr::new(4, SendOp::LocalInv(rkey), &[]) }).unwrap();
    let wc = b.wait();
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::LocalInv));
    assert_eq!(target.bound_windows(), 0);
    assert_eq!(write(&a, 2, 4, RemoteAddr { addr: target.addr(), rkey }), WcStatus::RemAccessErr);
    restate(&a, &b);

    // Free again: it binds, with a new rkey.
    let (op, rkey2) = mw.bind_op(&target, 0, 64, Access::REMOTE_WRITE);
    assert_ne!(rkey2, rkey);
    b.qp.post_send(SendWr { signaled: true, ..SendWr::new(5, op, &[]) }).unwrap();
    assert_eq!(b.wait().status, WcStatus::Success);
    assert_eq!(write(&a, 3, 4, RemoteAddr { addr: target.addr(), rkey: rkey2 }), WcStatus::Success);

    // Deallocating the window kills its rkey.
    assert_eq!(target.bound_windows(), 1);
    drop(mw);
    assert_eq!(target.bound_windows(), 0);
    assert_eq!(write(&a, 4, 4, RemoteAddr { addr: target.addr(), rkey: rkey2 }), WcStatus::RemAccessErr);
}

#[test]
fn type2_remote_invalidate_and_only_the_binding_qp_may_use_it() {
    let (a, b, target) = setup();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let (op, rkey) = mw.bind_op(&target, 0, 256, Access::REMOTE_WRITE);
    b.qp.post_send(SendWr { signaled: true, ..SendWr::new(1, op, &[]) }).unwrap();
    assert_eq!(b.wait().status, WcStatus::Success);

    // A second connection into the same PD of `b`: the window does not answer it.
    let caps =
        QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let c = Side::new(Device::open(DeviceConfig::new(loopback_ip())).unwrap(), 4096, caps);
    let cq2 = b.dev.create_cq(16).unwrap();
    let qp2 = b.pd.create_qp(&QpInitAttr { cap: caps, ..QpInitAttr::rc(&cq2, &cq2) }).unwrap();
    let (pc, p2) = (0x30_0000, 0x40_0000);
    for (qp, me, peer, peer_qpn, rq, sq) in
        [(&c.qp, &c.dev, &b.dev, qp2.qp_num(), p2, pc), (&qp2, &b.dev, &c.dev, c.qp.qp_num(), pc, p2)]
    {
        qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
        let av = AddressVector::new(peer.gid(peer.default_gid_index()).unwrap(), me.default_gid_index());
        qp.modify(&QpAttrs::rtr(av, Mtu::Mtu1024, peer_qpn, Psn::new(rq))).unwrap();
        qp.modify(&QpAttrs::rts(Psn::new(sq))).unwrap();
    }
    c.mr.write(0, b"xyzw").unwrap();
    assert_eq!(write(&c, 1, 4, RemoteAddr { addr: target.addr(), rkey }), WcStatus::RemAccessErr);
    // The QP that bound it may.
    assert_eq!(write(&a, 2, 4, RemoteAddr { addr: target.addr(), rkey }), WcStatus::Success);

    // The peer invalidates it with a SEND with invalidate.
    b.qp.post_recv(RecvWr::new(9, &[b.mr.sge(0, 64)])).unwrap();
    a.qp.post_send(SendWr::new(3, SendOp::SendWithInv(rkey), &[a.mr.sge(0, 4)])).unwrap();
    assert_eq!(a.wait().status, WcStatus::Success);
    let wc = b.wait();
    assert_eq!((wc.wr_id, wc.status, wc.invalidated_rkey), (9, WcStatus::Success, Some(rkey)));
    assert_eq!(write(&a, 4, 4, RemoteAddr { addr: target.addr(), rkey }), WcStatus::RemAccessErr);
}

#[test]
fn bind_checks_fail_with_mw_bind_err() {
    let (a, b, target) = setup();
    let _ = a;
    let plain = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let readonly = b.pd.alloc_mr(4096, Access::MW_BIND).unwrap();
    let other_pd = b.dev.alloc_pd().unwrap();
    let foreign = other_pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND).unwrap();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let cases: [(&MemoryRegion, u64, u64, Access, &str); 5] = [
        (&plain, 0, 64, Access::REMOTE_READ, "region without MW_BIND"),
        (&readonly, 0, 64, Access::REMOTE_WRITE, "writable window on a region without local write"),
        (&target, 4000, 200, Access::REMOTE_READ, "range past the region's end"),
        (&foreign, 0, 64, Access::REMOTE_READ, "region of another PD"),
        (&target, 0, 64, Access::REMOTE_READ | Access::ZERO_BASED, "zero-based type 1 window"),
    ];
    for (i, (mr, off, len, access, what)) in cases.into_iter().enumerate() {
        b.qp.bind_mw(i as u64, &mw, mr, off, len, access).unwrap();
        let wc = b.wait();
        assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::MwBindErr), "{what}");
        // The failed bind took the QP to the error state, as in rxe.
        assert_eq!(b.qp.state(), QpState::Err, "{what}");
        restate(&a, &b);
    }
    // A window never bound has no access at all.
    assert_eq!(write(&a, 100, 4, mw.remote(target.addr())), WcStatus::RemAccessErr);
}

#[test]
fn zero_based_type2_window_counts_from_its_first_byte() {
    let (a, b, target) = setup();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let (op, rkey) = mw.bind_op(&target, 512, 64, Access::REMOTE_WRITE | Access::ZERO_BASED);
    b.qp.post_send(SendWr { signaled: true, ..SendWr::new(1, op, &[]) }).unwrap();
    assert_eq!(b.wait().status, WcStatus::Success);
    assert_eq!(write(&a, 1, 18, RemoteAddr { addr: 4, rkey }), WcStatus::Success);
    assert_eq!(&target.to_vec()[516..534], b"through the window");
    assert_eq!(write(&a, 2, 18, RemoteAddr { addr: 50, rkey }), WcStatus::RemAccessErr);
}

#[test]
fn a_bind_completes_in_order_behind_the_requests_before_it() {
    let (a, b, target) = setup();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    // `b` writes into `a` (a region with every right), then binds: the bind's completion
    // comes after the WRITE's, whatever the bind's own speed.
    let dest = a.mr.remote(0);
    for i in 0..8 {
        b.qp.post_send(SendWr::write(i, &[b.mr.sge(0, 4096)], dest)).unwrap();
    }
    let (op, rkey) = mw.bind_op(&target, 0, 64, Access::REMOTE_WRITE);
    b.qp.post_send(SendWr { signaled: true, ..SendWr::new(100, op, &[]) }).unwrap();
    b.qp.post_send(SendWr::write(101, &[b.mr.sge(0, 8)], dest)).unwrap();
    let ids: Vec<_> = (0..10).map(|_| b.wait()).map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<_> = (0..8).chain([100, 101]).map(|i| (i, WcStatus::Success)).collect();
    assert_eq!(ids, want);
    assert_eq!(write(&a, 1, 4, RemoteAddr { addr: target.addr(), rkey }), WcStatus::Success);
}
