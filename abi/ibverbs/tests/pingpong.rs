//! Debian's unmodified `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and
//! `ibv_srq_pingpong` (ibverbs-utils), two processes on loopback, both loading our library
//! through `LD_LIBRARY_PATH`: every exchange must complete and, with `-c`, every received
//! buffer must hold what the peer wrote.
//!
//! Each side gets its own loopback address (`SOFTROCE_DEVICES=127.x.y.z`, GID index 1; one test
//! GID index 0, the same address) and
//! each test its own TCP port, so the tests run in parallel with each other and the rest of the
//! suite. Cost: about 1 s per test.

mod common;

use std::time::Duration;

use common::*;

/// Runs `prog` as server and client with `args` on GID index 1; both must succeed and report
/// `iters` exchanges.
fn pingpong(test: &str, prog: &str, args: &[&str], iters: &str) {
    pingpong_on(test, prog, "1", args, iters);
}

/// [`pingpong`] on GID index `gid`.
fn pingpong_on(test: &str, prog: &str, gid: &str, args: &[&str], iters: &str) {
    let path = format!("/usr/bin/{prog}");
    if !require(test, &[SYSTEM_LIB, &path], "ibverbs-utils") {
        return;
    }
    let mut all = vec!["-g", gid];
    all.extend_from_slice(args);
    let (sout, cout) = run_pair(test, prog, &all, "-p", Duration::from_secs(60));
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
fn debian_rc_pingpong_new_post_api() {
    // -N: ibv_create_qp_ex with send ops, ibv_qp_to_qp_ex, ibv_wr_start/wr_send/set_sge/complete.
    pingpong("debian_rc_pingpong_new_post", "ibv_rc_pingpong", &["-n", "300", "-N", "-c"], "300");
    pingpong(
        "debian_rc_pingpong_new_post_events",
        "ibv_rc_pingpong",
        &["-n", "200", "-N", "-e", "-c"],
        "200",
    );
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

/// GID index 0 (on loopback, which has no link-local address, the device's own address again):
/// it must carry traffic like index 1 (it was a link-local GID nobody served: RTR failed).
#[test]
fn debian_rc_and_ud_pingpong_on_gid_0() {
    pingpong_on("debian_rc_pingpong_gid0", "ibv_rc_pingpong", "0", &["-n", "200", "-c"], "200");
    pingpong_on("debian_ud_pingpong_gid0", "ibv_ud_pingpong", "0", &["-n", "200", "-c"], "200");
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

/// A receiver that ends with `exit()` the moment its busy poll returns the last message (no
/// destroy, no close) still acknowledges it: the ACK its poll held back for its next packet
/// (`DeviceConfig::hold_acks`) leaves from the library's exit handler, and the sender's SEND
/// completes successfully instead of retrying into a process that is gone.
#[test]
fn a_receiver_that_exits_at_its_last_completion_acknowledges_it() {
    if !require("exit-after-recv", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    for _ in 0..3 {
        let dir = lib_dir("exit-after-recv");
        let exe = build_c("exit_after_recv", &dir);
        let c = std::process::Command::new(&exe)
            .env("LD_LIBRARY_PATH", &dir)
            .env("SOFTROCE_DEVICES", format!("{},{}", addr(), addr()))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (ok, out) = finish(c, Duration::from_secs(20));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(ok, "{out}");
        assert!(out.contains("send status 0\n") && out.contains("child exit 0\n"), "{out}");
    }
}
