//! Streams numbered messages over a UC or UD QP and checks what arrives — the loss test's
//! workload for the unreliable services.
//!
//! The client sends `--count` messages (UC: SENDs of `--size` bytes, several packets each; UD:
//! one packet each), message `i` filled with a pattern of `i`. Neither service retransmits, so
//! some are lost on a lossy path; the server checks that every message it receives is intact
//! (one that was sent, whole), that they arrive in increasing order, and — on UC — that none
//! arrives twice. The TCP side channel carries the QP addresses and, at the end, the number
//! sent. (Exchange lines: `qpn ip`.)
//!
//! ```text
//! datagrams -s -d 10.0.0.1 --qp-type ud                 # server
//! datagrams -d 10.0.0.2 --qp-type ud --count 5000 10.0.0.1
//! ```
//! The server prints `received R of N intact, in order` and exits 0 if every check held.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::exit;
use std::time::{Duration, Instant};

use clap::Parser;
use softroce::verbs::*;

#[derive(Parser, Debug)]
struct Args {
    /// Server role.
    #[arg(short = 's')]
    server: bool,
    /// Local address of the softroce device.
    #[arg(short = 'd')]
    dev: String,
    /// TCP port.
    #[arg(short = 'p', default_value_t = 18900)]
    port: u16,
    /// uc or ud.
    #[arg(long, default_value = "ud")]
    qp_type: String,
    /// Message size (UD: at most the port's MTU).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Messages to send.
    #[arg(long, default_value_t = 2000)]
    count: u32,
    /// Send every packet with its own system call (no UDP GSO), so that a lossy path drops
    /// single packets rather than whole GSO runs.
    #[arg(long)]
    no_gso: bool,
    /// Server address (client role).
    server_ip: Option<String>,
}

const QKEY: Qkey = Qkey::new(0x1111_1111);
const RX: usize = 1024;

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("datagrams: {msg}");
    exit(1)
}

/// The contents of message `i`.
fn pattern(i: u32, size: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..size)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i.wrapping_mul(0x9e37_79b9)) as u8)
        .collect();
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

fn main() {
    let a = Args::parse();
    let ud = match a.qp_type.as_str() {
        "ud" => true,
        "uc" => false,
        other => die(format!("--qp-type {other}: uc or ud")),
    };
    let mut cfg = DeviceConfig::new(a.dev.clone());
    cfg.gso = !a.no_gso;
    let dev = Device::open(cfg).unwrap_or_else(|e| die(e));
    let mtu = dev.query_port().active_mtu;
    if ud && a.size > mtu.bytes() as usize {
        die(format!("UD messages are at most the port's MTU ({})", mtu.bytes()));
    }
    if a.size < 4 {
        die("--size must be at least 4");
    }
    let grh = if ud { GRH_LEN } else { 0 };
    let pd = dev.alloc_pd().unwrap_or_else(|e| die(e));
    let cq = dev.create_cq(4 * RX).unwrap_or_else(|e| die(e));
    let mut init = QpInitAttr::new(if ud { QpType::Ud } else { QpType::Uc }, &cq, &cq);
    init.cap = QpCaps {
        max_send_wr: 64,
        max_recv_wr: RX as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&init).unwrap_or_else(|e| die(e));
    let slot = a.size + grh;
    let mr = pd.alloc_mr(slot * RX, Access::LOCAL_WRITE).unwrap_or_else(|e| die(e));
    if ud {
        qp.modify(&QpAttrs::init_ud(QKEY)).unwrap_or_else(|e| die(e));
    } else {
        qp.modify(&QpAttrs::init(Access::NONE)).unwrap_or_else(|e| die(e));
    }
    let me = format!("{} {}\n", qp.qp_num().value(), dev.ip());

    // Exchange "qpn gid" lines; the server posts its receives first.
    let mut stream = if a.server {
        for k in 0..RX {
            qp.post_recv(RecvWr::new(k as u64, &[mr.sge(k * slot, slot as u32)])).unwrap_or_else(|e| die(e));
        }
        let l = TcpListener::bind(("0.0.0.0", a.port)).unwrap_or_else(|e| die(e));
        l.accept().unwrap_or_else(|e| die(e)).0
    } else {
        let host = a.server_ip.clone().unwrap_or_else(|| die("client needs the server address"));
        TcpStream::connect((host.as_str(), a.port)).unwrap_or_else(|e| die(e))
    };
    let mut reader = BufReader::new(stream.try_clone().unwrap_or_else(|e| die(e)));
    stream.write_all(me.as_bytes()).unwrap_or_else(|e| die(e));
    let mut line = String::new();
    reader.read_line(&mut line).unwrap_or_else(|e| die(e));
    let mut it = line.split_whitespace();
    let peer_qpn = Qpn::new(it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| die("bad peer line")));
    let peer_ip: std::net::IpAddr =
        it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| die("bad peer address"));
    let av = AddressVector::new(Gid::from_ip(peer_ip), dev.default_gid_index());
    let mut ah = None;
    if ud {
        qp.modify(&QpAttrs::rtr_ud()).unwrap_or_else(|e| die(e));
        ah = Some(pd.create_ah(&av).unwrap_or_else(|e| die(e)));
    } else {
        qp.modify(&QpAttrs::rtr_uc(av, mtu, peer_qpn, Psn::new(0))).unwrap_or_else(|e| die(e));
    }
    qp.modify(&QpAttrs::rts_unreliable(Psn::new(0))).unwrap_or_else(|e| die(e));
    // Both sides are ready before the first message.
    stream.write_all(b"ready\n").unwrap_or_else(|e| die(e));
    line.clear();
    reader.read_line(&mut line).unwrap_or_else(|e| die(e));

    let mut wcs = [WorkCompletion::default(); 64];
    if !a.server {
        for i in 0..a.count {
            mr.write(0, &pattern(i, a.size)).unwrap_or_else(|e| die(e));
            let mut wr = SendWr::new(i as u64, SendOp::Send, &[mr.sge(0, a.size as u32)]);
            if let Some(ah) = &ah {
                wr.ud = Some(ah.dest(peer_qpn, QKEY));
            }
            qp.post_send(wr).unwrap_or_else(|e| die(e));
            // One at a time: the buffer is reused, and the receiver keeps up.
            let wc = cq.poll_one_wait(Duration::from_secs(10)).unwrap_or_else(|e| die(e));
            match wc {
                Some(wc) if wc.status == WcStatus::Success => {}
                other => die(format!("send {i}: {other:?}")),
            }
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        stream.write_all(format!("sent {}\n", a.count).as_bytes()).unwrap_or_else(|e| die(e));
        line.clear();
        let _ = reader.read_line(&mut line);
        print!("{line}");
        return;
    }

    // Server: receive until the client says how many it sent and the line is quiet.
    stream.set_nonblocking(true).unwrap_or_else(|e| die(e));
    let mut sent: Option<u32> = None;
    let mut got: Vec<u32> = Vec::new();
    let mut quiet_since = Instant::now();
    let mut buf = vec![0u8; a.size];
    loop {
        let n = cq.poll_wait(&mut wcs, Duration::from_millis(20)).unwrap_or_else(|e| die(e));
        if n > 0 {
            quiet_since = Instant::now();
        }
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success || wc.byte_len as usize != a.size + grh {
                die(format!("bad receive completion {wc:?}"));
            }
            let k = wc.wr_id as usize;
            mr.read(k * slot + grh, &mut buf).unwrap_or_else(|e| die(e));
            let i = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if buf != pattern(i, a.size) {
                die(format!("message {i} is not one that was sent, intact"));
            }
            got.push(i);
            qp.post_recv(RecvWr::new(k as u64, &[mr.sge(k * slot, slot as u32)])).unwrap_or_else(|e| die(e));
        }
        if sent.is_none() {
            let mut l = String::new();
            if reader.read_line(&mut l).is_ok() && l.starts_with("sent ") {
                sent = l[5..].trim().parse().ok();
            }
        }
        if sent.is_some() && quiet_since.elapsed() > Duration::from_millis(300) {
            break;
        }
    }
    let sent = sent.unwrap_or(0);
    let in_order = got.windows(2).all(|w| w[0] < w[1]) && got.iter().all(|&i| i < sent);
    let c = dev.counters().unwrap_or_else(|e| die(e));
    let summary = format!(
        "received {} of {sent} intact, {}; icrc errors {}, uc messages dropped {}\n",
        got.len(),
        if in_order { "in order" } else { "OUT OF ORDER OR DUPLICATED" },
        c.rcvd_icrc_err,
        c.qp.uc_msg_dropped
    );
    print!("{summary}");
    stream.set_nonblocking(false).unwrap_or_else(|e| die(e));
    let _ = stream.write_all(summary.as_bytes());
    if !in_order {
        exit(1);
    }
}
