//! `softroce perf`: every test between two softroce processes on loopback, the report layout,
//! `--json`, and the error paths.
//!
//! Each pair uses its own two loopback addresses (`127.<run>.<pid>`) and TCP port, derived from
//! the process id and a counter, so parallel tests and other test binaries never collide.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

const BANNER: &str = "* Waiting for client to connect... *";
const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
const DEADLINE: Duration = Duration::from_secs(40);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Two loopback addresses and a TCP port nobody else uses.
struct Net {
    server: String,
    client: String,
    port: String,
}

fn net() -> Net {
    let pid = std::process::id();
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    assert!(n < 40, "too many runs for the address plan");
    let (b, c) = ((pid >> 8) & 0xff, pid & 0xff);
    Net {
        server: format!("127.{}.{b}.{c}", 20 + 2 * n),
        client: format!("127.{}.{b}.{c}", 21 + 2 * n),
        // Below the kernel's ephemeral ports (32768 and up): the server listens on every
        // address, so an outgoing connection of another test that was given this port as its
        // local one made the listen fail with EADDRINUSE (once in CI, port 58828).
        port: (20000 + (pid % 300) * 40 + n).to_string(),
    }
}

/// What a process printed and how it ended.
#[derive(Debug)]
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softroce"))
}

/// Collects a child's output on threads; `banner` gets a message when a line contains
/// [`BANNER`].
fn collect(child: &mut Child, banner: Option<mpsc::Sender<()>>) -> [thread::JoinHandle<String>; 2] {
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let spawn = |r: Box<dyn Read + Send>, tx: Option<mpsc::Sender<()>>| {
        thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if line.contains(BANNER)
                    && let Some(tx) = &tx
                {
                    let _ = tx.send(());
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        })
    };
    [spawn(Box::new(out), banner.clone()), spawn(Box::new(err), banner)]
}

fn finish(mut child: Child, readers: [thread::JoinHandle<String>; 2], what: &str) -> Output {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let [o, e] = readers;
            panic!(
                "{what} did not finish in time\nstdout:\n{}\nstderr:\n{}",
                o.join().unwrap(),
                e.join().unwrap()
            );
        }
        thread::sleep(Duration::from_millis(10));
    };
    let [o, e] = readers;
    Output { code: status.code().unwrap_or(-1), stdout: o.join().unwrap(), stderr: e.join().unwrap() }
}

/// Runs `softroce perf <test>` as a server and as a client against it; both must succeed.
fn pair(test: &str, server_args: &[&str], client_args: &[&str]) -> (Output, Output) {
    let (s, c) = pair_outcome(test, server_args, client_args, None);
    assert_eq!(c.code, 0, "{test} client failed: {c:?}\nserver: {s:?}");
    assert_eq!(s.code, 0, "{test} server failed: {s:?}\nclient: {c:?}");
    (s, c)
}

/// Runs `softroce perf <test>` as a server and as a client against it, however they end; with
/// `kill_client_after`, the client is killed (SIGKILL) after that long.
fn pair_outcome(
    test: &str,
    server_args: &[&str],
    client_args: &[&str],
    kill_client_after: Option<Duration>,
) -> (Output, Output) {
    let n = net();
    let mut server = bin()
        .args(["perf", test, "-d", &n.server, "-p", &n.port])
        .args(server_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let server_readers = collect(&mut server, Some(tx));
    if rx.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = server.kill();
        let out = finish(server, server_readers, "server");
        panic!("the server never listened: {out:?}");
    }
    let mut client = bin()
        .args(["perf", test, "-d", &n.client, "-p", &n.port])
        .args(client_args)
        .arg(&n.server)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client_readers = collect(&mut client, None);
    if let Some(after) = kill_client_after {
        thread::sleep(after);
        client.kill().unwrap();
    }
    let c = finish(client, client_readers, "client");
    let s = finish(server, server_readers, "server");
    (s, c)
}

/// Runs a single `softroce perf` command (an error path).
fn single(args: &[&str]) -> Output {
    let mut child =
        bin().arg("perf").args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let readers = collect(&mut child, None);
    finish(child, readers, "softroce perf")
}

/// The result rows of a report: the lines between the column header and the next
/// `RESULT_LINE`, as numbers.
fn rows(report: &str) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in report.lines() {
        if line.starts_with(" #bytes") {
            inside = true;
        } else if line == RESULT_LINE {
            inside = false;
        } else if inside {
            let nums: Vec<f64> = line.split_whitespace().map(|w| w.parse().unwrap()).collect();
            out.push(nums);
        }
    }
    out
}

fn json(out: &Output) -> Value {
    let line = out.stdout.lines().find(|l| l.starts_with('{')).expect("a JSON line on stdout");
    serde_json::from_str(line).unwrap()
}

/// Checks a BW row: size, iterations, peak (0 allowed), positive average and message rate.
fn check_bw_row(row: &[f64], size: f64, iters: f64, peak: bool) {
    assert_eq!(row.len(), 5, "{row:?}");
    assert_eq!((row[0], row[1]), (size, iters), "{row:?}");
    if peak {
        assert!(row[2] > 0.0, "{row:?}");
    } else {
        assert_eq!(row[2], 0.0, "{row:?}");
    }
    assert!(row[3] > 0.0 && row[4] > 0.0, "{row:?}");
}

/// Checks a latency row: size, iterations, then 7 positive, ordered statistics.
fn check_lat_row(row: &[f64], size: f64, iters: f64) {
    assert_eq!(row.len(), 9, "{row:?}");
    assert_eq!((row[0], row[1]), (size, iters), "{row:?}");
    let (min, max, typical, avg, p99, p999) = (row[2], row[3], row[4], row[5], row[7], row[8]);
    assert!(min > 0.0 && min <= typical && typical <= max && min <= avg && avg <= max, "{row:?}");
    assert!(row[6] >= 0.0 && p99 <= p999 && p999 <= max, "{row:?}");
}

fn check_common_json(v: &Value, test: &str, role: &str) {
    assert_eq!(v["tool"], "softroce perf");
    assert_eq!(v["test"], test);
    assert_eq!(v["role"], role);
    assert_eq!(v["version"], "6.06");
    assert_eq!(v["peer_version"], "6.06");
    assert_eq!(v["params"]["connection"], "RC");
    assert_eq!(v["params"]["gid_index"], 1);
    assert_eq!(v["params"]["mtu"], 4096, "loopback's active MTU");
    let cpu = &v["cpu"];
    assert!(cpu["seconds"].as_f64().unwrap() >= 0.0, "{cpu}");
    assert!(cpu["wall_seconds"].as_f64().unwrap() > 0.0, "{cpu}");
    assert!(cpu["percent"].as_f64().unwrap() >= 0.0, "{cpu}");
    let qp = &v["qps"][0];
    assert!(qp["local"]["gid"].as_str().unwrap().starts_with("::ffff:127."), "{qp}");
    assert!(qp["remote"]["gid"].as_str().unwrap().starts_with("::ffff:127."), "{qp}");
    assert!(qp["local"]["qpn"].as_u64().unwrap() > 0);
}

fn bw_test(test: &str, size: f64) {
    let (s, c) = pair(test, &["-n", "200"], &["-n", "200", "--json"]);
    // Server: its own report (send_bw) or the client's (write/read/atomic); no peak on the
    // send server.
    let sr = rows(&s.stdout);
    assert_eq!(sr.len(), 1, "{}", s.stdout);
    check_bw_row(&sr[0], size, 200.0, test != "send-bw");
    // Client: the report on stderr (stdout has the JSON).
    let cr = rows(&c.stderr);
    assert_eq!(cr.len(), 1, "{}", c.stderr);
    check_bw_row(&cr[0], size, 200.0, true);
    if test != "send-bw" {
        assert_eq!(sr, cr, "the server prints the client's report");
    }
    let v = json(&c);
    check_common_json(&v, &test.replace('-', "_"), "client");
    assert_eq!(v["kind"], "bw");
    assert_eq!(v["params"]["iters"], 200);
    assert_eq!(v["params"]["size"], size);
    let r = &v["results"][0];
    assert_eq!((r["size"].as_f64(), r["iters"].as_u64()), (Some(size), Some(200)), "{r}");
    assert!(r["bw_avg"].as_f64().unwrap() > 0.0 && r["msg_rate_mpps"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(r["source"], "local");
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
}

fn lat_test(test: &str, size: f64, server_rows: bool) {
    let (s, c) = pair(test, &["-n", "200"], &["-n", "200", "--json"]);
    let sr = rows(&s.stdout);
    if server_rows {
        assert_eq!(sr.len(), 1, "{}", s.stdout);
        check_lat_row(&sr[0], size, 200.0);
    } else {
        // read/atomic_lat servers are passive: no header, no row, just the closing line.
        assert!(sr.is_empty() && !s.stdout.contains("#bytes"), "{}", s.stdout);
        assert!(s.stdout.trim_end().ends_with(RESULT_LINE));
    }
    let cr = rows(&c.stderr);
    assert_eq!(cr.len(), 1, "{}", c.stderr);
    check_lat_row(&cr[0], size, 200.0);
    let v = json(&c);
    check_common_json(&v, &test.replace('-', "_"), "client");
    assert_eq!(v["kind"], "lat");
    let r = &v["results"][0];
    assert_eq!(r["iters"], 200);
    for k in ["t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "p99_us", "p99_9_us"] {
        assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
    }
}

#[test]
fn write_bw() {
    bw_test("write-bw", 65536.0);
}

#[test]
fn read_bw() {
    bw_test("read-bw", 65536.0);
}

#[test]
fn send_bw() {
    bw_test("send-bw", 65536.0);
}

#[test]
fn atomic_bw_fetch_and_add() {
    bw_test("atomic-bw", 8.0);
}

#[test]
fn write_lat() {
    lat_test("write-lat", 2.0, true);
}

#[test]
fn read_lat() {
    lat_test("read-lat", 2.0, false);
}

#[test]
fn send_lat() {
    lat_test("send-lat", 2.0, true);
}

#[test]
fn atomic_lat_fetch_and_add() {
    lat_test("atomic-lat", 8.0, false);
}

#[test]
fn compare_and_swap_both_tests() {
    let (s, c) = pair(
        "atomic-bw",
        &["-n", "100", "-A", "CMP_AND_SWAP", "--json"],
        &["-n", "100", "-A", "CMP_AND_SWAP"],
    );
    assert!(c.stdout.contains("                    Atomic CMP_AND_SWAP BW Test\n"), "{}", c.stdout);
    check_bw_row(&rows(&c.stdout)[0], 8.0, 100.0, true);
    let v = json(&s);
    check_common_json(&v, "atomic_bw", "server");
    assert_eq!(v["params"]["atomic_type"], "CMP_AND_SWAP");
    assert_eq!(v["params"]["out_reads"], 128);
    assert_eq!(v["results"][0]["source"], "peer", "the server reports the client's numbers");

    let (_, c) =
        pair("atomic-lat", &["-n", "100", "-A", "CMP_AND_SWAP"], &["-n", "100", "-A", "CMP_AND_SWAP"]);
    assert!(c.stdout.contains("                    Atomic CMP_AND_SWAP Latency Test\n"), "{}", c.stdout);
    check_lat_row(&rows(&c.stdout)[0], 8.0, 100.0);
}

#[test]
fn report_layout_matches_perftest() {
    let (s, c) = pair("write-bw", &["-n", "50"], &["-n", "50"]);
    // The server's banner, then the test information block.
    assert!(s.stdout.starts_with(
        "\n************************************\n* Waiting for client to connect... *\n************************************\n"
    ));
    let info = [
        RESULT_LINE,
        "                    RDMA_Write BW Test",
        " Dual-port       : OFF\t\tDevice         : softroce0",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : OFF",
        " TX depth        : 50",
        " CQ Moderation   : 1",
        " Mtu             : 4096[B]",
        " Link type       : Ethernet",
        " GID index       : 1",
        " Max inline data : 0[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        RESULT_LINE,
    ];
    let lines: Vec<&str> = c.stdout.lines().collect();
    assert_eq!(&lines[..info.len()], &info[..], "{}", c.stdout);
    assert!(!s.stdout.contains(" TX depth"), "only the client shows the TX depth");
    // Address lines: perftest's %#0Nx formats and the GID in decimal.
    let local = lines[info.len()];
    let words: Vec<&str> = local.split(' ').collect();
    assert_eq!(&words[..5], &["", "local", "address:", "LID", "0000"], "{local}");
    assert_eq!((words[5], words[7], words[9], words[11]), ("QPN", "PSN", "RKey", "VAddr"), "{local}");
    assert_eq!(words[12].len(), 16, "VAddr %#016llx (the width includes 0x): {local}");
    assert!(lines[info.len() + 1].starts_with(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:"));
    assert!(lines[info.len() + 2].starts_with(" remote address: LID 0000 QPN "));
    assert_eq!(
        lines[info.len() + 5],
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    );
    assert!(lines[info.len() + 6].contains("\t\t   "), "perftest's tabs before the message rate");
    assert_eq!(lines.last(), Some(&RESULT_LINE));
}

#[test]
fn multiple_qps() {
    let (s, c) = pair("write-bw", &["-n", "100", "-q", "4"], &["-n", "100", "-q", "4", "--json"]);
    check_bw_row(&rows(&s.stdout)[0], 65536.0, 400.0, true);
    assert!(s.stdout.contains(" Number of qps   : 4\t\t"));
    assert_eq!(s.stdout.matches(" local address:").count(), 4);
    assert_eq!(s.stdout.matches(" remote address:").count(), 4);
    let v = json(&c);
    let qps = v["qps"].as_array().unwrap();
    assert_eq!(qps.len(), 4);
    // vaddr = buf[0] + (N + i) * BUFF_SIZE: consecutive QPs are one 64 KiB region apart.
    let vaddr = |i: usize| qps[i]["remote"]["vaddr"].as_u64().unwrap();
    assert_eq!(vaddr(1) - vaddr(0), 65536);
    assert_eq!(vaddr(3) - vaddr(0), 3 * 65536);
    assert_eq!(v["results"][0]["iters"], 400);
}

#[test]
fn all_sizes() {
    let (s, c) = pair("write-bw", &["-a", "-n", "5"], &["-a", "-n", "5"]);
    let cr = rows(&c.stdout);
    assert_eq!(cr.len(), 23, "{}", c.stdout);
    for (i, row) in cr.iter().enumerate() {
        if i < 10 {
            // Five tiny messages: on a loaded machine their average rounds to 0.00 MB/s.
            assert_eq!((row.len(), row[0], row[1]), (5, f64::from(2u32 << i), 5.0), "{row:?}");
        } else {
            check_bw_row(row, f64::from(2u32 << i), 5.0, true);
        }
    }
    // The server prints the report of the last size only.
    let sr = rows(&s.stdout);
    assert_eq!(sr, vec![cr[22].clone()]);
    // cq_mod stays 100 with -a, clamped to the (5) tx depth.
    assert!(c.stdout.contains(" CQ Moderation   : 5\n"));
}

#[test]
fn bidirectional_send_bw() {
    let (s, c) = pair("send-bw", &["-n", "100", "-b", "--json"], &["-n", "100", "-b", "--json"]);
    let (sr, cr) = (rows(&s.stderr), rows(&c.stderr));
    // Both sides print their own numbers plus the peer's: the same row.
    assert_eq!(sr.len(), 1);
    assert_eq!(sr, cr);
    check_bw_row(&sr[0], 65536.0, 100.0, true);
    assert!(s.stderr.contains("                    Send Bidirectional BW Test\n"));
    assert!(s.stderr.contains(" TX depth        : 100\n") && s.stderr.contains(" RX depth        : 100\n"));
    for v in [json(&s), json(&c)] {
        assert_eq!(v["results"][0]["source"], "combined");
        assert_eq!(v["params"]["duplex"], true);
    }
}

#[test]
fn duration_mode() {
    let (s, c) = pair("write-bw", &["-D", "1", "--json"], &["-D", "1"]);
    let cr = rows(&c.stdout);
    assert_eq!(cr.len(), 1);
    // -D: iterations counted in the measured second, no peak.
    assert!(cr[0][1] > 0.0 && cr[0][2] == 0.0 && cr[0][3] > 0.0, "{cr:?}");
    let v = json(&s);
    assert_eq!(v["params"]["duration_s"], 1);
    assert_eq!(v["params"]["iters"], Value::Null);
    assert_eq!(v["params"]["no_peak"], true);
    assert_eq!(v["results"][0]["iters"].as_f64(), Some(cr[0][1]));
    assert!(v["cpu"]["wall_seconds"].as_f64().unwrap() >= 1.0);
}

#[test]
fn client_without_server() {
    let n = net();
    let t0 = std::time::Instant::now();
    let out = single(&["write-bw", "-d", &n.client, "-p", &n.port, "--connect-timeout", "1", &n.server]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(t0.elapsed() >= std::time::Duration::from_millis(700), "retried for about 1 s: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.starts_with("softroce perf: cannot connect to"), "{out:?}");
    assert!(out.stderr.contains("start the server first") && out.stderr.contains("-p"), "{out:?}");
    assert!(out.stderr.contains("retried for 1 s") && out.stderr.contains("--connect-timeout"), "{out:?}");
}

#[test]
fn bad_flag_values() {
    let usage_errors: &[(&[&str], &str)] = &[
        (&["write-lat", "-q", "2", "127.0.0.1"], "Multiple QPs only available on bw tests"),
        (&["atomic-bw", "-s", "16", "127.0.0.1"], "Message size cannot be changed for Atomic tests"),
        (&["atomic-lat", "-a", "127.0.0.1"], "Atomic"),
        (&["send-bw", "-c", "UD", "-a"], "-a with -c UD"),
        (&["send-bw", "-c", "UC", "-R"], "rdma_cm connects RC and UD QPs only"),
        (&["read-bw", "-c", "UC"], "not possible in READ/ATOMIC verbs"),
        (&["write-bw", "-c", "UD"], "only possible in SEND verb"),
        (&["read-lat", "-n", "3"], "Iteration num should be between 5 and 100000000"),
        (&["write-bw", "-s", "0"], "Message Size should be between 1 and"),
        (&["atomic-bw", "-A", "SWAP"], "Invalid Atomic type"),
        (&["write-bw", "-e"], "Events feature not available on WRITE verb"),
        (&["send-lat", "-b"], "Bidirectional is only available in BW test"),
        (&["read-bw", "-I", "64"], "Inline feature not available on READ/Atomic verbs"),
        (&["write-bw", "-i", "2"], "single port"),
        (&["write-bw", "-D", "2", "-f", "1"], "DURATION > 2*MARGIN"),
        (&["write-bw", "-s", "-5"], "-s -5: Message Size should be between 1 and 2147483647"),
    ];
    for (args, want) in usage_errors {
        let out = single(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:?}");
        assert!(out.stderr.starts_with("softroce perf: ") && out.stderr.contains(want), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
    // Values clap rejects: its own message, the same exit code.
    for args in [&["write-bw", "-n", "abc"][..], &["write-bw", "--no-such-flag"]] {
        let out = single(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
    }
    // A GID index past the table is a setup error naming the valid range.
    let n = net();
    let out = single(&["write-bw", "-d", &n.client, "-x", "7", "-p", &n.port, &n.server]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("GID indexes 0..=1"), "{out:?}");
    // Every GID the device lists carries the test: index 0 too (on loopback, the device's own
    // address again; it was a link-local GID the device did not serve, refused here).
    pair("write-bw", &["-x", "0", "-n", "20"], &["-x", "0", "-n", "20"]);
}

/// `-R`: the parameter exchange over an rdma_cm connection and the test QPs connected by the
/// RDMA CM, between two softroce processes (Debian's perftest pairs are in
/// `abi/rdmacm/tests/debian.rs`).
#[test]
fn rdma_cm_mode() {
    for (test, args) in [
        ("write-bw", &["-R", "-n", "50", "-s", "4096"][..]),
        ("read-bw", &["-R", "-n", "50", "-s", "4096", "-q", "2"]),
        ("send-bw", &["-R", "-n", "50", "-s", "4096"]),
        ("send-lat", &["-R", "-n", "50"]),
        ("write-lat", &["-R", "-n", "50"]),
        ("atomic-lat", &["-R", "-n", "50"]),
        ("send-bw", &["-R", "-c", "UD", "-n", "50", "-s", "512"]),
        ("send-lat", &["-R", "-c", "UD", "-n", "50", "-s", "512"]),
    ] {
        let (s, c) = pair(test, args, args);
        for out in [&s, &c] {
            assert!(out.stdout.contains("Data ex. method : rdma_cm"), "{test} {args:?}: {out:?}");
        }
        let r = rows(&c.stdout);
        assert_eq!(r.len(), 1, "{test} {args:?}: {c:?}");
        let qps = if args.contains(&"-q") { 2.0 } else { 1.0 };
        assert_eq!(r[0][1], 50.0 * qps, "{test} {args:?}: {c:?}");
    }
}

/// `-c UD` over the TCP exchange: messages up to the MTU, larger ones lowered to it unless
/// `-s` asked for them.
#[test]
fn ud_send_tests() {
    for test in ["send-bw", "send-lat"] {
        let args = ["-c", "UD", "-n", "100", "-s", "1024"];
        let (s, c) = pair(test, &args, &args);
        for out in [&s, &c] {
            assert!(out.stdout.contains("Connection type : UD"), "{test}: {out:?}");
        }
        let r = rows(&c.stdout);
        assert_eq!((r.len(), r[0][0], r[0][1]), (1, 1024.0, 100.0), "{test}: {c:?}");
    }
    let (s, c) = pair("send-bw", &["-c", "UD", "-n", "50"], &["-c", "UD", "-n", "50"]);
    assert!(c.stderr.contains("Max msg size in UD is MTU"), "{c:?}");
    assert!(s.code == 0 && rows(&c.stdout)[0][0] <= 4096.0, "{c:?}");
    let (_, c) =
        pair_outcome("send-bw", &["-c", "UD", "-n", "50"], &["-c", "UD", "-n", "50", "-s", "65536"], None);
    assert!(c.stderr.contains("cannot be greater than MTU"), "{c:?}");
}

/// A scripted perftest server: checks our client's bytes against the spec (B3, trace D2) and
/// answers with a QP nobody serves, so the client's RDMA WRITEs are never acknowledged.
#[test]
fn client_bytes_and_retry_exceeded() {
    use std::io::Write;
    use std::net::TcpListener;
    let n = net();
    let listener = TcpListener::bind(format!("0.0.0.0:{}", n.port)).unwrap();
    // The fake QP lives on the (unused) server address: no device answers there.
    let ip: std::net::Ipv4Addr = n.server.parse().unwrap();
    let o = ip.octets();
    let fake_k = format!(
        "0000:0001:000011:a1b2c3:00001234:0000000000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:{:02x}:{:02x}:{:02x}:{:02x}:00000000:\0",
        o[0], o[1], o[2], o[3]
    );
    assert_eq!(fake_k.len(), 108);
    let peer = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut x = |reply: &[u8]| {
            let mut got = vec![0u8; reply.len()];
            s.read_exact(&mut got).unwrap();
            s.write_all(reply).unwrap();
            got
        };
        let v = x(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        let page = x(&[0, 0, 0x10, 0]);
        let line = x(&[0, 0, 0, 0x40]);
        let mtu = x(b"3\0"); // 1024: the client must use the smaller MTU
        let keys: Vec<Vec<u8>> = (0..3).map(|_| x(fake_k.as_bytes())).collect();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        (v, page, line, mtu, keys, rest)
    });
    let out = single(&["write-bw", "-d", &n.client, "-p", &n.port, "-n", "5", "-u", "8", "127.0.0.1"]);
    let (v, page, line, mtu, keys, rest) = peer.join().unwrap();
    assert_eq!(v, b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
    assert_eq!((page, line), (vec![0, 0, 0x10, 0], vec![0, 0, 0, 0x40]));
    assert_eq!(mtu, b"5\0", "loopback's active MTU is 4096");
    // K: %04x:%04x:%06x:%06x:%08x:%016llx: + 16 x %02x: + %08x: + NUL, the same all three times.
    let k = String::from_utf8(keys[0].clone()).unwrap();
    let fields: Vec<&str> = k.split(':').collect();
    let widths: Vec<usize> = fields.iter().map(|f| f.len()).collect();
    assert_eq!(widths, [[4, 4, 6, 6, 8, 16].as_slice(), &[2; 16], &[8, 1]].concat(), "{k:?}");
    assert_eq!((fields[0], fields[1]), ("0000", "0001"), "LID 0 and out_reads 1 for write tests");
    let cip: std::net::Ipv4Addr = n.client.parse().unwrap();
    let gid: Vec<String> = fields[6..22].iter().map(|s| s.to_string()).collect();
    let want: Vec<String> = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
        .iter()
        .chain(&cip.octets())
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(gid, want);
    assert_eq!(fields[22], "00000000");
    assert_eq!(fields[23], "\0");
    assert!(keys.iter().all(|x| x == &keys[0]));
    assert!(rest.is_empty(), "the client stops at the failure: {rest:?}");
    // The info block shows the negotiated MTU; the failure names the status and the remedy.
    assert!(out.stdout.contains(" Mtu             : 1024[B]\n"), "{out:?}");
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("IBV_WC_RETRY_EXC_ERR (status 12)"), "{out:?}");
    assert!(out.stderr.contains("reachable"), "{out:?}");
}

/// A peer that is not perftest 5.70+: a clear side-channel error.
#[test]
fn incompatible_version() {
    use std::io::Write;
    use std::net::TcpListener;
    let n = net();
    let listener = TcpListener::bind(format!("0.0.0.0:{}", n.port)).unwrap();
    let peer = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut v = [0u8; 16];
        s.read_exact(&mut v).unwrap();
        s.write_all(b"5.60\0\0\0\0\0\0\0\0\0\0\0\0").unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let out = single(&["send-lat", "-d", &n.client, "-p", &n.port, "127.0.0.1"]);
    peer.join().unwrap();
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("not perftest 5.70+ compatible (sent version \"5.60\")"), "{out:?}");
}

/// A server nobody connects to gives up after --peer-timeout, with exit 3.
#[test]
fn server_without_client_gives_up() {
    let n = net();
    let t0 = Instant::now();
    let out = single(&["write-bw", "-d", &n.server, "-p", &n.port, "--peer-timeout", "1"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(out.stderr.contains("no client connected") && out.stderr.contains("--peer-timeout"), "{out:?}");
}

/// A client killed in the middle of a run: the server notices the closed side channel at once
/// (not after --peer-timeout), both while it waits on the channel (write-bw) and while it
/// waits for completions (send-bw).
#[test]
fn peer_killed_mid_run_ends_the_server() {
    for test in ["write-bw", "send-bw"] {
        let t0 = Instant::now();
        let (s, _) = pair_outcome(test, &["-D", "30"], &["-D", "30"], Some(Duration::from_secs(2)));
        assert_eq!(s.code, 3, "{test}: {s:?}");
        assert!(t0.elapsed() < Duration::from_secs(15), "{test}: took {:?}", t0.elapsed());
        assert!(s.stderr.contains("closed") && s.stderr.contains("exited or was stopped"), "{test}: {s:?}");
    }
}

/// A send-bw server whose client sends fewer messages than it expects (here: a smaller -n;
/// over a lossy path: lost UC messages) reports what arrived once the client has finished,
/// with exit 1, instead of waiting forever; the client is not disturbed.
#[test]
fn receiver_short_of_messages_reports_instead_of_hanging() {
    for conn in ["RC", "UC"] {
        let t0 = Instant::now();
        let (s, c) = pair_outcome("send-bw", &["-c", conn, "-n", "40"], &["-c", conn, "-n", "25"], None);
        assert_eq!(c.code, 0, "{conn} client: {c:?}\nserver: {s:?}");
        assert_eq!(s.code, 1, "{conn} server: {s:?}");
        assert!(t0.elapsed() < Duration::from_secs(15), "{conn}: took {:?}", t0.elapsed());
        assert!(s.stderr.contains("received 25 of 40 messages, 15 missing"), "{conn}: {s:?}");
        if conn == "UC" {
            assert!(s.stderr.contains("UC does not retransmit"), "{s:?}");
        }
        // The report row counts what arrived.
        let r = rows(&s.stdout);
        assert_eq!(r.len(), 1, "{s:?}");
        assert_eq!((r[0][0], r[0][1]), (65536.0, 25.0), "{s:?}");
    }
}
