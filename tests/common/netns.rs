//! Two network namespaces joined by a veth pair, with an nftables rule in each dropping a
//! random share of incoming UDP 4791 packets (`numgen random`; this kernel has no netem).
//! Needs root; removed on drop.

use std::process::{Command, Stdio};

/// Runs a command, panics unless it succeeds; its stdout.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces and a veth pair, removed on drop.
pub struct Netns {
    /// The first namespace (10.201.0.1).
    pub a: String,
    /// The second namespace (10.201.0.2).
    pub b: String,
}

impl Netns {
    /// Namespaces `srl-a-<tag>` (10.201.0.1) and `srl-b-<tag>` (10.201.0.2) over a veth pair
    /// (MTU 9000), each dropping `loss_percent` % of the UDP 4791 packets it receives.
    pub fn new(tag: u32, loss_percent: u32) -> Netns {
        let (a, b) = (format!("srl-a-{tag}"), format!("srl-b-{tag}"));
        for ns in [&a, &b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        }
        sh(&["ip", "netns", "add", &a]);
        let n = Netns { a: a.clone(), b: b.clone() };
        sh(&["ip", "netns", "add", &b]);
        let (va, vb) = (format!("sra{tag}"), format!("srb{tag}"));
        sh(&["ip", "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b]);
        for (ns, dev, ip) in [(&a, &va, "10.201.0.1/24"), (&b, &vb, "10.201.0.2/24")] {
            sh(&["ip", "-n", ns, "addr", "add", ip, "dev", dev]);
            sh(&["ip", "-n", ns, "link", "set", dev, "mtu", "9000", "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            let nft = |rest: &[&str]| {
                let mut v = vec!["ip", "netns", "exec", ns.as_str(), "nft"];
                v.extend_from_slice(rest);
                sh(&v);
            };
            nft(&["add", "table", "inet", "srloss"]);
            nft(&["add", "chain", "inet", "srloss", "input", "{ type filter hook input priority 0; }"]);
            let n = loss_percent.to_string();
            nft(&[
                "add", "rule", "inet", "srloss", "input", "udp", "dport", "4791", "numgen", "random", "mod",
                "100", "<", &n, "counter", "drop",
            ]);
        }
        n
    }

    /// Packets the loss rule of namespace `ns` dropped.
    pub fn dropped(&self, ns: &str) -> u64 {
        let out = sh(&["ip", "netns", "exec", ns, "nft", "list", "table", "inet", "srloss"]);
        out.split_whitespace()
            .skip_while(|w| *w != "packets")
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).status();
    }
}
