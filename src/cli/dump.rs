//! `softroce dump`: one line per RoCEv2 packet of a capture file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use softroce::wire::pretty::{FrameDetail, FrameLine};
use softroce::wire::roce::RoceFrame;
use softroce::wire::{Error, ROCEV2_UDP_PORT};

use super::capture;

/// Arguments of `softroce dump`.
#[derive(clap::Args, Debug)]
#[command(after_help = super::common::EXIT_CODES)]
pub struct DumpArgs {
    /// Capture files (pcap or pcapng; Ethernet, Linux cooked or raw IP link types).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print every header field, one header per line, under each packet.
    #[arg(short, long)]
    pub verbose: bool,
    /// Exit with status 1 if any RoCEv2 packet is malformed or has a bad ICRC.
    #[arg(long)]
    pub check: bool,
}

/// Runs `softroce dump`; returns the process exit status.
pub fn run(args: &DumpArgs) -> i32 {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match dump(args, &mut out).and_then(|code| out.flush().map(|_| code)) {
        Ok(code) => code,
        // The reader went away (`softroce dump x.pcap | head`): not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("softroce dump: {e}");
            1
        }
    }
}

fn dump(args: &DumpArgs, out: &mut impl Write) -> std::io::Result<i32> {
    let mut problems = 0usize;
    for path in &args.files {
        let frames = match capture::read(path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("softroce dump: {e}");
                return Ok(super::common::exit::SETUP);
            }
        };
        if args.files.len() > 1 {
            writeln!(out, "=== {}", path.display())?;
        }
        let t0 = frames.first().map(|f| f.time).unwrap_or_default();
        let (mut roce, mut bad, mut malformed, mut other) = (0usize, 0usize, 0usize, 0usize);
        let mut opcodes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for (i, f) in frames.iter().enumerate() {
            let t = f.time.saturating_sub(t0).as_secs_f64();
            let Some(ip) = f.ip() else {
                other += 1;
                continue;
            };
            match RoceFrame::parse_ip(ip) {
                Ok(fr) => {
                    roce += 1;
                    if !fr.icrc_ok() {
                        bad += 1;
                    }
                    *opcodes.entry(fr.packet().info().name).or_default() += 1;
                    writeln!(out, "{:>5} {t:>11.6} {}", i + 1, FrameLine(&fr))?;
                    if args.verbose {
                        writeln!(out, "{}", FrameDetail(&fr))?;
                    }
                }
                Err(Error::NotRoce) | Err(Error::Malformed(softroce::wire::Malformed::NotUdp)) => other += 1,
                Err(e) if is_udp_to_rocev2(ip) => {
                    malformed += 1;
                    writeln!(
                        out,
                        "{:>5} {t:>11.6} UDP to port {ROCEV2_UDP_PORT}: malformed RoCEv2 packet: {e}",
                        i + 1
                    )?;
                }
                Err(_) => other += 1,
            }
        }
        let ops: Vec<String> = opcodes.iter().map(|(k, v)| format!("{k} x{v}")).collect();
        writeln!(
            out,
            "--- {}: {roce} RoCEv2 packets, ICRC bad={bad}, malformed={malformed}, other frames={other}; {}",
            path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            ops.join(", ")
        )?;
        problems += bad + malformed;
    }
    Ok(if args.check && problems > 0 { super::common::exit::FAILED } else { super::common::exit::OK })
}

/// True when the IP packet is UDP with destination port 4791 (looked at without the RoCEv2
/// parser, to tell a malformed RoCEv2 packet from unrelated traffic).
fn is_udp_to_rocev2(ip: &[u8]) -> bool {
    let (proto, off) = match ip.first().map(|b| b >> 4) {
        Some(4) => (ip.get(9).copied(), (ip[0] & 0xf) as usize * 4),
        Some(6) => (ip.get(6).copied(), 40),
        _ => return false,
    };
    proto == Some(17)
        && ip.get(off + 2..off + 4).map(|p| u16::from_be_bytes([p[0], p[1]])) == Some(ROCEV2_UDP_PORT)
}
