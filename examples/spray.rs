//! Sends junk at a softroce (or any RoCEv2) device's UDP port 4791 as fast as it can: the
//! hostile-traffic test's third process.
//!
//! Kinds (`--kinds`, comma-separated; all by default), taken in turn:
//! - `random`: random bytes, 1 to 1200 of them;
//! - `truncated`: a well-formed SEND cut short inside its headers;
//! - `bad_icrc`: a well-formed SEND to the live QP with a wrong ICRC;
//! - `unknown_qp`: a well-formed SEND (right ICRC) to a QP number nobody has;
//! - `ahead`: a WRITE to the live QP with a PSN far ahead of the expected one;
//! - `behind`: a SEND to the live QP with a PSN far behind (a "duplicate");
//! - `read_huge`: a READ request for 4 GiB − 1 to the live QP, PSN ahead or behind in turn;
//! - `atomic_unaligned`: a FETCH_ADD at an address that is not 8-byte aligned, ahead or behind;
//! - `foreign_rkey`: a WRITE with the rkey of another protection domain, ahead or behind.
//!
//! The packets of the last six carry a right ICRC and come from `--from` (the live QP's peer
//! address, so the receiver's source check passes). Prints `spray: sent <kind>=<n> …` at the
//! end.
//!
//! ```text
//! spray --from 127.8.0.1 --to 127.9.0.1 --qpn 0x12 --psn 0x400000 --rkey 0x1234 --addr 0x7f00 --seconds 5
//! ```

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use clap::Parser;
use softroce::transport::sim::Rng;
use softroce::wire::roce::{IpRepr, RoceFrameRepr};
use softroce::wire::{AtomicEthRepr, BthRepr, Opcode, PacketRepr, Psn, RethRepr};

#[derive(Parser, Debug)]
struct Args {
    /// Source address (bind).
    #[arg(long)]
    from: IpAddr,
    /// Target device address.
    #[arg(long)]
    to: IpAddr,
    /// The live QP's number.
    #[arg(long, value_parser = parse_u32)]
    qpn: u32,
    /// The live QP's expected PSN when the spray starts.
    #[arg(long, value_parser = parse_u32)]
    psn: u32,
    /// An rkey of another protection domain (`foreign_rkey`).
    #[arg(long, value_parser = parse_u32, default_value = "0")]
    rkey: u32,
    /// An address inside the target's memory (`atomic_unaligned`, `foreign_rkey`).
    #[arg(long, value_parser = parse_u64, default_value = "0")]
    addr: u64,
    /// How long to spray.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Which kinds (see the module docs); all when empty.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
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

fn main() {
    let a = Args::parse();
    let kinds: Vec<&str> = if a.kinds.is_empty() {
        KINDS.to_vec()
    } else {
        KINDS.iter().copied().filter(|k| a.kinds.iter().any(|x| x == k)).collect()
    };
    let sock = UdpSocket::bind(SocketAddr::new(a.from, 0)).unwrap_or_else(|e| {
        eprintln!("spray: bind {}: {e}", a.from);
        std::process::exit(2)
    });
    let sport = sock.local_addr().map(|s| s.port()).unwrap_or(0);
    let to = SocketAddr::new(a.to, 4791);
    let mut rng = Rng::new(0x5eed);
    let ahead = Psn::new(a.psn).add(1 << 22);
    let behind = Psn::new(a.psn).add((1 << 24) - (1 << 22));
    let mut sent = vec![0u64; kinds.len()];
    let t0 = Instant::now();
    let mut i = 0usize;
    while t0.elapsed() < Duration::from_secs(a.seconds) {
        let k = i % kinds.len();
        let far = if (i / kinds.len()).is_multiple_of(2) { ahead } else { behind };
        let pkt = match kinds[k] {
            "random" => {
                let n = 1 + rng.below(1200) as usize;
                (0..n).map(|_| rng.below(256) as u8).collect()
            }
            "truncated" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, a.qpn, ahead));
                let mut p = packet(&r, &[0; 32], a.from, sport, a.to);
                p.truncate(1 + rng.below(11) as usize);
                p
            }
            "bad_icrc" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, a.qpn, ahead));
                let mut p = packet(&r, &[0xab; 64], a.from, sport, a.to);
                let n = p.len();
                p[n - 1] ^= 0x5a;
                p
            }
            "unknown_qp" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, 0xab_cdef, ahead));
                packet(&r, &[0xcd; 64], a.from, sport, a.to)
            }
            "ahead" => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_WRITE_ONLY, a.qpn, ahead));
                r.reth = Some(RethRepr { va: a.addr, rkey: a.rkey, dma_len: 64 });
                packet(&r, &[0xee; 64], a.from, sport, a.to)
            }
            "behind" => {
                let r = PacketRepr::new(BthRepr::new(Opcode::RC_SEND_ONLY, a.qpn, behind));
                packet(&r, &[0xbe; 64], a.from, sport, a.to)
            }
            "read_huge" => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_READ_REQ, a.qpn, far));
                r.reth = Some(RethRepr { va: a.addr, rkey: a.rkey, dma_len: u32::MAX });
                packet(&r, &[], a.from, sport, a.to)
            }
            "atomic_unaligned" => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_FETCH_ADD, a.qpn, far));
                r.atomic_eth = Some(AtomicEthRepr { va: a.addr + 3, rkey: a.rkey, swap_add: 1, compare: 0 });
                packet(&r, &[], a.from, sport, a.to)
            }
            _ => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_WRITE_ONLY, a.qpn, far));
                r.reth = Some(RethRepr { va: a.addr, rkey: a.rkey, dma_len: 64 });
                packet(&r, &[0xf0; 64], a.from, sport, a.to)
            }
        };
        if sock.send_to(&pkt, to).is_ok() {
            sent[k] += 1;
        }
        i += 1;
    }
    let list: Vec<String> = kinds.iter().zip(&sent).map(|(k, n)| format!("{k}={n}")).collect();
    println!("spray: sent {} in {:.1} s", list.join(" "), t0.elapsed().as_secs_f64());
}
