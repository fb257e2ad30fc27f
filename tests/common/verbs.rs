//! Helpers for tests that use the public verbs API.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use softroce::verbs::*;

/// A fresh loopback address per call (127.x.y.z), so parallel tests never share a port.
pub fn loopback_ip() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    // Distinct per process (pid) and per call; a bijection onto 127.10-209.0-255.1-254.
    let n = N.fetch_add(1, Ordering::Relaxed) + (std::process::id() % 40_000) * 256;
    format!("127.{}.{}.{}", 10 + (n / (254 * 256)) % 200, (n / 254) % 256, n % 254 + 1)
}

/// One side: device, PD, CQ, QP and a buffer.
pub struct Side {
    pub dev: Device,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

impl Side {
    pub fn new(dev: Device, buf: usize, caps: QpCaps) -> Side {
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4096).unwrap();
        let mut init = QpInitAttr::rc(&cq, &cq);
        init.cap = caps;
        let qp = pd.create_qp(&init).unwrap();
        let mr = pd.alloc_mr(buf, Access::ALL).unwrap();
        Side { dev, pd, cq, qp, mr }
    }

    /// Waits for one completion.
    pub fn wait(&self) -> WorkCompletion {
        let mut wc = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0))];
        let n = self.cq.poll_wait(&mut wc, Duration::from_secs(20)).unwrap();
        assert_eq!(n, 1, "no completion within 20 s");
        wc[0]
    }
}

/// Moves both QPs to RTS, connected to each other (ACK timeout 10: 4 ms, for quick loss tests).
pub fn connect(a: &Side, b: &Side, mtu: Mtu) {
    connect_with_timeout(a, b, mtu, 10)
}

/// [`connect`] with the local ACK timeout code `timeout` (4.096 µs × 2^timeout).
pub fn connect_with_timeout(a: &Side, b: &Side, mtu: Mtu, timeout: u8) {
    let (pa, pb) = (0x10_0000, 0x20_0000);
    for (x, y, rq, sq) in [(a, b, pb, pa), (b, a, pa, pb)] {
        x.qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
        let av = AddressVector::new(y.dev.gid(y.dev.default_gid_index()).unwrap(), x.dev.default_gid_index());
        let mut rtr = QpAttrs::rtr(av, mtu, y.qp.qp_num(), Psn::new(rq));
        rtr.max_dest_rd_atomic = Some(16);
        x.qp.modify(&rtr).unwrap();
        let mut rts = QpAttrs::rts(Psn::new(sq));
        rts.timeout = Some(timeout);
        x.qp.modify(&rts).unwrap();
    }
}

/// Two connected sides on fresh loopback addresses over UDP.
pub fn udp_pair(buf: usize, mtu: Mtu) -> (Side, Side) {
    let caps =
        QpCaps { max_send_wr: 512, max_recv_wr: 512, max_send_sge: 8, max_recv_sge: 8, max_inline_data: 256 };
    let a = Side::new(Device::open(DeviceConfig::new(loopback_ip())).unwrap(), buf, caps);
    let b = Side::new(Device::open(DeviceConfig::new(loopback_ip())).unwrap(), buf, caps);
    connect(&a, &b, mtu);
    (a, b)
}
