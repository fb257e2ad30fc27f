//! Debian's unmodified programs with the server and the client on ONE address, two processes
//! sharing it as they would share a kernel RDMA device (issue 24, docs/design/shared-device.md):
//! `ibv_rc_pingpong -g 1` (data checked), `rping` (the CM's messages handed between the two
//! processes), `ib_write_bw -R` (perftest connected by the RDMA CM). Without the sharing the
//! second process could not open the device ("address in use").

mod common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn ibv_rc_pingpong_server_and_client_on_one_address() {
    if !require("ibv_rc_pingpong_one_address", &[SYSTEM_LIB, "/usr/bin/ibv_rc_pingpong"], "ibverbs-utils") {
        return;
    }
    let port = port();
    let (sout, cout) = pair_on_one_address(
        "pp_one_address",
        "/usr/bin/ibv_rc_pingpong",
        |_| args(&["-d", "softroce0", "-g", "1", "-n", "200", "-c", "-p", &port]),
        |ip| args(&["-d", "softroce0", "-g", "1", "-n", "200", "-c", "-p", &port, ip]),
        LIMIT,
    );
    for out in [&sout, &cout] {
        assert!(out.contains("200 iters in"), "{out}");
    }
    // Two QPs on one address: unique numbers (each process's carry its slot).
    let qpn = |out: &str, side: &str| {
        out.lines()
            .find(|l| l.contains(side))
            .and_then(|l| l.split("QPN ").nth(1))
            .map(|q| q[..8].to_string())
    };
    assert_eq!(qpn(&sout, "local address"), qpn(&cout, "remote address"), "{sout}\n{cout}");
    assert_ne!(qpn(&sout, "local address"), qpn(&cout, "local address"), "{sout}\n{cout}");
}

#[test]
fn rping_server_and_client_on_one_address() {
    if !require("rping_one_address", &[SYSTEM_LIB, "/usr/bin/rping"], "rdmacm-utils") {
        return;
    }
    let port = port();
    let (sout, cout) = pair_on_one_address(
        "rping_one_address",
        "/usr/bin/rping",
        |ip| args(&["-s", "-a", ip, "-p", &port, "-C", "20", "-V", "-v"]),
        |ip| args(&["-c", "-a", ip, "-p", &port, "-C", "20", "-V", "-v"]),
        LIMIT,
    );
    assert!(cout.contains("ping data: rdma-ping-19"), "{cout}");
    assert!(sout.contains("server ping data: rdma-ping-19"), "{sout}");
}

#[test]
fn ib_write_bw_rdma_cm_server_and_client_on_one_address() {
    if !require("ib_write_bw_one_address", &[SYSTEM_LIB, "/usr/bin/ib_write_bw"], "perftest") {
        return;
    }
    let port = port();
    let (sout, cout) = pair_on_one_address(
        "write_bw_one_address",
        "/usr/bin/ib_write_bw",
        |_| args(&["-R", "-n", "200", "-p", &port]),
        |ip| args(&["-R", "-n", "200", "-p", &port, ip]),
        LIMIT,
    );
    for out in [&sout, &cout] {
        assert!(out.lines().any(|l| l.trim_start().starts_with("65536") && l.contains(" 200 ")), "{out}");
    }
}
