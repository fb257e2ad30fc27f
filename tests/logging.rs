//! The library explains a failed connection in its log (`tracing` events): a QP connected to
//! an address where nobody answers walks through its states, retransmits on each local ACK
//! timeout, runs out of retries and completes its request with `RETRY_EXC_ERR` — and each of
//! those steps is an event a user sees with `RUST_LOG=debug` (or `softroce -vv`).

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use softroce::prelude::*;

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_connection_to_nobody_explains_itself_in_the_log() {
    let log = Captured::default();
    let writer = log.clone();
    // Global: the events come from the device's engine thread.
    tracing_subscriber::fmt()
        .with_env_filter("softroce=debug")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let dev = Device::open(DeviceConfig::new(common::verbs::loopback_ip())).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    // The "peer": an address on loopback where no softroce device listens (a wrong address).
    let nobody: std::net::IpAddr = common::verbs::loopback_ip().parse().unwrap();
    let peer = QpEndpoint { gid: Gid::from_ip(nobody), qpn: Qpn::new(0x11), psn: random_psn() };
    let opts = ConnectOptions { timeout: 8, retry_cnt: 2, ..ConnectOptions::default() }; // ~1 ms
    qp.connect(&qp.endpoint(random_psn()), &peer, &opts).unwrap();
    qp.post_send(SendWr::send(1, &[mr.sge(0, 8)])).unwrap();
    let wc = cq.poll_one_wait(Duration::from_secs(10)).unwrap().expect("an error completion");
    assert_eq!(wc.status, WcStatus::RetryExcErr);

    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let qpn = format!("qpn={}", qp.qp_num().value());
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(&qpn)).collect();
    let has = |needles: &[&str]| lines.iter().any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(has(&["QP state", "from=Init", "to=Rtr"]), "{text}");
    assert!(has(&["QP state", "from=Rtr", "to=Rts"]), "{text}");
    let retries =
        lines.iter().filter(|l| l.contains("retransmitting") && l.contains("local ACK timeout")).count();
    assert_eq!(retries, 2, "one event per retry (retry_cnt 2): {text}");
    assert!(has(&["WARN", "retries exhausted"]), "{text}");
    assert!(has(&["WARN", "error completion", "IBV_WC_RETRY_EXC_ERR", "wr_id=1"]), "{text}");
    assert!(has(&["QP to ERR"]), "{text}");
}
