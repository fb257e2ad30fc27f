//! `softroce {rc,uc,ud,srq}-pingpong`, `devinfo` and `counters` between processes on loopback.

mod common;

use std::process::{Command, Output, Stdio};

fn softroce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softroce"))
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// A TCP port per call, distinct across parallel tests.
fn port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static N: AtomicU16 = AtomicU16::new(0);
    30000 + (std::process::id() % 5000) as u16 * 4 + N.fetch_add(1, Ordering::Relaxed) % 4
}

fn pingpong(extra: &[&str], run_dir: &std::path::Path) -> (Output, Output) {
    pingpong_tool("rc-pingpong", extra, run_dir)
}

fn pingpong_tool(tool: &str, extra: &[&str], run_dir: &std::path::Path) -> (Output, Output) {
    let (s, c) = (common::verbs::loopback_ip(), common::verbs::loopback_ip());
    let p = port().to_string();
    let server = softroce()
        .args([tool, "-d", &s, "-p", &p])
        .args(extra)
        .env("SOFTROCE_RUN_DIR", run_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let client = softroce()
        .args([tool, "-d", &c, "-p", &p])
        .args(extra)
        .arg(&s)
        .env("SOFTROCE_RUN_DIR", run_dir)
        .output()
        .unwrap();
    (server.wait_with_output().unwrap(), client)
}

#[test]
fn rc_pingpong_pairs_and_prints_rdma_core_lines() {
    let dir = std::env::temp_dir().join(format!("sr-cli-{}", std::process::id()));
    for extra in [
        vec!["-n", "200"],
        vec!["-n", "50", "-s", "65536", "-m", "4096", "-c", "-g", "1"],
        vec!["-n", "100", "-s", "1", "-e", "--cpu"],
    ] {
        let (s, c) = pingpong(&extra, &dir);
        assert!(
            c.status.success() && s.status.success(),
            "{extra:?}\nclient:\n{}\nserver:\n{}",
            text(&c),
            text(&s)
        );
        let n: u64 = extra[1].parse().unwrap();
        let size: u64 = extra.iter().position(|x| *x == "-s").map_or(4096, |i| extra[i + 1].parse().unwrap());
        for out in [text(&s), text(&c)] {
            let lines: Vec<&str> = out.lines().collect();
            assert!(lines[0].starts_with("  local address:  LID 0x0000, QPN 0x"), "{out}");
            assert!(lines[0].contains(", GID ::ffff:127."), "{out}");
            assert!(lines[1].starts_with("  remote address: LID 0x0000, QPN 0x"), "{out}");
            assert!(
                lines[2].starts_with(&format!("{} bytes in ", 2 * n * size))
                    && lines[2].ends_with(" Mbit/sec"),
                "{out}"
            );
            assert!(
                lines[3].starts_with(&format!("{n} iters in ")) && lines[3].ends_with(" usec/iter"),
                "{out}"
            );
            assert!(!out.contains("invalid data"), "{out}");
        }
        if extra.contains(&"--cpu") {
            assert!(text(&c).contains("CPU time "), "{}", text(&c));
        }
    }
    // Both devices published their counters; `counters --all --json` reads them.
    let o = softroce().args(["counters", "--all", "--json"]).env("SOFTROCE_RUN_DIR", &dir).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devs = v.as_array().unwrap();
    assert!(devs.len() >= 6, "{devs:?}");
    for d in devs {
        assert_eq!(d["state"], "exited");
        assert!(d["counters"]["sent_pkts"].as_u64().unwrap() > 0, "{d}");
        assert!(d["counters"]["rdma_recvs"].as_u64().unwrap() >= 50, "{d}");
        assert_eq!(d["counters"]["rcvd_icrc_err"], 0);
    }
    // No running device: said on stderr, and not an error.
    let o = softroce().args(["counters"]).env("SOFTROCE_RUN_DIR", &dir).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "no running device: {}", text(&o));
    assert!(o.stdout.is_empty() && text(&o).contains("no running softroce device"), "{}", text(&o));
    let o = softroce().args(["counters", "--json"]).env("SOFTROCE_RUN_DIR", &dir).output().unwrap();
    assert_eq!((o.status.code(), o.stdout.as_slice()), (Some(0), &b"[]\n"[..]), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn uc_ud_srq_pingpong_pair_and_print_rdma_core_lines() {
    let dir = std::env::temp_dir().join(format!("sr-cli-x-{}", std::process::id()));
    for (tool, extra, qps, size) in [
        ("uc-pingpong", vec!["-n", "100", "-s", "20000", "-c"], 1, 20000u64),
        ("ud-pingpong", vec!["-n", "100", "-c"], 1, 1024),
        ("ud-pingpong", vec!["-n", "50", "-s", "16", "-e"], 1, 16),
        ("srq-pingpong", vec!["-n", "300", "-q", "5", "-c"], 5, 4096),
    ] {
        let (s, c) = pingpong_tool(tool, &extra, &dir);
        assert!(
            c.status.success() && s.status.success(),
            "{tool} {extra:?}\nclient:\n{}\nserver:\n{}",
            text(&c),
            text(&s)
        );
        let n: u64 = extra[1].parse().unwrap();
        for out in [text(&s), text(&c)] {
            let lines: Vec<&str> = out.lines().collect();
            let sep = if tool == "ud-pingpong" { ": GID" } else { ", GID" };
            for l in &lines[..qps] {
                assert!(l.starts_with("  local address:  LID 0x0000, QPN 0x") && l.contains(sep), "{out}");
            }
            for l in &lines[qps..2 * qps] {
                assert!(l.starts_with("  remote address: LID 0x0000, QPN 0x"), "{out}");
            }
            assert!(lines[2 * qps].starts_with(&format!("{} bytes in ", 2 * n * size)), "{out}");
            assert!(lines[2 * qps + 1].starts_with(&format!("{n} iters in ")), "{out}");
            assert!(!out.contains("invalid data"), "{out}");
        }
    }
    // UD: the message must fit the port's MTU (loopback: 4096).
    let ip = common::verbs::loopback_ip();
    let o = softroce().args(["ud-pingpong", "-d", &ip, "-s", "8192", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("Requested size larger than port MTU (4096)"), "{}", text(&o));
    let o = softroce().args(["srq-pingpong", "-d", &ip, "-q", "600", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rc_pingpong_errors_are_one_line_with_exit_codes() {
    let ip = common::verbs::loopback_ip();
    // No server, and no retry: refused at once.
    let o = softroce()
        .args(["rc-pingpong", "-d", &ip, "-p", &port().to_string(), "--connect-timeout", "0", "127.0.0.1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("Couldn't connect to 127.0.0.1:") && text(&o).contains("start the server first"),
        "{}",
        text(&o)
    );
    let o = softroce().args(["rc-pingpong", "-m", "1000", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = softroce().args(["rc-pingpong", "-d", "192.0.2.250", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("no local network interface has address 192.0.2.250"), "{}", text(&o));
    let o = softroce().args(["rc-pingpong", "-d", "rxe0", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert!(text(&o).contains("named by the local IP address or network interface"), "{}", text(&o));
    let o = softroce().args(["rc-pingpong", "-d", &ip, "-g", "7", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert!(text(&o).contains("GID index 7 is out of range"), "{}", text(&o));
    let o = softroce().args(["rc-pingpong", "--help"]).output().unwrap();
    assert!(text(&o).contains("[ibv_rc_pingpong -s]"), "--help names the matching flag");
}

#[test]
fn devinfo_shows_port_and_gid_table() {
    let o = softroce().args(["devinfo", "-v", "-d", "127.0.0.1"]).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "hca_id:\tsoftroce0",
        "state:\t\t\tPORT_ACTIVE (4)",
        "max_mtu:\t\t4096 (5)",
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
        "GID[  1]:\t\t0000:0000:0000:0000:0000:ffff:7f00:0001, RoCE v2",
        "max_qp_rd_atom:",
    ] {
        assert!(t.contains(want), "{want:?} missing in\n{t}");
    }
}

#[test]
fn json_outputs_parse() {
    let o = softroce().args(["devinfo", "-d", "127.0.0.1", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["hca_id"], "softroce0");
    assert_eq!(v["port"]["state"], "PORT_ACTIVE");
    assert_eq!(v["port"]["active_mtu"], 4096);
    assert_eq!(v["gids"][1]["gid"], "0000:0000:0000:0000:0000:ffff:7f00:0001");
    assert!(v["limits"]["max_qp"].as_u64().unwrap() > 0);

    let dir = std::env::temp_dir().join(format!("sr-cli-json-{}", std::process::id()));
    let (s, c) = pingpong(&["-n", "40", "-s", "8192", "-c", "--json"], &dir);
    assert!(s.status.success() && c.status.success(), "{}\n{}", text(&s), text(&c));
    let sv: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    let cv: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap();
    assert_eq!(sv["role"], "server");
    assert_eq!(cv["role"], "client");
    assert_eq!(sv["local"], cv["remote"]);
    assert_eq!(sv["remote"], cv["local"]);
    assert_eq!(cv["bytes"], 2 * 40 * 8192);
    assert_eq!(sv["data_check"], "ok");
    assert!(cv["usec_per_iter"].as_f64().unwrap() > 0.0);
    // The rdma-core lines moved to stderr.
    assert!(String::from_utf8_lossy(&c.stderr).contains("iters in"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--backend raw` without CAP_NET_RAW: one line naming the capability, exit 4 (local setup).
/// Needs root to drop to an unprivileged user with `setpriv`.
#[test]
#[ignore = "needs root and setpriv (util-linux): run with `cargo test --test cli_tools -- --ignored raw_backend` as root, as .ci/run does"]
fn raw_backend_without_cap_net_raw_says_so() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    assert!(root, "this test needs root (it drops to an unprivileged user with setpriv)");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_softroce"))
        .args(["rc-pingpong", "--backend", "raw", "-d", "127.0.0.1", "-n", "1"])
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(4), "{t}");
    assert!(t.contains("CAP_NET_RAW") && t.lines().count() == 1, "{t}");
}

/// Every wait for the peer is bounded, with one line and exit 3; sizes past the device's limits
/// are refused before anything is allocated (exit 2); a TCP port in use is local setup (exit 4).
#[test]
fn pingpong_waits_are_bounded_and_limits_checked_first() {
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};
    let ip = common::verbs::loopback_ip();
    // A server nobody connects to.
    let t0 = Instant::now();
    let p = port().to_string();
    let o = softroce().args(["rc-pingpong", "-d", &ip, "-p", &p, "--peer-timeout", "1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("no client connected") && t0.elapsed() < Duration::from_secs(10),
        "{}",
        text(&o)
    );
    // A server that accepts and says nothing.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port().to_string();
    let silent = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    });
    let o = softroce()
        .args(["rc-pingpong", "-d", &ip, "-p", &p, "--peer-timeout", "1", "127.0.0.1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("silent for 1 s"), "{}", text(&o));
    silent.join().unwrap();
    // A server that accepts, reads the client's record and closes.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port().to_string();
    let closer = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut rec = [0u8; 52];
        s.read_exact(&mut rec).unwrap();
    });
    let o = softroce().args(["rc-pingpong", "-d", &ip, "-p", &p, "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("exited or was stopped"), "{}", text(&o));
    closer.join().unwrap();
    // A port in use.
    let l = TcpListener::bind("0.0.0.0:0").unwrap();
    let p = l.local_addr().unwrap().port().to_string();
    let o = softroce().args(["rc-pingpong", "-d", &ip, "-p", &p]).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("Couldn't listen to port"), "{}", text(&o));
    drop(l);
    // Sizes: refused at once, with perf's message.
    for tool in ["rc-pingpong", "uc-pingpong", "ud-pingpong", "srq-pingpong"] {
        for bad in ["4294967295", "-5", "3G"] {
            let t0 = Instant::now();
            let o = softroce().args([tool, "-d", &ip, "-s", bad, "127.0.0.1"]).output().unwrap();
            assert_eq!(o.status.code(), Some(2), "{tool} -s {bad}: {}", text(&o));
            assert!(
                text(&o).contains(&format!("-s {bad}: Message Size should be between")),
                "{tool}: {}",
                text(&o)
            );
            assert!(t0.elapsed() < Duration::from_secs(3), "{tool} -s {bad}");
        }
        let o = softroce().args([tool, "-d", &ip, "-r", "100000", "127.0.0.1"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{tool} -r: {}", text(&o));
        assert!(text(&o).contains("-r 100000: rx_depth should be between 1 and"), "{}", text(&o));
    }
}

/// Every tool's `--help` ends with the same exit-code table.
#[test]
fn every_help_shows_the_exit_code_table() {
    let table = "Exit codes (all softroce tools):";
    for args in [
        &["--help"][..],
        &["rc-pingpong", "--help"],
        &["uc-pingpong", "--help"],
        &["ud-pingpong", "--help"],
        &["srq-pingpong", "--help"],
        &["perf", "write-bw", "--help"],
        &["perf", "send-lat", "--help"],
        &["devinfo", "--help"],
        &["counters", "--help"],
        &["dump", "--help"],
    ] {
        let o = softroce().args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        let t = text(&o);
        assert!(t.contains(table) && t.contains("  4  local setup"), "{args:?}:\n{t}");
    }
    // The waits are documented where they apply.
    let t = text(&softroce().args(["rc-pingpong", "--help"]).output().unwrap());
    assert!(t.contains("--connect-timeout") && t.contains("--peer-timeout"), "{t}");
}

/// A reader that stops early (`softroce counters --all | head -3`) ends the tool quietly, as it
/// ends `cat`: no panic message about a broken pipe, status 0 (what `dump` already did).
#[test]
fn a_closed_stdout_ends_the_tool_quietly() {
    for args in [&["devinfo", "-d", "127.0.0.1"][..], &["dump", "-v", "tests/data/read_8k.pcap"], &["--help"]]
    {
        // A pipe whose reader is gone before the tool starts: every write fails with EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = softroce().args(args).stdout(writer).stderr(Stdio::piped()).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {:?} {err}", o.status);
    }
}

/// `softroce udaddy` against itself on loopback: SIDR, then 20 datagrams each way on each of
/// two connections, udaddy's lines and return status; a client nobody listens for ends at once
/// with UNREACHABLE, error 1 (SIDR status: no listener).
#[test]
fn udaddy_pairs_and_prints_udaddys_lines() {
    let (s, c) = (common::verbs::loopback_ip(), common::verbs::loopback_ip());
    let server = softroce()
        .args(["udaddy", "-b", &s, "-c", "2", "-C", "20", "-S", "512"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let client =
        softroce().args(["udaddy", "-s", &s, "-b", &c, "-c", "2", "-C", "20", "-S", "512"]).output().unwrap();
    let server = server.wait_with_output().unwrap();
    let (st, ct) = (text(&server), text(&client));
    assert!(server.status.success() && client.status.success(), "{st}\n{ct}");
    assert_eq!(
        st,
        "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\n\
         test complete\nreturn status 0\n"
    );
    assert_eq!(
        ct,
        "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n\
         data transfers complete\ntest complete\nreturn status 0\n"
    );
    // A device at the address, nobody listening on the port.
    let idle = softroce()
        .args(["udaddy", "-b", &s, "--port", "7175", "-C", "0", "--timeout", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    let refused = softroce().args(["udaddy", "-s", &s, "-b", &c]).output().unwrap();
    let rt = text(&refused);
    assert!(rt.contains("udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\n"), "{rt}");
    assert!(rt.ends_with("return status 1\n"), "{rt}");
    assert_eq!(refused.status.code(), Some(1));
    assert!(t0.elapsed() < std::time::Duration::from_secs(3));
    let mut idle = idle;
    let _ = idle.kill();
    let _ = idle.wait();
    // udaddy's own reject: a server whose messages exceed the MTU fails every request
    // (rdma_reject): the client's UNREACHABLE, error 2 (SIDR status: rejected).
    let server = softroce().args(["udaddy", "-b", &s, "-S", "5000"]).stdout(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let rejected = softroce().args(["udaddy", "-s", &s, "-b", &c]).output().unwrap();
    let server = server.wait_with_output().unwrap();
    let (st, rt) = (text(&server), text(&rejected));
    assert!(st.contains("udaddy: failing connection request\n") && server.status.success(), "{st}");
    assert!(rt.contains("udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 2\n"), "{rt}");
    assert_eq!(rejected.status.code(), Some(2));
}

/// `softroce ucmatose` against itself on loopback: two RC connections, 10 messages each way,
/// the server disconnects; ucmatose's lines and return status.
#[test]
fn ucmatose_pairs_and_the_server_disconnects() {
    let (s, c) = (common::verbs::loopback_ip(), common::verbs::loopback_ip());
    let server = softroce()
        .args(["ucmatose", "-b", &s, "-c", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let client = softroce().args(["ucmatose", "-s", &s, "-b", &c, "-c", "2"]).output().unwrap();
    let server = server.wait_with_output().unwrap();
    let (st, ct) = (text(&server), text(&client));
    assert!(server.status.success() && client.status.success(), "{st}\n{ct}");
    assert_eq!(
        st,
        "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n\
         data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
    );
    assert_eq!(
        ct,
        "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n\
         data transfers complete\ntest complete\nreturn status 0\n"
    );
}

/// The summary line `--faults` prints at the end of a tool, exactly once.
fn fault_summary(o: &Output) -> String {
    let t = text(o);
    let mut lines = t.lines().filter(|l| l.starts_with("softroce faults: "));
    let first = lines.next().unwrap_or_else(|| panic!("no summary line:\n{t}")).to_string();
    assert!(lines.next().is_none(), "one summary line:\n{t}");
    first
}

#[test]
fn rc_pingpong_under_faults_prints_the_same_summary_each_run() {
    let dir = std::env::temp_dir().join(format!("sr-cli-faults-{}", std::process::id()));
    let args = ["--faults", "seed=3,loss=5%", "-n", "200", "-s", "1024", "-c"];
    let same = common::two_agree(|_| {
        let (s, c) = pingpong(&args, &dir);
        assert!(s.status.success() && c.status.success(), "client:\n{}\nserver:\n{}", text(&c), text(&s));
        (fault_summary(&s), fault_summary(&c))
    });
    assert!(
        same.0.starts_with("softroce faults: seed=3 dropped=") && !same.0.contains("dropped=0 "),
        "{same:?}"
    );
    // The counters file of an ended device lists the faults too.
    let o = softroce().args(["counters", "--all"]).env("SOFTROCE_RUN_DIR", &dir).output().unwrap();
    assert!(text(&o).contains("fault_dropped"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_fault_spec_is_a_usage_error_naming_the_item() {
    // `--faults` goes before the tool or after it.
    let o =
        softroce().args(["--faults", "seed=1,loss=2", "rc-pingpong", "-d", "127.0.0.1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("bad fault spec item \"loss=2\""), "{}", text(&o));
    let o = softroce()
        .args(["rc-pingpong", "-d", &common::verbs::loopback_ip(), "-n", "1"])
        .env("SOFTROCE_FAULTS", "delay=5")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("SOFTROCE_FAULTS: bad fault spec item \"delay=5\""), "{}", text(&o));
}
