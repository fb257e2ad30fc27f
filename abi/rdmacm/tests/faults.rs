//! Fault injection under Debian's unmodified `rping`: with `SOFTROCE_FAULTS=mad,loss=30%` on
//! both sides (only QP1's packets, the connection manager's MADs, are lost) the connection is
//! still made — the IB CM retransmits what was lost — and the 20 pings complete.
//!
//! Cost: about 8 s (a lost MAD is retransmitted after the CM's response timeout, seconds).

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;

/// Starts `prog <args>` with our libraries, device `dev`, fault SPEC `faults` and the counters
/// published in `run_dir`.
fn spawn_with(dir: &Path, dev: &str, faults: &str, run_dir: &Path, prog: &str, args: &[&str]) -> Child {
    let run_dir = run_dir.to_string_lossy();
    spawn_env(dir, dev, &[("SOFTROCE_FAULTS", faults), ("SOFTROCE_RUN_DIR", &run_dir)], prog, args)
}

/// The sum of the counters whose names start with `prefix`, over every counters file in `dir`.
fn published(dir: &Path, prefix: &str) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .flat_map(|t| {
                    t.lines()
                        .filter_map(|l| l.strip_prefix(prefix))
                        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                        .collect::<Vec<_>>()
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn rping_connects_and_completes_when_the_cm_loses_mads() {
    if !require(
        "rping_connects_and_completes_when_the_cm_loses_mads",
        &[SYSTEM_LIB, "/usr/bin/rping"],
        "rdmacm-utils",
    ) {
        return;
    }
    // Seed 13 loses one MAD of the connection's setup on each side (a connection costs about
    // 8 s; some seeds lose the DREQ too, which leaves the server waiting for the disconnect as
    // with the kernel's CM, or lose so many that the connection takes a minute).
    let spec = "seed=13,mad,loss=30%";
    let dir = lib_dir("faults-rping");
    let run_dir = std::env::temp_dir().join(format!("softroce-faults-rping-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::set_permissions(&run_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let (sip, cip, port) = (addr(), addr(), port());
    let srv = spawn_with(
        &dir,
        &sip,
        spec,
        &run_dir,
        "/usr/bin/rping",
        &["-s", "-a", &sip, "-p", &port, "-C", "20"],
    );
    let t = Instant::now();
    while !roce_bound(&sip) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    let args = ["-c", "-a", &sip, "-p", &port, "-C", "20", "-v"];
    let (cok, cout) =
        finish(spawn_with(&dir, &cip, spec, &run_dir, "/usr/bin/rping", &args), Duration::from_secs(90));
    // (A lost DREQ leaves the server waiting for the disconnect, as it would on any network.)
    let (_, sout) = finish(srv, Duration::from_secs(15));
    let retries = published(&run_dir, "cm_tx_retries.");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&run_dir);
    assert!(cok, "--- client:\n{cout}\n--- server:\n{sout}");
    assert_eq!(cout.matches("ping data: rdma-ping-").count(), 20, "{cout}");
    let dropped: u64 = [&cout, &sout]
        .iter()
        .flat_map(|o| o.lines().filter(|l| l.contains("softroce faults: ")))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("dropped="))?.parse::<u64>().ok())
        .sum();
    assert!(dropped > 0, "no MAD lost:\n{cout}\n{sout}");
    assert!(retries > 0, "the CM retransmitted nothing:\n{cout}\n{sout}");
}
