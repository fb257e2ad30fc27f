//! A soak run: many RC QPs plus a UC and a UD QP between two processes, every operation type,
//! every byte verified, QPs created, used and destroyed all the time, CQs kept near full, and a
//! line of resource figures per interval, so that growth shows.
//!
//! The client keeps `--qps` RC QPs busy. Each runs, one at a time, a rotation of WRITE (then a
//! READ of the same range, compared with what was written), SEND, WRITE with immediate,
//! FETCH_ADD and CMP_SWAP (the returned value must be the one this QP's own sequence implies)
//! against its own 64 KiB region on the server; the server checks the contents of every SEND
//! and the immediate of every WRITE with immediate. A UC QP and a UD QP send verified
//! messages besides (the server checks what arrives; under loss some do not). Every
//! `--churn-ms` one idle RC QP is destroyed on both sides and a new one takes its place. The
//! client's CQ has room for exactly the operations that can be in flight.
//!
//! Every `--interval` seconds each side prints
//! `soak-stats t=<s> rss_kib=<n> fds=<n> qps=<n> mrs=<n> ops=<n> bad=<n> errors=<n> …`; at the
//! end (`--seconds`) both print `soak: PASS` if no byte was wrong and no RC operation ended in
//! an error completion, else `soak: FAIL` and exit 1. `tests/soak.rs` runs it through two
//! network namespaces with random drop and checks that the figures stay bounded.
//!
//! ```text
//! soak -s -d 10.0.0.1                      # server
//! soak -d 10.0.0.2 --seconds 1800 10.0.0.1 # client
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::process::exit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
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
    /// TCP port of the side channel.
    #[arg(short = 'p', default_value_t = 18900)]
    port: u16,
    /// RC QPs kept busy (client).
    #[arg(long, default_value_t = 64)]
    qps: usize,
    /// How long the client runs.
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// Seconds between two stats lines.
    #[arg(long, default_value_t = 60)]
    interval: u64,
    /// Milliseconds between two QP replacements (0: none).
    #[arg(long, default_value_t = 200)]
    churn_ms: u64,
    /// Seed of lengths and contents.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Server address (client role).
    server_ip: Option<String>,
}

/// Bytes of server memory per RC QP; the atomics use the last 16.
const REGION: usize = 64 * 1024;
const ATOMIC_OFF: u64 = (REGION - 16) as u64;
/// Largest WRITE/READ/SEND of the rotation.
const MAX_LEN: u32 = 16 * 1024;
/// Receive buffer size on the server (SENDs are at most this long).
const RECV_LEN: u32 = MAX_LEN;
/// Receives the server keeps posted per QP.
const RECVS: u32 = 4;
const UD_QKEY: Qkey = Qkey::new(0x1111_2222);

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("soak: error: {msg}");
    exit(2)
}

/// The byte `i` of message `seq` of QP `tag`: what every side recomputes to verify.
fn pattern(tag: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = (tag as u64) << 32 | seq as u64;
    for i in 0..len {
        if i % 8 == 0 {
            x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(0x632b_e59b_d9b4_e019);
        }
        v.push((x >> ((i % 8) * 8)) as u8);
    }
    v
}

/// Where WRITE with immediate number `seq` puts its message: one of four 4 KiB slots at the
/// front of the QP's region, so the server can check one while the client writes the next.
fn imm_slot(seq: u32) -> usize {
    (seq as usize / 5 % 4) * 4096
}

/// A SEND's contents: tag, seq, then the pattern (the receiver checks all of it).
fn message(tag: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut m = pattern(tag, seq, len.max(8));
    m[..4].copy_from_slice(&tag.to_le_bytes());
    m[4..8].copy_from_slice(&seq.to_le_bytes());
    m
}

fn check_message(got: &[u8]) -> bool {
    if got.len() < 8 {
        return false;
    }
    let tag = u32::from_le_bytes(got[..4].try_into().unwrap_or_default());
    let seq = u32::from_le_bytes(got[4..8].try_into().unwrap_or_default());
    got == message(tag, seq, got.len()).as_slice()
}

/// Resident set (KiB) and open descriptors of this process.
fn rss_and_fds() -> (u64, usize) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    (rss, fds)
}

#[derive(Default)]
struct Stats {
    ops: AtomicU64,
    bad: AtomicU64,
    errors: AtomicU64,
    churned: AtomicU64,
}

fn print_stats(role: &str, t0: Instant, dev: &Device, st: &Stats, qps: usize, mrs: usize) {
    let (rss, fds) = rss_and_fds();
    let c = dev.counters().unwrap_or_default();
    let q = |n: &str| c.qp.iter().find(|(k, _)| *k == n).map_or(0, |(_, v)| v);
    println!(
        "soak-stats role={role} t={} rss_kib={rss} fds={fds} qps={qps} mrs={mrs} ops={} bad={} errors={} \
         churned={} retransmits={} seq_naks={} rnr={} socket_drops={}",
        t0.elapsed().as_secs(),
        st.ops.load(Relaxed),
        st.bad.load(Relaxed),
        st.errors.load(Relaxed),
        st.churned.load(Relaxed),
        q("completer_retry_err"),
        q("rcvd_seq_err"),
        q("rcv_rnr_err"),
        c.rcvd_socket_drops,
    );
}

fn open(dev: &str) -> Device {
    Device::open(DeviceConfig::new(dev)).unwrap_or_else(|e| die(format!("device {dev}: {e}")))
}

/// PMTU 1024 (five-packet messages), otherwise the defaults ibverbs programs use (ACK timeout
/// 14: 67 ms, 7 retries, infinite RNR retry). With timeout 12 (16.8 ms) a 30-minute run on
/// this loaded 2-core machine ended once in RETRY_EXC_ERR after 5 minutes: seven retries in
/// 134 ms while the peer process was descheduled (the stall-aware timer discounts only this
/// side's own scheduling delays).
fn opts() -> ConnectOptions {
    ConnectOptions {
        mtu: Some(Mtu::Mtu1024),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectOptions::default()
    }
}

// ------------------------------------------------------------------------------- server ----

struct ServerQp {
    qp: QueuePair,
    mr: MemoryRegion,
    qp_type: QpType,
}

fn server(a: &Args) {
    let dev = open(&a.dev);
    let pd = dev.alloc_pd().unwrap_or_else(|e| die(e));
    let cq = dev.create_cq(1 << 16).unwrap_or_else(|e| die(e));
    let qps: Arc<Mutex<HashMap<u32, ServerQp>>> = Arc::default();
    let st = Arc::new(Stats::default());
    let done = Arc::new(AtomicBool::new(false));
    let listener = TcpListener::bind((a.dev.as_str(), a.port)).unwrap_or_else(|e| die(e));
    println!("soak: server listening on {}:{}", a.dev, a.port);
    let (stream, _) = listener.accept().unwrap_or_else(|e| die(e));
    let t0 = Instant::now();

    // The completion thread: verifies what arrives and reposts receives.
    let cq = Arc::new(cq);
    let poller = {
        let (qps, st, done, cq) = (qps.clone(), st.clone(), done.clone(), cq.clone());
        std::thread::spawn(move || {
            let mut wc = [WorkCompletion::default(); 64];
            while !done.load(Relaxed) {
                let n = cq.poll_wait(&mut wc, Duration::from_millis(100)).unwrap_or(0);
                let map = qps.lock().unwrap_or_else(|e| e.into_inner());
                for w in &wc[..n] {
                    let Some(s) = map.get(&w.qp_num.value()) else { continue };
                    if w.status == WcStatus::WrFlushErr {
                        continue;
                    }
                    if w.status != WcStatus::Success {
                        st.errors.fetch_add(1, Relaxed);
                        eprintln!("soak: server: {:?} on QP {}", w.status, w.qp_num);
                        continue;
                    }
                    st.ops.fetch_add(1, Relaxed);
                    let slot = w.wr_id as u32;
                    let off = REGION as u64 + slot as u64 * RECV_LEN as u64;
                    let ok = match w.opcode {
                        WcOpcode::RecvRdmaWithImm => {
                            // The WRITE put a message in slot `imm_slot(seq)`, its seq in the
                            // immediate. The client may have written that slot again since
                            // (a later seq of the same slot): any whole message of this QP
                            // with such a seq is right.
                            let seq = w.imm_data.unwrap_or(0);
                            let mut got = vec![0; w.byte_len as usize];
                            let ok = s.mr.read(imm_slot(seq), &mut got).is_ok() && check_message(&got);
                            let tag =
                                u32::from_le_bytes(got[..4.min(got.len())].try_into().unwrap_or_default());
                            let seen = u32::from_le_bytes(
                                got.get(4..8).map_or([0; 4], |b| b.try_into().unwrap_or_default()),
                            );
                            ok && tag == w.qp_num.value() && seen >= seq && (seen - seq) % 20 == 0
                        }
                        _ => {
                            let skip = if s.qp_type == QpType::Ud { GRH_LEN as u64 } else { 0 };
                            let len = (w.byte_len as u64).saturating_sub(skip) as usize;
                            let mut got = vec![0; len];
                            s.mr.read((off + skip) as usize, &mut got).is_ok() && check_message(&got)
                        }
                    };
                    if !ok {
                        st.bad.fetch_add(1, Relaxed);
                        eprintln!(
                            "soak: server: wrong bytes on {:?} QP {} ({:?}, {} bytes)",
                            s.qp_type, w.qp_num, w.opcode, w.byte_len
                        );
                    }
                    let _ = s.qp.post_recv(RecvWr::new(w.wr_id, &[s.mr.sge(off as usize, RECV_LEN)]));
                }
            }
        })
    };

    let mut r = BufReader::new(stream.try_clone().unwrap_or_else(|e| die(e)));
    let mut w = stream;
    let mut next_stats = a.interval;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["NEW", kind, qpn, psn, ip] => {
                let (qpn, psn): (u32, u32) = (qpn.parse().unwrap_or(0), psn.parse().unwrap_or(0));
                let ip: IpAddr = ip.parse().unwrap_or_else(|_| die("bad peer address"));
                let qp_type = match *kind {
                    "RC" => QpType::Rc,
                    "UC" => QpType::Uc,
                    _ => QpType::Ud,
                };
                let mut init = match qp_type {
                    QpType::Rc => QpInitAttr::rc(&cq, &cq),
                    QpType::Uc => QpInitAttr::uc(&cq, &cq),
                    QpType::Ud => QpInitAttr::ud(&cq, &cq),
                };
                init.cap = QpCaps {
                    max_send_wr: 4,
                    max_recv_wr: RECVS,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                };
                let qp = pd.create_qp(&init).unwrap_or_else(|e| die(e));
                let mr =
                    pd.alloc_mr(REGION + (RECVS * RECV_LEN) as usize, Access::ALL).unwrap_or_else(|e| die(e));
                let my_psn = random_psn();
                if qp_type == QpType::Ud {
                    qp.modify(&QpAttrs::init_ud(UD_QKEY)).unwrap_or_else(|e| die(e));
                } else {
                    qp.modify(&QpAttrs::init(Access::ALL)).unwrap_or_else(|e| die(e));
                }
                for i in 0..RECVS {
                    let off = REGION + (i * RECV_LEN) as usize;
                    qp.post_recv(RecvWr::new(i as u64, &[mr.sge(off, RECV_LEN)])).unwrap_or_else(|e| die(e));
                }
                if qp_type == QpType::Ud {
                    qp.modify(&QpAttrs::rtr_ud()).unwrap_or_else(|e| die(e));
                    qp.modify(&QpAttrs::rts_unreliable(my_psn)).unwrap_or_else(|e| die(e));
                } else {
                    let peer = QpEndpoint { gid: Gid::from(ip), qpn: Qpn::new(qpn), psn: Psn::new(psn) };
                    qp.connect(&qp.endpoint(my_psn), &peer, &opts()).unwrap_or_else(|e| die(e));
                }
                let reply = format!(
                    "{} {} {} {:#x}\n",
                    qp.qp_num().value(),
                    my_psn.value(),
                    mr.rkey().value(),
                    mr.addr()
                );
                qps.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(qp.qp_num().value(), ServerQp { qp, mr, qp_type });
                w.write_all(reply.as_bytes()).unwrap_or_else(|e| die(e));
            }
            ["DEL", qpn] => {
                let qpn: u32 = qpn.parse().unwrap_or(0);
                drop(qps.lock().unwrap_or_else(|e| e.into_inner()).remove(&qpn));
                st.churned.fetch_add(1, Relaxed);
                w.write_all(b"OK\n").unwrap_or_else(|e| die(e));
            }
            ["END"] => break,
            _ => die(format!("bad request {line:?}")),
        }
        if t0.elapsed().as_secs() >= next_stats {
            let n = qps.lock().unwrap_or_else(|e| e.into_inner()).len();
            print_stats("server", t0, &dev, &st, n, n);
            next_stats += a.interval;
        }
    }
    done.store(true, Relaxed);
    let _ = poller.join();
    let n = qps.lock().unwrap_or_else(|e| e.into_inner()).len();
    print_stats("server", t0, &dev, &st, n, n);
    finish(&st);
}

fn finish(st: &Stats) -> ! {
    let (bad, errors) = (st.bad.load(Relaxed), st.errors.load(Relaxed));
    if bad == 0 && errors == 0 {
        println!("soak: PASS ({} operations verified)", st.ops.load(Relaxed));
        exit(0)
    }
    println!("soak: FAIL ({bad} wrong, {errors} error completions)");
    exit(1)
}

// ------------------------------------------------------------------------------- client ----

/// What one RC QP of the client is doing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    Idle,
    Write { seq: u32, off: u64, len: u32 },
    ReadBack { seq: u32, off: u64, len: u32 },
    Send,
    WriteImm,
    FetchAdd,
    CmpSwap,
}

struct ClientQp {
    qp: QueuePair,
    /// The server's QP number (its region's tag and the DEL key).
    peer: u32,
    remote: RemoteAddr,
    /// 64 KiB of local memory: what is sent and where READs land.
    mr: MemoryRegion,
    step: Step,
    seq: u32,
    faa: u64,
    cas: u64,
}

struct Session {
    r: BufReader<TcpStream>,
    w: TcpStream,
    ip: String,
}

impl Session {
    fn ask(&mut self, req: &str) -> Vec<String> {
        self.w.write_all(req.as_bytes()).unwrap_or_else(|e| die(e));
        let mut line = String::new();
        if self.r.read_line(&mut line).unwrap_or(0) == 0 {
            die("the server went away");
        }
        line.split_whitespace().map(str::to_string).collect()
    }
}

fn new_rc(s: &mut Session, pd: &ProtectionDomain, cq: &CompletionQueue) -> ClientQp {
    let mut init = QpInitAttr::rc(cq, cq);
    init.cap =
        QpCaps { max_send_wr: 2, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = pd.create_qp(&init).unwrap_or_else(|e| die(e));
    let psn = random_psn();
    let f = s.ask(&format!("NEW RC {} {} {}\n", qp.qp_num().value(), psn.value(), s.ip));
    let peer: u32 = f[0].parse().unwrap_or(0);
    let remote_ep = QpEndpoint {
        gid: Gid::from(s.r.get_ref().peer_addr().map(|a| a.ip()).unwrap_or_else(|e| die(e))),
        qpn: Qpn::new(peer),
        psn: Psn::new(f[1].parse().unwrap_or(0)),
    };
    qp.connect(&qp.endpoint(psn), &remote_ep, &opts()).unwrap_or_else(|e| die(e));
    let remote = RemoteAddr {
        addr: u64::from_str_radix(f[3].trim_start_matches("0x"), 16).unwrap_or(0),
        rkey: Rkey::new(f[2].parse().unwrap_or(0)),
    };
    let mr = pd.alloc_mr(REGION, Access::LOCAL_WRITE).unwrap_or_else(|e| die(e));
    ClientQp { qp, peer, remote, mr, step: Step::Idle, seq: 0, faa: 0, cas: 0 }
}

/// Starts the next operation of `c`'s rotation.
fn start(c: &mut ClientQp, rng: &mut Rng, id: u64) {
    c.seq = c.seq.wrapping_add(1);
    let seq = c.seq;
    let tag = c.peer;
    let len = 1 + rng.below(MAX_LEN as u64) as u32;
    let r = c.remote;
    let (wr, step) = match seq % 5 {
        0 => {
            // (the front 16 KiB belong to WRITE with immediate, which the server reads)
            let off = 32 * 1024 + (rng.below(ATOMIC_OFF - 32 * 1024 - MAX_LEN as u64) & !7);
            let _ = c.mr.write(0, &pattern(tag, seq, len as usize));
            let wr = SendWr::write(id, &[c.mr.sge(0, len)], RemoteAddr { addr: r.addr + off, ..r });
            (wr, Step::Write { seq, off, len })
        }
        1 => {
            let _ = c.mr.write(0, &message(tag, seq, len as usize));
            (SendWr::send(id, &[c.mr.sge(0, len.max(8))]), Step::Send)
        }
        2 => {
            // A whole message in slot `imm_slot(seq)`; the server checks it.
            let len = len.clamp(8, 4096);
            let _ = c.mr.write(0, &message(tag, seq, len as usize));
            let dst = RemoteAddr { addr: r.addr + imm_slot(seq) as u64, ..r };
            (SendWr::write_with_imm(id, &[c.mr.sge(0, len)], dst, seq), Step::WriteImm)
        }
        3 => {
            let remote = RemoteAddr { addr: r.addr + ATOMIC_OFF, ..r };
            (
                SendWr::new(id, SendOp::FetchAdd { remote, add: 1 }, &[c.mr.sge(REGION - 16, 8)]),
                Step::FetchAdd,
            )
        }
        _ => {
            let remote = RemoteAddr { addr: r.addr + ATOMIC_OFF + 8, ..r };
            let op = SendOp::CompareSwap { remote, compare: c.cas, swap: c.cas + 3 };
            (SendWr::new(id, op, &[c.mr.sge(REGION - 8, 8)]), Step::CmpSwap)
        }
    };
    c.qp.post_send(wr).unwrap_or_else(|e| die(format!("post_send: {e}")));
    c.step = step;
}

/// Handles `c`'s completion; returns false if the data was wrong.
fn complete(c: &mut ClientQp, id: u64) -> bool {
    let word = |off: usize| c.mr.atomic_u64(off).map(|w| w.load(Relaxed)).unwrap_or(u64::MAX);
    match c.step {
        Step::Write { seq, off, len } => {
            let rd = SendWr::read(
                id,
                &[c.mr.sge(32 * 1024, len)],
                RemoteAddr { addr: c.remote.addr + off, ..c.remote },
            );
            c.qp.post_send(rd).unwrap_or_else(|e| die(format!("post_send: {e}")));
            c.step = Step::ReadBack { seq, off, len };
            return true;
        }
        Step::ReadBack { seq, len, .. } => {
            let mut got = vec![0; len as usize];
            let _ = c.mr.read(32 * 1024, &mut got);
            c.step = Step::Idle;
            return got == pattern(c.peer, seq, len as usize);
        }
        Step::FetchAdd => {
            let ok = word(REGION - 16) == c.faa;
            c.faa += 1;
            c.step = Step::Idle;
            return ok;
        }
        Step::CmpSwap => {
            let ok = word(REGION - 8) == c.cas;
            c.cas += 3;
            c.step = Step::Idle;
            return ok;
        }
        _ => {}
    }
    c.step = Step::Idle;
    true
}

/// One RC completion: checks it, and starts the QP's next operation unless it is `hold`.
fn handle(qps: &mut [ClientQp], w: &WorkCompletion, st: &Stats, rng: &mut Rng, hold: Option<usize>) {
    let i = w.wr_id as usize;
    let Some(c) = qps.get_mut(i) else { return };
    if w.status != WcStatus::Success {
        st.errors.fetch_add(1, Relaxed);
        die(format!("{} on QP {} during {:?}", w.status, w.qp_num, c.step));
    }
    st.ops.fetch_add(1, Relaxed);
    if !complete(c, w.wr_id) {
        st.bad.fetch_add(1, Relaxed);
        eprintln!("soak: client: wrong bytes on QP {}", w.qp_num);
    }
    if c.step == Step::Idle && hold != Some(i) {
        start(c, rng, i as u64);
    }
}

fn client(a: &Args) {
    let server_ip = a.server_ip.clone().unwrap_or_else(|| die("the client needs the server's address"));
    let dev = open(&a.dev);
    let pd = dev.alloc_pd().unwrap_or_else(|e| die(e));
    let stream = (0..100)
        .find_map(|_| {
            TcpStream::connect((server_ip.as_str(), a.port)).ok().or_else(|| {
                std::thread::sleep(Duration::from_millis(100));
                None
            })
        })
        .unwrap_or_else(|| die("no server"));
    let mut s = Session {
        r: BufReader::new(stream.try_clone().unwrap_or_else(|e| die(e))),
        w: stream,
        ip: a.dev.clone(),
    };
    // Room for exactly what can be in flight: one operation per RC QP, and the unreliable
    // sends (completed locally at once, reaped every round).
    let cq = dev.create_cq(a.qps + 16).unwrap_or_else(|e| die(e));
    let mut rng = Rng::new(a.seed);
    let mut qps: Vec<ClientQp> = (0..a.qps).map(|_| new_rc(&mut s, &pd, &cq)).collect();

    // The unreliable pair: a UC and a UD QP, each sending verified messages now and then.
    let ucq = dev.create_cq(64).unwrap_or_else(|e| die(e));
    let mk = |init: QpInitAttr<'_>| {
        pd.create_qp(&QpInitAttr {
            cap: QpCaps {
                max_send_wr: 8,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..init
        })
        .unwrap_or_else(|e| die(e))
    };
    let uc = mk(QpInitAttr::uc(&ucq, &ucq));
    let ud = mk(QpInitAttr::ud(&ucq, &ucq));
    let umr = pd.alloc_mr(2 * 4096, Access::LOCAL_WRITE).unwrap_or_else(|e| die(e));
    let psn = random_psn();
    let f = s.ask(&format!("NEW UC {} {} {}\n", uc.qp_num().value(), psn.value(), s.ip));
    let peer_ip: IpAddr = server_ip.parse().unwrap_or_else(|_| die("server address"));
    let uc_peer = QpEndpoint {
        gid: Gid::from(peer_ip),
        qpn: Qpn::new(f[0].parse().unwrap_or(0)),
        psn: Psn::new(f[1].parse().unwrap_or(0)),
    };
    uc.connect(&uc.endpoint(psn), &uc_peer, &opts()).unwrap_or_else(|e| die(e));
    let f = s.ask(&format!("NEW UD {} 0 {}\n", ud.qp_num().value(), s.ip));
    ud.modify(&QpAttrs::init_ud(UD_QKEY)).unwrap_or_else(|e| die(e));
    ud.modify(&QpAttrs::rtr_ud()).unwrap_or_else(|e| die(e));
    ud.modify(&QpAttrs::rts_unreliable(random_psn())).unwrap_or_else(|e| die(e));
    let ah = pd
        .create_ah(&AddressVector::new(Gid::from(peer_ip), dev.default_gid_index()))
        .unwrap_or_else(|e| die(e));
    let ud_dest = ah.dest(Qpn::new(f[0].parse().unwrap_or(0)), UD_QKEY);

    let st = Stats::default();
    let t0 = Instant::now();
    let (end, mut next_stats, mut next_churn, mut next_unreliable) =
        (Duration::from_secs(a.seconds), Duration::from_secs(a.interval), Duration::ZERO, Duration::ZERO);
    let mut useq = 0u32;
    let mut unreliable_out = [false; 2];
    let mut wc = [WorkCompletion::default(); 64];
    for (i, c) in qps.iter_mut().enumerate() {
        start(c, &mut rng, i as u64);
    }
    while t0.elapsed() < end {
        let n = cq.poll_wait(&mut wc, Duration::from_millis(50)).unwrap_or(0);
        for w in &wc[..n] {
            handle(&mut qps, w, &st, &mut rng, None);
        }
        // Churn: let a random QP finish its operation (the others go on meanwhile), then
        // destroy it on both sides and put a new one in its place.
        if a.churn_ms > 0 && t0.elapsed() >= next_churn {
            next_churn += Duration::from_millis(a.churn_ms);
            let i = rng.below(qps.len() as u64) as usize;
            let deadline = Instant::now() + Duration::from_secs(60);
            while qps[i].step != Step::Idle {
                if Instant::now() > deadline {
                    die("a QP to retire never completed");
                }
                let mut one = [WorkCompletion::default()];
                if cq.poll_wait(&mut one, Duration::from_millis(50)).unwrap_or(0) == 1 {
                    handle(&mut qps, &one[0], &st, &mut rng, Some(i));
                }
            }
            let old = std::mem::replace(&mut qps[i], new_rc(&mut s, &pd, &cq));
            let peer = old.peer;
            drop(old);
            s.ask(&format!("DEL {peer}\n"));
            st.churned.fetch_add(1, Relaxed);
            start(&mut qps[i], &mut rng, i as u64);
        }
        // Unreliable traffic: a UC SEND and a UD SEND every 20 ms, each only once the previous
        // one from the same buffer completed (the engine gathers the bytes when it sends).
        while let Ok(n @ 1..) = ucq.poll(&mut wc) {
            for w in &wc[..n] {
                unreliable_out[w.wr_id as usize] = false;
            }
        }
        if t0.elapsed() >= next_unreliable {
            next_unreliable += Duration::from_millis(20);
            useq += 1;
            if !unreliable_out[0] {
                let m = message(0x5543, useq, 1 + (useq as usize * 37) % 4000);
                let _ = umr.write(0, &m);
                unreliable_out[0] = uc.post_send(SendWr::send(0, &[umr.sge(0, m.len() as u32)])).is_ok();
            }
            if !unreliable_out[1] {
                let m = message(0x5544, useq, 8 + (useq as usize * 13) % 1000);
                let _ = umr.write(4096, &m);
                let mut wr = SendWr::send(1, &[umr.sge(4096, m.len() as u32)]);
                wr.ud = Some(ud_dest);
                unreliable_out[1] = ud.post_send(wr).is_ok();
            }
        }
        if t0.elapsed() >= next_stats {
            next_stats += Duration::from_secs(a.interval);
            print_stats("client", t0, &dev, &st, qps.len() + 2, qps.len() + 2);
        }
    }
    // Let every RC QP finish its operation, then end the session.
    print_stats("client", t0, &dev, &st, qps.len() + 2, qps.len() + 2);
    let _ = s.w.write_all(b"END\n");
    finish(&st);
}

fn main() {
    let a = Args::parse();
    if a.server { server(&a) } else { client(&a) }
}
