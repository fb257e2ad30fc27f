//! The cross pairing: Debian's unmodified `ibv_rc_pingpong` loading softroce's libibverbs
//! (`LD_LIBRARY_PATH=$(softroce lib-path)`) against the native `softroce rc-pingpong`, in both
//! roles, with the received data checked (`-c` on the Debian side, `--chk` natively).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn addr(n: u32) -> String {
    let k = std::process::id().wrapping_mul(8).wrapping_add(n);
    format!("127.{}.{}.{}", 250 + (k / (254 * 256)) % 5, (k / 254) % 256, k % 254 + 1)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && c[1].ends_with(&want) && c[3] == "0A"
        })
    })
}

fn finish(mut c: Child, limit: Duration) -> (bool, String) {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let o = c.wait_with_output().unwrap();
    (
        o.status.success(),
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
    )
}

fn debian(lib: &str, dev: &str, port: &str, server: Option<&str>) -> Child {
    let mut c = Command::new("ibv_rc_pingpong");
    c.args(["-d", "softroce0", "-g", "1", "-n", "300", "-c", "-p", port]);
    c.args(server);
    c.env("LD_LIBRARY_PATH", lib).env("SOFTROCE_DEVICES", dev);
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn native(dev: &str, port: &str, server: Option<&str>) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softroce"));
    c.args(["rc-pingpong", "-d", dev, "-g", "1", "-n", "300", "--chk", "-p", port]);
    c.args(server);
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

#[test]
fn debian_rc_pingpong_through_our_library_with_native_softroce() {
    if !Path::new("/usr/bin/ibv_rc_pingpong").exists() {
        let why = "SKIPPED debian_rc_pingpong_through_our_library_with_native_softroce: missing /usr/bin/ibv_rc_pingpong (Debian ibverbs-utils)";
        assert!(std::env::var_os("CI").is_none(), "{why} — fatal under CI");
        println!("{why}");
        return;
    }
    let lib = common::built_lib_path();
    for debian_serves in [true, false] {
        let port = free_port().to_string();
        let (a, b) = (addr(if debian_serves { 0 } else { 2 }), addr(if debian_serves { 1 } else { 3 }));
        let server = if debian_serves { debian(&lib, &a, &port, None) } else { native(&a, &port, None) };
        let t = Instant::now();
        while !listening(port.parse().unwrap()) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let client = if debian_serves {
            native(&b, &port, Some("127.0.0.1"))
        } else {
            debian(&lib, &b, &port, Some("127.0.0.1"))
        };
        let (cok, cout) = finish(client, Duration::from_secs(60));
        let (sok, sout) = finish(server, Duration::from_secs(10));
        assert!(cok && sok, "Debian serves: {debian_serves}\n--- server:\n{sout}\n--- client:\n{cout}");
        for out in [&sout, &cout] {
            assert!(out.contains("300 iters in"), "{out}");
        }
    }
}
