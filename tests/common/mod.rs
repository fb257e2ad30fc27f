//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

/// Path of a file in `tests/data`.
pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The Ethernet frames of a pcap file with their timestamps.
pub fn read_pcap(name: &str) -> Vec<(Duration, Vec<u8>)> {
    let f = std::fs::File::open(data(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut r = pcap_file::pcap::PcapReader::new(f).expect("pcap header");
    assert_eq!(r.header().datalink, pcap_file::DataLink::ETHERNET, "{name}");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.expect("pcap record");
        out.push((p.timestamp, p.data.into_owned()));
    }
    out
}

/// Every capture from kernel rxe in `tests/data`, with the number of RoCEv2 packets in it.
pub const CAPTURES: &[(&str, usize)] = &[
    ("rc_pingpong.pcap", 50),
    ("send_8k.pcap", 180),
    ("write_8k.pcap", 180),
    ("read_8k.pcap", 180),
    ("imm.pcap", 16),
    ("atomic.pcap", 40),
    ("ud_pingpong.pcap", 6),
    ("rping_cm.pcap", 41),
    ("host_ud.pcap", 2),
    ("host_gsi_probe.pcap", 4),
];

/// Kernel rxe CM captures in `tests/data/cm` (see `tests/data/README.md`), with the number of
/// RoCEv2 packets and of CM MADs in each. `rping_cm.pcap` in [`CAPTURES`] holds CM MADs too.
pub const CM_CAPTURES: &[(&str, usize, usize)] = &[
    ("cm/rping_c3.pcap", 41, 5),
    ("cm/rping_ipv6.pcap", 41, 5),
    ("cm/rping_refused.pcap", 2, 2),
    ("cm/reject.pcap", 7, 7),
    ("cm/ucmatose_c2.pcap", 26, 10),
    ("cm/send_bw_R.pcap", 66, 12),
    ("cm/udaddy.pcap", 6, 2),
];

/// Frames of `host_gsi_probe.pcap` (0-based) whose ICRC was deliberately wrong.
pub const BAD_ICRC: &[(&str, usize)] = &[("host_gsi_probe.pcap", 1), ("host_gsi_probe.pcap", 2)];

pub mod duo;
pub mod netns;
pub mod verbs;
pub mod workload;

/// Path of an example binary, built (or brought up to date) in the profile the tests use.
/// A plain `cargo test` builds examples, a filtered one does not, and neither rebuilds one
/// that is stale on its own, so ask cargo every time (it is quick when nothing changed).
pub fn example(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_softroce"));
    let dir = bin.parent().unwrap();
    let mut c = std::process::Command::new(env!("CARGO"));
    c.args(["build", "--quiet", "--example", name]).current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.ends_with("release") {
        c.arg("--release");
    }
    assert!(c.status().unwrap().success(), "cargo build --example {name}");
    dir.join("examples").join(name)
}

/// Builds the drop-in library (`softroce-ibverbs`) in the profile of this test's `softroce`
/// binary (`cargo test` builds the tool but not the cdylib beside it) and returns what
/// `softroce lib-path` prints.
pub fn built_lib_path() -> String {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_softroce"));
    let profile = match exe.parent().and_then(|d| d.file_name()).and_then(|n| n.to_str()).unwrap() {
        "debug" => "dev".to_string(),
        p => p.to_string(),
    };
    let b = std::process::Command::new(env!("CARGO"))
        .args(["build", "-p", "softroce-ibverbs", "--profile", &profile])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let o = std::process::Command::new(exe).arg("lib-path").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Runs `run` until two runs agree, at most three times; their result. A fate depends on the
/// packet alone, so runs that send the same packets agree; on a loaded machine a timer may
/// fire early in one run (a spurious retransmission: one packet more, with a fate of its
/// own), so one run in three may differ. Fates that depended on time or scheduling would make
/// every run differ.
pub fn two_agree<T: PartialEq + std::fmt::Debug>(mut run: impl FnMut(usize) -> T) -> T {
    let mut seen: Vec<T> = Vec::new();
    for i in 0..3 {
        let r = run(i);
        if seen.contains(&r) {
            return r;
        }
        seen.push(r);
    }
    panic!("no two of three runs agree: {seen:#?}");
}
