//! SEND and RECV between two processes connected through the RDMA CM, the way a librdmacm
//! program does it: no side channel, the server listens on an IP address and port, the client
//! resolves that address and connects; the IB CM's MADs travel over QP1 of each device.
//!
//! ```text
//! cargo run --release --example cm_send_recv -- -a 127.0.0.1 &                 # server
//! cargo run --release --example cm_send_recv -- -a 127.0.0.2 127.0.0.1         # client
//! ```
//!
//! `-a` is the local address (a softroce device is opened on it), `-p` the rdma_cm port (7471
//! by default), `-n` the number of messages (client). The client sends numbered messages; the server
//! answers each in upper case until the client disconnects; the client checks every answer.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softroce::prelude::*;
use softroce::verbs::cm::{CmEventType, CmId, EventChannel, PortSpace};

const SLOT: usize = 256;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut local, mut port, mut count, mut server) = ("127.0.0.1".to_string(), 7471u16, 10u32, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-a" => local = args.next().ok_or("-a needs an address")?,
            "-p" => port = args.next().ok_or("-p needs a port")?.parse()?,
            "-n" => count = args.next().ok_or("-n needs a number")?.parse()?,
            _ => server = Some(a.parse::<IpAddr>()?),
        }
    }
    let local: IpAddr = local.parse()?;
    // 1. The device that serves the local address (the RDMA CM finds it by address).
    let dev = Device::open(DeviceConfig::new(local.to_string()))?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(16)?;
    let mr = pd.alloc_mr(2 * SLOT, Access::LOCAL_WRITE)?;
    // 2. An event channel: every rdma_cm event arrives there.
    let ch = EventChannel::new()?;
    let wait = |want: CmEventType| -> Result<softroce::verbs::cm::CmEvent, Box<dyn std::error::Error>> {
        let ev = ch.get_event_timeout(Duration::from_secs(30))?;
        if ev.event_type() != want {
            return Err(format!(
                "expected {}, got {} (status {})",
                want.name(),
                ev.event_type().name(),
                ev.status()
            )
            .into());
        }
        Ok(ev)
    };
    let mut id = match server {
        None => {
            // Server: bind, listen, take the request's new id.
            let mut listener = CmId::new(Some(&ch), PortSpace::Tcp)?;
            listener.bind_addr(SocketAddr::new(local, port))?;
            listener.listen(1)?;
            println!("listening on {local}:{port}");
            let mut req = wait(CmEventType::ConnectRequest)?;
            let id = req.take_id().ok_or("no new id")?;
            println!("request from {:?}", id.dst_addr());
            // (the listener is dropped here: one connection)
            id
        }
        Some(dst) => {
            let mut id = CmId::new(Some(&ch), PortSpace::Tcp)?;
            id.resolve_addr(
                Some(SocketAddr::new(local, 0)),
                SocketAddr::new(dst, port),
                Duration::from_secs(2),
            )?;
            wait(CmEventType::AddrResolved)?;
            id.resolve_route(Duration::from_secs(2))?;
            wait(CmEventType::RouteResolved)?;
            id
        }
    };
    // 3. The QP on the id (it starts in INIT); a receive posted before the peer can send.
    id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq))?;
    let qp = id.qp().ok_or("no QP")?;
    qp.post_recv(RecvWr::new(0, &[mr.sge(0, SLOT as u32)]))?;
    // 4. Connect or accept: the QP goes to RTR and RTS from the CM's attributes.
    if server.is_none() {
        id.accept(None)?;
    } else {
        id.connect(None)?;
    }
    wait(CmEventType::Established)?;
    println!("connected to {:?}", id.dst_addr());
    let qp = id.qp().ok_or("no QP")?;
    let mut wc = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0)); 1];
    let send = |text: &[u8]| -> Result<(), Box<dyn std::error::Error>> {
        mr.write(SLOT, text)?;
        qp.post_send(SendWr::new(1, SendOp::Send, &[mr.sge(SLOT, text.len() as u32)]))?;
        Ok(())
    };
    let mut buf = vec![0u8; SLOT];
    if server.is_none() {
        // Server: answer every message until the client disconnects.
        let mut answered = 0u32;
        loop {
            if cq.poll_wait(&mut wc, Duration::from_millis(50))? == 0 {
                if let Some(ev) = ch.try_get_event()?
                    && ev.event_type() == CmEventType::Disconnected
                {
                    break;
                }
                continue;
            }
            if wc[0].status != WcStatus::Success {
                return Err(format!("completion error {:?}", wc[0].status).into());
            }
            if wc[0].opcode != WcOpcode::Recv {
                continue;
            }
            let n = wc[0].byte_len as usize;
            mr.read(0, &mut buf[..n])?;
            qp.post_recv(RecvWr::new(0, &[mr.sge(0, SLOT as u32)]))?;
            send(&buf[..n].to_ascii_uppercase())?;
            answered += 1;
        }
        id.disconnect()?;
        println!("{answered} messages answered; the client disconnected");
        return Ok(());
    }
    let mut next_wc = || -> Result<WorkCompletion, Box<dyn std::error::Error>> {
        if cq.poll_wait(&mut wc, Duration::from_secs(10))? != 1 {
            return Err("no completion within 10 s".into());
        }
        if wc[0].status != WcStatus::Success {
            return Err(format!("completion error {:?}", wc[0].status).into());
        }
        Ok(wc[0])
    };
    for i in 0..count {
        let msg = format!("message {i}");
        send(msg.as_bytes())?;
        // The send's completion and the answer, in either order.
        let mut got = None;
        while got.is_none() {
            let w = next_wc()?;
            if w.opcode == WcOpcode::Recv {
                got = Some(w.byte_len as usize);
            }
        }
        let n = got.unwrap_or(0);
        mr.read(0, &mut buf[..n])?;
        qp.post_recv(RecvWr::new(0, &[mr.sge(0, SLOT as u32)]))?;
        if buf[..n] != *msg.to_uppercase().as_bytes() {
            return Err(format!("bad answer to {msg:?}: {:?}", String::from_utf8_lossy(&buf[..n])).into());
        }
    }
    // 5. Disconnect: the client starts it; both sides see DISCONNECTED.
    id.disconnect()?;
    wait(CmEventType::Disconnected)?;
    println!("{count} messages answered correctly");
    Ok(())
}
