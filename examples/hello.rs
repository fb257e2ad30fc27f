//! Hello RDMA: two softroce devices on two loopback addresses, one RDMA WRITE between them.
//! `cargo run --example hello`
use std::time::Duration;

use softroce::prelude::*;

fn main() -> Result<(), VerbsError> {
    let (a, b) =
        (Device::open(DeviceConfig::new("127.0.0.1"))?, Device::open(DeviceConfig::new("127.0.0.2"))?);
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
    let (qa, qb) = (pa.create_qp(&QpInitAttr::rc(&ca, &ca))?, pb.create_qp(&QpInitAttr::rc(&cb, &cb))?);
    let src = pa.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pb.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    // What an application exchanges out of band: GID, QP number and first PSN of each side,
    // and where the target's memory is (address and rkey).
    let (ea, eb) = (qa.endpoint(random_psn()), qb.endpoint(random_psn()));
    qa.connect(&ea, &eb, &ConnectOptions::with_access(Access::NONE))?;
    qb.connect(&eb, &ea, &ConnectOptions::with_access(Access::REMOTE_WRITE))?;
    let target = dst.remote(0);

    src.write(0, b"hello, RDMA")?;
    qa.post_send(SendWr::write(1, &[src.sge(0, 11)], target))?;
    let wc = ca.poll_one_wait(Duration::from_secs(5))?.expect("a completion");
    println!(
        "WRITE completed with {}; the peer's memory now says {:?}",
        wc.status,
        String::from_utf8_lossy(&dst.to_vec()[..11])
    );
    Ok(())
}
