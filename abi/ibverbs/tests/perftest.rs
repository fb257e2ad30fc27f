//! Debian's unmodified perftest tools (the eight `ib_*_bw` / `ib_*_lat`), two processes on
//! loopback, both loading our library through `LD_LIBRARY_PATH`: each run must finish with
//! its result table (the tools exit non-zero on any failed completion or setup step).
//!
//! perftest 4.5 on a device with vendor part id 0 posts with `ibv_post_send` (the new post
//! API needs `ibv_create_qp_ex` with send ops, not offered yet). Cost: about 10 s in all.

mod common;

use std::time::Duration;

use common::*;

/// Runs `tool <args> -x 1` as server and client; both must succeed and the client (and the
/// server, where the tool prints one there: not for READ and atomic latency) must print result
/// rows of `iters` iterations.
fn perf(test: &str, tool: &str, args: &[&str], iters: &str) {
    let path = format!("/usr/bin/{tool}");
    if !require(test, &[SYSTEM_LIB, &path], "perftest") {
        return;
    }
    let mut all = vec!["-x", "1"];
    all.extend_from_slice(args);
    let (sout, cout) = run_pair(test, tool, &all, "-p", Duration::from_secs(90));
    let server_reports = !(tool == "ib_read_lat" || tool == "ib_atomic_lat");
    for (out, must) in [(&sout, server_reports), (&cout, true)] {
        let rows: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("#bytes"))
            .skip(1)
            .take_while(|l| !l.starts_with("---"))
            .collect();
        assert!(!must || !rows.is_empty(), "{tool} {args:?}: no result table\n{out}");
        for r in &rows {
            let cols: Vec<&str> = r.split_whitespace().collect();
            assert!(cols.len() >= 4 && cols[1] == iters, "{tool} {args:?}: {r}\n{out}");
        }
    }
}

#[test]
fn perftest_send() {
    perf("perftest_send_bw", "ib_send_bw", &["-n", "300"], "300");
    perf("perftest_send_lat", "ib_send_lat", &["-n", "300"], "300");
}

#[test]
fn perftest_write() {
    perf("perftest_write_bw", "ib_write_bw", &["-n", "300"], "300");
    perf("perftest_write_lat", "ib_write_lat", &["-n", "300"], "300");
}

#[test]
fn perftest_read() {
    perf("perftest_read_bw", "ib_read_bw", &["-n", "300"], "300");
    perf("perftest_read_lat", "ib_read_lat", &["-n", "300"], "300");
}

#[test]
fn perftest_atomic_both_types() {
    perf("perftest_atomic_bw_faa", "ib_atomic_bw", &["-n", "300", "-A", "FETCH_AND_ADD"], "300");
    perf("perftest_atomic_bw_cas", "ib_atomic_bw", &["-n", "300", "-A", "CMP_AND_SWAP"], "300");
    perf("perftest_atomic_lat", "ib_atomic_lat", &["-n", "300"], "300");
}

#[test]
fn perftest_four_qps_and_all_sizes() {
    perf("perftest_send_bw_q4", "ib_send_bw", &["-n", "200", "-q", "4"], "800");
    perf("perftest_write_bw_all", "ib_write_bw", &["-n", "20", "-a"], "20");
}

#[test]
fn perftest_old_post_send() {
    // `--use_old_post_send` asks for ibv_post_send with ibv_send_wr lists explicitly.
    perf("perftest_write_bw_old", "ib_write_bw", &["-n", "300", "--use_old_post_send"], "300");
    perf("perftest_send_lat_old", "ib_send_lat", &["-n", "300", "--use_old_post_send"], "300");
    perf("perftest_read_bw_old", "ib_read_bw", &["-n", "300", "--use_old_post_send"], "300");
}
