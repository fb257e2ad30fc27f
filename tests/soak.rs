//! The soak run (`examples/soak.rs`) between two processes in two network namespaces joined by
//! a veth pair, each dropping 2 % of the RoCE packets it receives: 64 RC QPs doing every
//! operation with every byte verified, a UC and a UD QP besides, a QP replaced every 200 ms,
//! and a line of resource figures per interval from each side. Fails on a wrong byte, an RC
//! error completion, or a figure that keeps growing: open descriptors and QPs must level off
//! and the resident set must not grow in the second half of the run by more than 8 MiB or a
//! fifth.
//!
//! Needs root (namespaces, veth, nftables), so it is `#[ignore]`d. CI runs two minutes:
//! `cargo test --test soak -- --ignored`. The long run (the figures in the closing note):
//! `SOFTROCE_SOAK_SECONDS=1800 SOFTROCE_SOAK_INTERVAL=60 cargo test --release --test soak -- --ignored --nocapture`.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};

use common::netns::{Netns, sh};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The `soak-stats` lines of one side: each a map of its `key=value` fields.
fn stats(out: &str) -> Vec<HashMap<String, u64>> {
    out.lines()
        .filter(|l| l.starts_with("soak-stats "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
                .collect()
        })
        .collect()
}

/// Checks that `key` levels off: over the last third of the samples it grows by at most
/// `slack`, and it never exceeds `cap`.
fn levels_off(side: &str, s: &[HashMap<String, u64>], key: &str, slack: u64, cap: u64) {
    let v: Vec<u64> = s.iter().map(|m| m[key]).collect();
    let third = v[v.len() * 2 / 3];
    let last = *v.last().unwrap();
    assert!(last <= third + slack, "{side}: {key} still growing: {v:?}");
    assert!(v.iter().all(|x| *x <= cap), "{side}: {key} above {cap}: {v:?}");
}

#[test]
#[ignore = "needs root (network namespaces, veth, nftables): run with `cargo test --test soak -- --ignored` as root, as .ci/run does"]
fn soak_through_veth_with_random_drop() {
    assert_eq!(sh(&["id", "-u"]).trim(), "0", "the soak test needs root");
    let seconds = env_or("SOFTROCE_SOAK_SECONDS", 120);
    let interval = env_or("SOFTROCE_SOAK_INTERVAL", 10);
    // (a shorter run replaces QPs faster, so that the send sockets reach their cap early)
    let churn_ms = env_or("SOFTROCE_SOAK_CHURN_MS", 200);
    let ns = Netns::new(41, 2);
    let soak = common::example("soak");
    let soak = soak.to_str().unwrap();
    let server = Command::new("ip")
        .args(["netns", "exec", &ns.a, soak, "-s", "-d", "10.201.0.1", "--interval", &interval.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::new("ip")
        .args(["netns", "exec", &ns.b, soak, "-d", "10.201.0.2"])
        .args(["--seconds", &seconds.to_string(), "--interval", &interval.to_string()])
        .args(["--churn-ms", &churn_ms.to_string(), "10.201.0.1"])
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&client.stdout).into_owned() + &String::from_utf8_lossy(&client.stderr);
    let server = server.wait_with_output().unwrap();
    let s = String::from_utf8_lossy(&server.stdout).into_owned() + &String::from_utf8_lossy(&server.stderr);
    println!("client:\n{c}\nserver:\n{s}");
    let (da, db) = (ns.dropped(&ns.a), ns.dropped(&ns.b));
    println!("nftables dropped {da} packets into the server, {db} into the client");
    assert!(client.status.success() && c.contains("soak: PASS"), "client failed:\n{c}");
    assert!(server.status.success() && s.contains("soak: PASS"), "server failed:\n{s}");
    assert!(da > 0 && db > 0, "the loss rule must have dropped packets both ways");
    for (side, out) in [("client", &c), ("server", &s)] {
        let st = stats(out);
        assert!(st.len() >= 4, "{side}: too few samples: {st:?}");
        // Descriptors: the device's send sockets level off at 256 (one per source port in
        // use, least recently used closed), the rest are fixed.
        levels_off(side, &st, "fds", 8, 400);
        // 64 RC + UC + UD, and one more while a replacement is made before its old QP goes.
        levels_off(side, &st, "qps", 0, 67);
        let rss: Vec<u64> = st.iter().map(|m| m["rss_kib"]).collect();
        let (mid, last) = (rss[rss.len() / 2], *rss.last().unwrap());
        assert!(last <= mid + (8 << 10).max(mid / 5), "{side}: resident set still growing (KiB): {rss:?}");
        let last = st.last().unwrap();
        assert_eq!((last["bad"], last["errors"]), (0, 0), "{side}");
    }
    let cl = stats(&c);
    assert!(cl.last().unwrap()["retransmits"] > 0, "the client must have retransmitted");
    assert!(cl.last().unwrap()["churned"] > seconds * 1000 / churn_ms / 2, "QPs must have been replaced");
}
