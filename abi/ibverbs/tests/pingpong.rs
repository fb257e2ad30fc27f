//! Debian's unmodified `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and
//! `ibv_srq_pingpong` (ibverbs-utils), two processes on loopback, both loading our library
//! through `LD_LIBRARY_PATH`: every exchange must complete and, with `-c`, every received
//! buffer must hold what the peer wrote.
//!
//! Each side gets its own loopback address (`SOFTROCE_DEVICES=127.x.y.z`, GID index 1) and
//! each test its own TCP port, so the tests run in parallel with each other and the rest of the
//! suite. Cost: about 1 s per test.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A fresh loopback address for this process and call (127.220-249.x.y, apart from the
/// ranges the other test files use).
fn addr() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let k = std::process::id().wrapping_mul(64).wrapping_add(n);
    format!("127.{}.{}.{}", 220 + (k / (254 * 256)) % 30, (k / 254) % 256, k % 254 + 1)
}

/// A TCP port free right now (the server binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// True once some socket listens on TCP `port` (read from /proc/net/tcp{,6}, without
/// connecting: a probe connection would be taken for the peer).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3 && format!("{} ", &cols[1][cols[1].len() - 5..]) == want && cols[3] == "0A"
        })
    })
}

fn spawn(dir: &std::path::Path, prog: &str, dev: &str, args: &[&str], server: Option<&str>) -> Child {
    let mut c = Command::new(prog);
    c.args(["-d", "softroce0", "-g", "1"]).args(args);
    if let Some(s) = server {
        c.arg(s);
    }
    c.env("LD_LIBRARY_PATH", dir)
        .env("SOFTROCE_DEVICES", dev)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Waits for `c` at most `limit`, killing it past that; its output and whether it succeeded.
fn finish(mut c: Child, limit: Duration) -> (bool, String) {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let o = c.wait_with_output().unwrap();
    (o.status.success(), text(&o))
}

/// Runs `prog` as server and client with `args`; both must succeed and report `iters`
/// exchanges.
fn pingpong(test: &str, prog: &str, args: &[&str], iters: &str) {
    let path = format!("/usr/bin/{prog}");
    if !require(test, &[SYSTEM_LIB, &path], "ibverbs-utils") {
        return;
    }
    let dir = lib_dir(test);
    let port = free_port().to_string();
    let mut all: Vec<&str> = vec!["-p", &port];
    all.extend_from_slice(args);
    let server = spawn(&dir, prog, &addr(), &all, None);
    let t = Instant::now();
    while !listening(port.parse().unwrap()) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = spawn(&dir, prog, &addr(), &all, Some("127.0.0.1"));
    let (cok, cout) = finish(client, Duration::from_secs(60));
    let (sok, sout) = finish(server, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cok && sok, "{prog} {args:?}\n--- server:\n{sout}\n--- client:\n{cout}");
    for out in [&sout, &cout] {
        assert!(out.contains(&format!("{iters} iters in")), "{prog}: {out}");
        assert!(!out.contains("Failed"), "{prog}: {out}");
    }
}

#[test]
fn debian_rc_pingpong() {
    pingpong("debian_rc_pingpong", "ibv_rc_pingpong", &["-n", "500", "-c"], "500");
}

#[test]
fn debian_rc_pingpong_events() {
    pingpong("debian_rc_pingpong_events", "ibv_rc_pingpong", &["-n", "300", "-e", "-c"], "300");
}

#[test]
fn debian_rc_pingpong_sizes() {
    // One byte; several MTU-sized packets per message with a small MTU.
    pingpong("debian_rc_pingpong_1b", "ibv_rc_pingpong", &["-n", "200", "-s", "1", "-c"], "200");
    pingpong(
        "debian_rc_pingpong_64k",
        "ibv_rc_pingpong",
        &["-n", "50", "-s", "65536", "-m", "256", "-c"],
        "50",
    );
}

#[test]
fn debian_uc_pingpong() {
    pingpong("debian_uc_pingpong", "ibv_uc_pingpong", &["-n", "500", "-c"], "500");
}

#[test]
fn debian_ud_pingpong() {
    pingpong("debian_ud_pingpong", "ibv_ud_pingpong", &["-n", "500", "-c"], "500");
}

#[test]
fn debian_ud_pingpong_events() {
    pingpong("debian_ud_pingpong_events", "ibv_ud_pingpong", &["-n", "200", "-e", "-c"], "200");
}

#[test]
fn debian_srq_pingpong() {
    // 16 QPs sharing one SRQ on each side; -n counts exchanges per QP.
    pingpong("debian_srq_pingpong", "ibv_srq_pingpong", &["-n", "100", "-c"], "100");
}

#[test]
fn debian_srq_pingpong_events() {
    pingpong("debian_srq_pingpong_events", "ibv_srq_pingpong", &["-n", "50", "-q", "4", "-e", "-c"], "50");
}
