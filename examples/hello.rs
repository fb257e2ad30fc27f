//! Hello RDMA: two softroce devices on two loopback addresses, one RDMA WRITE between them.
//! `cargo run --example hello`
use softroce::verbs::*;

fn main() -> Result<()> {
    let (a, b) =
        (Device::open(DeviceConfig::new("127.0.0.1"))?, Device::open(DeviceConfig::new("127.0.0.2"))?);
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (ca, cb) = (a.create_cq(16)?, b.create_cq(16)?);
    let (qa, qb) = (pa.create_qp(&QpInitAttr::rc(&ca, &ca))?, pb.create_qp(&QpInitAttr::rc(&cb, &cb))?);
    let src = pa.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pb.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    // What an application exchanges out of band: QP number, PSN, GID.
    for (qp, dev, peer, peer_dev) in [(&qa, &a, &qb, &b), (&qb, &b, &qa, &a)] {
        qp.modify(&QpAttrs::init(Access::REMOTE_WRITE))?;
        let av = AddressVector::new(peer_dev.gid(1)?, 1);
        qp.modify(&QpAttrs::rtr(av, dev.query_port().active_mtu, peer.qp_num(), 0x1000))?;
        qp.modify(&QpAttrs::rts(0x1000))?;
    }
    src.write(0, b"hello, RDMA")?;
    let target = RemoteAddr { addr: dst.addr(), rkey: dst.rkey() };
    qa.post_send(SendWr::new(1, SendOp::RdmaWrite(target), &[src.sge(0, 11)]))?;
    let wc = ca.poll_one_wait(std::time::Duration::from_secs(5))?.expect("a completion");
    println!(
        "WRITE completed with {}; the peer's memory now says {:?}",
        wc.status,
        String::from_utf8_lossy(&dst.to_vec()[..11])
    );
    Ok(())
}
