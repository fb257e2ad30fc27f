//! Issue 14: an idle QP is small. 2000 RC QPs with perftest's `send-bw` queue sizes
//! (`max_send_wr` 128, `max_recv_wr` 512) created and moved to INIT must grow the process's
//! resident set by at most 12 KiB each (the target for 10 000 QPs). Work queues
//! preallocated to their depth took 46 KiB per QP; they now take memory as requests are
//! posted. Then the QPs still take work: each gets receives up to its depth and refuses one
//! more, so the depth is still enforced without a preallocated queue.
//!
//! One test in this binary, so that no other test's memory is counted. The benchmark with
//! the figures is `cargo bench --bench throughput -- qps`.

mod common;

use common::verbs::*;
use softroce::transport::PostError;
use softroce::verbs::*;

/// The resident set of this process in bytes.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn idle_rc_qps_take_at_most_12_kib_each() {
    const N: usize = 2000;
    let dev = Device::open(DeviceConfig::new(loopback_ip())).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4096).unwrap();
    let mut init = QpInitAttr::rc(&cq, &cq);
    init.cap =
        QpCaps { max_send_wr: 128, max_recv_wr: 512, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    // One QP first: what is allocated once per device is not counted per QP.
    drop(pd.create_qp(&init).unwrap());
    let mut qps = Vec::with_capacity(N);
    let before = rss();
    for _ in 0..N {
        let qp = pd.create_qp(&init).unwrap();
        qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
        qps.push(qp);
    }
    let per_qp = (rss().saturating_sub(before)) as f64 / N as f64;
    assert!(per_qp <= 12.0 * 1024.0, "{:.1} KiB per idle QP", per_qp / 1024.0);

    // Posting still works, up to the depth and no further, on a QP among many.
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    for qp in [&qps[0], &qps[N / 2], &qps[N - 1]] {
        for i in 0..512 {
            qp.post_recv(RecvWr::new(i, &[mr.sge(0, 64)])).unwrap();
        }
        let e = qp.post_recv(RecvWr::new(512, &[mr.sge(0, 64)])).unwrap_err();
        assert!(matches!(e, Error::Post(PostError::QueueFull)), "{e}");
    }
    // (Sends need RTS: tests/exhaustion.rs fills a send queue on a connected QP.)
    let e = qps[1].post_send(SendWr::new(0, SendOp::Send, &[mr.sge(0, 8)])).unwrap_err();
    assert!(matches!(e, Error::Post(PostError::InvalidState(QpState::Init))), "{e}");
}
