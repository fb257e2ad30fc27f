//! `rdma_listen` against a connection request that arrives the moment the listener is in
//! place: the request must reach the application, never a REJ.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{CmEventType, CmId, CmIdState, EventChannel, PortSpace};
use crate::engine::command::Command;
use crate::verbs::{Device, DeviceConfig, QpInitAttr};

const T: Duration = Duration::from_secs(10);

fn dev() -> (Device, IpAddr) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed) + (std::process::id() % 40_000) * 64;
    let ip = std::net::Ipv4Addr::new(
        127,
        170 + ((n / (254 * 256)) % 30) as u8,
        ((n / 254) % 256) as u8,
        (n % 254 + 1) as u8,
    );
    (Device::open(DeviceConfig::new(ip.to_string())).unwrap(), IpAddr::V4(ip))
}

/// Stops `dev`'s engine until the returned sender is dropped (or sends); returns once the
/// engine is held.
fn hold_engine(dev: &Device) -> std::sync::mpsc::Sender<()> {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    dev.shared.post(Command::Cm(Box::new(move |_, _| {
        let _ = started_tx.send(());
        let _ = held.recv_timeout(T);
    })));
    started.recv_timeout(T).expect("the engine runs the hold");
    release
}

/// perftest's server destroys its first listener once connected and listens again on the same
/// port for the test's own connection; its client connects as soon as the handshake allows.
/// Under load the REQ can be in the server's socket when `rdma_listen` registers the listener.
/// Here the engine is held while the REQ arrives and the listen command queues, so that the
/// engine runs the listen command and reads the REQ back to back: the request must be a
/// CONNECT_REQUEST (it was a REJ, reason 28, while `listen` set the id's state only after the
/// engine had registered the listener).
#[test]
fn a_request_arriving_with_the_listen_is_delivered() {
    for round in 0..5u16 {
        let (ds, sip) = dev();
        let (_dc, cip) = dev();
        let port = 7400 + round;
        let sch = EventChannel::new().unwrap();
        let mut l = CmId::new(Some(&sch), PortSpace::Tcp).unwrap();
        l.bind_addr(SocketAddr::new(sip, port)).unwrap();

        let cch = EventChannel::new().unwrap();
        let mut c = CmId::new(Some(&cch), PortSpace::Tcp).unwrap();
        c.resolve_addr(Some(SocketAddr::new(cip, 0)), SocketAddr::new(sip, port), T).unwrap();
        assert_eq!(cch.get_event_timeout(T).unwrap().event_type(), CmEventType::AddrResolved);
        c.resolve_route(T).unwrap();
        assert_eq!(cch.get_event_timeout(T).unwrap().event_type(), CmEventType::RouteResolved);
        let cdev = c.device().unwrap().clone();
        let pd = cdev.alloc_pd().unwrap();
        let cq = cdev.create_cq(16).unwrap();
        c.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq)).unwrap();

        let release = hold_engine(&ds);
        // The REQ goes out at once and waits in the server device's socket.
        c.connect(None).unwrap();
        let listening = std::thread::spawn(move || {
            l.listen(8).unwrap();
            l
        });
        let t = std::time::Instant::now();
        while ds.shared.engines[ds.shared.cm_engine()].cmd_tx.is_empty() && t.elapsed() < T {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!ds.shared.engines[ds.shared.cm_engine()].cmd_tx.is_empty(), "listen queued its command");
        drop(release);
        let l = listening.join().unwrap();
        assert_eq!(l.state(), CmIdState::Listen);

        let ev = cch.get_event_timeout(Duration::from_millis(300)).ok();
        if let Some(ev) = &ev {
            assert_ne!(ev.event_type(), CmEventType::Rejected, "round {round}: the REQ was rejected: {ev:?}");
        }
        drop(ev);
        let mut req = sch.get_event_timeout(T).expect("CONNECT_REQUEST");
        assert_eq!(req.event_type(), CmEventType::ConnectRequest, "round {round}");
        let s = req.take_id().unwrap();
        drop(req);
        drop(s);
    }
}
