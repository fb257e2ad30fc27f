//! Two network namespaces joined by a veth pair, for the tests that run Debian's programs on an
//! interface device (root only: those tests are `#[ignore]`d). Names start with `srif-`,
//! addresses are in 10.205.0.0/16.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a command that must succeed; its stdout.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails unless the test runs as root.
pub fn require_root() {
    assert_eq!(
        sh(&["id", "-u"]).trim(),
        "0",
        "this test needs root (network namespaces, veth); plain `cargo test` leaves it out (ignored)"
    );
}

/// Namespaces `ns[0]` and `ns[1]`, interfaces `dev[i]` with IPv4 address `v4[i]` and the
/// kernel's link-local IPv6 address (duplicate address detection finished); removed on drop.
pub struct VethPair {
    pub ns: [String; 2],
    pub dev: [String; 2],
    pub v4: [String; 2],
}

impl VethPair {
    /// A fresh pair; `n` (< 4) tells apart pairs of one process.
    pub fn new(n: u32) -> VethPair {
        let tag = std::process::id() % 250 * 4 + n;
        let p = VethPair {
            ns: [format!("srif-a-{tag}"), format!("srif-b-{tag}")],
            dev: [format!("srifa{tag}"), format!("srifb{tag}")],
            v4: [
                format!("10.205.{}.{}", tag / 4, tag % 4 * 4 + 1),
                format!("10.205.{}.{}", tag / 4, tag % 4 * 4 + 2),
            ],
        };
        for x in &p.ns {
            let _ = Command::new("ip").args(["netns", "del", x]).stderr(Stdio::null()).status();
            sh(&["ip", "netns", "add", x]);
        }
        let (ns, dev) = (&p.ns, &p.dev);
        sh(&[
            "ip", "link", "add", &dev[0], "netns", &ns[0], "type", "veth", "peer", "name", &dev[1], "netns",
            &ns[1],
        ]);
        for i in 0..2 {
            sh(&["ip", "-n", &ns[i], "addr", "add", &format!("{}/30", p.v4[i]), "dev", &dev[i]]);
            sh(&["ip", "-n", &ns[i], "link", "set", "lo", "up"]);
            sh(&["ip", "-n", &ns[i], "link", "set", &dev[i], "up"]);
        }
        // The link-local addresses appear with carrier and are tentative for about a second
        // (duplicate address detection): a device binds them at once, but traffic to them
        // flows only after.
        let t = Instant::now();
        while (0..2).any(|i| {
            let all = sh(&["ip", "-n", &ns[i], "-6", "addr", "show", "dev", &dev[i], "scope", "link"]);
            !all.contains("fe80::") || all.contains("tentative")
        }) {
            assert!(t.elapsed() < Duration::from_secs(10), "no usable link-local address on the veth pair");
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    /// Interface `i`'s link-local address.
    pub fn link_local(&self, i: usize) -> String {
        let out =
            sh(&["ip", "-n", &self.ns[i], "-6", "-o", "addr", "show", "dev", &self.dev[i], "scope", "link"]);
        let addr = out.split_whitespace().skip_while(|w| *w != "inet6").nth(1).expect("a link-local address");
        addr.split('/').next().unwrap().to_string()
    }

    /// True once a socket in namespace `i` listens on TCP `port`.
    pub fn listening(&self, i: usize, port: u16) -> bool {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[i], "cat", "/proc/net/tcp", "/proc/net/tcp6"])
            .output()
            .expect("ip netns exec");
        super::listens_in(&String::from_utf8_lossy(&out.stdout), port)
    }

    /// `prog args` in namespace `i` with `env`, output piped.
    pub fn spawn(&self, i: usize, env: &[(&str, &str)], prog: &str, args: &[&str]) -> Child {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], prog]).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("{prog}: {e}"))
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for x in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", x]).status();
        }
    }
}
