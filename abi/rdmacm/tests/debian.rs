//! Debian's unmodified rdma_cm programs on softroce, two processes on loopback, each with our
//! `libibverbs.so.1` + `librdmacm.so.1` and a loopback address of its own: rping (several
//! sizes, `-V`, `-C 1000`), ucmatose (several connections), udaddy (UD through SIDR, also
//! against the native `softroce udaddy`), rdma_server/rdma_client (the
//! synchronous `rdma_create_ep` API), perftest `-R` (send/write/read bandwidth, send/write
//! latency), and REJECTED for a port nobody listens on. About 10 s in all on an idle machine.

mod common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

fn have(test: &str, progs: &[&str]) -> bool {
    let mut paths = vec![SYSTEM_LIB];
    paths.extend_from_slice(progs);
    require(test, &paths, "rdmacm-utils perftest")
}

fn rping(tag: &str, extra: &[&str]) -> (String, String) {
    let port = port();
    pair(
        tag,
        "/usr/bin/rping",
        |ip| {
            let mut a = args(&["-s", "-a", ip, "-p", &port]);
            a.extend(args(extra));
            a
        },
        |ip| {
            let mut a = args(&["-c", "-a", ip, "-p", &port]);
            a.extend(args(extra));
            a
        },
        LIMIT,
    )
}

#[test]
fn rping_verbose_sizes() {
    if !have("rping_verbose_sizes", &["/usr/bin/rping"]) {
        return;
    }
    for size in ["64", "1024", "4000"] {
        let (s, c) = rping(&format!("rping{size}"), &["-v", "-C", "5", "-S", size]);
        assert_eq!(c.matches("ping data: rdma-ping-").count(), 5, "client {size}:\n{c}");
        assert_eq!(s.matches("server ping data: rdma-ping-").count(), 5, "server {size}:\n{s}");
        assert!(s.contains("DISCONNECT EVENT"), "the server sees the client's disconnect:\n{s}");
    }
}

#[test]
fn rping_validate_1000() {
    if !have("rping_validate_1000", &["/usr/bin/rping"]) {
        return;
    }
    // -V: the client checks every echoed buffer; a mismatch fails the run.
    let (_, c) = rping("rpingV", &["-V", "-C", "1000", "-S", "512"]);
    assert!(!c.contains("data mismatch"), "{c}");
    // The largest buffer rping takes.
    let (_, c) = rping("rping64k", &["-V", "-C", "20", "-S", "65000"]);
    assert!(!c.contains("data mismatch"), "{c}");
}

/// `rping -q` on both sides: each creates its own QP, moves it with `rdma_init_qp_attr` and
/// passes its number in the connection parameters (issue 25 item 5; the server's
/// `rdma_init_qp_attr` for INIT after CONNECT_REQUEST was `EINVAL`).
#[test]
fn rping_with_self_created_qps() {
    if !have("rping_with_self_created_qps", &["/usr/bin/rping"]) {
        return;
    }
    let (s, c) = rping("rpingq", &["-q", "-v", "-V", "-C", "10"]);
    assert_eq!(c.matches("ping data: rdma-ping-").count(), 10, "client:\n{c}");
    assert_eq!(s.matches("server ping data: rdma-ping-").count(), 10, "server:\n{s}");
}

/// Debian's `cmtime`: 50 connections set up and torn down between two processes, each step
/// timed (the client exits non-zero if any step fails; the server serves until killed).
#[test]
fn cmtime_connections() {
    if !have("cmtime_connections", &["/usr/bin/cmtime"]) {
        return;
    }
    let dir = lib_dir("cmtime");
    let (sip, cip, port) = (addr(), addr(), port());
    let srv = spawn(&dir, &sip, "/usr/bin/cmtime", &["-b", &sip, "-p", &port]);
    let t = std::time::Instant::now();
    while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    let (cok, c) =
        finish(spawn(&dir, &cip, "/usr/bin/cmtime", &["-s", &sip, "-p", &port, "-c", "50"]), LIMIT);
    let (_, sout) = finish(srv, Duration::from_millis(100));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cok, "client:\n{c}\n--- server:\n{sout}");
    for step in
        ["create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"]
    {
        assert!(c.lines().any(|l| l.starts_with(step)), "no {step} line:\n{c}");
    }
}

#[test]
fn ucmatose_several_connections() {
    if !have("ucmatose_several_connections", &["/usr/bin/ucmatose"]) {
        return;
    }
    let port = port();
    let (s, c) = pair(
        "ucmatose",
        "/usr/bin/ucmatose",
        |ip| args(&["-b", ip, "-p", &port, "-c", "4", "-C", "20", "-S", "1000"]),
        |ip| args(&["-s", ip, "-p", &port, "-c", "4", "-C", "20", "-S", "1000"]),
        LIMIT,
    );
    for out in [&s, &c] {
        assert!(out.contains("data transfers complete") && out.contains("test complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
}

#[test]
fn rdma_server_and_client() {
    if !have("rdma_server_and_client", &["/usr/bin/rdma_server", "/usr/bin/rdma_client"]) {
        return;
    }
    // Synchronous ids from rdma_getaddrinfo + rdma_create_ep, the rdma_verbs.h inlines
    // (rdma_reg_msgs, rdma_post_recv/send, rdma_get_send/recv_comp on the CQs rdma_create_qp
    // made), rdma_get_request. One program per role, so run them as two.
    let dir = lib_dir("ep");
    let (sip, cip, port) = (addr(), addr(), port());
    let srv = spawn(&dir, &sip, "/usr/bin/rdma_server", &["-s", &sip, "-p", &port]);
    let t = std::time::Instant::now();
    while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    let (cok, cout) = finish(spawn(&dir, &cip, "/usr/bin/rdma_client", &["-s", &sip, "-p", &port]), LIMIT);
    let (sok, sout) = finish(srv, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        cok && sok && cout.contains("end 0") && sout.contains("end 0"),
        "server:\n{sout}\nclient:\n{cout}"
    );
}

/// One perftest pair at a time: the bandwidth tests send in bursts, and on a loaded machine a
/// starved receiver drops datagrams; rdma_cm's QPs then wait the CM's ACK timeout (19:
/// 2.1 s, as kernel rxe's) before each retransmission. `-F`: a loaded machine can make
/// perftest's CPU-frequency estimate fail its r² check ("Can't produce a report"), and the
/// client then exits with its server waiting for it; with `-F` perftest reads the frequency
/// from /proc/cpuinfo instead.
static PERFTEST: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn perftest(prog: &str, extra: &[&str]) {
    let path = format!("/usr/bin/{prog}");
    if !have(prog, &[&path]) {
        return;
    }
    let _one = PERFTEST.lock().unwrap_or_else(|e| e.into_inner());
    let port = port();
    let (s, c) = pair(
        prog,
        &path,
        |_| {
            let mut a = args(&["-R", "-F", "-d", "softroce0", "-p", &port]);
            a.extend(args(extra));
            a
        },
        |ip| {
            let mut a = args(&["-R", "-F", "-d", "softroce0", "-p", &port]);
            a.extend(args(extra));
            a.push(ip.to_string());
            a
        },
        LIMIT,
    );
    for out in [&s, &c] {
        assert!(out.contains("rdma_cm QPs\t : ON") && out.contains("Data ex. method : rdma_cm"), "{out}");
    }
    // The result line: the message size first.
    let sizes = c.lines().filter(|l| l.trim_start().starts_with(|ch: char| ch.is_ascii_digit())).count();
    assert!(sizes >= 1, "no result line:\n{c}");
}

#[test]
fn perftest_send_bw() {
    perftest("ib_send_bw", &["-n", "200", "-s", "8192"]);
}

#[test]
fn perftest_write_bw() {
    perftest("ib_write_bw", &["-n", "200", "-s", "8192"]);
}

#[test]
fn perftest_read_bw() {
    perftest("ib_read_bw", &["-n", "200", "-s", "8192"]);
}

#[test]
fn perftest_send_lat() {
    perftest("ib_send_lat", &["-n", "200"]);
}

#[test]
fn perftest_write_lat() {
    perftest("ib_write_lat", &["-n", "200"]);
}

#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected() {
    if !have("rping_to_a_port_nobody_listens_on_is_rejected", &["/usr/bin/rping"]) {
        return;
    }
    // A device up on the server address with no listener: the IB CM answers the REQ with a
    // REJ, reason 8 (invalid service ID), which librdmacm reports as REJECTED, status 8.
    let dir = lib_dir("rej");
    let (sip, cip, port) = (addr(), addr(), port());
    // Something must own the server address: an rping server on another port.
    let other = (port.parse::<u32>().unwrap() + 1).to_string();
    let srv = spawn(&dir, &sip, "/usr/bin/rping", &["-s", "-a", &sip, "-p", &other]);
    let t = std::time::Instant::now();
    while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (ok, out) =
        finish(spawn(&dir, &cip, "/usr/bin/rping", &["-c", "-a", &sip, "-p", &port, "-C", "1"]), LIMIT);
    let mut srv = srv;
    let _ = srv.kill();
    let _ = srv.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!ok, "{out}");
    assert!(out.contains("RDMA_CM_EVENT_REJECTED, error 8"), "{out}");
}

#[test]
fn a_listener_bound_to_a_loopback_address_listens_on_every_device() {
    if !have("a_listener_bound_to_a_loopback_address_listens_on_every_device", &["/usr/bin/rping"]) {
        return;
    }
    // As Linux (cma_any_addr): binding 127.0.0.1 binds to no device, and the listen takes
    // requests on every device, to any of its addresses. The server's one device is another
    // address (no loopback device listed): the bind used to fail with EADDRNOTAVAIL, which is
    // where libfabric's verbs provider stopped (it binds "localhost" to find the devices).
    let dir = lib_dir("lo_any");
    let (sip, cip, port) = (addr(), addr(), port());
    let srv = spawn(&dir, &sip, "/usr/bin/rping", &["-s", "-a", "127.0.0.1", "-p", &port, "-C", "10", "-V"]);
    let t = std::time::Instant::now();
    while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    let cli = spawn(&dir, &cip, "/usr/bin/rping", &["-c", "-a", &sip, "-p", &port, "-C", "10", "-V"]);
    let (cok, cout) = finish(cli, LIMIT);
    let (sok, sout) = finish(srv, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cok && sok, "--- server:\n{sout}\n--- client:\n{cout}");
}

/// Debian's rping through our librdmacm against the native `softroce rping` (the Rust RDMA
/// CM, no C library), both roles.
#[test]
fn rping_pairs_with_native_softroce_rping() {
    if !have("rping_pairs_with_native_softroce_rping", &["/usr/bin/rping"]) {
        return;
    }
    let native = softroce_bin();
    let dir = lib_dir("cross");
    for debian_server in [true, false] {
        let (sip, cip, port) = (addr(), addr(), port());
        let common = ["-p", &port, "-C", "50", "-S", "1000", "-V"];
        let srv = if debian_server {
            let mut a = vec!["-s", "-a", &sip];
            a.extend_from_slice(&common);
            spawn(&dir, &sip, "/usr/bin/rping", &a)
        } else {
            let mut a = vec!["rping", "-s", "-a", &sip];
            a.extend_from_slice(&common);
            spawn(&dir, &sip, native.to_str().unwrap(), &a)
        };
        let t = std::time::Instant::now();
        while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let cli = if debian_server {
            let mut a = vec!["rping", "-c", "-a", &sip, "-I", &cip];
            a.extend_from_slice(&common);
            spawn(&dir, &cip, native.to_str().unwrap(), &a)
        } else {
            let mut a = vec!["-c", "-a", &sip];
            a.extend_from_slice(&common);
            spawn(&dir, &cip, "/usr/bin/rping", &a)
        };
        let (cok, cout) = finish(cli, LIMIT);
        let (sok, sout) = finish(srv, Duration::from_secs(10));
        assert!(cok && sok, "debian server: {debian_server}\n--- server:\n{sout}\n--- client:\n{cout}");
        assert!(sout.contains("DISCONNECT EVENT"), "{sout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Debian's perftest through our libraries against the native `softroce perf` (the Rust
/// RDMA CM for `-R`, our verbs for the TCP exchange), in both roles: `extra` goes to both.
fn perf_native(prog: &str, extra: &[&str]) {
    let path = format!("/usr/bin/{prog}");
    if !have(prog, &[&path]) {
        return;
    }
    let _one = PERFTEST.lock().unwrap_or_else(|e| e.into_inner());
    let native = softroce_bin();
    let native = native.to_str().unwrap();
    let sub = prog.trim_start_matches("ib_").replace('_', "-");
    let dir = lib_dir(&format!("native-{prog}"));
    for debian_server in [true, false] {
        let (sip, cip, port) = (addr(), addr(), port());
        let mut common: Vec<&str> = vec!["-p", &port];
        common.extend_from_slice(extra);
        let srv = if debian_server {
            let mut a = vec!["-F", "-d", "softroce0"];
            a.extend_from_slice(&common);
            spawn(&dir, &sip, &path, &a)
        } else {
            let mut a = vec!["perf", sub.as_str(), "-d", &sip];
            a.extend_from_slice(&common);
            spawn(&dir, &sip, native, &a)
        };
        let t = std::time::Instant::now();
        while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        let cli = if debian_server {
            let mut a = vec!["perf", sub.as_str(), "-d", &cip];
            a.extend_from_slice(&common);
            a.push(&sip);
            spawn(&dir, &cip, native, &a)
        } else {
            let mut a = vec!["-F", "-d", "softroce0"];
            a.extend_from_slice(&common);
            a.push(&sip);
            spawn(&dir, &cip, &path, &a)
        };
        let (cok, cout) = finish_or(cli, LIMIT, || wire(&sip, &cip));
        let (sok, sout) = finish(srv, Duration::from_secs(if cok { 15 } else { 2 }));
        assert!(
            cok && sok,
            "{prog} {extra:?}, debian server: {debian_server}\n--- server:\n{sout}\n--- client:\n{cout}"
        );
        for out in [&sout, &cout] {
            if extra.contains(&"-R") {
                assert!(
                    out.contains("rdma_cm QPs\t : ON") && out.contains("Data ex. method : rdma_cm"),
                    "{out}"
                );
            }
            let rows =
                out.lines().filter(|l| l.trim_start().starts_with(|ch: char| ch.is_ascii_digit())).count();
            assert!(rows >= 1, "no result line:\n{out}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn native_perf_rdma_cm_write_bw() {
    perf_native("ib_write_bw", &["-R", "-n", "200", "-s", "8192"]);
}

#[test]
fn native_perf_rdma_cm_read_bw() {
    perf_native("ib_read_bw", &["-R", "-n", "200", "-s", "8192"]);
}

#[test]
fn native_perf_rdma_cm_send_bw() {
    perf_native("ib_send_bw", &["-R", "-n", "200", "-s", "8192"]);
}

#[test]
fn native_perf_rdma_cm_send_lat() {
    perf_native("ib_send_lat", &["-R", "-n", "200"]);
}

#[test]
fn native_perf_ud_send_bw() {
    perf_native("ib_send_bw", &["-c", "UD", "-n", "200", "-s", "1024"]);
}

#[test]
fn native_perf_ud_send_lat() {
    perf_native("ib_send_lat", &["-c", "UD", "-n", "200", "-s", "64"]);
}

/// udaddy's server and client: UD ids in the UDP port space, each request a SIDR_REQ answered
/// by `rdma_accept`'s SIDR_REP; the client's ESTABLISHED carries `rdma_ud_param` (its address
/// handle from `ah_attr`, the server's QP number and Q_Key), the server answers through
/// `ibv_create_ah_from_wc` (the IPv4 header in the receive buffer's GRH slot) and the Q_Key
/// `ibv_query_qp` reports. udaddy's port is fixed (7174): each pair has addresses of its own.
#[test]
fn udaddy_several_connections() {
    if !have("udaddy_several_connections", &["/usr/bin/udaddy"]) {
        return;
    }
    for (c, n, size) in [("1", "10", "100"), ("4", "20", "1000")] {
        let (s, cl) = pair(
            &format!("udaddy{c}"),
            "/usr/bin/udaddy",
            |ip| args(&["-b", ip, "-c", c, "-C", n, "-S", size]),
            |ip| args(&["-s", ip, "-c", c, "-C", n, "-S", size]),
            LIMIT,
        );
        for out in [&s, &cl] {
            assert!(out.contains("data transfers complete") && out.contains("return status 0"), "{out}");
        }
        assert!(s.contains("sending replies"), "{s}");
    }
}

/// A UD request to an address nobody listens on: the SIDR_REP's status 1 (no such service ID),
/// which librdmacm reports as UNREACHABLE with that status (the kernel's `cma_sidr_rep_handler`).
#[test]
fn udaddy_to_a_port_nobody_listens_on_is_unreachable() {
    if !have("udaddy_to_a_port_nobody_listens_on_is_unreachable", &["/usr/bin/udaddy", "/usr/bin/rping"]) {
        return;
    }
    let dir = lib_dir("udrej");
    let (sip, cip) = (addr(), addr());
    // Something must own the server address: an rping server (no UD listener on 7174).
    let srv = spawn(&dir, &sip, "/usr/bin/rping", &["-s", "-a", &sip, "-p", &port()]);
    let t = std::time::Instant::now();
    while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (ok, out) = finish(spawn(&dir, &cip, "/usr/bin/udaddy", &["-s", &sip, "-b", &cip, "-C", "1"]), LIMIT);
    let mut srv = srv;
    let _ = srv.kill();
    let _ = srv.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!ok, "{out}");
    assert!(out.contains("event: RDMA_CM_EVENT_UNREACHABLE, error: 1"), "{out}");
}

/// Debian's udaddy through our librdmacm against the native `softroce udaddy` (the Rust RDMA
/// CM), both roles.
#[test]
fn udaddy_pairs_with_native_softroce_udaddy() {
    if !have("udaddy_pairs_with_native_softroce_udaddy", &["/usr/bin/udaddy"]) {
        return;
    }
    let native = softroce_bin();
    let dir = lib_dir("udcross");
    for debian_server in [true, false] {
        let (sip, cip) = (addr(), addr());
        let common = ["-c", "2", "-C", "10", "-S", "500"];
        let (sprog, cprog) = if debian_server {
            ("/usr/bin/udaddy", native.to_str().unwrap())
        } else {
            (native.to_str().unwrap(), "/usr/bin/udaddy")
        };
        let pre = |prog: &str| if prog == "/usr/bin/udaddy" { vec![] } else { vec!["udaddy"] };
        let mut a = pre(sprog);
        a.extend_from_slice(&["-b", &sip]);
        a.extend_from_slice(&common);
        let srv = spawn(&dir, &sip, sprog, &a);
        let t = std::time::Instant::now();
        while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        let mut a = pre(cprog);
        a.extend_from_slice(&["-s", &sip, "-b", &cip]);
        a.extend_from_slice(&common);
        let (cok, cout) = finish(spawn(&dir, &cip, cprog, &a), LIMIT);
        let (sok, sout) = finish(srv, Duration::from_secs(10));
        assert!(cok && sok, "debian server: {debian_server}\n--- server:\n{sout}\n--- client:\n{cout}");
        for out in [&sout, &cout] {
            assert!(out.contains("return status 0"), "{out}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
