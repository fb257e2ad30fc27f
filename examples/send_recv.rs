//! SEND and RECV between two processes, the way an application sets it up: each side opens a
//! device, creates its QP, posts receives, exchanges its endpoint (GID, QP number, first PSN)
//! with the peer over TCP, connects, and then the two trade messages.
//!
//! ```text
//! cargo run --release --example send_recv -- -d 127.0.0.1 &              # server
//! cargo run --release --example send_recv -- -d 127.0.0.2 127.0.0.1      # client
//! ```
//!
//! The client sends `-n` numbered messages; the server answers each with the same text in
//! upper case; the client checks every answer. Every step is one verbs call, commented.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use softroce::prelude::*;

/// Bytes per receive buffer (and largest message).
const SLOT: usize = 256;
/// Receives kept posted.
const DEPTH: usize = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // -d ADDR (local address), -n COUNT, -p TCP_PORT, and the server's address (client only).
    let (mut dev_addr, mut count, mut port, mut server) = ("127.0.0.1".to_string(), 10u64, 18800u16, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-d" => dev_addr = args.next().ok_or("-d needs an address")?,
            "-n" => count = args.next().ok_or("-n needs a number")?.parse()?,
            "-p" => port = args.next().ok_or("-p needs a port")?.parse()?,
            _ => server = Some(a),
        }
    }

    // 1. The device: a local address (or interface name) whose UDP port 4791 it takes.
    let dev = Device::open(DeviceConfig::new(dev_addr))?;
    // 2. A protection domain, a completion queue for both directions, an RC queue pair.
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(2 * DEPTH)?;
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq).max_send_wr(DEPTH as u32).max_recv_wr(DEPTH as u32))?;
    // 3. Memory: DEPTH receive slots, then one send buffer.
    let mr = pd.alloc_mr(SLOT * (DEPTH + 1), Access::LOCAL_WRITE)?;
    let send_at = SLOT * DEPTH;
    // 4. Receives go up before the peer can send (RECV's wr_id: the slot it uses); a QP takes
    //    receives from INIT on.
    qp.modify(&QpAttrs::init(Access::NONE))?;
    for slot in 0..DEPTH {
        qp.post_recv(RecvWr::new(slot as u64, &[mr.sge(slot * SLOT, SLOT as u32)]))?;
    }

    // 5. The endpoints, over TCP: one line each way, "gid qpn psn".
    let me = qp.endpoint(random_psn());
    let mut tcp = match &server {
        Some(host) => connect_retrying(host, port)?,
        None => accept_within(&TcpListener::bind(("0.0.0.0", port))?, Duration::from_secs(60))?,
    };
    tcp.set_read_timeout(Some(Duration::from_secs(60)))?; // a silent peer is not waited for forever
    writeln!(tcp, "{} {} {}", me.gid, me.qpn.value(), me.psn.value())?;
    let mut line = String::new();
    BufReader::new(tcp.try_clone()?).read_line(&mut line)?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let peer = QpEndpoint {
        gid: Gid::from_ip(f.first().ok_or("no GID from the peer")?.parse()?),
        qpn: Qpn::new(f.get(1).ok_or("no QPN")?.parse()?),
        psn: Psn::new(f.get(2).ok_or("no PSN")?.parse()?),
    };
    println!("local {me:?}\npeer  {peer:?}");

    // 6. RTR and RTS in one call (QueuePair::modify does each step with any attributes).
    qp.connect(&me, &peer, &ConnectOptions::default())?;

    let started = Instant::now();
    let (mut answered, mut sent) = (0, 0);
    for n in 0..count {
        if server.is_some() {
            // Client: SEND a message, then wait for its answer.
            let text = format!("message {n}");
            mr.write(send_at, text.as_bytes())?;
            qp.post_send(SendWr::send(n, &[mr.sge(send_at, text.len() as u32)]))?;
            let answer = receive(&qp, &cq, &mr, &mut sent)?;
            if answer != text.to_uppercase() {
                return Err(format!("message {n}: answer {answer:?}").into());
            }
            answered += 1;
        } else {
            // Server: wait for a message, answer it in upper case.
            let text = receive(&qp, &cq, &mr, &mut sent)?.to_uppercase();
            mr.write(send_at, text.as_bytes())?;
            qp.post_send(SendWr::send(n, &[mr.sge(send_at, text.len() as u32)]))?;
        }
    }
    // Every SEND acknowledged (RC: the peer has it), then a moment for a peer still
    // retransmitting to hear from this device before it goes away.
    while sent < count {
        wait_send(&cq)?;
        sent += 1;
    }
    let took = started.elapsed();
    let _ = dev.wait_quiet(Duration::from_millis(200), Duration::from_secs(2));
    println!("{count} messages, {answered} answers checked, in {:.1} ms", took.as_secs_f64() * 1e3);
    println!(
        "{count} messages, {answered} answers checked, in {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// Waits for the next receive completion (counting send completions on the way in `sent`),
/// reads the message out of its slot and posts the slot again.
fn receive(
    qp: &QueuePair,
    cq: &CompletionQueue,
    mr: &MemoryRegion,
    sent: &mut u64,
) -> Result<String, Box<dyn std::error::Error>> {
    loop {
        let wc = cq.poll_one_wait(Duration::from_secs(10))?.ok_or("no completion for 10 s")?;
        if wc.status != WcStatus::Success {
            return Err(format!("completion {wc:?}").into());
        }
        if wc.opcode != WcOpcode::Recv {
            *sent += 1; // one of our SENDs finished
            continue;
        }
        let slot = wc.wr_id as usize;
        let mut bytes = vec![0u8; wc.byte_len as usize];
        mr.read(slot * SLOT, &mut bytes)?;
        qp.post_recv(RecvWr::new(wc.wr_id, &[mr.sge(slot * SLOT, SLOT as u32)]))?;
        return Ok(String::from_utf8(bytes)?);
    }
}

/// Waits for a send completion.
fn wait_send(cq: &CompletionQueue) -> Result<(), Box<dyn std::error::Error>> {
    loop {
        let wc = cq.poll_one_wait(Duration::from_secs(10))?.ok_or("no completion for 10 s")?;
        if wc.status != WcStatus::Success {
            return Err(format!("completion {wc:?}").into());
        }
        if wc.opcode == WcOpcode::Send {
            return Ok(());
        }
    }
}

/// Connects, retrying for 10 s while the server is not listening yet.
fn connect_retrying(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect((host, port)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Accepts one client, waiting at most `limit`.
fn accept_within(listener: &TcpListener, limit: Duration) -> std::io::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}
