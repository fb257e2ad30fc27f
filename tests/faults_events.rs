//! Fault injection's `tracing` events (target `softroce::faults`, one per injected fault) and
//! the filters they show: `qp=N` touches only QP N's packets, `opcode=NAME` only that opcode,
//! `mad` only QP1's (the CM's MADs); and a replay of the same seed injects the same faults into
//! the same packets.
//!
//! One test in its own binary: the events are collected by a process-wide subscriber.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::verbs::*;
use softroce::verbs::cm::{CmEventType, CmId, EventChannel, PortSpace};
use softroce::verbs::*;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One `softroce::faults` event: its fields as text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Ev {
    dir: String,
    qpn: u64,
    psn: String,
    opcode: String,
    nth: u64,
    fault: String,
}

impl Visit for Ev {
    fn record_u64(&mut self, f: &Field, v: u64) {
        match f.name() {
            "qpn" => self.qpn = v,
            "nth" => self.nth = v,
            _ => {}
        }
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        match f.name() {
            "dir" => self.dir = v.into(),
            "fault" => self.fault = v.into(),
            _ => {}
        }
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        match f.name() {
            "opcode" => self.opcode = format!("{v:?}"),
            "psn" => self.psn = format!("{v:?}"),
            _ => {}
        }
    }
}

#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<Ev>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Collect {
    fn on_event(&self, e: &tracing::Event<'_>, _: Context<'_, S>) {
        if e.metadata().target() == "softroce::faults" && e.metadata().fields().field("fault").is_some() {
            let mut ev = Ev::default();
            e.record(&mut ev);
            self.0.lock().unwrap().push(ev);
        }
    }
}

fn caps() -> QpCaps {
    QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 }
}

fn take(c: &Collect) -> Vec<Ev> {
    std::mem::take(&mut *c.0.lock().unwrap())
}

/// `n` SENDs of 3000 bytes (three packets) and `n` WRITEs from `a` to `b`, one at a time.
fn traffic(a: &Side, b: &Side, n: u64) {
    let remote = RemoteAddr { addr: b.mr.addr() + 8192, rkey: b.mr.rkey() };
    for i in 0..n {
        b.qp.post_recv(RecvWr::new(i, &[b.mr.sge(0, 4096)])).unwrap();
        a.qp.post_send(SendWr::send(i, &[a.mr.sge(0, 3000)])).unwrap();
        assert_eq!(a.wait().status, WcStatus::Success);
        assert_eq!(b.wait().status, WcStatus::Success);
        a.qp.post_send(SendWr::new(i, SendOp::RdmaWrite(remote), &[a.mr.sge(0, 3000)])).unwrap();
        assert_eq!(a.wait().status, WcStatus::Success);
    }
}

#[test]
fn events_show_the_filters_at_work_and_replay_the_same() {
    let c = Collect::default();
    let c_events = c.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::filter::Targets::new()
                    .with_target("softroce::faults", tracing::Level::DEBUG),
            )
            .with(c.clone()),
    )
    .unwrap();
    let open = |spec: &str| Device::open(DeviceConfig::new(loopback_ip()).with_faults(spec)).unwrap();

    // qp=N: of two QPs of a device, only N's packets (both directions) meet the faults.
    let run_qp = || {
        let (da, db) = (open("seed=1,loss=10%,qp=0x12"), open(""));
        let a1 = Side::new(da.clone(), 1 << 16, caps());
        let a2 = Side::new(da, 1 << 16, caps());
        let (b1, b2) = (Side::new(db.clone(), 1 << 16, caps()), Side::new(db, 1 << 16, caps()));
        assert_eq!((a1.qp.qp_num().value(), a2.qp.qp_num().value()), (0x11, 0x12));
        connect(&a1, &b1, Mtu::Mtu1024);
        connect(&a2, &b2, Mtu::Mtu1024);
        traffic(&a1, &b1, 30);
        traffic(&a2, &b2, 30);
        let ev = take(&c);
        assert_eq!(a1.dev.counters().unwrap().faults.dropped, ev.len() as u64);
        ev
    };
    let ev = run_qp();
    assert!(ev.len() > 5, "{ev:?}");
    assert!(ev.iter().all(|e| e.qpn == 0x12 && e.fault == "drop" && e.psn.starts_with("0x")), "{ev:?}");
    assert!(ev.iter().any(|e| e.dir == "tx") && ev.iter().any(|e| e.dir == "rx"), "{ev:?}");
    // The same seed, the same packets: the same events (direction, opcode, transmission). A
    // run in which a timer fired early on a loaded machine has one packet more, with a fate of
    // its own: two of three runs must agree, the first one included.
    let key = |v: &[Ev]| v.iter().map(|e| (e.dir.clone(), e.opcode.clone(), e.nth)).collect::<Vec<_>>();
    let first = key(&ev);
    let same = common::two_agree(|i| if i == 0 { first.clone() } else { key(&run_qp()) });
    assert!(!same.is_empty());

    // opcode=NAME: only that opcode, whatever else flows.
    let (a, b) = (
        Side::new(open("seed=4,dup=30%,opcode=RC_WRITE_ONLY"), 1 << 16, caps()),
        Side::new(open(""), 1 << 16, caps()),
    );
    connect(&a, &b, Mtu::Mtu4096);
    traffic(&a, &b, 30);
    let ev = take(&c);
    assert!(ev.len() > 3, "{ev:?}");
    assert!(
        ev.iter().all(|e| e.opcode == "RC_WRITE_ONLY" && e.fault == "duplicate" && e.dir == "tx"),
        "{ev:?}"
    );
    // (a spurious retransmission on a loaded machine may add one)
    assert!(b.dev.counters().unwrap().qp.duplicate_request >= ev.len() as u64);

    // mad: the connection manager's packets only (duplicated here: the CM drops duplicates);
    // the RC traffic on the connection it makes is untouched.
    let spec = "seed=5,mad,dup=50%";
    let (ds, dc) = (open(spec), open(spec));
    let sch = EventChannel::new().unwrap();
    let mut l = CmId::new(Some(&sch), PortSpace::Tcp).unwrap();
    let addr = SocketAddr::new(ds.ip(), 7027);
    l.bind_addr(addr).unwrap();
    l.listen(1).unwrap();
    let server = std::thread::spawn(move || {
        let ev = sch.get_event_timeout(T).unwrap();
        assert_eq!(ev.event_type(), CmEventType::ConnectRequest);
        let mut ev = ev;
        let mut s = ev.take_id().unwrap();
        drop(ev);
        let r = cm_qp(&mut s);
        s.accept(None).unwrap();
        assert_eq!(sch.get_event_timeout(T).unwrap().event_type(), CmEventType::Established);
        (s, r, sch, l)
    });
    let mut c = CmId::new(None, PortSpace::Tcp).unwrap();
    c.resolve_addr(Some(SocketAddr::new(dc.ip(), 0)), addr, T).unwrap();
    c.resolve_route(T).unwrap();
    let rc = cm_qp(&mut c);
    c.connect(None).unwrap();
    let (s, rs, _sch, _l) = server.join().unwrap();
    for _ in 0..50 {
        s.qp().unwrap().post_recv(RecvWr::new(1, &[rs.1.sge(0, 64)])).unwrap();
        c.qp().unwrap().post_send(SendWr::send(2, &[rc.1.sge(0, 64)])).unwrap();
        for cq in [&rc.0, &rs.0] {
            let mut wc = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0))];
            assert_eq!(cq.poll_wait(&mut wc, T).unwrap(), 1);
            assert_eq!(wc[0].status, WcStatus::Success);
        }
    }
    let ev = take(&c_events);
    assert!(!ev.is_empty(), "no MAD duplicated");
    assert!(ev.iter().all(|e| e.qpn == 1 && e.opcode == "UD_SEND_ONLY" && e.fault == "duplicate"), "{ev:?}");
    let (cs, cc) = (ds.counters().unwrap(), dc.counters().unwrap());
    assert_eq!(cs.faults.duplicated + cc.faults.duplicated, ev.len() as u64);
    assert_eq!(cs.qp.duplicate_request + cc.qp.duplicate_request, 0, "the RC QPs saw no duplicate");
}

const T: Duration = Duration::from_secs(10);

/// An RC QP for a CM id, with its CQ and a registered buffer.
fn cm_qp(id: &mut CmId) -> (CompletionQueue, MemoryRegion, ProtectionDomain) {
    let dev = id.device().unwrap().clone();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let mr = pd.alloc_mr(4096, Access::ALL).unwrap();
    id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq)).unwrap();
    (cq, mr, pd)
}
