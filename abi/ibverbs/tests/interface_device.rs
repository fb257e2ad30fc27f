//! Devices opened on an interface (`SOFTROCE_DEVICES=<interface>`), two network namespaces
//! joined by a veth pair: GID index 0 is the interface's IPv6 link-local address, as on kernel
//! rxe, and it carries traffic on every backend — Debian's `ibv_rc_pingpong` and
//! `ibv_ud_pingpong` with `-g 0` (data checked), over the UDP backend, the raw backend and
//! several engine threads, and libfabric's verbs datagram endpoint (`fi_pingpong -p verbs -e
//! dgram`), which uses GID 0 without being told (it hung when the device listed a link-local
//! GID it did not serve).
//!
//! Needs root (namespaces, veth, `CAP_NET_RAW`), so every test is `#[ignore]`d: root runs them
//! with `cargo test -p softroce-ibverbs --test interface_device -- --ignored` (.ci/run does, under
//! `flock /tmp/softroce-netns.lock`). Cost: about 5 s.

mod common;

use std::time::{Duration, Instant};

use common::netns::{VethPair, require_root};
use common::*;

/// Runs `prog -d softroce0 <args> -p <port>` as server in namespace 0 (device `devs[0]`) and
/// as client of it in namespace 1 (device `devs[1]`, with `client_env` too); both must
/// succeed. Returns (server output, client output).
fn run_pair(
    p: &VethPair,
    test: &str,
    devs: [&str; 2],
    client_env: &[(&str, &str)],
    prog: &str,
    args: &[&str],
) -> (String, String) {
    let lib = lib_dir(test);
    let lib = lib.to_str().unwrap();
    let port = free_port();
    let port_s = port.to_string();
    let mut all = vec!["-d", "softroce0"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-p", &port_s]);
    let server = p.spawn(0, &[("SOFTROCE_DEVICES", devs[0]), ("LD_LIBRARY_PATH", lib)], prog, &all);
    let t = Instant::now();
    while !p.listening(0, port) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    all.push(&p.v4[0]);
    let mut cenv = vec![("SOFTROCE_DEVICES", devs[1]), ("LD_LIBRARY_PATH", lib)];
    cenv.extend_from_slice(client_env);
    let client = p.spawn(1, &cenv, prog, &all);
    let (cok, cout) = finish(client, Duration::from_secs(60));
    let (sok, sout) = finish(server, Duration::from_secs(10));
    assert!(cok && sok, "{prog} {args:?} ({devs:?})\n--- server:\n{sout}\n--- client:\n{cout}");
    (sout, cout)
}

/// The GID a pingpong printed for one side (`local address: … GID <gid>`).
fn local_gid(out: &str) -> &str {
    out.lines()
        .find(|l| l.contains("local address"))
        .and_then(|l| l.split("GID ").nth(1))
        .map_or("", str::trim)
}

/// `prog` with GID index `gid`, 200 exchanges, data checked, between the two namespaces.
fn pingpong(p: &VethPair, test: &str, devs: [&str; 2], client_env: &[(&str, &str)], prog: &str, gid: &str) {
    let (sout, cout) = run_pair(p, test, devs, client_env, prog, &["-g", gid, "-n", "200", "-c"]);
    for out in [&sout, &cout] {
        assert!(out.contains("200 iters in"), "{prog} -g {gid}: {out}");
    }
    let want = |i: usize| if gid == "0" { p.link_local(i) } else { format!("::ffff:{}", p.v4[i]) };
    assert_eq!((local_gid(&sout), local_gid(&cout)), (want(0).as_str(), want(1).as_str()), "{sout}\n{cout}");
}

fn prerequisites(test: &str, extra: &[&str]) -> bool {
    let mut paths =
        vec![SYSTEM_LIB, "/usr/bin/ibv_rc_pingpong", "/usr/bin/ibv_ud_pingpong", "/usr/bin/ibv_devinfo"];
    paths.extend_from_slice(extra);
    require(test, &paths, "ibverbs-utils, libfabric-bin")
}

#[test]
#[ignore = "needs root: network namespaces"]
fn gid_0_is_the_link_local_address_and_carries_traffic() {
    require_root();
    if !prerequisites("gid_0_is_the_link_local_address_and_carries_traffic", &[]) {
        return;
    }
    let p = VethPair::new(0);
    let devs = [p.dev[0].as_str(), p.dev[1].as_str()];
    // The table: GID 0 the link-local address, GID 1 the IPv4 address (what `-g 1` users
    // pass), both RoCE v2.
    let lib = lib_dir("gid0_devinfo");
    let info = finish(
        p.spawn(
            0,
            &[("SOFTROCE_DEVICES", devs[0]), ("LD_LIBRARY_PATH", lib.to_str().unwrap())],
            "ibv_devinfo",
            &["-v"],
        ),
        Duration::from_secs(20),
    );
    let gid_line = |k: usize| {
        let line = info.1.lines().find(|l| l.contains(&format!("GID[{k:>3}]:")))?;
        Some(line.split("]:").nth(1)?.trim().to_string())
    };
    assert_eq!(gid_line(0), Some(format!("{}, RoCE v2", p.link_local(0))), "{}", info.1);
    assert_eq!(gid_line(1), Some(format!("::ffff:{}, RoCE v2", p.v4[0])), "{}", info.1);
    pingpong(&p, "gid0_rc", devs, &[], "ibv_rc_pingpong", "0");
    pingpong(&p, "gid0_ud", devs, &[], "ibv_ud_pingpong", "0");
    pingpong(&p, "gid1_rc", devs, &[], "ibv_rc_pingpong", "1");
}

#[test]
#[ignore = "needs root: network namespaces, CAP_NET_RAW"]
fn gid_0_over_the_raw_backend_and_several_engines() {
    require_root();
    if !prerequisites("gid_0_over_the_raw_backend_and_several_engines", &[]) {
        return;
    }
    let p = VethPair::new(1);
    // Raw backend (every address of the interface) against the UDP backend with two engine
    // threads (a SO_REUSEPORT group on each of its two addresses).
    let raw = format!("{}:raw", p.dev[0]);
    let devs = [raw.as_str(), p.dev[1].as_str()];
    let threads = [("SOFTROCE_ENGINE_THREADS", "2")];
    pingpong(&p, "gid0_raw_rc", devs, &threads, "ibv_rc_pingpong", "0");
    pingpong(&p, "gid0_raw_ud", devs, &threads, "ibv_ud_pingpong", "0");
}

#[test]
#[ignore = "needs root: network namespaces"]
fn libfabric_verbs_datagram_endpoint_uses_gid_0() {
    require_root();
    if !prerequisites("libfabric_verbs_datagram_endpoint_uses_gid_0", &["/usr/bin/fi_pingpong"]) {
        return;
    }
    let p = VethPair::new(2);
    let devs = [p.dev[0].as_str(), p.dev[1].as_str()];
    // -I iterations per size, -c data checked; the server's control port -B, the client's -P.
    // (libfabric's verbs provider opens an rdma_cm event channel even for datagrams: both
    // drop-in libraries.)
    let lib = lib_dir_with_rdmacm("gid0_fabric");
    let lib = lib.to_str().unwrap();
    let port = free_port().to_string();
    let args = ["-p", "verbs", "-e", "dgram", "-I", "100", "-c"];
    let env = |i: usize| [("SOFTROCE_DEVICES", devs[i]), ("LD_LIBRARY_PATH", lib)];
    let server = p.spawn(0, &env(0), "fi_pingpong", &[&args[..], &["-B", &port]].concat());
    let t = Instant::now();
    while !p.listening(0, port.parse().unwrap()) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = p.spawn(1, &env(1), "fi_pingpong", &[&args[..], &["-P", &port, &p.v4[0]]].concat());
    let (cok, cout) = finish(client, Duration::from_secs(60));
    let (sok, sout) = finish(server, Duration::from_secs(10));
    assert!(cok && sok, "fi_pingpong -p verbs -e dgram\n--- server:\n{sout}\n--- client:\n{cout}");
    for out in [&sout, &cout] {
        // bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec: 64 B up to the MTU.
        assert!(out.lines().any(|l| l.starts_with("64 ") && l.contains("=100")), "{out}");
    }
}

#[test]
#[ignore = "needs root: network namespaces"]
fn two_processes_share_one_interface_device_on_both_its_addresses() {
    // The server and the client on the same interface device in one namespace (one address
    // shared, docs/design/shared-device.md), over GID 0 (the link-local address's group) and
    // GID 1 (the IPv4 address's), data checked.
    require_root();
    if !prerequisites("two_processes_share_one_interface_device_on_both_its_addresses", &[]) {
        return;
    }
    let p = VethPair::new(3);
    let lib = lib_dir("shared_iface");
    let lib = lib.to_str().unwrap();
    for (prog, gid) in [("ibv_rc_pingpong", "0"), ("ibv_ud_pingpong", "0"), ("ibv_rc_pingpong", "1")] {
        let port = free_port().to_string();
        let args = ["-d", "softroce0", "-g", gid, "-n", "200", "-c", "-p", &port];
        let env = [("SOFTROCE_DEVICES", p.dev[0].as_str()), ("LD_LIBRARY_PATH", lib)];
        let server = p.spawn(0, &env, prog, &args);
        let t = Instant::now();
        while !p.listening(0, port.parse().unwrap()) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let client = p.spawn(0, &env, prog, &[&args[..], &[p.v4[0].as_str()]].concat());
        let (cok, cout) = finish(client, Duration::from_secs(60));
        let (sok, sout) = finish(server, Duration::from_secs(10));
        assert!(
            cok && sok,
            "{prog} -g {gid}, both on {}\n--- server:\n{sout}\n--- client:\n{cout}",
            p.dev[0]
        );
        let want = if gid == "0" { p.link_local(0) } else { format!("::ffff:{}", p.v4[0]) };
        assert_eq!((local_gid(&sout), local_gid(&cout)), (want.as_str(), want.as_str()), "{sout}\n{cout}");
    }
}
