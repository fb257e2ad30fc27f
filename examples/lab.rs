//! The RDMA lab sequence: open a device, allocate a PD, CQ, QP and MR, exchange QPN, PSN, GID,
//! addresses and rkeys with the peer over TCP, move the QP to RTS, then run SEND, SEND with
//! immediate, RDMA WRITE, WRITE with immediate, RDMA READ and both atomics — checking the data
//! each time — and tear everything down.
//!
//! It speaks protocol `LAB1` (tests/interop/lab-protocol.md) byte for byte, so it pairs with
//! `labpeer`, the kernel-rxe program of the interop rig, in either role:
//!
//! ```text
//! cargo run --example lab -- -s -d 127.0.0.1              # server (responder)
//! cargo run --example lab -- -d 127.0.0.2 127.0.0.1       # client (requester)
//! ```
//!
//! `-d` names the local address or interface; without it the address the TCP connection uses
//! is taken.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::process::exit;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;
use softroce::verbs::*;
use std::io::Read;

type StepResult = std::result::Result<(), String>;

/// RDMA lab sequence (protocol LAB1), pairs with labpeer.
#[derive(Parser, Debug)]
#[command(name = "lab")]
struct Args {
    /// Server role (responder); without it, client connecting to SERVER_IP.
    #[arg(short = 's')]
    server: bool,
    /// TCP port of the side channel.
    #[arg(short = 'p', default_value_t = 18700)]
    port: u16,
    /// Source GID index (default: the GID of the device's address).
    #[arg(short = 'g')]
    gid_index: Option<u8>,
    /// Local address or interface of the softroce device.
    #[arg(short = 'd')]
    dev: Option<String>,
    /// Port number (only 1).
    #[arg(short = 'i', default_value_t = 1)]
    ib_port: u8,
    /// Path MTU (client; the server takes the client's).
    #[arg(short = 'm')]
    mtu: Option<u32>,
    /// Size of the large messages (client; the server takes the client's).
    #[arg(short = 'z')]
    size: Option<usize>,
    /// Initial send PSN, hex.
    #[arg(short = 'P', value_parser = |s: &str| u32::from_str_radix(s, 16))]
    psn: Option<u32>,
    /// Completion timeout, seconds.
    #[arg(short = 't', default_value_t = 30)]
    timeout: u64,
    /// Verbose log on stderr.
    #[arg(short = 'v')]
    verbose: bool,
    /// Packet I/O backend: udp or raw (AF_PACKET, needs CAP_NET_RAW).
    #[arg(long, default_value = "udp")]
    backend: BackendKind,
    /// Mark data packets ECN-capable (ECT(0)).
    #[arg(long)]
    ecn: bool,
    /// The server's address (client role).
    server_ip: Option<String>,
}

const STEPS: [&str; 14] = [
    "send",
    "send_imm",
    "write",
    "write_imm",
    "read",
    "send_small",
    "send_imm_small",
    "write_small",
    "write_imm_small",
    "read_small",
    "write_imm_zero",
    "fetch_add",
    "cmp_swap",
    "cmp_swap_miss",
];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

fn kind(n: usize) -> Kind {
    match STEPS[n - 1] {
        "send" | "send_small" => Kind::Send,
        "send_imm" | "send_imm_small" => Kind::SendImm,
        "write" | "write_small" => Kind::Write,
        "write_imm" | "write_imm_small" | "write_imm_zero" => Kind::WriteImm,
        "read" | "read_small" => Kind::Read,
        "fetch_add" => Kind::FetchAdd,
        _ => Kind::CmpSwap,
    }
}

fn len_of(n: usize, s: usize) -> usize {
    match n {
        1..=5 => s,
        6..=10 => 100,
        11 => 0,
        _ => 8,
    }
}

fn imm_of(n: usize) -> Option<u32> {
    matches!(kind(n), Kind::SendImm | Kind::WriteImm).then_some(0xC0DE_0000 + n as u32)
}

fn pattern(n: usize, i: usize) -> u8 {
    ((37 * n + (i % 251)) % 256) as u8
}

/// (initial word, compare_add, swap, original, afterwards) of the atomic steps.
fn atomic_values(n: usize) -> (u64, u64, u64, u64, u64) {
    match n {
        12 => (0x1122_3344_FFFF_FFFF, 0x0000_0001_0000_0001, 0, 0x1122_3344_FFFF_FFFF, 0x1122_3346_0000_0000),
        13 => (
            0x0102_0304_0506_0708,
            0x0102_0304_0506_0708,
            0xA1A2_A3A4_A5A6_A7A8,
            0x0102_0304_0506_0708,
            0xA1A2_A3A4_A5A6_A7A8,
        ),
        _ => (
            0x1020_3040_5060_7080,
            0x1020_3041_5060_7080,
            0xDEAD_BEEF_DEAD_BEEF,
            0x1020_3040_5060_7080,
            0x1020_3040_5060_7080,
        ),
    }
}

const FILL: u8 = 0xEE;

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("lab: error: {msg}");
    exit(2)
}

/// The side channel: lines of `LAB1 ...`.
struct Chan {
    r: BufReader<TcpStream>,
    w: TcpStream,
    verbose: bool,
}

impl Chan {
    fn send(&mut self, line: &str) {
        if self.verbose {
            eprintln!("lab: > {line}");
        }
        if let Err(e) = self.w.write_all(format!("{line}\n").as_bytes()) {
            die(format!("tcp write: {e}"));
        }
    }
    fn recv(&mut self) -> Vec<String> {
        let mut line = String::new();
        match self.r.by_ref().take(257).read_line(&mut line) {
            Ok(0) => die("peer closed the connection"),
            Ok(_) => {}
            Err(e) => die(format!("tcp read: {e}")),
        }
        if !line.ends_with('\n') || line.len() > 256 {
            die(format!("malformed line {line:?}"));
        }
        line.pop();
        if self.verbose {
            eprintln!("lab: < {line}");
        }
        let f: Vec<String> = line.split(' ').map(str::to_string).collect();
        if f.first().map(String::as_str) != Some("LAB1") {
            die(format!("not a LAB1 line: {line:?}"));
        }
        f
    }
    fn expect(&mut self, what: &str, n: usize, fields: usize) -> Vec<String> {
        let f = self.recv();
        if f.len() < fields || f[1] != what || f[2] != n.to_string() || f[3] != STEPS[n - 1] {
            die(format!("expected {what} {n} {}, got {:?}", STEPS[n - 1], f.join(" ")));
        }
        f
    }
}

struct Hello {
    qpn: Qpn,
    psn: Psn,
    gid: Gid,
    mtu: u32,
    size: usize,
}

fn hello_line(h: &Hello) -> String {
    let gid: String = h.gid.0.iter().map(|b| format!("{b:02x}")).collect();
    format!("LAB1 HELLO {:06x} {:06x} {gid} {} {}", h.qpn, h.psn.value(), h.mtu, h.size)
}

fn parse_hello(f: &[String]) -> Hello {
    if f.len() != 7 || f[1] != "HELLO" {
        if f.get(1).map(String::as_str) == Some("ERROR") {
            die(format!("peer refused: {}", f[2..].join(" ")));
        }
        die(format!("expected HELLO, got {:?}", f.join(" ")));
    }
    let hex = |s: &str, n: usize| {
        if s.len() != n || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            die(format!("bad hex field {s:?}"));
        }
        u128::from_str_radix(s, 16).unwrap_or_else(|_| die("bad hex"))
    };
    let dec = |s: &str| s.parse::<usize>().unwrap_or_else(|_| die(format!("bad number {s:?}")));
    Hello {
        qpn: Qpn::new(hex(&f[2], 6) as u32),
        psn: Psn::new(hex(&f[3], 6) as u32),
        gid: Gid(hex(&f[4], 32).to_be_bytes()),
        mtu: dec(&f[5]) as u32,
        size: dec(&f[6]),
    }
}

/// Device, PD, CQ, QP and one MR of 4 KiB-aligned regions.
struct Res {
    dev: Device,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    region: usize,
}

impl Res {
    fn open(addr: &str, size: usize, access: Access, args: &Args) -> Res {
        let cfg =
            DeviceConfig { ecn: args.ecn, ..DeviceConfig::new(addr).with_backend(args.backend.clone()) };
        let dev = Device::open(cfg).unwrap_or_else(|e| die(e));
        let pd = dev.alloc_pd().unwrap_or_else(|e| die(e));
        let cq = dev.create_cq(64).unwrap_or_else(|e| die(e));
        let mut init = QpInitAttr::rc(&cq, &cq);
        init.cap =
            QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 3, max_recv_sge: 2, max_inline_data: 0 };
        let qp = pd.create_qp(&init).unwrap_or_else(|e| die(e));
        let region = (size + 256).div_ceil(4096) * 4096;
        let mr = pd.alloc_mr(region * 6, access).unwrap_or_else(|e| die(e));
        qp.modify(&QpAttrs::init(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC))
            .unwrap_or_else(|e| die(e));
        Res { dev, _pd: pd, cq, qp, mr, region }
    }

    /// The source GID index: `-g`, or the device's own address.
    fn gid_index(&self, args: &Args) -> GidIndex {
        args.gid_index.map_or_else(|| self.dev.default_gid_index(), GidIndex::new)
    }

    fn connect(&self, peer: &Hello, gid_index: GidIndex, mtu: Mtu, psn: Psn) {
        let av = AddressVector::new(peer.gid, gid_index);
        let mut rtr = QpAttrs::rtr(av, mtu, peer.qpn, peer.psn);
        rtr.max_dest_rd_atomic = Some(1);
        rtr.min_rnr_timer = Some(12);
        self.qp.modify(&rtr).unwrap_or_else(|e| die(e));
        let mut rts = QpAttrs::rts(psn);
        rts.max_rd_atomic = Some(1);
        self.qp.modify(&rts).unwrap_or_else(|e| die(e));
    }

    /// Offset of byte `off` of region `r`.
    fn at(&self, r: usize, off: usize) -> usize {
        r * self.region + off
    }

    fn fill_region(&self, r: usize) {
        self.mr.fill(self.at(r, 0), self.region, FILL).unwrap_or_else(|e| die(e));
    }

    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.mr.read(off, &mut v).unwrap_or_else(|e| die(e));
        v
    }

    fn all_fill(&self, off: usize, len: usize) -> bool {
        self.bytes(off, len).iter().all(|&b| b == FILL)
    }

    fn wait(&self, t: Duration) -> Option<WorkCompletion> {
        let deadline = Instant::now() + t;
        loop {
            match self.cq.poll_one() {
                Ok(Some(wc)) => return Some(wc),
                Ok(None) => {}
                Err(e) => die(e),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let _ = self.cq.wait(left.min(Duration::from_millis(100)));
        }
    }

    fn extra(&self) -> Option<String> {
        matches!(self.cq.poll_one(), Ok(Some(_))).then(|| "unexpected extra completion".to_string())
    }
}

fn check(ok: bool, why: impl FnOnce() -> String) -> StepResult {
    if ok { Ok(()) } else { Err(why()) }
}

fn opcode_name(o: WcOpcode) -> &'static str {
    match o {
        WcOpcode::Send => "SEND",
        WcOpcode::RdmaWrite => "RDMA_WRITE",
        WcOpcode::RdmaRead => "RDMA_READ",
        WcOpcode::CompSwap => "COMP_SWAP",
        WcOpcode::FetchAdd => "FETCH_ADD",
        WcOpcode::BindMw => "BIND_MW",
        WcOpcode::LocalInv => "LOCAL_INV",
        WcOpcode::Recv => "RECV",
        WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
    }
}

// ---------------------------------------------------------------- client ----

fn client_step(res: &Res, n: usize, len: usize, addr: u64, rkey: u32, t: Duration) -> StepResult {
    let k = kind(n);
    let remote = RemoteAddr { addr, rkey: Rkey::new(rkey) };
    // Gather: 3 SGEs in separate regions at offsets 64, 65, 66.
    let g = [len / 3, len / 3, len - 2 * (len / 3)];
    let gather: Vec<Sge> = if len == 0 {
        vec![]
    } else {
        let mut done = 0;
        (0..3)
            .map(|j| {
                let off = res.at(j, 64 + j);
                let data: Vec<u8> = (done..done + g[j]).map(|i| pattern(n, i)).collect();
                res.mr.write(off, &data).unwrap_or_else(|e| die(e));
                done += g[j];
                res.mr.sge(off, g[j] as u32)
            })
            .collect()
    };
    let (r0, r1) = (len / 2 + 1, len.saturating_sub(len / 2 + 1));
    let (op, sges) = match k {
        Kind::Send => (SendOp::Send, gather),
        Kind::SendImm => (SendOp::SendWithImm(imm_of(n).unwrap_or(0)), gather),
        Kind::Write => (SendOp::RdmaWrite(remote), gather),
        Kind::WriteImm => (SendOp::RdmaWriteWithImm(remote, imm_of(n).unwrap_or(0)), gather),
        Kind::Read => {
            res.fill_region(3);
            res.fill_region(4);
            (
                SendOp::RdmaRead(remote),
                vec![res.mr.sge(res.at(3, 64), r0 as u32), res.mr.sge(res.at(4, 64), r1 as u32)],
            )
        }
        Kind::FetchAdd | Kind::CmpSwap => {
            res.fill_region(5);
            let (_, ca, swap, _, _) = atomic_values(n);
            let op = if k == Kind::FetchAdd {
                SendOp::FetchAdd { remote, add: ca }
            } else {
                SendOp::CompareSwap { remote, compare: ca, swap }
            };
            (op, vec![res.mr.sge(res.at(5, 64), 8)])
        }
    };
    res.qp.post_send(SendWr::new(n as u64, op, &sges)).map_err(|e| format!("post_send: {e}"))?;
    let wc = res.wait(t).ok_or_else(|| "no completion".to_string())?;
    check(wc.status == WcStatus::Success, || format!("status {}", wc.status))?;
    check(wc.wr_id == n as u64, || format!("wr_id {}", wc.wr_id))?;
    let want = match k {
        Kind::Send | Kind::SendImm => WcOpcode::Send,
        Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
        Kind::Read => WcOpcode::RdmaRead,
        Kind::FetchAdd => WcOpcode::FetchAdd,
        Kind::CmpSwap => WcOpcode::CompSwap,
    };
    check(wc.opcode == want, || format!("opcode {}", opcode_name(wc.opcode)))?;
    match k {
        Kind::Read => {
            check(wc.byte_len as usize == len, || format!("byte_len {}", wc.byte_len))?;
            let got = [res.bytes(res.at(3, 64), r0), res.bytes(res.at(4, 64), r1)].concat();
            if let Some(i) = (0..len).find(|&i| got[i] != pattern(n, i)) {
                return Err(format!("read data wrong at byte {i}"));
            }
            check(res.all_fill(res.at(3, 0), 64) && res.all_fill(res.at(3, 64 + r0), 64), || {
                "read guard overwritten".into()
            })?;
            check(res.all_fill(res.at(4, 0), 64) && res.all_fill(res.at(4, 64 + r1), 64), || {
                "read guard overwritten".into()
            })?;
        }
        Kind::FetchAdd | Kind::CmpSwap => {
            check(wc.byte_len == 8, || format!("byte_len {}", wc.byte_len))?;
            let v = u64::from_le_bytes(res.bytes(res.at(5, 64), 8).try_into().unwrap_or_default());
            let orig = atomic_values(n).3;
            check(v == orig, || format!("original value {v:#018x}, expected {orig:#018x}"))?;
            check(res.all_fill(res.at(5, 0), 64) && res.all_fill(res.at(5, 72), 64), || {
                "atomic guard overwritten".into()
            })?;
        }
        _ => {}
    }
    match res.extra() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn client(args: &Args, target: &str) -> i32 {
    let t = Duration::from_secs(args.timeout);
    let mtu_bytes = args.mtu.unwrap_or(1024);
    let mtu = Mtu::from_bytes(mtu_bytes).unwrap_or_else(|| die(format!("bad MTU {mtu_bytes}")));
    let size = args.size.unwrap_or(10000);
    if !(100..=8_388_608).contains(&size) {
        die(format!("size {size} out of 100..8388608"));
    }
    let ip: IpAddr = target.parse().unwrap_or_else(|_| die(format!("bad server address {target}")));
    let deadline = Instant::now() + Duration::from_secs(10);
    let stream = loop {
        match TcpStream::connect((ip, args.port)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => die(format!("cannot connect to {ip}:{}: {e}", args.port)),
        }
    };
    let local = args
        .dev
        .clone()
        .unwrap_or_else(|| stream.local_addr().map(|a| a.ip().to_string()).unwrap_or_default());
    let res = Res::open(&local, size, Access::LOCAL_WRITE, args);
    let psn = args.psn.map_or_else(random_psn, Psn::new);
    let gid = res.dev.gid(res.gid_index(args)).unwrap_or_else(|e| die(e));
    let me = Hello { qpn: res.qp.qp_num(), psn, gid, mtu: mtu_bytes, size };
    let mut ch = Chan {
        r: BufReader::new(stream.try_clone().unwrap_or_else(|e| die(e))),
        w: stream,
        verbose: args.verbose,
    };
    ch.send(&hello_line(&me));
    let peer = parse_hello(&ch.recv());
    if peer.mtu != mtu_bytes || peer.size != size {
        die("server adopted different MTU or size");
    }
    let _ = ch.w.set_nodelay(true);
    res.connect(&peer, res.gid_index(args), mtu, psn);
    print_info("client", &me, &peer);
    let mut nok = 0;
    let mut failed = false;
    for n in 1..=14 {
        if failed {
            println!("step {}: skipped", STEPS[n - 1]);
            continue;
        }
        ch.send(&format!("LAB1 BEGIN {n} {}", STEPS[n - 1]));
        let f = ch.expect("READY", n, 7);
        let addr = u64::from_str_radix(&f[4], 16).unwrap_or_else(|_| die("bad addr"));
        let rkey = u32::from_str_radix(&f[5], 16).unwrap_or_else(|_| die("bad rkey"));
        let len: usize = f[6].parse().unwrap_or_else(|_| die("bad len"));
        let want = len_of(n, size);
        let r = if len != want {
            Err(format!("READY len {len}, expected {want}"))
        } else {
            client_step(&res, n, len, addr, rkey, t)
        };
        match &r {
            Ok(()) => ch.send(&format!("LAB1 DONE {n} {} OK", STEPS[n - 1])),
            Err(why) => ch.send(&format!("LAB1 DONE {n} {} FAIL {why}", STEPS[n - 1])),
        }
        let v = ch.expect("RESULT", n, 5);
        match (&r, v[4].as_str()) {
            (Err(why), _) => {
                println!("step {}: FAIL (requester: {why})", STEPS[n - 1]);
                failed = true;
            }
            (Ok(()), "OK") => {
                println!("step {}: ok", STEPS[n - 1]);
                nok += 1;
            }
            (Ok(()), _) => {
                println!("step {}: FAIL (responder: {})", STEPS[n - 1], v[5..].join(" "));
                failed = true;
            }
        }
    }
    let end = format!("LAB1 END {} {nok}", if nok == 14 { "PASS" } else { "FAIL" });
    ch.send(&end);
    let e2 = ch.recv().join(" ");
    if e2 != end {
        die(format!("server ended with {e2:?}"));
    }
    // Stay until the peer is silent: it may still resend something whose ACK it missed.
    let _ = res.dev.wait_quiet(Duration::from_millis(200), Duration::from_secs(2));
    finish(nok)
}

// ---------------------------------------------------------------- server ----

struct Prepared {
    addr: u64,
    rkey: u32,
    target_off: usize,
    recv: Option<(usize, usize)>,
}

fn server_prepare(res: &Res, n: usize, len: usize) -> Prepared {
    let k = kind(n);
    let mut p = Prepared { addr: 0, rkey: 0, target_off: 0, recv: None };
    if matches!(k, Kind::Send | Kind::SendImm | Kind::WriteImm) {
        let lr = if n == 11 { 100 } else { len };
        let r0 = lr / 2 + 1;
        let r1 = lr - r0 + 32;
        res.fill_region(0);
        res.fill_region(1);
        let sg = [res.mr.sge(res.at(0, 64), r0 as u32), res.mr.sge(res.at(1, 64), r1 as u32)];
        res.qp.post_recv(RecvWr::new(n as u64, &sg)).unwrap_or_else(|e| die(format!("post_recv: {e}")));
        p.recv = Some((r0, r1));
    }
    match k {
        Kind::Write | Kind::WriteImm | Kind::Read => {
            res.fill_region(2);
            p.target_off = res.at(2, 64 + n);
            if k == Kind::Read {
                let data: Vec<u8> = (0..len).map(|i| pattern(n, i)).collect();
                res.mr.write(p.target_off, &data).unwrap_or_else(|e| die(e));
            }
        }
        Kind::FetchAdd | Kind::CmpSwap => {
            res.fill_region(3);
            p.target_off = res.at(3, 64 + 8 * n);
            res.mr
                .atomic_u64(p.target_off)
                .unwrap_or_else(|e| die(e))
                .store(atomic_values(n).0, Ordering::SeqCst);
        }
        _ => {}
    }
    if !matches!(k, Kind::Send | Kind::SendImm) {
        p.addr = res.mr.addr() + p.target_off as u64;
        p.rkey = res.mr.rkey().value();
    }
    p
}

fn server_verify(res: &Res, n: usize, len: usize, p: &Prepared, t: Duration) -> StepResult {
    let k = kind(n);
    if let Some((r0, r1)) = p.recv {
        let wc = res.wait(t).ok_or_else(|| "no receive completion".to_string())?;
        check(wc.status == WcStatus::Success, || format!("status {}", wc.status))?;
        check(wc.wr_id == n as u64, || format!("wr_id {}", wc.wr_id))?;
        let want = if k == Kind::WriteImm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
        check(wc.opcode == want, || format!("opcode {}", opcode_name(wc.opcode)))?;
        check(wc.byte_len as usize == len, || format!("byte_len {}", wc.byte_len))?;
        check(wc.imm_data.is_some() == imm_of(n).is_some(), || "WITH_IMM flag wrong".into())?;
        check(wc.imm_data == imm_of(n), || format!("imm_data {:#x}", wc.imm_data.unwrap_or(0)))?;
        if k == Kind::WriteImm {
            check(res.all_fill(res.at(0, 0), res.region) && res.all_fill(res.at(1, 0), res.region), || {
                "receive buffer written by an RDMA WRITE".into()
            })?;
        } else {
            let got = [res.bytes(res.at(0, 64), r0), res.bytes(res.at(1, 64), r1)].concat();
            if let Some(i) = (0..len).find(|&i| got[i] != pattern(n, i)) {
                return Err(format!("received data wrong at byte {i}"));
            }
            check(got[len..].iter().all(|&b| b == FILL), || {
                "receive buffer written past the message".into()
            })?;
            check(res.all_fill(res.at(0, 0), 64) && res.all_fill(res.at(1, 0), 64), || {
                "receive guard overwritten".into()
            })?;
        }
    }
    match k {
        Kind::Write | Kind::WriteImm | Kind::Read => {
            let got = res.bytes(p.target_off, len);
            if let Some(i) = (0..len).find(|&i| got[i] != pattern(n, i)) {
                return Err(format!("target data wrong at byte {i}"));
            }
            check(res.all_fill(p.target_off - 64, 64) && res.all_fill(p.target_off + len, 64), || {
                "target guard overwritten".into()
            })?;
        }
        Kind::FetchAdd | Kind::CmpSwap => {
            let v = res.mr.atomic_u64(p.target_off).map(|w| w.load(Ordering::SeqCst)).unwrap_or_default();
            let after = atomic_values(n).4;
            check(v == after, || format!("word {v:#018x}, expected {after:#018x}"))?;
            check(res.all_fill(p.target_off - 8, 8) && res.all_fill(p.target_off + 8, 8), || {
                "atomic neighbour overwritten".into()
            })?;
        }
        _ => {}
    }
    match res.extra() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn server(args: &Args) -> i32 {
    let t = Duration::from_secs(args.timeout);
    let listener = TcpListener::bind(("::", args.port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", args.port)))
        .unwrap_or_else(|e| die(format!("cannot listen on tcp port {}: {e}", args.port)));
    println!("info: listening on tcp port {}", args.port);
    let stream = accept_within(&listener, Duration::from_secs(60))
        .unwrap_or_else(|e| die(format!("no client within 60 s on tcp port {}: {e}", args.port)));
    drop(listener);
    let local = args.dev.clone().unwrap_or_else(|| {
        let ip = stream.local_addr().map(|a| a.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
        match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        }
        .to_string()
    });
    let mut ch = Chan {
        r: BufReader::new(stream.try_clone().unwrap_or_else(|e| die(e))),
        w: stream,
        verbose: args.verbose,
    };
    let peer = parse_hello(&ch.recv());
    let mtu = Mtu::from_bytes(peer.mtu);
    let bad = if mtu.is_none() {
        Some(format!("unsupported MTU {}", peer.mtu))
    } else if !(100..=8_388_608).contains(&peer.size) {
        Some(format!("size {} out of range", peer.size))
    } else if args.mtu.is_some_and(|m| m != peer.mtu) || args.size.is_some_and(|s| s != peer.size) {
        Some("MTU or size differs from the server's -m/-z".to_string())
    } else {
        None
    };
    if let Some(why) = bad {
        ch.send(&format!("LAB1 ERROR {why}"));
        die(why);
    }
    let (mtu, size) = (mtu.unwrap_or(Mtu::Mtu1024), peer.size);
    let res = Res::open(&local, size, Access::ALL, args);
    let psn = args.psn.map_or_else(random_psn, Psn::new);
    res.connect(&peer, res.gid_index(args), mtu, psn);
    let gid = res.dev.gid(res.gid_index(args)).unwrap_or_else(|e| die(e));
    let me = Hello { qpn: res.qp.qp_num(), psn, gid, mtu: peer.mtu, size };
    ch.send(&hello_line(&me));
    let _ = ch.w.set_nodelay(true);
    print_info("server", &me, &peer);
    let mut nok = 0;
    let mut failed = false;
    for n in 1..=14 {
        if failed {
            println!("step {}: skipped", STEPS[n - 1]);
            continue;
        }
        let _ = ch.expect("BEGIN", n, 4);
        let len = len_of(n, size);
        let p = server_prepare(&res, n, len);
        ch.send(&format!("LAB1 READY {n} {} {:016x} {:08x} {len}", STEPS[n - 1], p.addr, p.rkey));
        let d = ch.expect("DONE", n, 5);
        let verdict =
            if d[4] == "OK" { server_verify(&res, n, len, &p, t) } else { Err("requester failed".into()) };
        match &verdict {
            Ok(()) => ch.send(&format!("LAB1 RESULT {n} {} OK", STEPS[n - 1])),
            Err(why) => ch.send(&format!("LAB1 RESULT {n} {} FAIL {why}", STEPS[n - 1])),
        }
        if d[4] != "OK" {
            println!("step {}: FAIL (requester: {})", STEPS[n - 1], d[5..].join(" "));
            failed = true;
        } else if let Err(why) = verdict {
            println!("step {}: FAIL (responder: {why})", STEPS[n - 1]);
            failed = true;
        } else {
            println!("step {}: ok", STEPS[n - 1]);
            nok += 1;
        }
    }
    let end = format!("LAB1 END {} {nok}", if nok == 14 { "PASS" } else { "FAIL" });
    let e1 = ch.recv().join(" ");
    if e1 != end {
        die(format!("client ended with {e1:?}, expected {end:?}"));
    }
    ch.send(&end);
    let _ = res.dev.wait_quiet(Duration::from_millis(200), Duration::from_secs(2));
    finish(nok)
}

fn print_info(role: &str, me: &Hello, peer: &Hello) {
    let hex = |g: &Gid| g.0.iter().map(|b| format!("{b:02x}")).collect::<String>();
    println!(
        "info: role {role}, local qpn 0x{:06x} psn 0x{:06x} gid {}, remote qpn 0x{:06x} psn 0x{:06x} gid {}, mtu {}, size {}",
        me.qpn,
        me.psn.value(),
        hex(&me.gid),
        peer.qpn,
        peer.psn.value(),
        hex(&peer.gid),
        me.mtu,
        me.size
    );
}

fn finish(nok: usize) -> i32 {
    println!("result: {} {nok}/14", if nok == 14 { "PASS" } else { "FAIL" });
    if nok == 14 { 0 } else { 1 }
}

fn main() {
    let args = Args::parse();
    if args.ib_port != 1 {
        die("only port 1 exists");
    }
    let code = match (&args.server, &args.server_ip) {
        (true, None) => server(&args),
        (false, Some(ip)) => client(&args, ip),
        _ => die("give -s (server) or the server's address (client)"),
    };
    exit(code)
}

/// Accepts one client, waiting at most `limit` (a server started on its own is not left
/// waiting forever when its client never comes).
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
