//! Throughput between two processes on loopback, softroce against a raw UDP baseline, in one
//! invocation so that the ratios compare like with like on a shared, noisy machine.
//!
//! ```text
//! cargo bench --bench throughput            # everything, 2 s each
//! cargo bench --bench throughput -- 5       # 5 s each
//! cargo bench --bench throughput -- 2 tput  # the throughput rows only (no latency rows)
//! cargo bench --bench throughput -- 2 noraw # without the raw backend's runs
//! cargo bench --bench throughput -- 2 rounds 3 # all of it three times, then each ratio's
//!                                               # median and range over the rounds
//! ```
//!
//! `rounds N` works with `tput`, `noraw`, `lat` (and its test names) and the single-run
//! filters (`send`, …: then the rates themselves are summarised). This machine has slow spells
//! of seconds to tens of seconds in which everything runs at a third; one invocation can fall
//! into one, the median of several rounds rarely does.
//!
//! - `udp 4 KiB, one datagram per send`: blocking `send_to` of 4140-byte datagrams (the size
//!   of a PMTU-4096 RoCEv2 packet), receiver with `recvmmsg` + GRO.
//! - `udp 4 KiB, GSO 15 + GRO`: the same datagrams, 15 per `sendmsg` with UDP GSO; run
//!   again after the WRITE row and after the READ row, and those rows are compared with the
//!   median of the three runs. Every UDP baseline pins its sender and receiver to two cores.
//! - `udp 64 B, one datagram per send`: the datagram rate for small messages; run again after
//!   the SEND row, which is compared with the mean of the two.
//! - `udp write floor` and `udp send floor`: the datagrams of a 64 KiB WRITE (two GSO sends per
//!   message) and 64 B SEND packets (80 bytes, GSO sends of 64), each with the work per datagram
//!   RoCEv2 over UDP sockets cannot do without: a CRC-32 over every datagram at both ends (the
//!   ICRC) and, at the receiver, a copy of the payload into a region. What any implementation
//!   on this kernel and CPU could reach at best: the floors under the WRITE, READ and SEND rows,
//!   measured before and after them.
//! - `rc write 64 KiB, PMTU 4096`: RDMA WRITE bandwidth with 64 KiB messages, 64 in flight.
//! - `rc read 64 KiB, PMTU 4096`: RDMA READ bandwidth, the same (the responder's 16 READs
//!   outstanding, `max_dest_rd_atomic`, bound how many are in flight).
//! - `rc send 64 B`: SEND message rate, 256 in flight, receives always posted.
//! - `raw: rc write 64 KiB` and `raw: rc send 64 B`: the same two over the raw (AF_PACKET)
//!   backend on `lo`. They need CAP_NET_RAW; without it they are skipped with the reason.
//!
//! Latency (half round trips, the median of each run, as perftest's `t_typical`):
//!
//! - `udp ping-pong, busy-poll`: the baseline. Two threads pinned to two cores exchange a
//!   2-byte payload (a 44-byte datagram, the size of a 2-byte RDMA WRITE) over non-blocking
//!   loopback sockets, each spinning on `recv`; half of each round trip.
//! - `write-lat`, `send-lat`, `read-lat` 2 B, `atomic-lat` (8 B): `softroce perf <test> -s 2`
//!   (the tool built with this bench), server and client on loopback, `t_typical` of the client;
//!   each printed as a ratio to the mean of the baselines run just before and just after it
//!   (the baseline runs again between rows: it drifts within an invocation). `t_typical` of READ and
//!   atomics is a whole round trip (perftest's `rtt_factor` 1): those rows print half of it.
//!
//! ```text
//! cargo bench --bench throughput -- lat          # only the latency rows
//! cargo bench --bench throughput -- lat --json   # plus one JSON line with every figure
//! cargo bench --bench throughput -- lat write-lat # only the rows of the tests named
//! ```
//!
//! Many idle QPs (`qps`): one device, PD and CQ, then 10 000 RC QPs with perftest's
//! `send-bw` sizes (`max_send_wr` 128, `max_recv_wr` 512, one SGE each) moved RESET → INIT →
//! RTR → RTS with nothing posted; after each step the growth of the process's resident set
//! (`VmRSS`) per QP and the time per QP of that step (create, or one `modify`).
//!
//! ```text
//! cargo bench --bench throughput -- qps                 # 10 000 QPs
//! cargo bench --bench throughput -- qps 2000 --json     # 2000 QPs, plus one JSON line
//! ```
//!
//! Many busy QPs over several engine threads (`engines`): two devices in this process on
//! loopback, `n` RC QP pairs (8 by default) sharing one CQ per side, every QP kept busy
//! (WRITE 64 KiB, 16 in flight per QP; SEND 64 B, 64 in flight per QP); each run once with
//! one engine thread per device and once with two (`DeviceConfig::engine_threads`), and the
//! ratio of the two in the same invocation.
//!
//! ```text
//! cargo bench --bench throughput -- engines          # 8 QPs, 2 s per run
//! cargo bench --bench throughput -- engines 3 16     # 16 QPs, 3 s per run
//! ```
//!
//! One address shared by several processes (`shared`, `DeviceConfig::share`): the same
//! WRITE 64 KiB and SEND 64 B runs and `softroce perf` latency rows three ways in one
//! invocation — devices that do not share (`SOFTROCE_SHARE=0`, today's single-process path),
//! sharing devices each alone on its address (the default), and client and server on one
//! address (two processes, one `SO_REUSEPORT` group steered by QP number) — and the ratios of
//! the last two to the first. Each mode runs three times, interleaved with the others, and the
//! best run of each counts (a loaded machine slows some runs of every mode).
//!
//! ```text
//! cargo bench --bench throughput -- shared          # 2 s per run
//! cargo bench --bench throughput -- shared kernel   # only the kernel's steering cost
//! ```
//!
//! It also measures the kernel's part alone: a busy-poll UDP ping-pong whose receiving socket
//! is plain, then one of a two-socket `SO_REUSEPORT` group with the steering program.
//!
//! Busy-polling applications on fewer cores than busy threads (`onecore`, issues 28 and 30):
//! `softroce perf write-bw -s 65536` and `send-bw -s 64` (the tool's CQ loop spins, as
//! perftest's does) with both processes free to use every CPU, then with both on one CPU, each
//! with the CQ poll's pacing on (the default) and off (`SOFTROCE_POLL_YIELD=0`,
//! `softroce::engine::pacer`), interleaved, `rounds` times (3 by default); the ratio of one CPU
//! to all, per mode. With the pacing off a poller that finds nothing keeps its CPU until its
//! time slice ends, while the peer's engine on the same CPU waits to acknowledge.
//!
//! ```text
//! cargo bench --bench throughput -- onecore         # 3 s per run, 3 rounds
//! cargo bench --bench throughput -- onecore 4 5     # 4 s per run, 5 rounds
//! ```
//!
//! The server side of each runs in a child process (this binary, re-executed).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use softroce::verbs::*;

const ROLE: &str = "SOFTROCE_BENCH_ROLE";

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        child(&role);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `-- rounds N`: the throughput and latency rows N times in a row, then each ratio's
    // median and range over the rounds (a slow spell of the machine spoils one round, not
    // the figure).
    let rounds_at = args.iter().position(|a| a == "rounds");
    let rounds: usize =
        rounds_at.and_then(|i| args.get(i + 1)).and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    let secs: f64 = args
        .iter()
        .enumerate()
        .filter(|&(i, _)| rounds_at.is_none_or(|r| i != r + 1))
        .find_map(|(_, a)| a.parse().ok())
        .unwrap_or(2.0);
    let json = std::env::args().any(|a| a == "--json");
    if std::env::args().any(|a| a == "qps") {
        let n = std::env::args().skip(1).filter_map(|a| a.parse().ok()).next().unwrap_or(10_000);
        idle_qps(n, json);
        return;
    }
    if std::env::args().any(|a| a == "lat") {
        let mut all = Vec::new();
        for k in 0..rounds {
            if rounds > 1 {
                println!("round {} of {rounds}", k + 1);
            }
            all.push(latency(json));
        }
        summary(&all);
        return;
    }
    if std::env::args().any(|a| a == "shared") {
        shared(Duration::from_secs_f64(secs));
        return;
    }
    if std::env::args().any(|a| a == "onecore") {
        let nums: Vec<f64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
        onecore(nums.first().copied().unwrap_or(3.0), nums.get(1).map_or(3, |&n| n as usize));
        return;
    }
    if std::env::args().any(|a| a == "engines") {
        let nums: Vec<f64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
        let nqps = nums.get(1).map_or(8, |&n| n as usize);
        engines(Duration::from_secs_f64(secs), nqps);
        return;
    }
    let mut all = Vec::new();
    for k in 0..rounds {
        if rounds > 1 {
            println!("round {} of {rounds}", k + 1);
        }
        let mut ratios = throughput(secs);
        // `-- tput` leaves out the latency rows (the throughput rows and their ratios only).
        if !only_rc() && !std::env::args().any(|a| a == "tput") {
            println!();
            ratios.extend(latency(json));
        }
        all.push(ratios);
    }
    summary(&all);
}

/// `-- write` / `-- read` / `-- send`: only that softroce run.
fn only_run() -> Option<&'static str> {
    ["write", "read", "send"].into_iter().find(|k| std::env::args().any(|a| a == *k))
}

/// Only softroce runs (`-- rc` or one of [`only_run`]): no UDP baseline, no latency rows.
fn only_rc() -> bool {
    only_run().is_some() || std::env::args().any(|a| a == "rc")
}

/// After `rounds N` (N > 1): each ratio's median and range over the rounds.
fn summary(all: &[Vec<(String, f64)>]) {
    if all.len() < 2 {
        return;
    }
    println!();
    println!("ratios over {} rounds: median (min..max), then every round", all.len());
    for (name, _) in &all[0] {
        let v: Vec<f64> = all.iter().filter_map(|r| r.iter().find(|(n, _)| n == name).map(|x| x.1)).collect();
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let each: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
        println!(
            "  {name:<30} {:>6.2} ({:.2}..{:.2})  {}",
            median(&v),
            sorted[0],
            sorted[sorted.len() - 1],
            each.join(" ")
        );
    }
}

/// One round of the throughput rows: prints them and their ratios, returns the ratios.
fn throughput(secs: f64) -> Vec<(String, f64)> {
    let mut ratios: Vec<(String, f64)> = Vec::new();
    // `cargo bench --bench throughput -- rc` runs only the softroce part (for profiling);
    // `-- write` / `-- read` / `-- send`: only that softroce run.
    let only = only_run();
    let runs = |kind: &str| only.is_none_or(|o| o == kind);
    let only_rc = only_rc();
    let d = Duration::from_secs_f64(secs);
    println!(
        "softroce throughput, two processes on loopback, {secs} s per run ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let skip = (1.0, 1.0);
    // The GSO+GRO and 64 B baselines run again after the rows compared with them (within an
    // invocation they moved by a factor of two and more: GSO+GRO 13-44 Gb/s on this machine
    // before they were pinned, 16.5-65 after); the ratios below say to what.
    let udp1 = if only_rc { skip } else { udp_bench(4140, 1, d) };
    let udpg = if only_rc { skip } else { udp_bench(4140, 15, d) };
    let udp64 = if only_rc { skip } else { udp_bench(64 + 28, 1, d) };
    // The datagrams a 64 KiB WRITE needs (two GSO sends per message): the kernel's limit for
    // that shape, before and after WRITE and after READ (each row against the two around it:
    // the machine has slow spells of tens of seconds in which everything runs at a third).
    let udpw = if only_rc { skip } else { udp_write_shaped(d) };
    // The same with the work RoCEv2 over UDP sockets cannot do without (the ICRC at both
    // ends, the receive copy): the floor under WRITE and READ, before WRITE and after READ.
    let udpwf = if only_rc { skip } else { udp_write_floor(d) };
    let w = if runs("write") { rc_bench("write", 65536, d, "udp") } else { skip };
    let udpw2 = if only_rc { skip } else { udp_write_shaped(d) };
    let udpg2 = if only_rc { skip } else { udp_bench(4140, 15, d) };
    let r = if runs("read") { rc_bench("read", 65536, d, "udp") } else { skip };
    let udpw3 = if only_rc { skip } else { udp_write_shaped(d) };
    let udpg3 = if only_rc { skip } else { udp_bench(4140, 15, d) };
    let udpwf2 = if only_rc { skip } else { udp_write_floor(d) };
    // 64 B SEND packets in the engine's batches with the same work: the floor under SEND.
    let udpsf = if only_rc { skip } else { udp_send_floor(d) };
    let s = if runs("send") { rc_bench("send", 64, d, "udp") } else { skip };
    let udpsf2 = if only_rc { skip } else { udp_send_floor(d) };
    let udp64b = if only_rc { skip } else { udp_bench(64 + 28, 1, d) };
    // `-- noraw` leaves out the raw backend's runs.
    let raw = if std::env::args().any(|a| a == "noraw") {
        Some("left out (noraw)".to_string())
    } else {
        raw_skip_reason()
    };
    if let Some(why) = &raw {
        println!("raw backend runs skipped: {why}");
    }
    let rw = (raw.is_none() && runs("write")).then(|| rc_bench("write", 65536, d, "raw"));
    let rs = (raw.is_none() && runs("send")).then(|| rc_bench("send", 64, d, "raw"));
    println!();
    println!("{:<38} {:>12} {:>12}", "run", "Gb/s", "Mmsg/s");
    let row = |name: &str, bytes: f64, msgs: f64| {
        println!("{name:<38} {:>12.2} {:>12.3}", bytes * 8.0 / 1e9, msgs / 1e6)
    };
    if !only_rc {
        row("udp 4 KiB, one datagram per send", udp1.0, udp1.1);
        row("udp 4 KiB, GSO 15 + GRO", udpg.0, udpg.1);
        row("udp 4 KiB, GSO 15 + GRO, after write", udpg2.0, udpg2.1);
        row("udp 4 KiB, GSO 15 + GRO, after read", udpg3.0, udpg3.1);
        row("udp in write's datagrams (2 per msg)", udpw.0, udpw.1);
        row("udp in write's datagrams, after write", udpw2.0, udpw2.1);
        row("udp in write's datagrams, after read", udpw3.0, udpw3.1);
        row("udp write floor (+ ICRC, receive copy)", udpwf.0, udpwf.1);
        row("udp write floor, after read", udpwf2.0, udpwf2.1);
        row("udp send floor (64 B, GSO 64, + work)", udpsf.0, udpsf.1);
        row("udp send floor, after send", udpsf2.0, udpsf2.1);
        row("udp 64 B, one datagram per send", udp64.0, udp64.1);
        row("udp 64 B, one per send, after send", udp64b.0, udp64b.1);
    }
    row("rc write 64 KiB, PMTU 4096", w.0, w.1);
    row("rc read 64 KiB, PMTU 4096", r.0, r.1);
    row("rc send 64 B", s.0, s.1);
    if let Some(rw) = rw {
        row("raw: rc write 64 KiB, PMTU 4096", rw.0, rw.1);
    }
    if let Some(rs) = rs {
        row("raw: rc send 64 B", rs.0, rs.1);
    }
    println!();
    println!("ratios (same invocation):");
    if !only_rc {
        // (`rc` runs no UDP baseline: no ratio to it.)
        // (GSO+GRO: to the median of its three runs, which even pinned now and then read a
        // half or 1.6 times the other two; 64 B: to the mean of the runs before and after)
        let g = median(&[udpg.0, udpg2.0, udpg3.0]);
        println!("  rc write / udp one-per-send  {:>6.2}", w.0 / udp1.0);
        println!("  rc write / udp GSO+GRO       {:>6.2}", w.0 / g);
        println!("  rc read / udp GSO+GRO        {:>6.2}", r.0 / g);
        ratios.push(("rc write / udp GSO+GRO".into(), w.0 / g));
        ratios.push(("rc read / udp GSO+GRO".into(), r.0 / g));
        // (The limit for the datagrams WRITE needs, the same bytes as two sends per 64 KiB
        // message, against the 15-per-send stream; and WRITE and READ against that limit.)
        let sh = median(&[udpw.0, udpw2.0, udpw3.0]);
        println!(
            "  udp write-shaped / GSO+GRO   {:>6.2}  (medians: the limit for 2 sends per 64 KiB)",
            sh / g
        );
        println!("  rc write / udp write-shaped  {:>6.2}", w.0 / ((udpw.0 + udpw2.0) / 2.0));
        println!("  rc read / udp write-shaped   {:>6.2}", r.0 / ((udpw2.0 + udpw3.0) / 2.0));
        // (64 B: the mean of the runs before and after SEND, for SEND and its floor)
        let udp64_mean = (udp64.1 + udp64b.1) / 2.0;
        let send = s.1 / udp64_mean;
        println!("  rc send 64 B / udp 64 B      {send:>6.2}  (messages per second)");
        ratios.push(("udp write-shaped / GSO+GRO".into(), sh / g));
        ratios.push(("rc write / udp write-shaped".into(), w.0 / ((udpw.0 + udpw2.0) / 2.0)));
        ratios.push(("rc send 64 B / udp 64 B".into(), send));
        // (The floors: what the goals could be met by at best, and how near the rows are.)
        let wf = (udpwf.0 + udpwf2.0) / 2.0;
        let sf = (udpsf.1 + udpsf2.1) / 2.0;
        println!("  udp write floor / GSO+GRO    {:>6.2}  (the most WRITE and READ could reach)", wf / g);
        println!("  rc write / udp write floor   {:>6.2}", w.0 / wf);
        println!("  rc read / udp write floor    {:>6.2}", r.0 / wf);
        println!("  udp send floor / udp 64 B    {:>6.2}  (the most SEND 64 B could reach)", sf / udp64_mean);
        println!("  rc send 64 B / udp send floor {:>5.2}", s.1 / sf);
        ratios.push(("udp write floor / GSO+GRO".into(), wf / g));
        ratios.push(("rc write / udp write floor".into(), w.0 / wf));
        ratios.push(("rc read / udp write floor".into(), r.0 / wf));
        ratios.push(("udp send floor / udp 64 B".into(), sf / udp64_mean));
        ratios.push(("rc send 64 B / udp send floor".into(), s.1 / sf));
    }
    if let Some(rw) = rw {
        println!("  raw rc write / udp rc write  {:>6.2}", rw.0 / w.0);
        ratios.push(("raw rc write / udp rc write".into(), rw.0 / w.0));
    }
    if let Some(rs) = rs {
        println!("  raw rc send / udp rc send    {:>6.2}  (messages per second)", rs.1 / s.1);
        ratios.push(("raw rc send / udp rc send".into(), rs.1 / s.1));
    }
    if only_rc {
        // (No baseline: the rates themselves, M msg/s and Gb/s.)
        for (kind, name, v) in [
            ("write", "rc write Gb/s", w.0 * 8.0 / 1e9),
            ("read", "rc read Gb/s", r.0 * 8.0 / 1e9),
            ("send", "rc send M msg/s", s.1 / 1e6),
        ] {
            if runs(kind) {
                ratios.push((name.into(), v));
            }
        }
    }
    ratios
}

/// The latency rows: the UDP busy-poll baseline, then `softroce perf *-lat` 2 B, each as a
/// ratio to the baseline. The baseline runs again after every row, and each row's ratio is to
/// the mean of the two baselines around it: on this shared machine the baseline itself drifts
/// by a fifth and more within a minute, and one baseline at the start left the last rows'
/// ratios to that drift.
fn latency(json: bool) -> Vec<(String, f64)> {
    let iters = 20_000;
    let mut base = udp_pingpong(iters);
    let mut bases = vec![base];
    println!("latency, 2 B, half round trip (median), two processes on loopback");
    println!("{:<38} {:>10} {:>8} {:>14}", "run", "us", "ratio", "baselines us");
    println!("{:<38} {:>10.2} {:>8}", "udp ping-pong, busy-poll, 2 cores", base, "1.00");
    let mut rows = Vec::new();
    // Each test through the engine thread (SOFTROCE_INLINE_PROGRESS=0) and with inline progress (the default).
    const TESTS: [&str; 4] = ["write-lat", "send-lat", "read-lat", "atomic-lat"];
    // `-- lat write-lat read-lat`: only those tests.
    let only: Vec<String> = std::env::args().filter(|a| TESTS.contains(&a.as_str())).collect();
    for (i, test) in TESTS.into_iter().enumerate() {
        if !only.is_empty() && !only.iter().any(|t| t == test) {
            continue;
        }
        for (j, (inline, tag)) in [(false, ""), (true, "_inline")].into_iter().enumerate() {
            let name = format!("softroce perf {test}{}", if inline { " (inline)" } else { "" });
            let r = perf_lat(test, 5000, 18_700 + 2 * i as u16 + j as u16, inline);
            let after = udp_pingpong(iters);
            bases.push(after);
            let around = (base + after) / 2.0;
            match r {
                // perftest's READ and atomic latency (`t_typical`) is the whole round trip:
                // half of it is what compares with the others and the baseline.
                Ok(t) => {
                    let t = if matches!(test, "read-lat" | "atomic-lat") { t / 2.0 } else { t };
                    println!("{name:<38} {t:>10.2} {:>8.2} {:>6.2} {:>6.2}", t / around, base, after);
                    rows.push((format!("{}{tag}", test.replace('-', "_")), t, around));
                }
                Err(e) => println!("{name:<38} failed: {e}"),
            }
            base = after;
        }
    }
    let mut sorted = bases.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    println!(
        "{:<38} {:>10.2}   (median of {}, {:.2}..{:.2})",
        "udp ping-pong baselines",
        median,
        bases.len(),
        sorted[0],
        sorted[sorted.len() - 1]
    );
    if json {
        let mut o = serde_json::Map::new();
        o.insert("bench".into(), "latency".into());
        o.insert("load_average".into(), load_average().into());
        o.insert("udp_pingpong_us".into(), median.into());
        o.insert("udp_pingpong_runs_us".into(), bases.into());
        for (k, t, around) in &rows {
            o.insert(format!("{k}_us"), (*t).into());
            o.insert(format!("{k}_ratio"), (t / around).into());
        }
        println!("{}", serde_json::Value::Object(o));
    }
    rows.into_iter().map(|(k, t, around)| (k, t / around)).collect()
}

/// This process's resident set in bytes (`VmRSS` of /proc/self/status).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// `n` idle RC QPs: RSS growth and time per QP after creating them and after each of the
/// modifies to INIT, RTR and RTS (nothing posted, no peer: the destination is an address on
/// loopback nobody listens on, and no packet is sent while nothing is posted).
fn idle_qps(n: usize, json: bool) {
    let dev = Device::open(DeviceConfig::new("127.0.79.1")).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4096).unwrap();
    let mut init = QpInitAttr::rc(&cq, &cq);
    init.cap =
        QpCaps { max_send_wr: 128, max_recv_wr: 512, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    // One QP through every step first, so that what is allocated once (the engine's first
    // table, the first path) is not counted per QP.
    {
        let qp = pd.create_qp(&init).unwrap();
        connect(&dev, &qp, Qpn::new(0x11), Psn::new(0), "127.0.79.2", Psn::new(0));
    }
    let av = AddressVector::new(Gid::from_ip("127.0.79.2".parse().unwrap()), dev.default_gid_index());
    let base = rss_bytes();
    let mut rows: Vec<(&str, f64, f64)> = Vec::new();
    let t = Instant::now();
    let qps: Vec<QueuePair> = (0..n).map(|_| pd.create_qp(&init).unwrap()).collect();
    let mut step = |name: &'static str, t: Instant| {
        let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let kib = (rss_bytes() as f64 - base as f64) / 1024.0 / n as f64;
        rows.push((name, kib, us));
    };
    step("create", t);
    let t = Instant::now();
    for qp in &qps {
        qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
    }
    step("init", t);
    let t = Instant::now();
    for (i, qp) in qps.iter().enumerate() {
        qp.modify(&QpAttrs::rtr(av, Mtu::Mtu4096, Qpn::new(0x100 + i as u32), Psn::new(0))).unwrap();
    }
    step("rtr", t);
    let t = Instant::now();
    for qp in &qps {
        qp.modify(&QpAttrs::rts(Psn::new(0))).unwrap();
    }
    step("rts", t);
    let t = Instant::now();
    drop(qps);
    let destroy_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!(
        "{n} idle RC QPs (max_send_wr 128, max_recv_wr 512, 1 SGE), one device, PD and CQ; RSS before: {:.1} MiB",
        base as f64 / 1048576.0
    );
    println!("{:<28} {:>14} {:>12}", "after", "RSS KiB / QP", "us / QP");
    for (name, kib, us) in &rows {
        let label = match *name {
            "create" => "create_qp",
            "init" => "+ modify to INIT",
            "rtr" => "+ modify to RTR",
            _ => "+ modify to RTS",
        };
        println!("{label:<28} {kib:>14.2} {us:>12.2}");
    }
    println!("{:<28} {:>14} {destroy_us:>12.2}", "destroy_qp", "");
    if json {
        let mut o = serde_json::Map::new();
        o.insert("bench".into(), "idle_qps".into());
        o.insert("qps".into(), n.into());
        o.insert("load_average".into(), load_average().into());
        for (name, kib, us) in &rows {
            o.insert(format!("{name}_rss_kib_per_qp"), (*kib).into());
            o.insert(format!("{name}_us_per_qp"), (*us).into());
        }
        o.insert("destroy_us_per_qp".into(), destroy_us.into());
        println!("{}", serde_json::Value::Object(o));
    }
}

/// The 1-minute load average (what else ran on the machine).
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Pins the calling thread to CPU `cpu` (best effort).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
    // sched_setaffinity reads `size_of::<cpu_set_t>()` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The baseline: a 2-byte ping-pong between two threads pinned to two cores, each busy-polling
/// a non-blocking UDP socket; the median half round trip in microseconds.
fn udp_pingpong(iters: usize) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The payload of a 2-byte RDMA WRITE Only: BTH 12 + RETH 16 + 2 + ICRC 4, rounded.
    const LEN: usize = 34;
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let warm = 1000;
    let echo = std::thread::spawn(move || {
        pin(1 % cores);
        let mut buf = [0u8; 64];
        for _ in 0..iters + warm {
            loop {
                if b.recv(&mut buf).is_ok() {
                    break;
                }
                std::hint::spin_loop();
            }
            b.send(&buf[..LEN]).unwrap();
        }
    });
    let saved = affinity();
    pin(0);
    let mut buf = [0u8; 64];
    let mut rtt = Vec::with_capacity(iters);
    for i in 0..iters + warm {
        let t = Instant::now();
        a.send(&buf[..LEN]).unwrap();
        loop {
            if a.recv(&mut buf).is_ok() {
                break;
            }
            std::hint::spin_loop();
        }
        if i >= warm {
            rtt.push(t.elapsed().as_nanos() as u64);
        }
    }
    echo.join().unwrap();
    // Unpin this thread again (the softroce runs follow in other processes).
    unpin(&saved);
    rtt.sort_unstable();
    rtt[rtt.len() / 2] as f64 / 2000.0
}

/// The kernel's part of the steering alone, as CPU time (wall-clock ping-pongs of pinned
/// busy-polling threads are at the mercy of anything else on the machine): a thread sends
/// 34-byte BTH-shaped datagrams over loopback to a plain socket, then to the first socket of
/// a two-process-style `SO_REUSEPORT` group with the shared address's steering program; on
/// loopback the sender's thread runs the whole receive path, socket lookup and steering
/// included. Seven rounds, interleaved, the least CPU time per datagram of each.
fn steering_cost() {
    let (mut plain, mut steered) = (f64::MAX, f64::MAX);
    for _ in 0..7 {
        plain = plain.min(send_cpu_ns(200_000, false));
        steered = steered.min(send_cpu_ns(200_000, true));
    }
    println!();
    println!("{:<44} {:>10} {:>8}", "udp send + receive path, 34 B, CPU per datagram", "ns", "ratio");
    println!("{:<44} {:>10.0} {:>8.2}", "receiver a plain socket", plain, 1.0);
    println!("{:<44} {:>10.0} {:>8.2}", "receiver in a steered 2-socket group", steered, steered / plain);
    println!("  the kernel's steering costs {:.0} ns per packet received", steered - plain);
}

/// CPU time of this thread, in ns.
fn thread_cpu_ns() -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed value it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let tv = |v: libc::timeval| v.tv_sec as f64 * 1e9 + v.tv_usec as f64 * 1e3;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The CPU time per datagram of sending `n` of them to a plain socket or (`steered`) to a
/// steered group's socket (see [`steering_cost`]); the receiver is drained by another thread.
fn send_cpu_ns(n: usize, steered: bool) -> f64 {
    let bind = |addr: &str, reuse: bool| {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        s.set_reuse_port(reuse).unwrap();
        s.bind(&addr.parse::<SocketAddr>().unwrap().into()).unwrap();
        s
    };
    let a: UdpSocket = bind("127.0.79.1:0", false).into();
    let b_sock = bind("127.0.79.2:0", steered);
    let b_addr = b_sock.local_addr().unwrap().as_socket().unwrap();
    let _idle = steered.then(|| {
        let other = bind(&b_addr.to_string(), true);
        let prog = softroce::verbs::share_bench::steering_program(&[(0, 0), (1, 0)]);
        softroce::verbs::share_bench::attach(&other, &prog).unwrap();
        other
    });
    let b: UdpSocket = b_sock.into();
    b.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let drain = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut got = 0usize;
        while b.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    let mut msg = [0u8; 34];
    msg[0] = 0x0a; // RC RDMA WRITE Only, QP 0x11 (slot 0: the first socket)
    msg[7] = 0x11;
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        let _ = a.send_to(&msg, b_addr);
    }
    let cpu = thread_cpu_ns() - t0;
    let got = drain.join().unwrap();
    assert!(got > 0, "nothing reached the receiving socket");
    cpu / n as f64
}

/// Gives this thread back the CPUs it had before [`pin`] (`saved`, from [`affinity`]), and
/// checks that it has them: the softroce processes the bench starts afterwards inherit them.
/// (Computing the set from `available_parallelism` after `pin`, as this did before, gave one
/// CPU: every latency row ran its four threads on one core, those with inline progress in
/// milliseconds.)
fn unpin(saved: &libc::cpu_set_t) {
    // SAFETY: sched_setaffinity reads the set it is given.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), saved) };
    let now = affinity();
    // SAFETY: CPU_COUNT reads two valid sets.
    let (got, want) = unsafe { (libc::CPU_COUNT(&now), libc::CPU_COUNT(saved)) };
    assert_eq!(got, want, "the bench thread could not be unpinned: the softroce runs would share fewer CPUs");
}

/// This thread's CPU affinity.
fn affinity() -> libc::cpu_set_t {
    // SAFETY: sched_getaffinity writes one cpu_set_t into the zeroed value it is given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        set
    }
}

/// `softroce perf <test> -s 2 -n <iters>` between a server on 127.0.77.11 and a client on
/// 127.0.77.12 (`SOFTROCE_BENCH_NET=127.0.N`: 127.0.N.21 and .22); the client's `t_typical` in
/// microseconds.
fn perf_lat(test: &str, iters: u32, port: u16, inline: bool) -> std::result::Result<f64, String> {
    perf_lat_on(test, iters, port, inline, Sharing::Default)
}

/// [`perf_lat`] with the devices sharing their addresses as `sharing` says.
fn perf_lat_on(
    test: &str,
    iters: u32,
    port: u16,
    inline: bool,
    sharing: Sharing,
) -> std::result::Result<f64, String> {
    // `SOFTROCE_BENCH_NET=127.0.N` moves them to 127.0.N.21/.22.
    let net = std::env::var("SOFTROCE_BENCH_NET").ok();
    let server_ip = net.as_ref().map_or("127.0.77.11".to_string(), |n| format!("{n}.21"));
    let client_ip = match (&net, sharing) {
        (_, Sharing::OneAddress) => server_ip.clone(),
        (Some(n), _) => format!("{n}.22"),
        (None, _) => "127.0.77.12".to_string(),
    };
    let (server_ip, client_ip) = (server_ip.as_str(), client_ip.as_str());
    let common = |c: &mut Command| {
        c.env("SOFTROCE_INLINE_PROGRESS", if inline { "1" } else { "0" });
        match sharing {
            Sharing::Default => {}
            Sharing::Off => {
                c.env("SOFTROCE_SHARE", "0");
            }
            Sharing::OneAddress => {
                c.env("SOFTROCE_SHARE", "1");
            }
        }
        c.args(["perf", test, "-n", &iters.to_string(), "-p", &port.to_string()]);
        if test != "atomic-lat" {
            // (atomics are always 8 bytes)
            c.args(["-s", "2"]);
        }
    };
    let v = perf_pair(&common, server_ip, client_ip)?;
    v["results"][0]["t_typical_us"].as_f64().ok_or_else(|| "no t_typical_us in the report".to_string())
}

/// A `softroce perf` server on `server_ip` and its client on `client_ip`, both set up by
/// `common` (the test and its options); the client's JSON report.
fn perf_pair(
    common: &dyn Fn(&mut Command),
    server_ip: &str,
    client_ip: &str,
) -> std::result::Result<serde_json::Value, String> {
    let exe = env!("CARGO_BIN_EXE_softroce");
    let mut server = Command::new(exe);
    common(&mut server);
    let mut server = server
        .args(["-d", server_ip])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut client = Command::new(exe);
    common(&mut client);
    let out = client
        .args(["-d", client_ip, "--connect-timeout", "10", "--json", server_ip])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let _ = server.wait();
    // (The report is the last line that is a JSON object.)
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("no report ({})", out.status))?;
    serde_json::from_str(line).map_err(|e| format!("{e} ({})", out.status))
}

/// Why the raw backend cannot run here, if it cannot (it needs CAP_NET_RAW).
fn raw_skip_reason() -> Option<String> {
    match Device::open(DeviceConfig::new("127.0.78.9").with_backend(BackendKind::Raw)) {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// The local addresses of the client and the server of a backend's runs.
/// `SOFTROCE_BENCH_NET=127.0.N` moves them to 127.0.N.1/.2 (UDP) and .11/.12 (raw), so that two
/// invocations at once (two worktrees) do not share port 4791 on one address.
fn bench_addrs(backend: &str) -> (String, String) {
    match (std::env::var("SOFTROCE_BENCH_NET"), backend) {
        (Ok(net), "raw") => (format!("{net}.11"), format!("{net}.12")),
        (Ok(net), _) => (format!("{net}.1"), format!("{net}.2")),
        (Err(_), "raw") => ("127.0.78.1".into(), "127.0.78.2".into()),
        (Err(_), _) => ("127.0.77.1".into(), "127.0.77.2".into()),
    }
}

/// Starts this binary as the server of `role`; returns it and its first stdout line.
fn spawn(role: &str, args: &str) -> (std::process::Child, BufReader<std::process::ChildStdout>, String) {
    spawn_env(role, args, &[])
}

/// [`spawn`] with environment variables.
fn spawn_env(
    role: &str,
    args: &str,
    env: &[(&str, &str)],
) -> (std::process::Child, BufReader<std::process::ChildStdout>, String) {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .envs(env.iter().copied())
        .env(ROLE, format!("{role} {args}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    (c, out, line.trim().to_string())
}

/// The median of the runs (of an even number, the mean of the middle two).
fn median(runs: &[f64]) -> f64 {
    let mut sorted = runs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n.is_multiple_of(2) { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 } else { sorted[n / 2] }
}

/// Sends datagrams of `size` bytes, `gso` per system call, for `d`; returns (bytes/s,
/// datagrams/s) counted by the receiver.
fn udp_bench(size: usize, gso: usize, d: Duration) -> (f64, f64) {
    udp_stream(&[(size, size * gso)], d)
}

/// The UDP datagrams in which the engine sends one 64 KiB RC WRITE at PMTU 4096, as two GSO
/// sends: the first packet (BTH + RETH + 4096 + ICRC: 4128 bytes) with the second (4112, the
/// shorter last segment of that send), then the other fourteen (4112 each). Every packet but
/// the last of a GSO send must have the size of the first, and the first packet of a WRITE is
/// 16 bytes (its RETH) longer than the rest, so a message cannot be fewer than two sends (and
/// one send holds at most 65,507 bytes: 15 of these packets). Returns (bytes/s, messages/s):
/// the messages the receiver counted, in payload bytes as the WRITE row counts them.
fn udp_write_shaped(d: Duration) -> (f64, f64) {
    udp_write_shaped_with(d, false)
}

/// [`udp_write_shaped`] with the work per byte that RoCEv2 over UDP sockets cannot do without
/// ([`udp_stream_with`], `roce_work`): the floor under RC WRITE on this machine's loopback.
fn udp_write_floor(d: Duration) -> (f64, f64) {
    udp_write_shaped_with(d, true)
}

fn udp_write_shaped_with(d: Duration, roce_work: bool) -> (f64, f64) {
    const FIRST: usize = 12 + 16 + 4096 + 4;
    const REST: usize = 12 + 4096 + 4;
    let (bytes, _) = udp_stream_with(&[(FIRST, FIRST + REST), (REST, 14 * REST)], d, roce_work);
    let msgs = bytes / (FIRST + 15 * REST) as f64;
    (msgs * 65536.0, msgs)
}

/// 64 B SEND packets (BTH, 64 bytes, ICRC: 80-byte datagrams) in GSO sends of 64, as the engine
/// batches them, with the work per packet RoCEv2 over UDP sockets cannot do without
/// ([`udp_stream_with`], `roce_work`) and nothing of the protocol (no work requests,
/// completions or ACKs): the floor under the SEND 64 B message rate. Returns (bytes/s,
/// messages/s).
fn udp_send_floor(d: Duration) -> (f64, f64) {
    const PKT: usize = 12 + 64 + 4;
    udp_stream_with(&[(PKT, 64 * PKT)], d, true)
}

/// Sends, over and over for `d`, one UDP send per `(segment size, bytes)` of `sends` (GSO
/// when the bytes exceed the segment size; its last segment may be shorter), from a thread
/// pinned to core 0 to a receiver with GRO pinned to core 1; returns (bytes/s, datagrams/s)
/// counted by the receiver.
fn udp_stream(sends: &[(usize, usize)], d: Duration) -> (f64, f64) {
    udp_stream_with(sends, d, false)
}

/// [`udp_stream`]; with `roce_work`, also the work per datagram that RoCEv2 over UDP sockets
/// cannot do without, whatever the implementation: the sender computes a CRC-32 over each
/// datagram and puts it in the last four bytes (the ICRC; with no copy out of the memory
/// region, as a sender that gathers the payload straight from it would do), the receiver
/// checks every one and copies what follows the 12-byte BTH into a 64 KiB region (a UDP socket
/// cannot place a payload before its headers are read and checked). No header is built or
/// parsed and the IPv4 identification is not recovered: a floor, not a model.
fn udp_stream_with(sends: &[(usize, usize)], d: Duration, roce_work: bool) -> (f64, f64) {
    let size = sends[0].0;
    let role_args = if roce_work { format!("{size} roce") } else { format!("{size}") };
    let (mut child, mut out, addr) = spawn("udp-recv", &role_args);
    let dst: SocketAddr = addr.parse().unwrap();
    // Sender and receiver pinned to two cores, as the ping-pong baseline's threads are: left
    // to the scheduler they sometimes shared one and the limit read a third of itself
    // (GSO+GRO 14 against 42 Gb/s in one invocation).
    let saved = affinity();
    pin(0);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let state = quinn_udp::UdpSocketState::new((&sock).into()).unwrap();
    let mut buf = vec![0x5au8; sends.iter().map(|s| s.1).max().unwrap_or(0)];
    let start = Instant::now();
    while start.elapsed() < d {
        for _ in 0..64 {
            for &(seg, len) in sends {
                if roce_work {
                    for p in buf[..len].chunks_mut(seg) {
                        let n = p.len() - 4;
                        let crc = crc32fast::hash(&p[..n]);
                        p[n..].copy_from_slice(&crc.to_le_bytes());
                    }
                }
                let t = quinn_udp::Transmit {
                    destination: dst,
                    ecn: None,
                    contents: &buf[..len],
                    segment_size: (len > seg).then_some(seg),
                    src_ip: None,
                };
                let _ = state.try_send((&sock).into(), &t);
            }
        }
    }
    unpin(&saved);
    std::thread::sleep(Duration::from_millis(100));
    child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    child.wait().unwrap();
    let f: Vec<f64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
    // (The receiver counts datagrams whose CRC did not match: none may, or it measured nothing.)
    assert!(f.get(3).is_none_or(|&bad| bad == 0.0), "udp-recv: {} datagrams with a bad CRC", f[3]);
    (f[0] / f[2], f[1] / f[2])
}

fn rc_bench(kind: &str, size: usize, d: Duration, backend: &str) -> (f64, f64) {
    let (b, m, _) = rc_bench_on(kind, size, d, backend, Sharing::Default);
    (b, m)
}

/// How the devices of a run treat their address (the `shared` rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sharing {
    /// As configured (`SOFTROCE_SHARE`; sharing by default), each on its own address.
    Default,
    /// `SOFTROCE_SHARE=0`: the device binds the port alone.
    Off,
    /// Client and server share one address.
    OneAddress,
}

/// One run: (bytes/s, messages/s, CPU seconds of both processes per GB moved, the setup
/// included).
fn rc_bench_on(kind: &str, size: usize, d: Duration, backend: &str, sharing: Sharing) -> (f64, f64, f64) {
    let cpu0 = cpu_seconds();
    let (ca, sa) = bench_addrs(backend);
    let ca = if sharing == Sharing::OneAddress { sa.clone() } else { ca };
    let env: Vec<(&str, &str)> = match sharing {
        Sharing::Default => vec![],
        Sharing::Off => vec![("SOFTROCE_SHARE", "0")],
        Sharing::OneAddress => vec![("SOFTROCE_SHARE", "1"), ("SOFTROCE_BENCH_PEER", ca.as_str())],
    };
    let (mut child, mut out, peer) = spawn_env("rc", &format!("{kind} {size} {sa} {backend}"), &env);
    let p: Vec<&str> = peer.split_whitespace().collect();
    let (qpn, psn, raddr, rkey) = (
        Qpn::new(p[0].parse().unwrap()),
        Psn::new(p[1].parse().unwrap()),
        p[2].parse().unwrap(),
        Rkey::new(p[3].parse().unwrap()),
    );
    let mut cfg = DeviceConfig::new(ca.as_str()).with_backend(backend.parse().unwrap());
    match sharing {
        Sharing::Default => {}
        Sharing::Off => cfg = cfg.with_share(false),
        Sharing::OneAddress => cfg = cfg.with_share(true),
    }
    let dev = Device::open(cfg).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8192).unwrap();
    let mut init = QpInitAttr::rc(&cq, &cq);
    init.cap =
        QpCaps { max_send_wr: 1024, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
    let qp = pd.create_qp(&init).unwrap();
    let mr = pd.alloc_mr(size.max(64), Access::LOCAL_WRITE).unwrap();
    connect(&dev, &qp, qpn, psn, &sa, Psn::new(0x1000));
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(format!("{} {}\n", qp.qp_num().value(), 0x1000).as_bytes())
        .unwrap();
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    let depth = if kind == "send" { 256 } else { 64 };
    let mut wcs = vec![WorkCompletion::default(); 64];
    let (mut posted, mut done) = (0u64, 0u64);
    let mut start = Instant::now();
    let mut counted = 0u64;
    let warmup = Duration::from_millis(300);
    let mut warm = false;
    loop {
        while posted - done < depth {
            let remote = RemoteAddr { addr: raddr, rkey };
            let op = match kind {
                "write" => SendOp::RdmaWrite(remote),
                "read" => SendOp::RdmaRead(remote),
                _ => SendOp::Send,
            };
            let mut wr = SendWr::new(posted, op, &[mr.sge(0, size as u32)]);
            // Signal one in 16, as perftest's CQ moderation does.
            wr.signaled = posted % 16 == 15;
            qp.post_send(wr).unwrap();
            posted += 1;
        }
        let n = cq.poll(&mut wcs).unwrap();
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                // For the post-mortem: this side's counters (the peer prints nothing).
                eprintln!("{kind} failed; this side's QP counters: {:?}", dev.counters().map(|c| c.qp));
                drop(child.stdin.take());
                let _ = child.wait();
            }
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            done = wc.wr_id + 1;
        }
        if !warm && start.elapsed() > warmup {
            warm = true;
            start = Instant::now();
            counted = done;
        }
        if warm && start.elapsed() > d {
            break;
        }
        if n == 0 {
            // Block rather than spin: on a two-core machine a spinning application thread
            // takes the CPU the two engines need.
            let _ = cq.wait(Duration::from_millis(1));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let msgs = (done - counted) as f64;
    drop(child.stdin.take());
    child.wait().unwrap();
    let total = done as f64 * size as f64;
    (msgs * size as f64 / secs, msgs / secs, (cpu_seconds() - cpu0) / (total / 1e9))
}

/// CPU time of this process and its waited-for children so far, in seconds.
fn cpu_seconds() -> f64 {
    let t = |who| {
        // SAFETY: getrusage writes one `rusage` into the zeroed value it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut u) };
        let tv = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    t(libc::RUSAGE_SELF) + t(libc::RUSAGE_CHILDREN)
}

/// The `shared` rows: unshared devices, sharing devices alone on their addresses, and two
/// processes on one address, side by side (see the module docs).
fn shared(d: Duration) {
    if std::env::args().any(|a| a == "kernel") {
        steering_cost();
        return;
    }
    println!(
        "softroce, one address shared by two processes, {} s per run ({} cores)",
        d.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let modes = [Sharing::Off, Sharing::Default, Sharing::OneAddress];
    let name = |m: Sharing| match m {
        Sharing::Off => "unshared (SOFTROCE_SHARE=0)",
        Sharing::Default => "shared, one process per address",
        Sharing::OneAddress => "shared, both on one address",
    };
    println!();
    println!("{:<44} {:>10} {:>10} {:>8} {:>12}", "run", "Gb/s", "Mmsg/s", "ratio", "CPU s/GB");
    // Each mode three times, interleaved, the best run of each: a busy machine slows some runs
    // of every mode; the best shows what the path itself costs. The CPU time per byte (both
    // processes, least of the three) is the steadier measure on a busy machine.
    let rounds = 3;
    for (kind, size) in [("write", 65536usize), ("send", 64)] {
        let mut r = vec![(0.0f64, 0.0f64, f64::MAX); modes.len()];
        for _ in 0..rounds {
            for (k, m) in modes.iter().enumerate() {
                let v = rc_bench_on(kind, size, d, "udp", *m);
                if v.1 > r[k].1 {
                    (r[k].0, r[k].1) = (v.0, v.1);
                }
                r[k].2 = r[k].2.min(v.2);
            }
        }
        for (m, v) in modes.iter().zip(&r) {
            let ratio = if kind == "write" { v.0 / r[0].0 } else { v.1 / r[0].1 };
            println!(
                "{:<44} {:>10.2} {:>10.3} {:>8.2} {:>12.3}",
                format!("rc {kind} {size} B, {}", name(*m)),
                v.0 * 8.0 / 1e9,
                v.1 / 1e6,
                ratio,
                v.2
            );
        }
    }
    steering_cost();
    println!();
    println!("{:<44} {:>10} {:>8}", "latency, 2 B, half round trip (median)", "us", "ratio");
    for (i, test) in ["send-lat", "write-lat", "read-lat"].iter().enumerate() {
        let mut best = vec![f64::MAX; modes.len()];
        for round in 0..rounds {
            for (k, m) in modes.iter().enumerate() {
                let port = 18_700 + (((i * rounds + round) * modes.len() + k) % 1000) as u16;
                match perf_lat_on(test, 20_000, port, true, *m) {
                    Ok(us) => best[k] = best[k].min(us),
                    Err(e) => println!("{:<44} failed: {e}", format!("{test}, {}", name(*m))),
                }
            }
        }
        for (k, m) in modes.iter().enumerate() {
            println!("{:<44} {:>10.2} {:>8.2}", format!("{test}, {}", name(*m)), best[k], best[k] / best[0]);
        }
    }
}

/// The `onecore` rows: `softroce perf write-bw` 64 KiB and `send-bw` 64 B on every CPU and on
/// one, with the CQ poll's pacing on and off.
fn onecore(secs: f64, rounds: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "softroce perf, busy-polling applications on all CPUs ({cores}) and on one, {secs} s per run, \
         best of {rounds} (load {:.1})",
        load_average()
    );
    println!();
    println!("{:<58} {:>10} {:>10} {:>8}", "run", "all CPUs", "one CPU", "ratio");
    let saved = affinity();
    let mut port = 18_900u16;
    for (test, size, unit) in [("write-bw", 65536, "MB/s"), ("send-bw", 64, "Mmsg/s")] {
        // [pacing on, off] x [all, one]: the best of the rounds.
        let mut best = [[0.0f64; 2]; 2];
        for _ in 0..rounds {
            for (m, pacing) in ["1", "0"].into_iter().enumerate() {
                for (c, one) in [false, true].into_iter().enumerate() {
                    if one {
                        // Both processes inherit this thread's CPU set.
                        pin(cores - 1);
                    }
                    port = if port >= 18_990 { 18_900 } else { port + 1 };
                    let r = perf_bw(test, size, secs, port, pacing);
                    unpin(&saved);
                    match r {
                        Ok(v) => best[m][c] = best[m][c].max(v),
                        Err(e) => println!("{test} pacing {pacing} one CPU {one}: failed: {e}"),
                    }
                }
            }
        }
        for (m, name) in ["pacing on (default)", "pacing off (SOFTROCE_POLL_YIELD=0)"].into_iter().enumerate()
        {
            let [all, one] = best[m];
            let scale = if unit == "MB/s" { 1.0 } else { 1e-6 };
            println!(
                "{:<58} {:>10.2} {:>10.2} {:>8.2}",
                format!("{test} {size} B {unit}, {name}"),
                all * scale,
                one * scale,
                one / all
            );
        }
    }
}

/// `softroce perf <test> -s <size> -D <secs>` between 127.0.77.31 and .32 (`SOFTROCE_BENCH_NET`
/// moves them to .31/.32 of that net), with `SOFTROCE_POLL_YIELD=<pacing>`: the client's
/// average bandwidth in MB/s (`write-bw`) or messages per second (`send-bw`).
fn perf_bw(test: &str, size: usize, secs: f64, port: u16, pacing: &str) -> std::result::Result<f64, String> {
    let net = std::env::var("SOFTROCE_BENCH_NET").unwrap_or_else(|_| "127.0.77".to_string());
    let (server_ip, client_ip) = (format!("{net}.31"), format!("{net}.32"));
    let common = |c: &mut Command| {
        c.env("SOFTROCE_POLL_YIELD", pacing);
        c.args(["perf", test, "-s", &size.to_string(), "-D", &format!("{secs}"), "-p", &port.to_string()]);
    };
    let v = perf_pair(&common, &server_ip, &client_ip)?;
    let r = &v["results"][0];
    if test == "write-bw" {
        r["bw_avg"].as_f64().ok_or_else(|| "no bw_avg in the report".to_string())
    } else {
        r["msg_rate_mpps"]
            .as_f64()
            .map(|m| m * 1e6)
            .ok_or_else(|| "no msg_rate_mpps in the report".to_string())
    }
}

/// The `engines` rows: many busy QPs with one and with two engine threads per device.
fn engines(d: Duration, nqps: usize) {
    println!(
        "softroce, {nqps} RC QP pairs between two devices in one process on loopback, {} s per run ({} cores)",
        d.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("{:<38} {:>12} {:>12}", "run", "Gb/s", "Mmsg/s");
    let mut results = Vec::new();
    for (kind, size) in [("write", 65536), ("send", 64)] {
        let mut by_engines = Vec::new();
        for engines in [1, 2] {
            let r = many_qps(kind, size, nqps, engines, d);
            let label = if kind == "write" { "write 64 KiB" } else { "send 64 B" };
            println!(
                "{:<38} {:>12.2} {:>12.3}",
                format!("{label}, {nqps} QPs, {engines} engine(s)"),
                r.0 * 8.0 / 1e9,
                r.1 / 1e6
            );
            by_engines.push(r);
        }
        results.push((kind, by_engines[1].1 / by_engines[0].1));
    }
    println!();
    println!("ratios (same invocation), 2 engines / 1 engine:");
    for (kind, r) in results {
        println!("  {kind:<6} {r:>6.2}  (messages per second)");
    }
}

/// `nqps` RC QP pairs between two devices with `engines` engine threads each, every QP kept
/// busy with `kind` (`write` or `send`) of `size` bytes for `d`; returns (bytes/s, msgs/s).
fn many_qps(kind: &str, size: usize, nqps: usize, engines: usize, d: Duration) -> (f64, f64) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let open = |k: usize| {
        let cfg = DeviceConfig::new(format!("127.0.79.{}", 10 * engines + k)).with_engine_threads(engines);
        Device::open(cfg).unwrap()
    };
    let (da, db) = (open(1), open(2));
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (ca, cb) = (da.create_cq(65536).unwrap(), db.create_cq(65536).unwrap());
    let ma = pa.alloc_mr(size.max(64), Access::LOCAL_WRITE).unwrap();
    let mb = pb.alloc_mr(size.max(64), Access::ALL).unwrap();
    let depth: u64 = if kind == "write" { 16 } else { 64 };
    let caps =
        QpCaps { max_send_wr: 256, max_recv_wr: 1024, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let mut qas = Vec::new();
    let mut qbs = Vec::new();
    for _ in 0..nqps {
        let qa = pa.create_qp(&QpInitAttr { cap: caps, ..QpInitAttr::rc(&ca, &ca) }).unwrap();
        let qb = pb.create_qp(&QpInitAttr { cap: caps, ..QpInitAttr::rc(&cb, &cb) }).unwrap();
        connect(&da, &qa, qb.qp_num(), Psn::new(0x2000), &db.ip().to_string(), Psn::new(0x1000));
        connect(&db, &qb, qa.qp_num(), Psn::new(0x1000), &da.ip().to_string(), Psn::new(0x2000));
        if kind == "send" {
            for k in 0..1024 {
                qb.post_recv(RecvWr::new(k, &[mb.sge(0, 64)])).unwrap();
            }
        }
        qas.push(qa);
        qbs.push(qb);
    }
    let qbs = Arc::new(qbs);
    let stop = Arc::new(AtomicBool::new(false));
    let remote = RemoteAddr { addr: mb.addr(), rkey: mb.rkey() };
    // The receiving side gives each completed receive back to its QP.
    let server = {
        let (qbs, stop, cb, mb) = (qbs.clone(), stop.clone(), cb, mb);
        std::thread::spawn(move || {
            let mut wcs = vec![WorkCompletion::default(); 256];
            while !stop.load(Ordering::SeqCst) {
                let n = cb.poll_wait(&mut wcs, Duration::from_millis(20)).unwrap_or(0);
                for wc in &wcs[..n] {
                    if let Some(qb) = qbs.iter().find(|q| q.qp_num() == wc.qp_num) {
                        qb.post_recv(RecvWr::new(0, &[mb.sge(0, 64)])).unwrap();
                    }
                }
            }
        })
    };
    let (mut posted, mut done) = (vec![0u64; nqps], vec![0u64; nqps]);
    let mut wcs = vec![WorkCompletion::default(); 256];
    let mut start = Instant::now();
    let mut counted = 0u64;
    let warmup = Duration::from_millis(300);
    let mut warm = false;
    loop {
        for (i, qa) in qas.iter().enumerate() {
            while posted[i] - done[i] < depth {
                let op = if kind == "write" { SendOp::RdmaWrite(remote) } else { SendOp::Send };
                let mut wr = SendWr::new((i as u64) << 40 | posted[i], op, &[ma.sge(0, size as u32)]);
                wr.signaled = posted[i] % 16 == 15;
                qa.post_send(wr).unwrap();
                posted[i] += 1;
            }
        }
        let n = ca.poll(&mut wcs).unwrap();
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            let i = (wc.wr_id >> 40) as usize;
            done[i] = (wc.wr_id & ((1 << 40) - 1)) + 1;
        }
        if !warm && start.elapsed() > warmup {
            warm = true;
            start = Instant::now();
            counted = done.iter().sum();
        }
        if warm && start.elapsed() > d {
            break;
        }
        if n == 0 {
            let _ = ca.wait(Duration::from_millis(1));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let msgs = (done.iter().sum::<u64>() - counted) as f64;
    stop.store(true, Ordering::SeqCst);
    server.join().unwrap();
    (msgs * size as f64 / secs, msgs / secs)
}

fn connect(dev: &Device, qp: &QueuePair, qpn: Qpn, psn: Psn, peer: &str, my_psn: Psn) {
    qp.modify(&QpAttrs::init(Access::ALL)).unwrap();
    let av = AddressVector::new(Gid::from_ip(peer.parse().unwrap()), dev.default_gid_index());
    qp.modify(&QpAttrs::rtr(av, Mtu::Mtu4096, qpn, psn)).unwrap();
    qp.modify(&QpAttrs::rts(my_psn)).unwrap();
}

fn child(role: &str) {
    let args: Vec<&str> = role.split_whitespace().collect();
    match args[0] {
        "udp-recv" => {
            let size: usize = args[1].parse().unwrap();
            pin(1 % std::thread::available_parallelism().map_or(1, |n| n.get()));
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            sock.set_nonblocking(true).unwrap();
            let s2 = socket2::SockRef::from(&sock);
            let _ = s2.set_recv_buffer_size(16 << 20);
            let state = quinn_udp::UdpSocketState::new((&sock).into()).unwrap();
            println!("{}", sock.local_addr().unwrap());
            let stop = stop_when_stdin_closes();
            let mut bufs: Vec<Vec<u8>> = (0..32).map(|_| vec![0u8; 65536]).collect();
            let mut metas = vec![quinn_udp::RecvMeta::default(); 32];
            let (mut bytes, mut dgrams) = (0u64, 0u64);
            // `roce`: check each datagram's CRC and copy its payload into a region
            // (`udp_stream_with`).
            let roce_work = args.get(2) == Some(&"roce");
            let mut region = vec![0u8; 65536];
            let (mut at, mut bad) = (0usize, 0u64);
            let mut first: Option<Instant> = None;
            let mut last = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut sl: Vec<std::io::IoSliceMut<'_>> =
                    bufs.iter_mut().map(|b| std::io::IoSliceMut::new(b)).collect();
                match state.recv((&sock).into(), &mut sl, &mut metas) {
                    Ok(n) => {
                        let now = Instant::now();
                        first.get_or_insert(now);
                        last = now;
                        for (m, b) in metas[..n].iter().zip(&bufs) {
                            bytes += m.len as u64;
                            dgrams +=
                                (m.len / m.stride.max(1)) as u64 + (m.len % m.stride.max(1) != 0) as u64;
                            if roce_work {
                                for p in b[..m.len].chunks(m.stride.max(1)) {
                                    let Some(n) = p.len().checked_sub(4).filter(|&n| n >= 12) else {
                                        bad += 1;
                                        continue;
                                    };
                                    if crc32fast::hash(&p[..n]).to_le_bytes() != p[n..] {
                                        bad += 1;
                                        continue;
                                    }
                                    let payload = &p[12..n];
                                    if at + payload.len() > region.len() {
                                        at = 0;
                                    }
                                    region[at..at + payload.len()].copy_from_slice(payload);
                                    at += payload.len();
                                }
                            }
                        }
                    }
                    Err(_) => std::thread::yield_now(),
                }
            }
            let secs = first.map_or(1.0, |f| (last - f).as_secs_f64().max(1e-9));
            let _ = size;
            std::hint::black_box(&region);
            println!("{bytes} {dgrams} {secs} {bad}");
        }
        _ => {
            let (kind, size, addr, backend) = (args[1], args[2].parse::<usize>().unwrap(), args[3], args[4]);
            let dev = Device::open(DeviceConfig::new(addr).with_backend(backend.parse().unwrap())).unwrap();
            let pd = dev.alloc_pd().unwrap();
            let cq = dev.create_cq(8192).unwrap();
            let mut init = QpInitAttr::rc(&cq, &cq);
            init.cap = QpCaps {
                max_send_wr: 16,
                max_recv_wr: 4096,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            let qp = pd.create_qp(&init).unwrap();
            let mr = pd.alloc_mr(size.max(64), Access::ALL).unwrap();
            println!("{} {} {} {}", qp.qp_num().value(), 0x2000, mr.addr(), mr.rkey().value());
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            let p: Vec<u32> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
            let peer = std::env::var("SOFTROCE_BENCH_PEER").unwrap_or_else(|_| bench_addrs(backend).0);
            connect(&dev, &qp, Qpn::new(p[0]), Psn::new(p[1]), &peer, Psn::new(0x2000));
            let mut posted = 0u64;
            if kind == "send" {
                while posted < 4096 {
                    qp.post_recv(RecvWr::new(posted, &[mr.sge(0, 64)])).unwrap();
                    posted += 1;
                }
            }
            println!("ready");
            // Keep receives posted until the parent closes stdin.
            let stop = stop_when_stdin_closes();
            let mut wcs = vec![WorkCompletion::default(); 256];
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let n = cq.poll_wait(&mut wcs, Duration::from_millis(50)).unwrap_or(0);
                for _ in 0..n {
                    qp.post_recv(RecvWr::new(posted, &[mr.sge(0, 64)])).unwrap();
                    posted += 1;
                }
            }
        }
    }
}

/// A flag raised when the parent closes this child's stdin (the end of a run).
fn stop_when_stdin_closes() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        let _ = std::io::stdin().read_line(&mut l);
        st.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    stop
}
