//! The device-level verbs through real C callers: a test program built against the installed
//! headers (so the header inlines are the ones applications compile), Debian's unmodified
//! `ibv_devices`, `ibv_devinfo [-v]` and `ibv_asyncwatch`, all loading our library through
//! `LD_LIBRARY_PATH`, compared with what the softroce crate says the device is (what
//! `softroce devinfo -v` prints).
//!
//! The devices are named by explicit loopback addresses (opening one binds nothing), except
//! in the tests of the default list.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use softroce::verbs::DeviceConfig;
use softroce::verbs::device::DeviceInfo;

/// The first line starting with `key ` in `out`, without the key.
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key} ");
    out.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no line {key:?} in:\n{out}"))
}

/// Runs `tests/c/<name>.c` against Debian's library and ours: the outputs must be identical.
fn same_as_debian(name: &str, min_lines: usize) {
    let dir = lib_dir(name);
    let exe = build_c(name, &dir);
    let real = Command::new(&exe).env_remove("LD_LIBRARY_PATH").output().unwrap();
    let ours = run_with(&dir, &mut Command::new(&exe));
    assert!(real.status.success() && ours.status.success(), "{}", text(&ours));
    let (real, ours) = (String::from_utf8(real.stdout).unwrap(), String::from_utf8(ours.stdout).unwrap());
    for (r, o) in real.lines().zip(ours.lines()) {
        assert_eq!(r, o, "{name}: Debian's libibverbs vs ours");
    }
    assert_eq!(real.lines().count(), ours.lines().count());
    assert!(real.lines().count() >= min_lines);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The string helpers and rate conversions, every value.
#[test]
fn strings_and_rates_match_debian() {
    if require("strings_and_rates_match_debian", C_BUILD, C_BUILD_PACKAGES) {
        same_as_debian("strings", 300);
    }
}

/// The exports rdma-core implements as plain reads and writes of the caller's struct, on
/// structs the caller made (issue 25 item 3; tests/c/mock.c): `ibv_get_device_name` of a mock
/// device (NULL before: a unit test mocking device lists crashed on it), `ibv_ack_cq_events` and
/// `ibv_ack_async_event` on the caller's objects, `ibv_qp_to_qp_ex` of a `struct verbs_qp`.
#[test]
fn caller_made_structs_match_debian() {
    if require("caller_made_structs_match_debian", C_BUILD, C_BUILD_PACKAGES) {
        same_as_debian("mock", 20);
    }
}

/// The `ibv_copy_*_kern` conversions, every output byte for patterned inputs.
#[test]
fn kernel_struct_conversions_match_debian() {
    if require("kernel_struct_conversions_match_debian", C_BUILD, C_BUILD_PACKAGES) {
        same_as_debian("kern", 60);
    }
}

#[test]
fn device_level_verbs_from_c() {
    if !require("device_level_verbs_from_c", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    let dir = lib_dir("devquery");
    let exe = build_c("devquery", &dir);
    let o =
        run_with(&dir, Command::new(&exe).arg("softroce1").env("SOFTROCE_DEVICES", "127.0.0.1,127.0.0.3"));
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let info = DeviceInfo::query(&DeviceConfig::new("127.0.0.3")).unwrap();
    let a = &info.attr;

    assert_eq!(line(&out, "num_devices"), "2");
    let guid = format!("{:016x}", a.node_guid);
    assert_eq!(line(&out, "device softroce1"), format!("index 1 guid {guid} node_type 1 transport 0"));
    assert_eq!(line(&out, "ibdev_path"), "/sys/class/infiniband/softroce1");
    assert_eq!(line(&out, "verbs_context"), "1 sz 648");
    assert_eq!(line(&out, "num_comp_vectors"), "1");
    for k in ["cmd_fd_valid", "async_fd_valid", "ctx_device_matches"] {
        assert_eq!(line(&out, k), "1", "{k}");
    }
    assert_eq!(line(&out, "query_device"), "0");
    assert_eq!(
        line(&out, "vendor_id"),
        format!(
            "0xffffff part {} max_qp {} max_cqe {} max_sge {} max_mr {} max_pd {} max_qp_rd_atom {} max_srq {} max_ah {} ports 1 atomic 1 cap_flags 0x1023800 guid {guid}",
            a.vendor_part_id,
            a.max_qp,
            a.max_cqe,
            a.max_sge,
            a.max_mr,
            a.max_pd,
            a.max_qp_rd_atom,
            a.max_srq,
            a.max_ah
        )
    );
    assert_eq!(line(&out, "query_device_ex"), "0");
    assert_eq!(line(&out, "ex_same_orig"), "1 ex_port_cnt 1 ex_ts_mask 0 ex_odp 0");
    assert_eq!(line(&out, "query_device_ex_bad_mask"), libc::EINVAL.to_string());

    let p = &info.port;
    assert_eq!(line(&out, "query_port"), "0");
    assert_eq!(
        line(&out, "port"),
        format!(
            "state 4 max_mtu 5 active_mtu {} gid_tbl_len {} lid 0 link_layer 2 pkey_tbl_len 1 max_msg_sz {:#x} cap_flags {:#x} flags2 0x0 width 1 speed 1 phys 5",
            p.active_mtu as u32,
            info.gids.len(),
            p.max_msg_sz,
            p.port_cap_flags
        )
    );
    assert_eq!(line(&out, "query_port_2"), libc::EINVAL.to_string());
    assert_eq!(line(&out, "query_port_len20"), "0 state 4 untouched_after 1");
    assert_eq!(line(&out, "query_port_len64"), "0 zeroed_after 1");
    assert_eq!(line(&out, "compat_query_port"), "0 byte48 0xaa", "the 1.1 export fills 48 bytes");

    let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    for (i, g) in info.gids.iter().enumerate() {
        assert_eq!(
            line(&out, &format!("gid {i}")),
            format!("{g} rc 0 type 1 rc 0 ex 0 ex_index {i} ex_port 1 ex_type 2 ex_same 1 ex_ifindex {lo}")
        );
    }
    assert_eq!(info.gids[1].to_string(), "::ffff:127.0.0.3");
    assert_eq!(line(&out, "gid_past_end"), format!("-1 errno {}", libc::EINVAL));
    assert_eq!(line(&out, "gid_ex_past_end"), libc::EINVAL.to_string());
    assert_eq!(line(&out, "gid_ex_flags"), libc::EINVAL.to_string());
    assert_eq!(line(&out, "gid_table"), "2 0/2 1/2");
    assert_eq!(line(&out, "gid_table_too_small"), format!("-{}", libc::EINVAL));

    assert_eq!(line(&out, "pkey0"), "0 0xffff");
    // (rdma-core reads the P_Key from sysfs: no file for index 1 is ENOENT, as on kernel rxe)
    assert_eq!(line(&out, "pkey1"), format!("-1 errno {}", libc::ENOENT));
    assert_eq!(line(&out, "pkey_index_ffff"), "0 pkey_index_7fff -1");

    assert_eq!(line(&out, "sysfs_board_id"), "-1", "rxe has no board_id either");
    assert_eq!(line(&out, "sysfs_node_type"), "5 1: CA");
    assert_eq!(line(&out, "sysfs_gid_type0"), "7 RoCE v2");
    assert_eq!(line(&out, "sysfs_too_small"), "-1");
    assert_eq!(line(&out, "sysfs_path"), "/sys");

    assert_eq!(line(&out, "async_poll"), "0", "nothing queued on async_fd");
    assert_eq!(line(&out, "async_nonblock"), format!("-1 errno {}", libc::EAGAIN));
    assert_eq!(line(&out, "fork_init"), "0 fork_status 2", "IBV_FORK_UNNEEDED: no DMA");

    // Objects exist now (their verbs are tested in objects.rs): PD, CQ and channel succeed;
    // ibv_create_qp_ex with only a PD falls back to ibv_create_qp, which refuses the NULL PD.
    for k in ["alloc_pd", "create_cq", "create_comp_channel", "create_cq_ex"] {
        assert!(line(&out, k).starts_with("1 "), "{k}: {}", line(&out, k));
    }
    assert_eq!(line(&out, "create_qp_ex"), format!("0 errno {}", libc::EINVAL));
    // EOPNOTSUPP, the real library's answer for a device without the verb.
    for k in ["open_xrcd", "alloc_dm"] {
        assert_eq!(line(&out, k), format!("0 errno {}", libc::EOPNOTSUPP), "{k}");
    }
    assert_eq!(line(&out, "close"), "0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pthread_cancel` of a thread blocked in `ibv_get_async_event` (rping's pattern with
/// `ibv_get_cq_event`): the forced unwind passes through our frame, the thread's cleanup
/// handlers run, the process goes on.
#[test]
fn cancel_while_blocked_in_get_async_event() {
    if !require("cancel_while_blocked_in_get_async_event", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    let dir = lib_dir("cancel");
    let exe = build_c("devquery", &dir);
    let o = run_with(
        &dir,
        Command::new(&exe).args(["--cancel", "softroce0"]).env("SOFTROCE_DEVICES", "127.0.0.1"),
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert_eq!(line(&out, "cancelled"), "1 cleanup_ran 1");
    assert_eq!(line(&out, "close"), "0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two processes opening the loopback device (the default list, or `lo`) get two addresses.
#[test]
fn loopback_device_takes_a_free_address_per_process() {
    if !require("loopback_device_takes_a_free_address_per_process", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    let dir = lib_dir("hold");
    let exe = build_c("devquery", &dir);
    let hold = |devices: Option<&str>| {
        let mut c = Command::new(&exe);
        c.args(["--hold", "softroce0"])
            .env("LD_LIBRARY_PATH", &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        match devices {
            Some(d) => c.env("SOFTROCE_DEVICES", d),
            None => c.env_remove("SOFTROCE_DEVICES"),
        };
        let mut child = c.spawn().unwrap();
        let mut r = BufReader::new(child.stdout.take().unwrap());
        let gid = loop {
            let mut l = String::new();
            assert!(r.read_line(&mut l).unwrap() > 0, "no gid1 line");
            if let Some(g) = l.strip_prefix("gid1 ") {
                break g.trim().to_string();
            }
        };
        (child, gid)
    };
    let (mut a, ga) = hold(None);
    let (mut b, gb) = hold(Some("lo"));
    for g in [&ga, &gb] {
        let ip: std::net::Ipv6Addr = g.parse().unwrap();
        assert!(ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()), "{g}");
    }
    assert_ne!(ga, gb, "two processes, two loopback addresses");
    drop(a.stdin.take());
    drop(b.stdin.take());
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Several threads opening one device at once (issue 25 item 2; tests/c/threads.c): each
/// opens the device, allocates a PD and a CQ, frees them and closes it, in a loop, with no
/// synchronisation. The last context of one thread closing while another opens used to fail the
/// other's first PD with `EADDRINUSE` (the closed runtime's engine still held the port as the
/// new one bound it): 2 threads × 300 rounds on an explicit address failed 8 runs in 10.
/// Six such runs, two with 8 threads, then the default (loopback) device.
#[test]
fn threads_opening_one_device_at_once() {
    if !require("threads_opening_one_device_at_once", C_BUILD, C_BUILD_PACKAGES) {
        return;
    }
    let dir = lib_dir("threads");
    let exe = build_c("threads", &dir);
    let run = |devices: Option<&str>, threads: &str, rounds: &str| {
        let mut c = Command::new(&exe);
        c.args([threads, rounds]);
        match devices {
            Some(d) => c.env("SOFTROCE_DEVICES", d),
            None => c.env_remove("SOFTROCE_DEVICES"),
        };
        let o = run_with(&dir, &mut c);
        assert!(o.status.success(), "{threads} threads on {devices:?}:\n{}", text(&o));
    };
    let a = addr();
    for i in 0..8 {
        run(Some(&a), if i < 6 { "2" } else { "8" }, if i < 6 { "300" } else { "100" });
    }
    run(None, "8", "30");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `key:\tvalue` lines of `ibv_devinfo`, first occurrence of each key.
fn devinfo_fields(out: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for l in out.lines() {
        if let Some((k, v)) = l.trim().split_once(':') {
            m.entry(k.trim().to_string()).or_insert_with(|| v.trim().to_string());
        }
    }
    m
}

#[test]
fn debian_ibv_devices_and_devinfo() {
    if !require(
        "debian_ibv_devices_and_devinfo",
        &[SYSTEM_LIB, "/usr/bin/ibv_devices", "/usr/bin/ibv_devinfo", "/usr/bin/ibv_asyncwatch"],
        "ibverbs-utils",
    ) {
        return;
    }
    let dir = lib_dir("devinfo");
    let run = |args: &[&str], devices: Option<&str>| {
        let mut c = Command::new(args[0]);
        c.args(&args[1..]);
        match devices {
            Some(d) => c.env("SOFTROCE_DEVICES", d),
            None => c.env_remove("SOFTROCE_DEVICES"),
        };
        let o = run_with(&dir, &mut c);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let devs = "127.0.0.1,127.0.0.3,lo";
    let info = DeviceInfo::query(&DeviceConfig::new("127.0.0.3")).unwrap();

    let out = run(&["ibv_devices"], Some(devs));
    let rows: Vec<Vec<&str>> = out.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 3, "{out}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[0], format!("softroce{i}"));
    }
    assert_eq!(rows[1][1], format!("{:016x}", info.attr.node_guid));

    let out = run(&["ibv_devinfo"], Some(devs));
    assert_eq!(out.matches("hca_id:").count(), 3, "{out}");
    assert_eq!(out.matches("PORT_ACTIVE (4)").count(), 3);
    assert_eq!(out.matches("link_layer:\t\tEthernet").count(), 3);

    // -v against what softroce itself says the device is.
    let out = run(&["ibv_devinfo", "-v", "-d", "softroce1"], Some(devs));
    let f = devinfo_fields(&out);
    let a = &info.attr;
    let p = &info.port;
    let g = |k: &str| f.get(k).unwrap_or_else(|| panic!("no {k} in\n{out}")).as_str();
    assert_eq!(g("hca_id"), "softroce1");
    assert_eq!(g("transport"), "InfiniBand (0)");
    assert_eq!(g("fw_ver"), a.fw_ver);
    assert_eq!(g("vendor_id"), "0xffffff");
    assert_eq!(g("vendor_part_id"), a.vendor_part_id.to_string());
    assert_eq!(g("phys_port_cnt"), "1");
    for (k, v) in [
        ("max_qp", a.max_qp),
        ("max_qp_wr", a.max_qp_wr),
        ("max_sge", a.max_sge),
        ("max_cq", a.max_cq),
        ("max_cqe", a.max_cqe),
        ("max_mr", a.max_mr),
        ("max_pd", a.max_pd),
        ("max_qp_rd_atom", a.max_qp_rd_atom),
        ("max_qp_init_rd_atom", a.max_qp_init_rd_atom),
        ("max_srq", a.max_srq),
        ("max_srq_wr", a.max_srq_wr),
        ("max_srq_sge", a.max_srq_sge),
        ("max_ah", a.max_ah),
    ] {
        assert_eq!(g(k), v.to_string(), "{k}");
    }
    assert_eq!(g("max_mr_size"), format!("{:#x}", a.max_mr_size));
    assert_eq!(g("atomic_cap"), "ATOMIC_HCA (1)");
    assert_eq!(g("max_mw"), a.max_mw.to_string());
    assert_eq!(g("max_mcast_grp"), "0");
    assert_eq!(g("num_comp_vectors"), "1");
    assert_eq!(g("state"), "PORT_ACTIVE (4)");
    assert_eq!(g("max_mtu"), "4096 (5)");
    assert_eq!(g("active_mtu"), format!("{} ({})", p.active_mtu.bytes(), p.active_mtu as u32));
    assert_eq!(g("link_layer"), "Ethernet");
    assert_eq!(g("port_lid"), "0");
    assert_eq!(g("max_msg_sz"), format!("{:#x}", p.max_msg_sz));
    assert_eq!(g("port_cap_flags"), format!("{:#010x}", p.port_cap_flags));
    assert_eq!(g("gid_tbl_len"), info.gids.len().to_string());
    assert_eq!(g("pkey_tbl_len"), "1");
    assert_eq!(g("phys_state"), "LINK_UP (5)");
    for (i, gid) in info.gids.iter().enumerate() {
        assert_eq!(g(&format!("GID[{i:>3}]")), format!("{gid}, RoCE v2"), "GID {i}");
    }

    // The default list: the loopback interface first, at a free 127.0.0.x of this process.
    let out = run(&["ibv_devices"], None);
    assert!(out.lines().nth(2).is_some_and(|l| l.trim_start().starts_with("softroce0")), "{out}");
    let out = run(&["ibv_devinfo", "-v", "-d", "softroce0"], None);
    let gid1 = devinfo_fields(&out).get("GID[  1]").cloned().unwrap_or_default();
    assert!(gid1.starts_with("::ffff:127.0.0.") && gid1.ends_with(", RoCE v2"), "{out}");

    // ibv_asyncwatch blocks on the async fd: it starts, prints the fd, and waits.
    let mut child = Command::new("ibv_asyncwatch")
        .args(["-d", "softroce1"])
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", devs)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("softroce1: async event FD"), "{first}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "ibv_asyncwatch should block waiting for events");
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
