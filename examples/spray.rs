//! Sends junk at softroce (or any RoCEv2) devices' UDP port 4791 as fast as it can: the
//! hostile-traffic test's third process, and the flood of `tests/flood.rs` and
//! `benches/flood.sh` (issue 30).
//!
//! Kinds (`--kinds`, comma-separated; all but the `*_bad_icrc` flood kinds by default), taken
//! in turn:
//! - `random`: random bytes, 1 to 1200 of them;
//! - `truncated`: a well-formed SEND cut short inside its headers;
//! - `bad_icrc`: a well-formed SEND to the live QP with a wrong ICRC;
//! - `unknown_qp`: a well-formed SEND (right ICRC) to a QP number nobody has;
//! - `ahead`: a WRITE to the live QP with a PSN far ahead of the expected one;
//! - `behind`: a SEND to the live QP with a PSN far behind (a "duplicate");
//! - `read_huge`: a READ request for 4 GiB − 1 to the live QP, PSN ahead or behind in turn;
//! - `atomic_unaligned`: a FETCH_ADD at an address that is not 8-byte aligned, ahead or behind;
//! - `foreign_rkey`: a WRITE with the rkey of another protection domain, ahead or behind;
//! - `bth_bad_icrc`: a packet shaped like data of a live-looking QP (one of `--qpns` numbers
//!   from `--qpn`; an RC SEND or WRITE First/Middle/Last/Only or READ response Middle), a
//!   random PSN and payload length (0 to 1024 bytes), and a wrong ICRC;
//! - `read_bad_icrc`: a READ request for 4 GiB − 1 to a live-looking QP with a wrong ICRC.
//!
//! The packets of the kinds that name the live QP come from `--from` (the live QP's peer
//! address, so the receiver's source check passes). With several `--to` addresses, packet `i`
//! goes to the `i`-th in turn, from the `--from` address of the same position (the last one
//! when there are fewer): `--from B,A --to A,B` floods two peers, each from the other's
//! address. The packets are built before the clock starts (a pool of [`POOL`], cycled), so
//! the sending loop is system calls only. Prints `spray: sent <kind>=<n> … in <s> s (<rate>
//! datagrams/s)` at the end (and every `--report-every` seconds); `--rate` paces it.
//!
//! ```text
//! spray --from 127.8.0.1 --to 127.9.0.1 --qpn 0x12 --psn 0x400000 --rkey 0x1234 --addr 0x7f00 --seconds 5
//! spray --from 127.0.0.2,127.0.0.1 --to 127.0.0.1,127.0.0.2 --qpn 0x11 --qpns 4 \
//!       --kinds random,truncated,bth_bad_icrc,read_bad_icrc --seconds 6
//! ```

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use clap::Parser;
use softroce::transport::sim::Rng;
use softroce::wire::roce::{IpRepr, RoceFrameRepr};
use softroce::wire::{AtomicEthRepr, BthRepr, Opcode, PacketRepr, Psn, RethRepr};

#[derive(Parser, Debug)]
struct Args {
    /// Source addresses (bind), one per target (the last one for the rest).
    #[arg(long, value_delimiter = ',', required = true)]
    from: Vec<IpAddr>,
    /// Target device addresses.
    #[arg(long, value_delimiter = ',', required = true)]
    to: Vec<IpAddr>,
    /// The live QP's number.
    #[arg(long, value_parser = parse_u32)]
    qpn: u32,
    /// How many QP numbers from `--qpn` the flood kinds aim at (live-looking ones).
    #[arg(long, default_value_t = 1)]
    qpns: u32,
    /// The live QP's expected PSN when the spray starts.
    #[arg(long, value_parser = parse_u32, default_value = "0")]
    psn: u32,
    /// An rkey of another protection domain (`foreign_rkey`).
    #[arg(long, value_parser = parse_u32, default_value = "0")]
    rkey: u32,
    /// An address inside the target's memory (`atomic_unaligned`, `foreign_rkey`).
    #[arg(long, value_parser = parse_u64, default_value = "0")]
    addr: u64,
    /// How long to spray, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Which kinds (see the module docs); when empty, all but the flood kinds.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// UDP destination port.
    #[arg(long, default_value_t = 4791)]
    port: u16,
    /// Also print the counts every this many seconds while spraying.
    #[arg(long)]
    report_every: Option<f64>,
    /// At most this many datagrams per second (paced in bursts of 64); as fast as it can
    /// without.
    #[arg(long)]
    rate: Option<f64>,
}

fn parse_u32(s: &str) -> std::result::Result<u32, String> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| e.to_string())
}

fn parse_u64(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| e.to_string())
}

const KINDS: &[&str] = &[
    "random",
    "truncated",
    "bad_icrc",
    "unknown_qp",
    "ahead",
    "behind",
    "read_huge",
    "atomic_unaligned",
    "foreign_rkey",
    "bth_bad_icrc",
    "read_bad_icrc",
];

/// Kinds only sent when asked for.
const FLOOD_ONLY: &[&str] = &["bth_bad_icrc", "read_bad_icrc"];

/// Packets built before the clock starts, then sent in turn.
const POOL: usize = 8192;

/// Opcodes of the data packets `bth_bad_icrc` imitates (every header they need is built).
const DATA_OPCODES: &[Opcode] = &[
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_WRITE_FIRST,
    Opcode::RC_WRITE_MIDDLE,
    Opcode::RC_WRITE_LAST,
    Opcode::RC_WRITE_ONLY,
    Opcode::RC_READ_RESP_MIDDLE,
];

/// A packet with its ICRC as a receiver on `to` computes it for a datagram from `from:sport`.
fn packet(repr: &PacketRepr, payload: &[u8], from: IpAddr, sport: u16, to: IpAddr) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len(payload.len())];
    let Ok(n) = repr.emit(&mut buf, payload) else { return buf };
    buf.truncate(n);
    let ip = match (from, to) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 { src, dst, tos: 0, ttl: 64, id: 0, df: true },
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            IpRepr::V6 { src, dst, traffic_class: 0, flow_label: 0, hop_limit: 64 }
        }
        _ => return buf,
    };
    let frame = RoceFrameRepr { ip, src_port: sport, dst_port: 4791, udp_checksum: false };
    let body = buf.len() - 4;
    if let Ok(crc) = frame.icrc(&buf[..body]) {
        buf[body..].copy_from_slice(&crc.to_le_bytes());
    }
    buf
}

/// `p` with its ICRC made wrong.
fn bad_icrc(mut p: Vec<u8>, rng: &mut Rng) -> Vec<u8> {
    let n = p.len();
    p[n - 1 - rng.below(4) as usize] ^= 1 << rng.below(8);
    p
}

/// Where packets go: one socket per target, bound to its `--from` address.
struct Target {
    sock: UdpSocket,
    from: IpAddr,
    sport: u16,
    to: IpAddr,
    dst: SocketAddr,
}

fn main() {
    let a = Args::parse();
    let kinds: Vec<&str> = if a.kinds.is_empty() {
        KINDS.iter().copied().filter(|k| !FLOOD_ONLY.contains(k)).collect()
    } else {
        KINDS.iter().copied().filter(|k| a.kinds.iter().any(|x| x == k)).collect()
    };
    if kinds.is_empty() {
        eprintln!("spray: no known kind in {:?} (known: {})", a.kinds, KINDS.join(","));
        std::process::exit(2);
    }
    let targets: Vec<Target> =
        a.to.iter()
            .enumerate()
            .map(|(i, &to)| {
                let from = a.from[i.min(a.from.len() - 1)];
                let sock = UdpSocket::bind(SocketAddr::new(from, 0)).unwrap_or_else(|e| {
                    eprintln!("spray: bind {from}: {e}");
                    std::process::exit(2)
                });
                let sport = sock.local_addr().map(|s| s.port()).unwrap_or(0);
                Target { sock, from, sport, to, dst: SocketAddr::new(to, a.port) }
            })
            .collect();
    let mut rng = Rng::new(0x5eed);
    let ahead = Psn::new(a.psn).add(1 << 22);
    let behind = Psn::new(a.psn).add((1 << 24) - (1 << 22));
    let live = |rng: &mut Rng| a.qpn + rng.below(u64::from(a.qpns.max(1))) as u32;
    let mut pool = Vec::with_capacity(POOL);
    for i in 0..POOL {
        let k = i % kinds.len();
        let t = &targets[(i / kinds.len()) % targets.len()];
        let far = if (i / (kinds.len() * targets.len())).is_multiple_of(2) { ahead } else { behind };
        let (from, sport, to) = (t.from, t.sport, t.to);
        let pkt = match kinds[k] {
            "random" => {
                let n = 1 + rng.below(1200) as usize;
                (0..n).map(|_| rng.below(256) as u8).collect()
            }
            "truncated" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, a.qpn, ahead));
                let mut p = packet(&r, &[0; 32], from, sport, to);
                p.truncate(1 + rng.below(11) as usize);
                p
            }
            "bad_icrc" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, a.qpn, ahead));
                let mut p = packet(&r, &[0xab; 64], from, sport, to);
                let n = p.len();
                p[n - 1] ^= 0x5a;
                p
            }
            "unknown_qp" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, 0xab_cdef, ahead));
                packet(&r, &[0xcd; 64], from, sport, to)
            }
            "ahead" => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_WRITE_ONLY, a.qpn, ahead));
                r.reth = Some(RethRepr { va: a.addr, rkey: a.rkey, dma_len: 64 });
                packet(&r, &[0xee; 64], from, sport, to)
            }
            "behind" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, a.qpn, behind));
                packet(&r, &[0xbe; 64], from, sport, to)
            }
            "read_huge" => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_READ_REQ, a.qpn, far));
                r.reth = Some(RethRepr { va: a.addr, rkey: a.rkey, dma_len: u32::MAX });
                packet(&r, &[], from, sport, to)
            }
            "atomic_unaligned" => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_FETCH_ADD, a.qpn, far));
                r.atomic_eth = Some(AtomicEthRepr { va: a.addr + 3, rkey: a.rkey, swap_add: 1, compare: 0 });
                packet(&r, &[], from, sport, to)
            }
            "foreign_rkey" => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_WRITE_ONLY, a.qpn, far));
                r.reth = Some(RethRepr { va: a.addr, rkey: a.rkey, dma_len: 64 });
                packet(&r, &[0xf0; 64], from, sport, to)
            }
            "bth_bad_icrc" => {
                let op = DATA_OPCODES[rng.below(DATA_OPCODES.len() as u64) as usize];
                let psn = Psn::new(rng.below(1 << 24) as u32);
                let mut r = PacketRepr::new(BthRepr::new(op, live(&mut rng), psn));
                if op == Opcode::RC_WRITE_FIRST || op == Opcode::RC_WRITE_ONLY {
                    r.reth =
                        Some(RethRepr { va: rng.next_u64(), rkey: rng.next_u64() as u32, dma_len: 1 << 20 });
                }
                let payload: Vec<u8> = (0..rng.below(1025)).map(|_| rng.below(256) as u8).collect();
                bad_icrc(packet(&r, &payload, from, sport, to), &mut rng)
            }
            _ => {
                // read_bad_icrc
                let psn = Psn::new(rng.below(1 << 24) as u32);
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_READ_REQ, live(&mut rng), psn));
                r.reth =
                    Some(RethRepr { va: rng.next_u64(), rkey: rng.next_u64() as u32, dma_len: u32::MAX });
                bad_icrc(packet(&r, &[], from, sport, to), &mut rng)
            }
        };
        pool.push((k, (i / kinds.len()) % targets.len(), pkt));
    }
    let mut sent = vec![0u64; kinds.len()];
    let t0 = Instant::now();
    let limit = Duration::from_secs_f64(a.seconds.max(0.0));
    let report = |sent: &[u64]| {
        let secs = t0.elapsed().as_secs_f64();
        let total: u64 = sent.iter().sum();
        let list: Vec<String> = kinds.iter().zip(sent).map(|(k, n)| format!("{k}={n}")).collect();
        println!("spray: sent {} in {secs:.1} s ({:.0} datagrams/s)", list.join(" "), total as f64 / secs);
    };
    let mut i = 0usize;
    let mut next_report = a.report_every.map(|s| Duration::from_secs_f64(s.max(0.1)));
    loop {
        // The clock is read once per 64 datagrams.
        for _ in 0..64 {
            let (k, t, pkt) = &pool[i % POOL];
            let t = &targets[*t];
            if t.sock.send_to(pkt, t.dst).is_ok() {
                sent[*k] += 1;
            }
            i += 1;
        }
        let mut now = t0.elapsed();
        if now >= limit {
            break;
        }
        if let Some(rate) = a.rate.filter(|r| *r > 0.0) {
            // The time the datagrams sent so far are due by.
            let due = Duration::from_secs_f64(i as f64 / rate);
            if due > now {
                std::thread::sleep(due - now);
                now = t0.elapsed();
            }
        }
        if let (Some(at), Some(every)) = (next_report, a.report_every)
            && now >= at
        {
            // (for a caller that stops the sprayer with a signal: the last line counts)
            report(&sent);
            next_report = Some(at + Duration::from_secs_f64(every.max(0.1)));
        }
    }
    report(&sent);
}
