//! Moves a lot of data over one RC QP and verifies every byte and the order of every
//! completion — the loss test's workload.
//!
//! The client writes message `i` (a length between 1 byte and `--max` bytes, the contents a
//! function of the seed and `i`) into slot `i mod SLOTS` of the server's buffer with RDMA
//! WRITE, then SENDs a small descriptor with immediate data `i`. The server checks that the
//! descriptors arrive in order, that the slot holds exactly the expected bytes, and answers
//! with a SEND carrying `i` back; the client reuses a slot only after that answer, and every
//! few messages it READs a verified slot back and compares it too.
//!
//! ```text
//! bulk -s -d 10.0.0.1                    # server
//! bulk -d 10.0.0.2 --bytes 1G 10.0.0.1   # client
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::exit;
use std::time::{Duration, Instant};

use clap::Parser;
use softroce::transport::sim::Rng;
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
    #[arg(short = 'p', default_value_t = 18800)]
    port: u16,
    /// Path MTU in bytes.
    #[arg(short = 'm', default_value_t = 4096)]
    mtu: u32,
    /// Bytes to move (suffixes K, M, G).
    #[arg(long, default_value = "64M")]
    bytes: String,
    /// Largest message.
    #[arg(long, default_value_t = 1 << 20)]
    max: usize,
    /// Messages in flight.
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Seed of the lengths and contents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Send every packet with its own system call (no UDP GSO).
    #[arg(long)]
    no_gso: bool,
    /// Local ACK timeout code of the RC QPs (4.096 µs × 2^code). The default, ~8 ms, is far
    /// above the tens of microseconds a veth round trip takes; `QpAttrs::rts` gives 14 (67 ms).
    #[arg(long, default_value_t = 11)]
    timeout: u8,
    /// Packet I/O backend: udp or raw (AF_PACKET, needs CAP_NET_RAW).
    #[arg(long, default_value = "udp")]
    backend: BackendKind,
    /// Server address (client role).
    server_ip: Option<String>,
}

const SLOTS: usize = 16;

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("bulk: error: {msg}");
    exit(2)
}

fn parse_bytes(s: &str) -> u64 {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().unwrap_or_else(|_| die(format!("bad size {s}"))) * mul
}

/// Length and contents of message `i`.
fn message(seed: u64, i: u64, max: usize) -> Vec<u8> {
    let mut r = Rng::new(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    // Mostly large, some tiny, so both long packet trains and Only packets happen.
    let len = if r.below(8) == 0 { 1 + r.below(64) as usize } else { 1 + r.below(max as u64) as usize };
    let mut v = vec![0u8; len];
    for chunk in v.chunks_mut(8) {
        let w = r.next_u64().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
    v
}

struct Res {
    dev: Device,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn open(addr: &str, max: usize, gso: bool, backend: &BackendKind) -> Res {
    let dev = Device::open(DeviceConfig { gso, ..DeviceConfig::new(addr).with_backend(backend.clone()) })
        .unwrap_or_else(|e| die(e));
    let pd = dev.alloc_pd().unwrap_or_else(|e| die(e));
    let cq = dev.create_cq(4096).unwrap_or_else(|e| die(e));
    let mut init = QpInitAttr::rc(&cq, &cq);
    init.cap =
        QpCaps { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = pd.create_qp(&init).unwrap_or_else(|e| die(e));
    // Slots for messages, then 64 bytes per descriptor, then a READ landing area.
    let mr = pd.alloc_mr(SLOTS * max + 256 * 64 + max, Access::ALL).unwrap_or_else(|e| die(e));
    qp.modify(&QpAttrs::init(Access::ALL)).unwrap_or_else(|e| die(e));
    Res { dev, _pd: pd, cq, qp, mr }
}

fn wait(res: &Res) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match res.cq.poll_one() {
            Ok(Some(wc)) => {
                if wc.status != WcStatus::Success {
                    // What the QP went through, for the post-mortem.
                    let c = res.dev.counters().map(|c| c.nonzero_summary());
                    die(format!(
                        "completion {} failed: {} (counters: {})",
                        wc.wr_id,
                        wc.status,
                        c.unwrap_or_default()
                    ));
                }
                return wc;
            }
            Ok(None) => {
                if Instant::now() > deadline {
                    die("no completion for 120 s");
                }
                let _ = res.cq.wait(Duration::from_millis(100));
            }
            Err(e) => die(e),
        }
    }
}

/// Sends this side's `qpn psn address va rkey` line and returns the peer's.
fn exchange(stream: &mut TcpStream, res: &Res, psn: Psn) -> (Qpn, Psn, Gid, u64, Rkey) {
    let line = format!(
        "{} {} {} {} {}\n",
        res.qp.qp_num().value(),
        psn.value(),
        res.dev.ip(),
        res.mr.addr(),
        res.mr.rkey().value()
    );
    stream.write_all(line.as_bytes()).unwrap_or_else(|e| die(e));
    let mut peer = String::new();
    BufReader::new(stream.try_clone().unwrap_or_else(|e| die(e)))
        .read_line(&mut peer)
        .unwrap_or_else(|e| die(e));
    let f: Vec<&str> = peer.split_whitespace().collect();
    if f.len() != 5 {
        die(format!("bad peer line {peer:?}"));
    }
    let p = |s: &str| s.parse::<u64>().unwrap_or_else(|_| die("bad number"));
    let ip: std::net::IpAddr = f[2].parse().unwrap_or_else(|_| die("bad address"));
    (Qpn::new(p(f[0]) as u32), Psn::new(p(f[1]) as u32), Gid::from_ip(ip), p(f[3]), Rkey::new(p(f[4]) as u32))
}

fn connect(res: &Res, a: &Args, mtu: Mtu, qpn: Qpn, rq: Psn, gid: Gid, sq: Psn) {
    let av = AddressVector::new(gid, res.dev.default_gid_index());
    res.qp.modify(&QpAttrs::rtr(av, mtu, qpn, rq)).unwrap_or_else(|e| die(e));
    let mut rts = QpAttrs::rts(sq);
    rts.timeout = Some(a.timeout);
    res.qp.modify(&rts).unwrap_or_else(|e| die(e));
}

const DESC: usize = 16; // i, slot offset, length

fn server(a: &Args, mtu: Mtu) {
    let res = open(&a.dev, a.max, !a.no_gso, &a.backend);
    let listener = TcpListener::bind((a.dev.as_str(), a.port)).unwrap_or_else(|e| die(e));
    println!("listening");
    let (mut s, _) = listener.accept().unwrap_or_else(|e| die(e));
    let (qpn, psn, gid, _, _) = exchange(&mut s, &res, Psn::new(0x40_0000));
    connect(&res, a, mtu, qpn, psn, gid, Psn::new(0x40_0000));
    let desc_base = SLOTS * a.max;
    for k in 0..256usize {
        res.qp
            .post_recv(RecvWr::new(k as u64, &[res.mr.sge(desc_base + k * 64, 64)]))
            .unwrap_or_else(|e| die(e));
    }
    let mut expect = 0u64;
    let mut moved = 0u64;
    let mut scratch = Vec::new();
    loop {
        let wc = wait(&res);
        if wc.opcode == WcOpcode::Send {
            continue; // our answers
        }
        let k = wc.wr_id as usize;
        let i = wc.imm_data.unwrap_or_else(|| die("descriptor without immediate")) as u64;
        if i == u32::MAX as u64 {
            break;
        }
        if i != expect & 0xffff_ffff {
            die(format!("descriptor {i} arrived, expected {expect}: out of order or duplicated"));
        }
        let mut d = [0u8; DESC];
        res.mr.read(desc_base + k * 64, &mut d).unwrap_or_else(|e| die(e));
        let off = u32::from_le_bytes(d[8..12].try_into().unwrap_or_default()) as usize;
        let len = u32::from_le_bytes(d[12..16].try_into().unwrap_or_default()) as usize;
        let want = message(a.seed, expect, a.max);
        if len != want.len() || off != (expect as usize % SLOTS) * a.max {
            die(format!(
                "descriptor {expect}: offset {off} length {len}, expected {} {}",
                (expect as usize % SLOTS) * a.max,
                want.len()
            ));
        }
        scratch.resize(len, 0);
        res.mr.read(off, &mut scratch).unwrap_or_else(|e| die(e));
        if scratch != want {
            let at = scratch.iter().zip(&want).position(|(x, y)| x != y).unwrap_or(0);
            die(format!("message {expect}: byte {at} of {len} differs"));
        }
        moved += len as u64;
        expect += 1;
        res.qp
            .post_recv(RecvWr::new(k as u64, &[res.mr.sge(desc_base + k * 64, 64)]))
            .unwrap_or_else(|e| die(e));
        // Answer: the slot may be reused.
        res.qp
            .post_send(SendWr::new(u64::MAX, SendOp::SendWithImm(i as u32), &[]))
            .unwrap_or_else(|e| die(e));
    }
    // Linger until the client has been quiet for a while: the ACK of its last message may be
    // lost, and a server that is gone leaves it retrying into the void (RETRY_EXC_ERR).
    let _ = res.dev.wait_quiet(Duration::from_millis(500), Duration::from_secs(10));
    println!("server: verified {expect} messages, {moved} bytes, every byte and the order");
    let c = res.dev.counters().unwrap_or_else(|e| die(e));
    println!("server counters: {}", c.nonzero_summary());
}

fn client(a: &Args, mtu: Mtu, ip: &str) {
    let total = parse_bytes(&a.bytes);
    let res = open(&a.dev, a.max, !a.no_gso, &a.backend);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect((ip, a.port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => die(e),
        }
    };
    let (qpn, psn, gid, raddr, rkey) = exchange(&mut s, &res, Psn::new(0x80_0000));
    connect(&res, a, mtu, qpn, psn, gid, Psn::new(0x80_0000));
    for k in 0..256u64 {
        res.qp.post_recv(RecvWr::new(k, &[])).unwrap_or_else(|e| die(e));
    }
    let start = Instant::now();
    let (mut sent, mut acked, mut moved, mut reads) = (0u64, 0u64, 0u64, 0u64);
    let desc_base = SLOTS * a.max;
    let read_area = desc_base + 256 * 64;
    let window = a.window.min(SLOTS - 1);
    let mut deferred: std::collections::VecDeque<WorkCompletion> = Default::default();
    while moved < total || acked < sent {
        while moved < total && sent - acked < window as u64 {
            let m = message(a.seed, sent, a.max);
            let slot = (sent as usize % SLOTS) * a.max;
            res.mr.write(slot, &m).unwrap_or_else(|e| die(e));
            let remote = RemoteAddr { addr: raddr + slot as u64, rkey };
            let mut w =
                SendWr::new(sent << 1, SendOp::RdmaWrite(remote), &[res.mr.sge(slot, m.len() as u32)]);
            w.signaled = false;
            res.qp.post_send(w).unwrap_or_else(|e| die(e));
            let dk = (sent % 256) as usize;
            let mut d = [0u8; DESC];
            d[..8].copy_from_slice(&sent.to_le_bytes());
            d[8..12].copy_from_slice(&(slot as u32).to_le_bytes());
            d[12..16].copy_from_slice(&(m.len() as u32).to_le_bytes());
            res.mr.write(desc_base + dk * 64, &d).unwrap_or_else(|e| die(e));
            let op = SendOp::SendWithImm(sent as u32);
            res.qp
                .post_send(SendWr::new(sent << 1 | 1, op, &[res.mr.sge(desc_base + dk * 64, DESC as u32)]))
                .unwrap_or_else(|e| die(e));
            moved += m.len() as u64;
            sent += 1;
        }
        let wc = deferred.pop_front().unwrap_or_else(|| wait(&res));
        match wc.opcode {
            WcOpcode::Recv => {
                // The server verified message `acked`.
                if wc.imm_data != Some(acked as u32) {
                    die(format!("answer {:?}, expected {acked}: out of order", wc.imm_data));
                }
                res.qp.post_recv(RecvWr::new(wc.wr_id, &[])).unwrap_or_else(|e| die(e));
                // Every 16th verified message: READ it back (its slot is not reused until a
                // later answer) and compare.
                // (The slot of message `acked` is not reused before `acked` is counted: at most
                // `window` < SLOTS messages are ahead of it.)
                if acked % 16 == 0 {
                    let m = message(a.seed, acked, a.max);
                    let slot = (acked as usize % SLOTS) * a.max;
                    let remote = RemoteAddr { addr: raddr + slot as u64, rkey };
                    res.qp
                        .post_send(SendWr::new(
                            u64::MAX - acked,
                            SendOp::RdmaRead(remote),
                            &[res.mr.sge(read_area, m.len() as u32)],
                        ))
                        .unwrap_or_else(|e| die(e));
                    loop {
                        let w = wait(&res);
                        if w.opcode == WcOpcode::RdmaRead {
                            break;
                        }
                        deferred.push_back(w);
                    }
                    let mut back = vec![0u8; m.len()];
                    res.mr.read(read_area, &mut back).unwrap_or_else(|e| die(e));
                    if back != m {
                        die(format!("READ of message {acked} differs"));
                    }
                    reads += 1;
                }
                acked += 1;
            }
            WcOpcode::Send if wc.wr_id & 1 == 1 && wc.wr_id >> 1 > sent => {
                die("completion for a message never sent");
            }
            _ => {}
        }
    }
    res.qp.post_send(SendWr::new(0, SendOp::SendWithImm(u32::MAX), &[])).unwrap_or_else(|e| die(e));
    let _ = wait(&res);
    let secs = start.elapsed().as_secs_f64();
    // Linger too: the ACK of the server's last answer may have been lost, and the server
    // resends that answer after its ACK timeout (or sooner, on a tail probe), to a client that
    // must still be there to acknowledge it (a gone one leaves it retrying into RETRY_EXC_ERR;
    // seen once in about ten starved runs with 5 % loss). Two ACK timeouts at least.
    let timeout = Duration::from_nanos(4096 << a.timeout.min(31));
    let _ = res.dev.wait_quiet((2 * timeout).max(Duration::from_millis(500)), Duration::from_secs(10));
    println!(
        "client: {sent} messages, {moved} bytes, {reads} READs verified in {secs:.2} s = {:.1} MB/s",
        moved as f64 / secs / 1e6
    );
    let c = res.dev.counters().unwrap_or_else(|e| die(e));
    println!("client counters: {}", c.nonzero_summary());
}

fn main() {
    let a = Args::parse();
    let mtu = Mtu::from_bytes(a.mtu).unwrap_or_else(|| die("bad MTU"));
    if a.max == 0 || a.max > 64 << 20 {
        die("--max out of range");
    }
    match (a.server, &a.server_ip) {
        (true, None) => server(&a, mtu),
        (false, Some(ip)) => client(&a, mtu, ip),
        _ => die("give -s or the server's address"),
    }
}
